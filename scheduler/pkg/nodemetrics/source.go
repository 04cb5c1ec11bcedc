// Package nodemetrics reads the live node metrics the decision engine reads, refreshed in the
// background so that a scheduling cycle never waits for them, and keeps the assign cache that
// corrects them for pods bound since their node was last scraped (assign_cache.go).
//
// A Source publishes whole snapshots from its readers, tried in order on every refresh: the engine's
// copy (engine.go, GetNodeMetrics: one reader of Prometheus per cluster, and the plugin's Filter reads
// the numbers the engine decides with), then Prometheus itself (prometheus.go: the engine's PromQL and
// unit conversions), so that the safety filter keeps live metrics while the engine is down.
//
// Per node, in the engine's units (the columns of its NodeSnapshot):
//
//	Observed = [CPU busy milli-cores, memory used MiB, disk busy share, network Mbit/s]
//	Capacity = [CPU milli-cores,      memory MiB,      1,               NIC Mbit/s (10,000 if unknown)]
//
// A node missing from a query has NaN for that value; its metrics are not Fresh.
package nodemetrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// Node is one node's metrics.
type Node struct {
	Observed [4]float64
	Capacity [4]float64
	// SampleTime is the time of the node's newest sample, in Unix seconds (-Inf: never).
	SampleTime float64
}

// Complete reports whether every observed value is known.
func (n Node) Complete() bool {
	for _, v := range n.Observed {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// Fresh reports whether the metrics are complete and at most maxAge old at now (the engine's rule).
func (n Node) Fresh(now time.Time, maxAge time.Duration) bool {
	return n.Complete() && unixSeconds(now)-n.SampleTime <= maxAge.Seconds()
}

// Snapshot is every node's metrics at one refresh; never modified once published.
type Snapshot struct {
	Nodes   map[string]Node
	TakenAt time.Time
	// Reader names the reader that took it ("engine", "prometheus").
	Reader string
	// Stamp is the reader's own name for the snapshot (the engine's taken_at_s, exactly as sent), 0: none.
	Stamp float64
}

// Names are the snapshot's node names, sorted.
func (s *Snapshot) Names() []string {
	names := make([]string, 0, len(s.Nodes))
	for n := range s.Nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// A Reader takes a snapshot of every node's metrics. last is the snapshot published now (nil: none); a
// reader may return it unchanged when it knows nothing newer.
type Reader interface {
	Name() string
	Read(ctx context.Context, last *Snapshot) (*Snapshot, error)
}

// Source asks its readers in order every Interval and publishes the first snapshot one of them takes.
type Source struct {
	Readers  []Reader
	Interval time.Duration
	// OnRefresh, when set, is called once for every reader asked, with its error (nil: its snapshot was
	// published).
	OnRefresh func(reader string, err error)

	snapshot atomic.Pointer[Snapshot]
}

// NewSource is a Source over readers, tried in their order.
func NewSource(interval time.Duration, readers ...Reader) *Source {
	return &Source{Readers: readers, Interval: interval}
}

// Snapshot is the last published snapshot, nil before the first successful refresh.
func (s *Source) Snapshot() *Snapshot { return s.snapshot.Load() }

// Publish swaps in a snapshot (Refresh does; tests and other sources may too).
func (s *Source) Publish(snap *Snapshot) { s.snapshot.Store(snap) }

// Run refreshes now and then every Interval until ctx is done.
func (s *Source) Run(ctx context.Context) { s.RunAfter(ctx, 0) }

// RunAfter is Run with the first refresh after wait.
func (s *Source) RunAfter(ctx context.Context, wait time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(wait):
	}
	ticker := time.NewTicker(s.Interval)
	defer ticker.Stop()
	for {
		if err := s.Refresh(ctx); err != nil {
			klog.FromContext(ctx).V(2).Info("node metrics refresh failed; keeping the last snapshot", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Refresh asks the readers in order and publishes the first snapshot with nodes; when every reader
// fails the old snapshot stays and the error names each reader's failure.
func (s *Source) Refresh(ctx context.Context) error {
	var errs []error
	for _, r := range s.Readers {
		snap, err := r.Read(ctx, s.Snapshot())
		if err == nil && len(snap.Nodes) == 0 {
			err = errors.New("no node metrics")
		}
		if err == nil {
			s.Publish(snap)
		} else {
			errs = append(errs, fmt.Errorf("%s: %w", r.Name(), err))
		}
		if s.OnRefresh != nil {
			s.OnRefresh(r.Name(), err)
		}
		if err == nil {
			return nil
		}
	}
	if len(errs) == 0 {
		return errors.New("no node metrics reader configured")
	}
	return errors.Join(errs...)
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
