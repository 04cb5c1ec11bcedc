package td3score

import (
	"encoding/json"
	"fmt"
	"math"
	"os"

	fwk "k8s.io/kube-scheduler/framework"

	"td3-scheduler/scheduler/pkg/nodemetrics"
)

// The fragmentation share of the static score (fallbackFragmentation): the static score blended with
// FGD's (Weng et al., USENIX ATC'23), as the engine's fallback and static-weights' frag blend it
// (src/td3sched/policy/static_weights.py blend_fragmentation, policy/fgd.py, metrics/fragmentation.py):
//
//	F_n      = max(free CPU_n, 0) * sum over the typical pods m of n's pool of p_m * [m does not fit n]
//	decrease = F_n(as it is) - F_n(with the pod's requests taken, its GPUs as Bind takes them)
//	score_n  = (1 - share) * minmax(static_n) + share * minmax(decrease_n)   over the fresh candidates
//
// free is allocatable minus the requests of the pods on the node (CPU milli, memory MiB, disk GiB, RDMA
// %, as NodeResourcesFit books them), a node's GPUs are whole (the free ones first); "fits" compares a
// resource column only when some typical pod of the pool requests it. The typical pods come per pool by
// name from a file (a model card's typical_pods, or their own form); a node of a pool the file does not
// name has no typical pods, so its F_n is 0. The shared test vectors hold this to the engine.

// GPUMilli is a whole GPU in milli-GPU.
const GPUMilli = 1000

// TypicalPods are one pool's typical pods: request shapes and their weights p_m (summing to 1).
type TypicalPods struct {
	Request  [][4]float64 // CPU milli, memory MiB, disk GiB, RDMA %
	GPUCount []int64
	GPUMilli []int64 // per GPU; 1000: whole GPUs
	Weight   []float64
	checked  [4]bool // column j is compared when some shape requests it
}

// PoolTypicalPods are the typical pods of each pool, by pool name.
type PoolTypicalPods map[string]*TypicalPods

// typicalPodsJSON is metrics/fragmentation.py typical_pods_to_json's form.
type typicalPodsJSON struct {
	Pools []string `json:"pools"`
	Sets  []struct {
		Request  [][]float64 `json:"request"`
		GPUCount []int64     `json:"gpu_count"`
		GPUMilli []int64     `json:"gpu_milli"`
		Weight   []float64   `json:"weight"`
	} `json:"sets"`
}

// ParseTypicalPods reads typical pods in their own JSON form ({"pools": [...], "sets": [...]}) or from a
// model card holding them under "typical_pods"; an error names the entry and what was expected.
func ParseTypicalPods(data []byte) (PoolTypicalPods, error) {
	if !json.Valid(data) {
		return nil, fmt.Errorf("not JSON")
	}
	var card map[string]json.RawMessage
	if json.Unmarshal(data, &card) == nil && card["typical_pods"] != nil {
		data = card["typical_pods"]
	}
	var raw typicalPodsJSON
	if err := json.Unmarshal(data, &raw); err != nil || raw.Pools == nil || raw.Sets == nil {
		return nil, fmt.Errorf(`expected {"pools": [pool names], "sets": [one set per pool]} (or a model card ` +
			`holding them under typical_pods)`)
	}
	if len(raw.Pools) != len(raw.Sets) {
		return nil, fmt.Errorf("pools %q with %d sets: expected one set per pool", raw.Pools, len(raw.Sets))
	}
	out := make(PoolTypicalPods, len(raw.Pools))
	for k, name := range raw.Pools {
		if _, dup := out[name]; dup || name == "" {
			return nil, fmt.Errorf("pools %q: expected distinct, non-empty pool names", raw.Pools)
		}
		set := raw.Sets[k]
		m := len(set.Weight)
		if len(set.Request) != m || len(set.GPUCount) != m || len(set.GPUMilli) != m {
			return nil, fmt.Errorf("typical_pods[%q]: %d requests, %d GPU counts, %d GPU millis for %d weights: "+
				"expected one of each per shape", name, len(set.Request), len(set.GPUCount), len(set.GPUMilli), m)
		}
		t := &TypicalPods{Request: make([][4]float64, m), GPUCount: set.GPUCount, GPUMilli: set.GPUMilli, Weight: set.Weight}
		sum := 0.0
		for s := 0; s < m; s++ {
			ok := len(set.Request[s]) == 4 && set.GPUCount[s] >= 0 && set.GPUMilli[s] >= 0 && set.GPUMilli[s] <= GPUMilli &&
				set.Weight[s] >= 0 && !math.IsInf(set.Weight[s], 0)
			for j := 0; ok && j < 4; j++ {
				x := set.Request[s][j]
				ok = x >= 0 && !math.IsInf(x, 0)
				t.Request[s][j] = x
				t.checked[j] = t.checked[j] || x > 0
			}
			if !ok {
				return nil, fmt.Errorf("typical_pods[%q] shape %d: expected 4 non-negative requests, a GPU count >= 0, "+
					"GPU milli in [0, 1000] and a weight >= 0", name, s)
			}
			sum += set.Weight[s]
		}
		if m > 0 && math.Abs(sum-1) >= 1e-9 {
			return nil, fmt.Errorf("typical_pods[%q]: weights sum to %g: expected 1", name, sum)
		}
		out[name] = t
	}
	return out, nil
}

// LoadTypicalPods is ParseTypicalPods of a file; an error names the file.
func LoadTypicalPods(path string) (PoolTypicalPods, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("typical pods: %w", err)
	}
	typical, err := ParseTypicalPods(data)
	if err != nil {
		return nil, fmt.Errorf("typical pods %s: %w", path, err)
	}
	return typical, nil
}

// NodeFragmentation is F_n of a node with free resources free and free milli-GPU gpuFree per device,
// with its pool's typical pods t (nil: none, F_n = 0); the unfit weights summed in shape order, as the
// simulator sums them (simulator/kernels.py unfit_share).
func NodeFragmentation(t *TypicalPods, free [4]float64, gpuFree []int64) float64 {
	if t == nil {
		return 0
	}
	largest, whole := int64(-1), int64(0)
	for _, f := range gpuFree {
		largest = max(largest, f)
		if f == GPUMilli {
			whole++
		}
	}
	unfit := 0.0
	for s := range t.Weight {
		fits := true
		for j := 0; j < 4; j++ {
			if t.checked[j] && !(free[j] >= t.Request[s][j]) {
				fits = false
				break
			}
		}
		if c := t.GPUCount[s]; fits && c > 0 {
			if c == 1 && t.GPUMilli[s] < GPUMilli {
				fits = largest >= t.GPUMilli[s]
			} else {
				fits = whole >= c
			}
		}
		if !fits {
			unfit += t.Weight[s]
		}
	}
	return math.Max(free[0], 0) * unfit
}

// FragmentationDecrease is how much placing a pod of request (CPU milli, memory MiB, disk GiB, RDMA %) and
// gpuCount GPUs of gpuMilli each lowers the node's F_n (negative: raises it). Its GPUs are taken as Bind
// takes them (policy/fgd.py assign_gpus): a share from the fitting GPU with the least free milli (lowest
// index on ties; the first GPU when none fits), whole GPUs from the lowest-indexed entirely free ones.
func FragmentationDecrease(t *TypicalPods, request [4]float64, gpuCount, gpuMilli int64, free [4]float64, gpuFree []int64) float64 {
	after := free
	for j := range after {
		after[j] -= request[j]
	}
	gpuAfter := gpuFree
	if gpuCount > 0 && len(gpuFree) > 0 {
		gpuAfter = append([]int64(nil), gpuFree...)
		if gpuCount == 1 && gpuMilli < GPUMilli {
			best, least := 0, int64(math.MaxInt64)
			for g, f := range gpuFree {
				if f >= gpuMilli && f < least {
					best, least = g, f
				}
			}
			gpuAfter[best] -= gpuMilli
		} else {
			taken := int64(0)
			for g, f := range gpuFree {
				if f == GPUMilli && taken < gpuCount {
					gpuAfter[g] -= gpuMilli
					taken++
				}
			}
		}
	}
	return NodeFragmentation(t, free, gpuFree) - NodeFragmentation(t, after, gpuAfter)
}

// GPULayout is the free milli-GPU per device of a node with gpus whole GPUs, used of them requested: the
// free ones first, then the taken ones (engine/state.py gpu_layout; at least one device, 0 beyond its
// count). A v1.Pod asks whole GPUs, so which devices hold them changes no fit and no F_n.
func GPULayout(gpus, used int64) []int64 {
	free := min(max(gpus-used, 0), gpus)
	layout := make([]int64, max(gpus, 1))
	for g := int64(0); g < free; g++ {
		layout[g] = GPUMilli
	}
	return layout
}

// NodeAllocation is what the pods on a node leave free of it, as the scheduler books them: allocatable
// minus requested CPU milli, memory MiB, disk GiB and RDMA % (a node whose allocatable lists no disk or
// RDMA has diskGiB and rdmaPct, the engine's assumptions), and its GPUs' layout.
func NodeAllocation(nodeInfo fwk.NodeInfo, diskGiB, rdmaPct float64) ([4]float64, []int64) {
	free, req := nodeAllocatable(nodeInfo, diskGiB, rdmaPct), nodeInfo.GetRequested()
	requested := req.GetScalarResources()
	free[0] -= float64(req.GetMilliCPU())
	free[1] -= float64(req.GetMemory()) / nodemetrics.MiB
	free[2] -= float64(req.GetEphemeralStorage()) / GiB
	free[3] -= float64(requested[rdmaResource])
	return free, GPULayout(nodeInfo.GetAllocatable().GetScalarResources()[gpuResource], requested[gpuResource])
}

// MinMax is scores scaled to [0, 1] over one pod's candidates (all 0 when they are equal).
func MinMax(scores []float64) []float64 {
	out := make([]float64, len(scores))
	if len(scores) == 0 {
		return out
	}
	low, high := scores[0], scores[0]
	for _, s := range scores {
		low, high = math.Min(low, s), math.Max(high, s)
	}
	if span := high - low; span > 0 {
		for i, s := range scores {
			out[i] = (s - low) / span
		}
	}
	return out
}

// BlendFragmentation is (1 - share) x MinMax(scores) + share x MinMax(decrease); scores unscaled for a share of 0.
func BlendFragmentation(scores, decrease []float64, share float64) []float64 {
	if share == 0 {
		return scores
	}
	s, d := MinMax(scores), MinMax(decrease)
	out := make([]float64, len(scores))
	for i := range out {
		out[i] = (1.0-share)*s[i] + share*d[i]
	}
	return out
}
