package td3score

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"td3-scheduler/scheduler/apis/config"
	enginev1 "td3-scheduler/scheduler/pkg/engine/v1"
	"td3-scheduler/scheduler/pkg/nodemetrics"
)

// fragmentationVectors is the vectors' fallback_fragmentation section: the engine's fallback blended
// with FGD's score, which the plugin's fallback with fallbackFragmentation must answer.
type fragmentationVectors struct {
	FallbackFragmentation  []fragmentationCase `json:"fallback_fragmentation"`
	FragmentationDecisions []fragmentationCase `json:"fragmentation_decisions"`
}

type fragmentationCase struct {
	NowS        float64         `json:"now_s"`
	Weights     []float64       `json:"weights"`
	Tau         float64         `json:"tau"`
	Share       float64         `json:"share"`
	TypicalPods json.RawMessage `json:"typical_pods"`
	Nodes       []struct {
		Name          string     `json:"name"`
		Allocatable   [4]float64 `json:"allocatable"`
		Requested     [4]float64 `json:"requested"`
		GPUs          int64      `json:"gpus"`
		GPUsRequested int64      `json:"gpus_requested"`
		Pool          string     `json:"pool"`
		Capacity      [4]float64 `json:"capacity"`
		Observed      [4]float64 `json:"observed"`
		SampleTimeS   float64    `json:"sample_time_s"`
	} `json:"nodes"`
	Pod struct {
		CPUMilli float64 `json:"cpu_milli"`
		MemMiB   float64 `json:"mem_mib"`
		DiskGiB  float64 `json:"disk_gib"`
		RDMAPct  float64 `json:"rdma_pct"`
		GPUCount uint32  `json:"gpu_count"`
		GPUMilli uint32  `json:"gpu_milli"`
	} `json:"pod"`
	Candidates     []string  `json:"candidates"`
	FallbackReason string    `json:"fallback_reason"`
	Scores         []float64 `json:"scores"`
	Scores100      []int64   `json:"scores_0_100"`
	Model          string    `json:"model"` // fragmentation_decisions: the served model's graph
}

// setUp publishes the case's node metrics at its time and returns its candidates' NodeInfos and pod.
func (c fragmentationCase) setUp(pl *TD3Score) ([]fwk.NodeInfo, *enginev1.Pod) {
	now := time.Unix(0, int64(c.NowS*1e9))
	pl.now = func() time.Time { return now }
	snap := &nodemetrics.Snapshot{Nodes: map[string]nodemetrics.Node{}, TakenAt: now}
	infos := map[string]fwk.NodeInfo{}
	for _, n := range c.Nodes {
		snap.Nodes[n.Name] = nodemetrics.Node{Observed: n.Observed, Capacity: n.Capacity, SampleTime: n.SampleTimeS}
		infos[n.Name] = allocatedNode(n.Name, n.Allocatable, n.Requested, n.GPUs, n.GPUsRequested, n.Pool)
	}
	pl.metrics.Publish(snap)
	nodes := make([]fwk.NodeInfo, len(c.Candidates))
	for j, name := range c.Candidates {
		nodes[j] = infos[name]
	}
	return nodes, &enginev1.Pod{Name: "vector", CpuMilli: c.Pod.CPUMilli, MemMib: c.Pod.MemMiB, DiskGib: c.Pod.DiskGiB,
		RdmaPct: c.Pod.RDMAPct, GpuCount: c.Pod.GPUCount, GpuMilli: c.Pod.GPUMilli}
}

func (c fragmentationCase) check(t *testing.T, i int, scores map[string]int64) {
	t.Helper()
	for j, name := range c.Candidates {
		if got, want := scores[name], c.Scores100[j]; got != want {
			t.Fatalf("case %d (%s): node %s scored %d by the plugin, %d by the engine (%.9f)", i, c.FallbackReason,
				name, got, want, c.Scores[j])
		}
	}
}

// allocatedNode is a node stating allocatable [CPU milli, memory MiB, disk GiB, RDMA %] and gpus GPUs in its
// pool (label td3sched.io/pool; none for ""), with one pod on it requesting requested and gpusRequested GPUs:
// the NodeInfo the scheduler hands Score.
func allocatedNode(name string, a, requested [4]float64, gpus, gpusRequested int64, pool string) fwk.NodeInfo {
	labels := map[string]string{}
	if pool != "" {
		labels[config.DefaultPoolLabel] = pool
	}
	info := framework.NewNodeInfo()
	info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
		v1.ResourceCPU:              *resource.NewMilliQuantity(int64(a[0]), resource.DecimalSI),
		v1.ResourceMemory:           *resource.NewQuantity(int64(a[1])*nodemetrics.MiB, resource.BinarySI),
		v1.ResourceEphemeralStorage: *resource.NewQuantity(int64(a[2])*GiB, resource.BinarySI),
		rdmaResource:                *resource.NewQuantity(int64(a[3]), resource.DecimalSI),
		gpuResource:                 *resource.NewQuantity(gpus, resource.DecimalSI),
	}}})
	info.AddPod(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-pod", Namespace: "default", UID: k8stypes.UID("uid-" + name)},
		Spec: v1.PodSpec{NodeName: name, Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{
				v1.ResourceCPU:              *resource.NewMilliQuantity(int64(requested[0]), resource.DecimalSI),
				v1.ResourceMemory:           *resource.NewQuantity(int64(requested[1])*nodemetrics.MiB, resource.BinarySI),
				v1.ResourceEphemeralStorage: *resource.NewQuantity(int64(requested[2])*GiB, resource.BinarySI),
				rdmaResource:                *resource.NewQuantity(int64(requested[3]), resource.DecimalSI),
				gpuResource:                 *resource.NewQuantity(gpusRequested, resource.DecimalSI),
			}}}}}})
	return info
}

func TestFallbackFragmentationMatchesTheEngine(t *testing.T) {
	var v fragmentationVectors
	readJSON(t, filepath.Join("..", "..", "testdata", "vectors.json"), &v)
	if len(v.FallbackFragmentation) < 20 {
		t.Fatalf("testdata/vectors.json: %d fallback_fragmentation cases", len(v.FallbackFragmentation))
	}
	blended := 0
	for i, c := range v.FallbackFragmentation {
		typical, err := ParseTypicalPods(c.TypicalPods)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		pl := newTestPlugin(t, "127.0.0.1:1", func(a *config.TD3ScoreArgs) {
			a.FallbackWeights, a.FallbackTau, a.FallbackFragmentation = c.Weights, &c.Tau, &c.Share
			a.FallbackTypicalPods = "vectors"
		})
		pl.typical = typical
		nodes, p := c.setUp(pl)
		c.check(t, i, pl.blendedStaticScores(p, nodes))
		if c.FallbackReason == "no_model" {
			blended++
		}
	}
	if blended < 20 {
		t.Fatalf("only %d cases blend the fresh candidates", blended)
	}
}

// A model of action mode fragmentation (the shipped blend) run in the plugin (inference: plugin), with the
// typical pods GetModel sends: the engine's decisions.
func TestInferenceOfAFragmentationModelMatchesTheEngine(t *testing.T) {
	var v fragmentationVectors
	readJSON(t, filepath.Join("..", "..", "testdata", "vectors.json"), &v)
	if len(v.FragmentationDecisions) < 10 {
		t.Fatalf("testdata/vectors.json: %d fragmentation_decisions", len(v.FragmentationDecisions))
	}
	pl := newTestPlugin(t, "127.0.0.1:1", nil)
	for i, c := range v.FragmentationDecisions {
		graph, err := os.ReadFile(filepath.Join("..", "..", "..", c.Model))
		if err != nil {
			t.Fatal(err)
		}
		m, err := loadModel(&enginev1.GetModelResponse{ModelVersion: "blend", Onnx: graph, ActionMode: "fragmentation",
			ObservationFields: ObservationFields, TypicalPods: string(c.TypicalPods)})
		if err != nil {
			t.Fatal(err)
		}
		nodes, p := c.setUp(pl)
		scores, reason, err := pl.inferScores(m, p, nodes)
		if reason != c.FallbackReason {
			t.Fatalf("case %d: fallback reason %q (%v) in the plugin, %q by the engine", i, reason, err, c.FallbackReason)
		}
		if reason == "" {
			c.check(t, i, scores)
		}
	}
	// without its typical pods such a model is refused, not run without its share
	graph, _ := os.ReadFile(filepath.Join("..", "..", "..", v.FragmentationDecisions[0].Model))
	if _, err := loadModel(&enginev1.GetModelResponse{ModelVersion: "blend", Onnx: graph, ActionMode: "fragmentation",
		ObservationFields: ObservationFields}); err == nil || !strings.Contains(err.Error(), "typical pods") {
		t.Fatalf("a fragmentation model without typical pods: expected a refusal naming them, got %v", err)
	}
}

func TestFragmentationOfANode(t *testing.T) {
	typical, err := ParseTypicalPods([]byte(`{"pools": ["gpu"], "sets": [{"request": [[4000, 8192, 0, 0],
		[8000, 8192, 0, 0], [1000, 1024, 0, 0]], "gpu_count": [1, 2, 1], "gpu_milli": [1000, 1000, 500],
		"weight": [0.5, 0.3, 0.2]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	g := typical["gpu"]
	// 10 cores free, two whole GPUs: every shape fits
	if f := NodeFragmentation(g, [4]float64{10000, 65536, 0, 0}, []int64{1000, 1000}); f != 0 {
		t.Fatalf("every typical pod fits: expected F 0, got %g", f)
	}
	// one whole GPU: the two-GPU shape (0.3) does not fit; F = free CPU x 0.3
	if f := NodeFragmentation(g, [4]float64{10000, 65536, 0, 0}, []int64{1000, 0}); f != 10000*0.3 {
		t.Fatalf("expected F = 10000 x 0.3, got %g", f)
	}
	// half a GPU: only the share fits
	if f := NodeFragmentation(g, [4]float64{10000, 65536, 0, 0}, []int64{500, 0}); math.Abs(f-10000*0.8) > 1e-9 {
		t.Fatalf("expected F = 10000 x 0.8, got %g", f)
	}
	// a one-GPU pod on two free GPUs takes one: fragmentation grows by 10000 x 0.3 less the pod's 4 cores
	d := FragmentationDecrease(g, [4]float64{4000, 8192, 0, 0}, 1, 1000, [4]float64{10000, 65536, 0, 0}, []int64{1000, 1000})
	if want := -(6000 * 0.3); math.Abs(d-want) > 1e-9 {
		t.Fatalf("expected a decrease of %g, got %g", want, d)
	}
	if d := FragmentationDecrease(nil, [4]float64{4000, 0, 0, 0}, 0, 0, [4]float64{10000, 0, 0, 0}, nil); d != 0 {
		t.Fatalf("a pool without typical pods has no fragmentation, got a decrease of %g", d)
	}
	if l := GPULayout(4, 1); len(l) != 4 || l[0] != 1000 || l[2] != 1000 || l[3] != 0 {
		t.Fatalf("GPULayout(4, 1): expected the 3 free GPUs first, got %v", l)
	}
	if l := GPULayout(0, 0); len(l) != 1 || l[0] != 0 {
		t.Fatalf("GPULayout(0, 0): expected one device without milli, got %v", l)
	}
}

func TestTypicalPodsAreReadFromACardOrTheirFormAndRefusedByName(t *testing.T) {
	card := filepath.Join("..", "..", "..", "models", "static-blend-dlrm-small", "model.json")
	fromCard, err := LoadTypicalPods(card)
	if err != nil {
		t.Fatalf("the shipped blend's card: %v", err)
	}
	if fromCard["gpu"] == nil || len(fromCard["gpu"].Weight) == 0 {
		t.Fatalf("the shipped blend's card: expected the gpu pool's typical pods, got %v", fromCard)
	}
	raw, _ := os.ReadFile(card)
	var c struct {
		TypicalPods json.RawMessage `json:"typical_pods"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	own, err := ParseTypicalPods(c.TypicalPods)
	if err != nil || len(own) != len(fromCard) || own["gpu"].Weight[0] != fromCard["gpu"].Weight[0] {
		t.Fatalf("their own form: expected the card's typical pods, got %v (%v)", own, err)
	}
	for _, bad := range []struct{ json, says string }{
		{`[]`, "expected {"},
		{`{"pools": `, "not JSON"},
		{`{"pools": ["a", "b"], "sets": []}`, "expected one set per pool"},
		{`{"pools": ["a", "a"], "sets": [` + oneShape + `, ` + oneShape + `]}`, "distinct, non-empty pool names"},
		{`{"pools": ["a"], "sets": [{"request": [[1, 2, 3]], "gpu_count": [0], "gpu_milli": [0], "weight": [1]}]}`,
			`typical_pods["a"] shape 0`},
		{`{"pools": ["a"], "sets": [{"request": [[1, 2, 3, 4]], "gpu_count": [0], "gpu_milli": [0], "weight": [0.5]}]}`,
			"weights sum to 0.5"},
		{`{"pools": ["a"], "sets": [{"request": [], "gpu_count": [0], "gpu_milli": [0], "weight": [1]}]}`,
			"0 requests, 1 GPU counts"},
	} {
		if _, err := ParseTypicalPods([]byte(bad.json)); err == nil || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("%s: expected an error saying %q, got %v", bad.json, bad.says, err)
		}
	}
	if _, err := LoadTypicalPods("no-such-file.json"); err == nil || !strings.Contains(err.Error(), "no-such-file.json") {
		t.Errorf("a missing file: expected an error naming it, got %v", err)
	}
}

const oneShape = `{"request": [[1, 2, 3, 4]], "gpu_count": [0], "gpu_milli": [0], "weight": [1]}`

// With a fragmentation share the plugin's fallback (here: the engine is down) is the blend over the
// candidates, not each node's static score, and it moves the choice towards the node FGD prefers.
func TestADeadEngineFallsBackToTheBlendWithAFragmentationShare(t *testing.T) {
	typical, err := ParseTypicalPods([]byte(`{"pools": ["gpu"], "sets": [{"request": [[8000, 8192, 0, 0]],
		"gpu_count": [2], "gpu_milli": [1000], "weight": [1]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	pl := newTestPlugin(t, "127.0.0.1:1", func(a *config.TD3ScoreArgs) {
		a.FallbackWeights, a.FallbackTau = []float64{1, 0, 0, 0}, ptrTo(0.4)
		a.FallbackFragmentation, a.FallbackTypicalPods = ptrTo(0.5), "typical.json"
	})
	pl.typical = typical
	snap, _ := testNodes([]float64{0.3, 0.3}, 0)
	pl.metrics.Publish(snap)
	// same live CPU; n0 has both its GPUs free, n1 one of two: a one-GPU pod on n0 leaves no room for the
	// typical two-GPU pod, on n1 it leaves what was already unusable
	nodes := []fwk.NodeInfo{
		allocatedNode("n0", [4]float64{16000, 65536, 100, 100}, [4]float64{0, 0, 0, 0}, 2, 0, "gpu"),
		allocatedNode("n1", [4]float64{16000, 65536, 100, 100}, [4]float64{0, 0, 0, 0}, 2, 1, "gpu"),
	}
	before := counter(t, ReasonUnavailable)
	pod := testPod("train-1", "1", "1Gi")
	pod.Spec.Containers[0].Resources.Requests[gpuResource] = resource.MustParse("1")
	got, _ := cycle(t, pl, pod, nodes)
	if counter(t, ReasonUnavailable) != before+1 {
		t.Fatalf("expected one fallback counted as %s", ReasonUnavailable)
	}
	if !(got["n1"] > got["n0"]) {
		t.Fatalf("expected FGD's share to prefer n1 (its GPU already broken up), got %v", got)
	}
	p, _ := EnginePod(pod)
	if want := pl.blendedStaticScores(p, nodes); got["n0"] != want["n0"] || got["n1"] != want["n1"] {
		t.Fatalf("expected the blended static scores %v, got %v", want, got)
	}
}
