// Package nodemetrics reads the live node metrics the decision engine reads (the same Prometheus, the
// same PromQL, the same unit conversions as src/td3sched/engine/prometheus_source.py), refreshed in the
// background so that a scheduling cycle never waits on Prometheus, and keeps the assign cache that
// corrects them for pods bound since their node was last scraped (assign_cache.go).
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
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// MiB is the bytes of a mebibyte.
const MiB = 1 << 20

// DefaultNICMbit is the NIC capacity of a node without node_network_speed_bytes (10 Gbit/s).
const DefaultNICMbit = 10_000.0

// DefaultQueries are the engine's default PromQL queries (prometheus_source.DEFAULT_QUERIES); the test
// vectors written by the Python package hold them equal.
var DefaultQueries = map[string]string{
	"cpu_cores":           `count by (instance) (node_cpu_seconds_total{mode="idle"})`,
	"cpu_busy_cores":      `sum by (instance) (1 - rate(node_cpu_seconds_total{mode="idle"}[1m]))`,
	"mem_total_bytes":     `max by (instance) (node_memory_MemTotal_bytes)`,
	"mem_available_bytes": `max by (instance) (node_memory_MemAvailable_bytes)`,
	"disk_busy":           `max by (instance) (rate(node_disk_io_time_seconds_total[1m]))`,
	"net_bytes_per_s": `sum by (instance) (rate(node_network_receive_bytes_total{device!="lo"}[1m]) ` +
		`+ rate(node_network_transmit_bytes_total{device!="lo"}[1m]))`,
	"net_speed_bytes": `max by (instance) (node_network_speed_bytes{device!="lo"})`,
	"sample_time_s":   `max by (instance) (timestamp(node_memory_MemAvailable_bytes))`,
	"oom_kills_5m":    `sum(increase(node_vmstat_oom_kill[5m]))`,
}

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
}

// Source queries Prometheus every Interval and publishes whole snapshots.
type Source struct {
	URL      string
	Queries  map[string]string
	Interval time.Duration
	Timeout  time.Duration
	Client   *http.Client
	// OnRefresh, when set, is called after every refresh with its error (nil: ok).
	OnRefresh func(err error)

	snapshot atomic.Pointer[Snapshot]
}

// NewSource is a Source over the default queries with overrides.
func NewSource(promURL string, overrides map[string]string, interval, timeout time.Duration) *Source {
	queries := make(map[string]string, len(DefaultQueries))
	for k, v := range DefaultQueries {
		queries[k] = v
	}
	for k, v := range overrides {
		queries[k] = v
	}
	return &Source{URL: promURL, Queries: queries, Interval: interval, Timeout: timeout, Client: &http.Client{}}
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

// Refresh runs every query once and publishes the joined snapshot; on error the old one stays.
func (s *Source) Refresh(ctx context.Context) error {
	snap, err := s.fetch(ctx)
	if err == nil && len(snap.Nodes) == 0 {
		err = fmt.Errorf("no node metrics at %s (query cpu_cores returned no series)", s.URL)
	}
	if err == nil {
		s.Publish(snap)
	}
	if s.OnRefresh != nil {
		s.OnRefresh(err)
	}
	return err
}

func (s *Source) fetch(ctx context.Context) (*Snapshot, error) {
	values := map[string]map[string]float64{}
	for _, name := range []string{"cpu_cores", "cpu_busy_cores", "mem_total_bytes", "mem_available_bytes",
		"disk_busy", "net_bytes_per_s", "net_speed_bytes", "sample_time_s"} {
		v, err := s.query(ctx, name)
		if err != nil {
			return nil, err
		}
		values[name] = v
	}
	col := func(name, node string) float64 {
		if v, ok := values[name][node]; ok {
			return v
		}
		return math.NaN()
	}
	nodes := map[string]Node{}
	for name := range values["cpu_cores"] {
		if _, ok := values["mem_total_bytes"][name]; !ok {
			continue
		}
		cores, memTotal := col("cpu_cores", name), col("mem_total_bytes", name)
		speedMbit := DefaultNICMbit
		if speed := col("net_speed_bytes", name); !math.IsNaN(speed) && !math.IsInf(speed, 0) && speed > 0 {
			speedMbit = speed * 8 / 1e6
		}
		sample := col("sample_time_s", name)
		if math.IsNaN(sample) || math.IsInf(sample, 0) {
			sample = math.Inf(-1)
		}
		nodes[name] = Node{
			Observed: [4]float64{col("cpu_busy_cores", name) * 1000, (memTotal - col("mem_available_bytes", name)) / MiB,
				col("disk_busy", name), col("net_bytes_per_s", name) * 8 / 1e6},
			Capacity:   [4]float64{cores * 1000, memTotal / MiB, 1, speedMbit},
			SampleTime: sample,
		}
	}
	return &Snapshot{Nodes: nodes, TakenAt: time.Now()}, nil
}

var portSuffix = regexp.MustCompile(`:\d+$`)

// query runs one named query: node name (the instance label without its port) -> value.
func (s *Source) query(ctx context.Context, name string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	endpoint := strings.TrimRight(s.URL, "/") + "/api/v1/query?" + url.Values{"query": {s.Queries[name]}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return nil, fmt.Errorf("query %s at %s: %w", name, s.URL, err)
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query %s at %s: %w", name, s.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("query %s at %s: %w", name, s.URL, err)
	}
	var answer struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, fmt.Errorf("query %s at %s: HTTP %d, not JSON: %w", name, s.URL, resp.StatusCode, err)
	}
	if answer.Status != "success" {
		return nil, fmt.Errorf("query %s at %s: %s: %s", name, s.URL, answer.ErrorType, answer.Error)
	}
	out := make(map[string]float64, len(answer.Data.Result))
	for _, series := range answer.Data.Result {
		node := portSuffix.ReplaceAllString(series.Metric["instance"], "")
		text, ok := series.Value[1].(string)
		if node == "" || !ok {
			continue
		}
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s at %s: value %q of %s: %w", name, s.URL, text, node, err)
		}
		out[node] = v
	}
	return out, nil
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

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
