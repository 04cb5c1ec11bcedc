package nodemetrics

// The Prometheus reader: the same PromQL and unit conversions as the engine's
// (src/td3sched/engine/prometheus_source.py).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
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

// Prometheus reads the node metrics from Prometheus' HTTP API, one instant query per metric.
type Prometheus struct {
	URL     string
	Queries map[string]string
	Timeout time.Duration // one query's deadline
	Client  *http.Client
}

// NewPrometheus is a Prometheus reader over the default queries with overrides.
func NewPrometheus(promURL string, overrides map[string]string, timeout time.Duration) *Prometheus {
	queries := make(map[string]string, len(DefaultQueries))
	for k, v := range DefaultQueries {
		queries[k] = v
	}
	for k, v := range overrides {
		queries[k] = v
	}
	return &Prometheus{URL: promURL, Queries: queries, Timeout: timeout, Client: &http.Client{}}
}

// Name is the reader's name in the refresh metric.
func (s *Prometheus) Name() string { return "prometheus" }

// Read runs every query once and joins them by node.
func (s *Prometheus) Read(ctx context.Context, _ *Snapshot) (*Snapshot, error) { return s.fetch(ctx) }

func (s *Prometheus) fetch(ctx context.Context) (*Snapshot, error) {
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
	return &Snapshot{Nodes: nodes, TakenAt: time.Now(), Reader: s.Name()}, nil
}

var portSuffix = regexp.MustCompile(`:\d+$`)

// query runs one named query: node name (the instance label without its port) -> value.
func (s *Prometheus) query(ctx context.Context, name string) (map[string]float64, error) {
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
