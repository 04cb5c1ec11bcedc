package td3score

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"

	enginev1 "td3-scheduler/scheduler/pkg/engine/v1"
	"td3-scheduler/scheduler/pkg/nodemetrics"
)

// vectors is testdata/vectors.json, written by the Python package (`td3sched plugin-vectors`): the Go
// static score, safety rule and pod reading are held to the Python ones by it.
type vectors struct {
	Constants struct {
		DefaultMilliCPURequest  float64 `json:"default_milli_cpu_request"`
		DefaultMemoryRequestMiB float64 `json:"default_memory_request_mib"`
		NeutralScore            float64 `json:"neutral_score"`
	} `json:"constants"`
	StaticScore []struct {
		PodCPUMilli float64     `json:"pod_cpu_milli"`
		PodMemMiB   float64     `json:"pod_mem_mib"`
		Observed    [4]float64  `json:"observed"`
		Capacity    [4]float64  `json:"capacity"`
		Recent      [2]float64  `json:"recent"`
		Weights     [4]float64  `json:"weights"`
		Tau         float64     `json:"tau"`
		Ceiling     *float64    `json:"ceiling"`
		Fresh       bool        `json:"fresh"`
		Utilisation *[4]float64 `json:"utilisation"`
		Score       float64     `json:"score"`
		Score100    int64       `json:"score_0_100"`
		HeldBack    bool        `json:"held_back"`
	} `json:"static_score"`
	Safety []struct {
		ObservedCPUMilli    float64 `json:"observed_cpu_milli"`
		AllocatableCPUMilli float64 `json:"allocatable_cpu_milli"`
		Threshold           float64 `json:"threshold"`
		OK                  bool    `json:"ok"`
	} `json:"safety"`
	Pods []struct {
		Pod      v1.Pod `json:"pod"`
		Expected struct {
			Name          string   `json:"name"`
			Namespace     string   `json:"namespace"`
			CPUMilli      float64  `json:"cpu_milli"`
			MemMiB        float64  `json:"mem_mib"`
			DiskGiB       float64  `json:"disk_gib"`
			RdmaPct       float64  `json:"rdma_pct"`
			GPUCount      uint32   `json:"gpu_count"`
			GPUMilli      uint32   `json:"gpu_milli"`
			QoS           string   `json:"qos"`
			CPULimitMilli *float64 `json:"cpu_limit_milli"`
			MemLimitMiB   *float64 `json:"mem_limit_mib"`
			Owner         string   `json:"owner"`
		} `json:"expected"`
	} `json:"pods"`
	Siblings []struct {
		Score    float64 `json:"score"`
		Siblings float64 `json:"siblings"`
		Spread   float64 `json:"spread"`
		Value    float64 `json:"value"`
	} `json:"siblings"`
}

// readJSON reads a shared test vector file into into.
func readJSON(t *testing.T, path string, into any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the shared test vectors: %v (td3sched plugin-vectors writes them)", err)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func loadVectors(t *testing.T) vectors {
	t.Helper()
	var v vectors
	readJSON(t, filepath.Join("..", "..", "testdata", "vectors.json"), &v)
	if len(v.StaticScore) == 0 || len(v.Safety) == 0 || len(v.Pods) == 0 {
		t.Fatalf("testdata/vectors.json: empty sections (%d static, %d safety, %d pods)", len(v.StaticScore),
			len(v.Safety), len(v.Pods))
	}
	return v
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

func TestConstantsAreThePythonOnes(t *testing.T) {
	c := loadVectors(t).Constants
	if c.DefaultMilliCPURequest != DefaultMilliCPURequest || c.DefaultMemoryRequestMiB != DefaultMemoryRequestMiB ||
		c.NeutralScore != NeutralScore {
		t.Fatalf("Python: %+v; Go: %g, %g, %g", c, DefaultMilliCPURequest, DefaultMemoryRequestMiB, NeutralScore)
	}
}

func TestStaticScoreMatchesPython(t *testing.T) {
	for i, c := range loadVectors(t).StaticScore {
		node := nodemetrics.Node{Observed: c.Observed, Capacity: c.Capacity}
		if c.Fresh {
			u := Utilisation(c.PodCPUMilli, c.PodMemMiB, node, c.Recent[0], c.Recent[1])
			for r := range u {
				if !near(u[r], c.Utilisation[r]) {
					t.Fatalf("vector %d: utilisation[%d] Go %v, Python %v", i, r, u, *c.Utilisation)
				}
			}
			if s := WeightedCloseness(u, c.Weights, c.Tau); !c.HeldBack && !near(s, c.Score) {
				t.Fatalf("vector %d: score Go %.17g, Python %.17g", i, s, c.Score)
			}
		}
		ceiling := 0.0
		if c.Ceiling != nil {
			ceiling = *c.Ceiling
		} else if got := StaticScore(c.PodCPUMilli, c.PodMemMiB, node, c.Fresh, c.Recent[0], c.Recent[1], c.Weights, c.Tau); got != c.Score100 {
			t.Fatalf("vector %d: static score 0-100 Go %d, Python %d (%+v)", i, got, c.Score100, c)
		}
		if got := ActionScore(c.PodCPUMilli, c.PodMemMiB, node, c.Fresh, c.Recent[0], c.Recent[1], c.Weights, c.Tau, ceiling); got != c.Score100 {
			t.Fatalf("vector %d: score 0-100 Go %d, Python %d (%+v)", i, got, c.Score100, c)
		}
	}
}

func TestSafetyRuleMatchesPython(t *testing.T) {
	for i, c := range loadVectors(t).Safety {
		if got := SafetyOK(c.ObservedCPUMilli, c.AllocatableCPUMilli, c.Threshold); got != c.OK {
			t.Fatalf("vector %d: Go %v, Python %v (%+v)", i, got, c.OK, c)
		}
	}
}

func TestEnginePodMatchesPython(t *testing.T) {
	qos := map[string]enginev1.QosClass{"Guaranteed": enginev1.QosClass_QOS_CLASS_GUARANTEED,
		"Burstable": enginev1.QosClass_QOS_CLASS_BURSTABLE, "BestEffort": enginev1.QosClass_QOS_CLASS_BEST_EFFORT}
	orZero := func(p *float64) float64 { // the proto's 0 is Python's None: no limit
		if p == nil {
			return 0
		}
		return *p
	}
	for _, c := range loadVectors(t).Pods {
		got, err := EnginePod(&c.Pod)
		if err != nil {
			t.Fatalf("pod %s: %v", c.Pod.Name, err)
		}
		e := c.Expected
		if got.Name != e.Name || got.Namespace != e.Namespace || !near(got.CpuMilli, e.CPUMilli) ||
			!near(got.MemMib, e.MemMiB) || !near(got.DiskGib, e.DiskGiB) || !near(got.RdmaPct, e.RdmaPct) || got.GpuCount != e.GPUCount ||
			got.GpuMilli != e.GPUMilli || got.Qos != qos[e.QoS] || !near(got.CpuLimitMilli, orZero(e.CPULimitMilli)) ||
			!near(got.MemLimitMib, orZero(e.MemLimitMiB)) || got.Owner != e.Owner {
			t.Errorf("pod %s: Go %v, Python %+v", c.Pod.Name, got, e)
		}
	}
}
