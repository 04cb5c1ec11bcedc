package nodemetrics

import (
	"sync"
	"time"
)

// AssignHorizon is how long a binding is remembered even if no newer scrape of its node comes (the
// engine's ASSIGN_HORIZON_S).
const AssignHorizon = 600 * time.Second

// AssignCache is the correction for stale metrics (policy/assign_cache.py): the CPU and memory
// requests of pods bound (or assumed, about to be bound) to a node at or after the time of its newest
// sample are added to its observed usage, until a scrape has seen them.
type AssignCache struct {
	mu      sync.Mutex
	entries map[string][]assigned
}

type assigned struct {
	at       float64 // Unix seconds
	pod      string  // the pod's UID ("": not named, never removed)
	cpuMilli float64
	memMiB   float64
}

// NewAssignCache is an empty cache.
func NewAssignCache() *AssignCache { return &AssignCache{entries: map[string][]assigned{}} }

// Add records the pod pod (its UID; "" for one never removed) bound or assumed on node at time at, with
// its non-zero CPU and memory requests.
func (c *AssignCache) Add(node, pod string, at time.Time, cpuMilli, memMiB float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := unixSeconds(at)
	kept := c.entries[node][:0]
	for _, e := range c.entries[node] {
		if e.at >= now-AssignHorizon.Seconds() {
			kept = append(kept, e)
		}
	}
	c.entries[node] = append(kept, assigned{now, pod, cpuMilli, memMiB})
}

// Remove forgets the pod pod (its UID) on node: an assumed pod the scheduler did not bind there. A pod
// not held there is a no-op.
func (c *AssignCache) Remove(node, pod string) {
	if pod == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	entries := c.entries[node]
	for i, e := range entries {
		if e.pod == pod {
			c.entries[node] = append(entries[:i:i], entries[i+1:]...)
			return
		}
	}
}

// UsageSince is the CPU milli-cores and memory MiB of pods bound to node at or after since (Unix s).
func (c *AssignCache) UsageSince(node string, since float64) (cpuMilli, memMiB float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries[node] {
		if e.at >= since {
			cpuMilli += e.cpuMilli
			memMiB += e.memMiB
		}
	}
	return cpuMilli, memMiB
}
