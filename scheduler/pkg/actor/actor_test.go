package actor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// vectors is the "actor" section of testdata/vectors.json (td3sched plugin-vectors): a shipped model's
// graph and ONNX Runtime's answers on observations around its normaliser and past its clip.
type vectors struct {
	Actor struct {
		Model      string `json:"model"`
		OnnxSHA256 string `json:"onnx_sha256"`
		ActionMode string `json:"action_mode"`
		Cases      []struct {
			Observation    []float32 `json:"observation"`
			PreActivations []float32 `json:"pre_activations"`
		} `json:"cases"`
	} `json:"actor"`
}

// Tolerance is the export's parity tolerance (rl/onnx_export.py PARITY_TOLERANCE).
const tolerance = 1e-4

func load(t testing.TB) (vectors, []byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "vectors.json"))
	if err != nil {
		t.Fatalf("the shared test vectors: %v (td3sched plugin-vectors writes them)", err)
	}
	var v vectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	graph, err := os.ReadFile(filepath.Join("..", "..", "..", v.Actor.Model))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(graph); hex.EncodeToString(sum[:]) != v.Actor.OnnxSHA256 {
		t.Fatalf("%s is not the graph the vectors were written from: run td3sched plugin-vectors", v.Actor.Model)
	}
	return v, graph
}

func TestActMatchesOnnxRuntime(t *testing.T) {
	v, graph := load(t)
	a, err := Load(graph)
	if err != nil {
		t.Fatal(err)
	}
	if a.InputSize() != 35 || a.OutputSize() != 5 || a.Metadata()["td3sched.action_mode"] != v.Actor.ActionMode {
		t.Fatalf("graph: %d inputs, %d outputs, metadata %v", a.InputSize(), a.OutputSize(), a.Metadata())
	}
	worst, off := 0.0, 0
	for i, c := range v.Actor.Cases {
		got, err := a.Act(c.Observation)
		if err != nil {
			t.Fatal(err)
		}
		for j, want := range c.PreActivations {
			d := math.Abs(float64(got[j] - want))
			worst = math.Max(worst, d)
			if d > tolerance {
				t.Fatalf("case %d: action %v, ONNX Runtime %v", i, got, c.PreActivations)
			}
			if math.Abs(float64(want)) < 4.9 {
				off++
			}
		}
	}
	if off == 0 {
		t.Fatal("every expected action is at the bound: the vectors cannot tell a wrong graph")
	}
	t.Logf("%d cases (%d values off the bound): largest difference %.2g", len(v.Actor.Cases), off, worst)
}

func TestConcurrentActsAgree(t *testing.T) {
	v, graph := load(t)
	a, err := Load(graph)
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]float32, len(v.Actor.Cases))
	for i, c := range v.Actor.Cases {
		want[i], _ = a.Act(c.Observation)
	}
	errs := make(chan string, 8)
	for g := range 8 {
		go func() {
			for r := range 50 {
				i := (g*50 + r) % len(want)
				got, _ := a.Act(v.Actor.Cases[i].Observation)
				for j := range got {
					if got[j] != want[i][j] {
						errs <- "concurrent Act differs"
						return
					}
				}
			}
			errs <- ""
		}()
	}
	for range 8 {
		if e := <-errs; e != "" {
			t.Fatal(e)
		}
	}
}

func TestBadInputIsRefusedNotAPanic(t *testing.T) {
	_, graph := load(t)
	a, err := Load(graph)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Act(make([]float32, 34)); err == nil || !strings.Contains(err.Error(), "expected 35") {
		t.Fatalf("a short observation: %v", err)
	}
	if _, err := Load(nil); err == nil {
		t.Fatal("empty bytes loaded")
	}
	if _, err := Load(graph[:len(graph)/2]); err == nil {
		t.Fatal("a truncated graph loaded")
	}
	unknown := strings.Replace(string(graph), "\x22\x04Tanh", "\x22\x04Tank", 1) // NodeProto.op_type (field 4)
	if _, err := Load([]byte(unknown)); err == nil || !strings.Contains(err.Error(), "Tank") {
		t.Fatalf("an unknown op: %v", err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 400 { // truncations and byte flips: an error or a graph, never a panic
		b := append([]byte(nil), graph[:rng.IntN(len(graph)+1)]...)
		if i%2 == 1 {
			b = append([]byte(nil), graph...)
			for range 1 + rng.IntN(8) {
				b[rng.IntN(len(b))] = byte(rng.IntN(256))
			}
		}
		if a, err := Load(b); err == nil {
			_, _ = a.Act(make([]float32, a.InputSize()))
		}
	}
}

func BenchmarkAct(b *testing.B) {
	v, graph := load(b)
	a, err := Load(graph)
	if err != nil {
		b.Fatal(err)
	}
	obs := v.Actor.Cases[0].Observation
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Act(obs); err != nil {
			b.Fatal(err)
		}
	}
}
