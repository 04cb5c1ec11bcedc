package td3score

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"td3-scheduler/scheduler/apis/config"
	enginev1 "td3-scheduler/scheduler/pkg/engine/v1"
	"td3-scheduler/scheduler/pkg/nodemetrics"
)

// The in-process inference is held to the Python engine by the shared vectors: the observation, the
// action's decoding and the engine's whole decision (package actor holds the graph's evaluation).

type inferenceVectors struct {
	Constants struct {
		LogitLimit        float64    `json:"logit_limit"`
		RangeSlack        float64    `json:"range_slack"`
		CeilingRange      [2]float64 `json:"ceiling_range"`
		ObservationFields []string   `json:"observation_fields"`
	} `json:"constants"`
	Observation []struct {
		Pod            vectorPod `json:"pod"`
		TimeS          float64   `json:"time_s"`
		OOMKillsRecent float64   `json:"oom_kills_recent"`
		KnownNodes     int       `json:"known_nodes"`
		Candidates     []struct {
			Allocatable [4]float64 `json:"allocatable"`
			Capacity    [4]float64 `json:"capacity"`
			Observed    [4]float64 `json:"observed"`
			Recent      [2]float64 `json:"recent"`
		} `json:"candidates"`
		Observation []float32 `json:"observation"`
	} `json:"observation"`
	Actor struct {
		Model  string `json:"model"`
		Decode []struct {
			ActionMode     string     `json:"action_mode"`
			PreActivations []float32  `json:"pre_activations"`
			Weights        [4]float64 `json:"weights"`
			Tau            float64    `json:"tau"`
			Ceiling        *float64   `json:"ceiling"`
		} `json:"decode"`
	} `json:"actor"`
	Decisions []vectorDecision `json:"decisions"`
}

// vectorDecision is one of the engine's decisions: the nodes' metrics, the pod, its candidates and scores.
type vectorDecision struct {
	NowS           float64 `json:"now_s"`
	OOMKillsRecent float64 `json:"oom_kills_recent"`
	FailClosed     bool    `json:"fail_closed"`
	Nodes          []struct {
		Name        string     `json:"name"`
		Allocatable [4]float64 `json:"allocatable"`
		Capacity    [4]float64 `json:"capacity"`
		Observed    [4]float64 `json:"observed"`
		SampleTimeS float64    `json:"sample_time_s"`
	} `json:"nodes"`
	Pod            vectorPod `json:"pod"`
	Candidates     []string  `json:"candidates"`
	FallbackReason string    `json:"fallback_reason"`
	Scores         []float64 `json:"scores"`
	Scores100      []int64   `json:"scores_0_100"`
}

// publish sets the plugin's clock, node metrics and recent OOM kills to the decision's; it returns the
// snapshot, the clock's time and the candidates' NodeInfos, in the decision's order.
func (d vectorDecision) publish(pl *TD3Score) (*nodemetrics.Snapshot, time.Time, []fwk.NodeInfo) {
	now := time.Unix(0, int64(d.NowS*1e9))
	pl.now = func() time.Time { return now }
	snap := &nodemetrics.Snapshot{Nodes: map[string]nodemetrics.Node{}, TakenAt: now}
	pl.oomKills.Store(math.Float64bits(d.OOMKillsRecent))
	infos := map[string]fwk.NodeInfo{}
	for _, n := range d.Nodes {
		snap.Nodes[n.Name] = nodemetrics.Node{Observed: n.Observed, Capacity: n.Capacity, SampleTime: n.SampleTimeS}
		infos[n.Name] = vectorNode(n.Name, n.Allocatable)
	}
	pl.metrics.Publish(snap)
	nodes := make([]fwk.NodeInfo, len(d.Candidates))
	for j, name := range d.Candidates {
		nodes[j] = infos[name]
	}
	return snap, now, nodes
}

type vectorPod struct {
	CPUMilli float64 `json:"cpu_milli"`
	MemMiB   float64 `json:"mem_mib"`
	DiskGiB  float64 `json:"disk_gib"`
	RDMAPct  float64 `json:"rdma_pct"`
	QoS      string  `json:"qos"`
}

func (p vectorPod) engine() *enginev1.Pod {
	qos := map[string]enginev1.QosClass{"Guaranteed": enginev1.QosClass_QOS_CLASS_GUARANTEED,
		"Burstable": enginev1.QosClass_QOS_CLASS_BURSTABLE, "BestEffort": enginev1.QosClass_QOS_CLASS_BEST_EFFORT}
	return &enginev1.Pod{Name: "vector", CpuMilli: p.CPUMilli, MemMib: p.MemMiB, DiskGib: p.DiskGiB, RdmaPct: p.RDMAPct,
		Qos: qos[p.QoS]}
}

func loadInferenceVectors(t *testing.T) inferenceVectors {
	t.Helper()
	var v inferenceVectors
	readJSON(t, filepath.Join("..", "..", "testdata", "vectors.json"), &v)
	if len(v.Observation) == 0 || len(v.Actor.Decode) == 0 || len(v.Decisions) == 0 {
		t.Fatalf("testdata/vectors.json: empty inference sections (%d observations, %d decodings, %d decisions)",
			len(v.Observation), len(v.Actor.Decode), len(v.Decisions))
	}
	return v
}

func TestInferenceConstantsAreThePythonOnes(t *testing.T) {
	c := loadInferenceVectors(t).Constants
	if c.LogitLimit != LogitLimit || c.RangeSlack != RangeSlack || c.CeilingRange != [2]float64{CeilingLow, CeilingHigh} {
		t.Fatalf("Python: %+v; Go: %g, %g, [%g, %g]", c, LogitLimit, RangeSlack, CeilingLow, CeilingHigh)
	}
	if !slices.Equal(c.ObservationFields, ObservationFields) {
		t.Fatalf("observation fields: Python %v, Go %v", c.ObservationFields, ObservationFields)
	}
}

func TestObservationMatchesPython(t *testing.T) {
	out := make([]float32, ObservationSize)
	var scratch []float64
	for i, c := range loadInferenceVectors(t).Observation {
		p := c.Pod.engine()
		candidates := make([]Candidate, len(c.Candidates))
		for j, n := range c.Candidates {
			node := nodemetrics.Node{Observed: n.Observed, Capacity: n.Capacity}
			candidates[j] = Candidate{Allocatable: n.Allocatable,
				Utilisation: Utilisation(p.CpuMilli, p.MemMib, node, n.Recent[0], n.Recent[1])}
		}
		scratch = Observe([4]float64{p.CpuMilli, p.MemMib, p.DiskGib, p.RdmaPct}, qosIndex(p.Qos), candidates,
			c.KnownNodes, c.OOMKillsRecent, c.TimeS, out, scratch)
		for j, want := range c.Observation {
			// float32 of the same float64 everywhere but the time of day, whose sin and cos may differ by
			// an ulp between the two math libraries before the rounding
			if got := out[j]; got != want && !(j >= 33 && math.Abs(float64(got-want)) <= 1e-7) {
				t.Fatalf("vector %d: %s Go %.9g, Python %.9g", i, ObservationFields[j], got, want)
			}
		}
	}
}

func TestDecodeMatchesPython(t *testing.T) {
	for i, c := range loadInferenceVectors(t).Actor.Decode {
		got, err := Decode(c.PreActivations, c.ActionMode)
		if err != nil {
			t.Fatalf("vector %d: %v", i, err)
		}
		ceiling := 0.0
		if c.Ceiling != nil {
			ceiling = *c.Ceiling
		}
		for r := range got.Weights {
			if !near(got.Weights[r], c.Weights[r]) {
				t.Fatalf("vector %d (%s): weights Go %v, Python %v", i, c.ActionMode, got.Weights, c.Weights)
			}
		}
		if !near(got.Tau, c.Tau) || !near(got.Ceiling, ceiling) {
			t.Fatalf("vector %d (%s): tau, ceiling Go %g, %g, Python %g, %g", i, c.ActionMode, got.Tau, got.Ceiling, c.Tau, ceiling)
		}
	}
	for _, bad := range []struct {
		pre  []float32
		mode string
	}{{[]float32{0, 0, 0, 0, 0}, "requests"}, {[]float32{0, 0, 0, 0}, "full"}, {[]float32{0, 0, 0, 0, 0}, "ceiling"},
		{[]float32{0, float32(math.NaN()), 0, 0, 0}, "full"}} {
		if _, err := Decode(bad.pre, bad.mode); err == nil {
			t.Errorf("Decode(%v, %q): expected an error", bad.pre, bad.mode)
		}
	}
}

// servedTestModel is the vectors' model as a GetModel reply would bring it.
func servedTestModel(t *testing.T, failClosed bool) *servedModel {
	t.Helper()
	graph, err := os.ReadFile(filepath.Join("..", "..", "..", loadInferenceVectors(t).Actor.Model))
	if err != nil {
		t.Fatal(err)
	}
	m, err := loadModel(&enginev1.GetModelResponse{ModelVersion: "vectors", Onnx: graph, ActionMode: "full",
		ObservationFields: ObservationFields, FailClosed: failClosed})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// vectorNode is a v1.Node stating a vector's allocatable [CPU milli, memory MiB, disk GiB, RDMA %].
func vectorNode(name string, a [4]float64) fwk.NodeInfo {
	info := framework.NewNodeInfo()
	info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
		v1.ResourceCPU:              *resource.NewMilliQuantity(int64(a[0]), resource.DecimalSI),
		v1.ResourceMemory:           *resource.NewQuantity(int64(a[1])*nodemetrics.MiB, resource.BinarySI),
		v1.ResourceEphemeralStorage: *resource.NewQuantity(int64(a[2])*GiB, resource.BinarySI),
		rdmaResource:                *resource.NewQuantity(int64(a[3]), resource.DecimalSI),
	}}})
	return info
}

func TestInferenceMatchesTheEnginesDecision(t *testing.T) {
	v := loadInferenceVectors(t)
	pl := newTestPlugin(t, "127.0.0.1:1", nil)
	models := map[bool]*servedModel{false: servedTestModel(t, false), true: servedTestModel(t, true)}
	for i, d := range v.Decisions {
		_, _, nodes := d.publish(pl)
		scores, reason, err := pl.inferScores(models[d.FailClosed], d.Pod.engine(), nodes)
		if reason != d.FallbackReason {
			t.Fatalf("decision %d: fallback reason Go %q (%v), Python %q", i, reason, err, d.FallbackReason)
		}
		for j, name := range d.Candidates {
			got, want := scores[name], d.Scores100[j]
			// the graph's float32 output differs from ONNX Runtime's by ~1e-5: a score a hair from a half
			// may round the other way
			halfway := math.Abs(math.Mod(100*d.Scores[j], 1)-0.5) < 1e-3
			if got != want && !(halfway && math.Abs(float64(got-want)) == 1) {
				t.Fatalf("decision %d: node %s scored %d in the plugin, %d by the engine (%.6f)", i, name, got, want,
					100*d.Scores[j])
			}
		}
	}
}

// modelEngine serves the vectors' model through GetModel.
type modelEngine struct {
	fakeEngine
	reply *enginev1.GetModelResponse
	asked []string
}

func (f *modelEngine) GetModel(_ context.Context, req *enginev1.GetModelRequest) (*enginev1.GetModelResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, req.KnownVersion)
	reply := proto.Clone(f.reply).(*enginev1.GetModelResponse)
	if req.KnownVersion == reply.ModelVersion {
		reply.Onnx = nil
	}
	return reply, nil
}

func decisionsBy(t *testing.T, source string) float64 {
	v, err := testutil.GetCounterMetricValue(decisions.WithLabelValues(source))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestTheEnginesModelRunsInThePlugin(t *testing.T) {
	graph, err := os.ReadFile(filepath.Join("..", "..", "..", loadInferenceVectors(t).Actor.Model))
	if err != nil {
		t.Fatal(err)
	}
	f := &modelEngine{reply: &enginev1.GetModelResponse{ModelVersion: "m1", Onnx: graph, ActionMode: "full",
		ObservationFields: ObservationFields, OomKillsRecent: 3}}
	f.answer = scoresBy(func(string) int64 { return 7 })
	pl := newTestPlugin(t, startEngine(t, f), func(a *config.TD3ScoreArgs) { a.Inference = config.InferencePlugin })
	snap, nodes := testNodes([]float64{0.1, 0.35, 0.5, 0.8}, 0)
	pl.metrics.Publish(snap)
	ctx := context.Background()
	if got, _ := cycle(t, pl, testPod("before", "500m", "256Mi"), nodes); got["n0"] != 7 || f.calls != 1 {
		t.Fatalf("before the model arrives: expected the engine's answer (7), got %v after %d calls", got, f.calls)
	}
	if err := pl.refreshModel(ctx); err != nil {
		t.Fatal(err)
	}
	if got := math.Float64frombits(pl.oomKills.Load()); got != 3 {
		t.Fatalf("the engine's recent OOM kills: the observation would read %g, the engine says 3", got)
	}
	before := decisionsBy(t, "plugin")
	pod := testPod("inferred", "2", "1Gi")
	got, state := cycle(t, pl, pod, nodes)
	if f.calls != 1 || decisionsBy(t, "plugin") != before+1 {
		t.Fatalf("with the model: expected no engine call and one plugin decision, got %d calls, %g decisions",
			f.calls, decisionsBy(t, "plugin")-before)
	}
	want, reason, err := pl.inferScores(pl.model.Load(), mustEnginePod(t, pod), nodes)
	if reason != "" || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Score: %v, expected the model's scores %v (%s %v)", got, want, reason, err)
	}
	pl.PostBind(ctx, state, pod, "n0")
	if len(f.bindings) != 0 || len(pl.batch.take()) != 1 {
		t.Fatalf("the binding of a pod the plugin scored is batched: the engine got %v", f.bindings)
	}
	if err := pl.refreshModel(ctx); err != nil || pl.model.Load() == nil || f.asked[1] != "m1" {
		t.Fatalf("a refresh with the same version keeps the model (asked %v, err %v)", f.asked, err)
	}
	for name, edit := range map[string]func(*enginev1.GetModelResponse){
		"shadow mode":   func(r *enginev1.GetModelResponse) { r.Advisory = true },
		"a held model":  func(r *enginev1.GetModelResponse) { r.ActionHoldS = 600 },
		"no model":      func(r *enginev1.GetModelResponse) { r.ModelVersion, r.Onnx = "", nil },
		"requests mode": func(r *enginev1.GetModelResponse) { r.ActionMode, r.ModelVersion = "requests", "m2" },
		"other layout": func(r *enginev1.GetModelResponse) {
			r.ObservationFields, r.ModelVersion = r.ObservationFields[1:], "m3"
		},
		"a bad graph": func(r *enginev1.GetModelResponse) { r.Onnx, r.ModelVersion = graph[:100], "m4" },
	} {
		f.mu.Lock()
		reply := &enginev1.GetModelResponse{ModelVersion: "m1", Onnx: graph, ActionMode: "full", ObservationFields: ObservationFields}
		pl.model.Store(nil)
		edit(reply)
		f.reply = reply
		f.mu.Unlock()
		_ = pl.refreshModel(ctx)
		calls := f.calls
		if cycle(t, pl, testPod("p", "500m", "256Mi"), nodes); pl.model.Load() != nil || f.calls != calls+1 {
			t.Fatalf("%s: expected the engine to answer, got model %v and %d calls", name, pl.model.Load(), f.calls-calls)
		}
	}
}

func mustEnginePod(t *testing.T, pod *v1.Pod) *enginev1.Pod {
	t.Helper()
	p, err := EnginePod(pod)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BenchmarkInferScores is one pod's decision in the plugin over 420 candidates of 1,000 nodes (what
// kube-scheduler's percentageOfNodesToScore leaves at that size): the per-pod cost of inference: plugin.
func BenchmarkInferScores(b *testing.B) {
	t := &testing.T{}
	pl := newTestPlugin(t, "127.0.0.1:1", nil)
	m := servedTestModel(t, false)
	busy := make([]float64, 1000)
	for i := range busy {
		busy[i] = 0.05 + 0.8*float64((i*37)%100)/100
	}
	snap, infos := testNodes(busy, 0)
	pl.metrics.Publish(snap)
	for i, n := range infos {
		infos[i] = vectorNode(n.Node().Name, [4]float64{16000, 65536, 100, 100})
	}
	p := &enginev1.Pod{Name: "bench", CpuMilli: 500, MemMib: 512, Qos: enginev1.QosClass_QOS_CLASS_BURSTABLE}
	nodes := infos[:420]
	b.ReportAllocs()
	for b.Loop() {
		if _, reason, err := pl.inferScores(m, p, nodes); reason != "" {
			b.Fatal(reason, err)
		}
	}
}

func BenchmarkObserve(b *testing.B) {
	candidates := make([]Candidate, 420)
	for i := range candidates {
		c := &candidates[i]
		c.Allocatable = [4]float64{16000, 65536, 100, 100}
		for r := range 4 {
			c.Utilisation[r] = 0.05 + 0.8*float64((i*37+r*11)%100)/100
		}
	}
	obs := make([]float32, ObservationSize)
	var scratch []float64
	b.ReportAllocs()
	for b.Loop() {
		scratch = Observe([4]float64{500, 512, 1, 0}, 1, candidates, 1000, 0, 1.7e9, obs, scratch)
	}
}
