package td3score

import (
	"math"
	"slices"
)

// ObservationFields is the observation's layout (src/td3sched/rl/observation.py OBSERVATION_FIELDS): what
// the TD3 actor reads of one decision. A served graph whose card declares another layout is refused.
var ObservationFields = func() []string {
	fields := []string{"request_cpu", "request_mem", "request_disk", "request_rdma",
		"qos_guaranteed", "qos_burstable", "qos_best_effort"}
	for _, r := range []string{"cpu", "mem", "io", "net"} {
		for _, s := range []string{"mean", "std", "min", "max", "p10", "p90"} {
			fields = append(fields, "util_"+r+"_"+s)
		}
	}
	return append(fields, "feasible_share", "oom_kills_5min_log1p", "time_of_day_sin", "time_of_day_cos")
}()

// ObservationSize is the number of values in an observation.
var ObservationSize = len(ObservationFields)

const daySeconds = 86400.0

// Candidate is what the observation reads of one candidate node with fresh metrics: its allocatable
// [CPU milli-cores, memory MiB, disk GiB, RDMA %] and its utilisation with the pod (Utilisation).
type Candidate struct {
	Allocatable [4]float64
	Utilisation [4]float64
}

// Observe writes the observation of one decision into out (ObservationSize values), as the engine
// observes it (rl/observation.py observe over the fresh candidates):
//
//	0-3    the pod's requests [CPU milli, memory MiB, disk GiB, RDMA %] over the largest allocatable of
//	       that resource among the candidates
//	4-6    the QoS class one-hot (Guaranteed, Burstable, BestEffort)
//	7-30   per resource (CPU, memory, IO, network): mean, std, min, max, p10 and p90 of the
//	       candidates' utilisation
//	31     candidates / known nodes
//	32     log(1 + node OOM kills over the last 5 minutes)
//	33-34  sin and cos of the time of day (Unix seconds, UTC)
//
// Each value is computed in float64 in NumPy's order of operations and rounded to float32, so that it
// equals the Python one (the shared test vectors hold it so). scratch is reused between calls (it may
// be nil); Observe returns it.
func Observe(request [4]float64, qos int, candidates []Candidate, knownNodes int, oomKills, unixSeconds float64,
	out []float32, scratch []float64) []float64 {
	k := len(candidates)
	for r := range request {
		largest := candidates[0].Allocatable[r]
		for _, c := range candidates[1:] {
			largest = math.Max(largest, c.Allocatable[r])
		}
		out[r] = float32(request[r] / largest)
	}
	for j := range 3 {
		out[4+j] = 0
	}
	out[4+qos] = 1
	scratch = slices.Grow(scratch[:0], k)[:k]
	for r := range 4 {
		total := 0.0
		lowest, highest := math.Inf(1), math.Inf(-1)
		for i := range candidates {
			u := candidates[i].Utilisation[r]
			total += u
			scratch[i] = u
			lowest, highest = min(lowest, u), max(highest, u)
		}
		mean := total / float64(k)
		squares := 0.0
		for i := range candidates {
			d := candidates[i].Utilisation[r] - mean
			squares += d * d
		}
		o := 7 + 6*r
		out[o] = float32(mean)
		out[o+1] = float32(math.Sqrt(squares / float64(k)))
		out[o+2] = float32(lowest)
		out[o+3] = float32(highest)
		quantile := selectQuantile
		if slices.IsSorted(scratch) { // in node order already (or all equal): read, not select
			quantile = linearQuantile
		}
		out[o+4] = float32(quantile(scratch, 0.1))
		out[o+5] = float32(quantile(scratch, 0.9))
	}
	out[31] = float32(float64(k) / float64(max(knownNodes, 1)))
	out[32] = float32(math.Log1p(oomKills))
	angle := 2.0 * math.Pi * pyMod(unixSeconds, daySeconds) / daySeconds
	out[33] = float32(math.Sin(angle))
	out[34] = float32(math.Cos(angle))
	return scratch
}

// linearQuantile is numpy.quantile(x, q) (method "linear") of the sorted x, in NumPy's own arithmetic
// (its _lerp: from the lower neighbour below a half, from the upper one above).
func linearQuantile(sorted []float64, q float64) float64 {
	k := len(sorted)
	virtual := float64(k-1) * q
	if virtual >= float64(k-1) {
		return sorted[k-1]
	}
	below := int(math.Floor(virtual))
	return lerp(sorted[below], sorted[below+1], virtual-float64(below))
}

// selectQuantile is linearQuantile of x without sorting it: the two order statistics it reads are
// selected (nthElement, then the smallest above), in O(len(x)). It reorders x.
func selectQuantile(x []float64, q float64) float64 {
	k := len(x)
	virtual := float64(k-1) * q
	below := int(math.Floor(virtual))
	if virtual >= float64(k-1) {
		below = k - 1
	}
	a := nthElement(x, below)
	if below == k-1 {
		return a
	}
	return lerp(a, slices.Min(x[below+1:]), virtual-float64(below))
}

// lerp is NumPy's _lerp from a to b by gamma: from the lower end below a half, from the upper one above.
func lerp(a, b, gamma float64) float64 {
	diff := b - a
	if gamma < 0.5 {
		return a + diff*gamma
	}
	return b - diff*(1.0-gamma)
}

// nthElement reorders x so that x[n] is the value sorting would put there, with no greater value before
// it and no smaller one after (quickselect, Hoare's partition around the median of three); it returns
// x[n]. x must hold no NaN.
func nthElement(x []float64, n int) float64 {
	lo, hi := 0, len(x)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if x[mid] < x[lo] {
			x[mid], x[lo] = x[lo], x[mid]
		}
		if x[hi] < x[lo] {
			x[hi], x[lo] = x[lo], x[hi]
		}
		if x[hi] < x[mid] {
			x[hi], x[mid] = x[mid], x[hi]
		}
		pivot := x[mid]
		i, j := lo, hi
		for i <= j {
			for x[i] < pivot {
				i++
			}
			for x[j] > pivot {
				j--
			}
			if i <= j {
				x[i], x[j] = x[j], x[i]
				i++
				j--
			}
		}
		switch { // x[lo..j] <= pivot <= x[i..hi], and any between equal the pivot
		case n <= j:
			hi = j
		case n >= i:
			lo = i
		default:
			return x[n]
		}
	}
	return x[n]
}

// pyMod is Python's float modulo (the result has the divisor's sign).
func pyMod(x, m float64) float64 {
	r := math.Mod(x, m)
	if r != 0 && (r < 0) != (m < 0) {
		r += m
	}
	return r
}
