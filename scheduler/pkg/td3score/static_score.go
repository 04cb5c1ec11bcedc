package td3score

import (
	"math"

	"td3-scheduler/scheduler/pkg/nodemetrics"
)

// kube-scheduler's non-zero defaults for a pod without a CPU or memory request (policy/base.py).
const (
	DefaultMilliCPURequest  = 100.0
	DefaultMemoryRequestMiB = 200.0
)

// NeutralScore is the score in [0, 1] of a node without fresh metrics (the engine's fail-open score).
const NeutralScore = 0.5

// NonZeroRequests are a pod's CPU and memory requests with kube-scheduler's defaults for empty ones.
func NonZeroRequests(cpuMilli, memMiB float64) (float64, float64) {
	if !(cpuMilli > 0) {
		cpuMilli = DefaultMilliCPURequest
	}
	if !(memMiB > 0) {
		memMiB = DefaultMemoryRequestMiB
	}
	return cpuMilli, memMiB
}

// Utilisation of CPU, memory, disk and network of a node with the pod on it (policy/features.py):
//
//	u_cpu = (observed CPU + assign-cache CPU + pod CPU) / CPU capacity
//	u_mem = (observed memory + assign-cache memory + pod memory) / memory capacity
//	u_io  = observed disk busy share / 1,  u_net = observed Mbit/s / NIC Mbit/s
func Utilisation(podCPUMilli, podMemMiB float64, node nodemetrics.Node, recentCPUMilli, recentMemMiB float64) [4]float64 {
	cpu, mem := NonZeroRequests(podCPUMilli, podMemMiB)
	used := node.Observed
	used[0] += recentCPUMilli
	used[1] += recentMemMiB
	used[0] += cpu
	used[1] += mem
	var u [4]float64
	for r := range u {
		u[r] = used[r] / node.Capacity[r]
	}
	return u
}

// Closeness of a utilisation u to the target tau: 1 at tau, falling linearly to 0 at the far end of
// [0, 1], clipped to [0, 1] (the TargetLoadPacking shape).
func Closeness(u, tau float64) float64 {
	return math.Min(math.Max(1.0-math.Abs(u-tau)/math.Max(tau, 1.0-tau), 0.0), 1.0)
}

// WeightedCloseness is the static score in [0, 1]: sum over resources of w_r * closeness(u_r, tau).
func WeightedCloseness(u [4]float64, weights [4]float64, tau float64) float64 {
	score := 0.0
	for r := range u {
		score += weights[r] * Closeness(u[r], tau)
	}
	return score
}

// StaticScore is the score 0-100 of one node for a pod when the engine gives no usable answer: the
// weighted closeness of its utilisation with the pod, rounded as the engine rounds (halves to even);
// a node without fresh metrics scores NeutralScore.
func StaticScore(podCPUMilli, podMemMiB float64, node nodemetrics.Node, fresh bool, recentCPUMilli, recentMemMiB float64,
	weights [4]float64, tau float64) int64 {
	return ActionScore(podCPUMilli, podMemMiB, node, fresh, recentCPUMilli, recentMemMiB, weights, tau, 0)
}

// ActionScore is the score 0-100 of one node under an action's score arguments, as the engine's
// decision scores it: StaticScore's, and 0 for a fresh node whose CPU utilisation with the pod is above
// the hold-back ceiling (policy/static_weights.py within_ceiling); ceiling 0: none.
func ActionScore(podCPUMilli, podMemMiB float64, node nodemetrics.Node, fresh bool, recentCPUMilli, recentMemMiB float64,
	weights [4]float64, tau, ceiling float64) int64 {
	if !fresh {
		return To100(NeutralScore)
	}
	return UtilisationScore(Utilisation(podCPUMilli, podMemMiB, node, recentCPUMilli, recentMemMiB), weights, tau, ceiling)
}

// UtilisationScore is ActionScore of a fresh node from its utilisation with the pod.
func UtilisationScore(u [4]float64, weights [4]float64, tau, ceiling float64) int64 {
	if ceiling > 0 && !(u[0] <= ceiling) {
		return 0
	}
	return To100(WeightedCloseness(u, weights, tau))
}

// To100 is a score in [0, 1] as an integer 0-100, rounded like the engine's numpy rint.
func To100(score float64) int64 { return int64(math.RoundToEven(100 * score)) }

// SafetyOK is the safety rule (simulator/filter.py safety_ok): observed CPU at most threshold of capacity.
func SafetyOK(observedCPUMilli, allocatableCPUMilli, threshold float64) bool {
	return observedCPUMilli <= threshold*allocatableCPUMilli
}
