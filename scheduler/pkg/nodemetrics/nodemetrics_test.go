package nodemetrics

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The default queries are the engine's: the Python package writes them into the shared vectors.
func TestDefaultQueriesAreTheEngines(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "vectors.json"))
	if err != nil {
		t.Fatalf("the shared test vectors: %v (td3sched plugin-vectors writes them)", err)
	}
	var v struct {
		Queries map[string]string `json:"prometheus_queries"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Queries) != len(DefaultQueries) {
		t.Fatalf("the engine has %d queries, the plugin %d", len(v.Queries), len(DefaultQueries))
	}
	for name, q := range v.Queries {
		if DefaultQueries[name] != q {
			t.Errorf("query %s: engine %q, plugin %q", name, q, DefaultQueries[name])
		}
	}
}

// prometheusStub answers /api/v1/query with one series per node for each known query.
func prometheusStub(t *testing.T, values map[string]map[string]string) *httptest.Server {
	byQuery := map[string]string{}
	for name, q := range DefaultQueries {
		byQuery[q] = name
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := byQuery[r.URL.Query().Get("query")]
		result := []map[string]any{}
		for node, v := range values[name] {
			result = append(result, map[string]any{"metric": map[string]string{"instance": node + ":9100"},
				"value": []any{1.0, v}})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success",
			"data": map[string]any{"resultType": "vector", "result": result}})
	}))
}

func TestSnapshotUnitsAndStaleness(t *testing.T) {
	now := float64(time.Now().Unix())
	srv := prometheusStub(t, map[string]map[string]string{
		"cpu_cores":           {"a": "16", "b": "8", "c": "4"},
		"cpu_busy_cores":      {"a": "4", "b": "7.5"},
		"mem_total_bytes":     {"a": fmt.Sprint(64 << 30), "b": fmt.Sprint(32 << 30)},
		"mem_available_bytes": {"a": fmt.Sprint(48 << 30), "b": fmt.Sprint(8 << 30)},
		"disk_busy":           {"a": "0.2", "b": "0.5"},
		"net_bytes_per_s":     {"a": "1.25e8", "b": "0"},
		"net_speed_bytes":     {"a": "1.25e9"},
		"sample_time_s":       {"a": fmt.Sprint(now), "b": fmt.Sprint(now - 120)},
	})
	defer srv.Close()
	src := NewSource(time.Second, NewPrometheus(srv.URL, nil, time.Second))
	if err := src.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	snap := src.Snapshot()
	if _, ok := snap.Nodes["c"]; ok {
		t.Fatalf("node c has no memory total: expected it left out, got %+v", snap.Nodes["c"])
	}
	a, b := snap.Nodes["a"], snap.Nodes["b"]
	wantA := Node{Observed: [4]float64{4000, 16384, 0.2, 1000}, Capacity: [4]float64{16000, 65536, 1, 10000}, SampleTime: now}
	if a != wantA {
		t.Fatalf("node a: got %+v, want %+v", a, wantA)
	}
	if b.Capacity[3] != DefaultNICMbit {
		t.Fatalf("node b has no link speed: expected %g Mbit/s, got %g", DefaultNICMbit, b.Capacity[3])
	}
	if !a.Fresh(time.Now(), time.Minute) || b.Fresh(time.Now(), time.Minute) {
		t.Fatalf("freshness: a (now) %v, b (120 s old) %v", a.Fresh(time.Now(), time.Minute), b.Fresh(time.Now(), time.Minute))
	}
}

func TestMissingValueIsNotFresh(t *testing.T) {
	n := Node{Observed: [4]float64{1, 2, math.NaN(), 4}, Capacity: [4]float64{1, 1, 1, 1}, SampleTime: float64(time.Now().Unix())}
	if n.Fresh(time.Now(), time.Hour) {
		t.Fatal("a node with a NaN value must not be fresh")
	}
}

func TestFailedRefreshKeepsTheLastSnapshot(t *testing.T) {
	srv := prometheusStub(t, map[string]map[string]string{"cpu_cores": {"a": "4"}, "mem_total_bytes": {"a": "1073741824"}})
	src := NewSource(time.Second, NewPrometheus(srv.URL, nil, time.Second))
	var errs []error
	src.OnRefresh = func(_ string, err error) { errs = append(errs, err) }
	if err := src.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := src.Snapshot()
	srv.Close()
	if err := src.Refresh(context.Background()); err == nil {
		t.Fatal("a refresh against a closed Prometheus must fail")
	}
	if src.Snapshot() != first || len(errs) != 2 || errs[0] != nil || errs[1] == nil {
		t.Fatalf("expected the first snapshot kept and refreshes (ok, error), got %v", errs)
	}
}

func TestAssignCacheCountsBindingsSinceTheSample(t *testing.T) {
	c := NewAssignCache()
	t0 := time.Unix(1_000_000, 0)
	c.Add("a", "", t0, 500, 256)
	c.Add("a", "uid-1", t0.Add(10*time.Second), 100, 200)
	c.Add("b", "uid-2", t0, 1000, 1000)
	cpu, mem := c.UsageSince("a", 1_000_000)
	if cpu != 600 || mem != 456 {
		t.Fatalf("both bindings at or after the sample: got %g, %g", cpu, mem)
	}
	if cpu, mem = c.UsageSince("a", 1_000_005); cpu != 100 || mem != 200 {
		t.Fatalf("one binding after the sample: got %g, %g", cpu, mem)
	}
	c.Remove("a", "uid-2") // held on b, not a: a no-op
	c.Remove("a", "")      // an unnamed entry is never removed
	if cpu, mem = c.UsageSince("a", 1_000_000); cpu != 600 || mem != 456 {
		t.Fatalf("removing what a does not hold changed it: got %g, %g", cpu, mem)
	}
	c.Remove("a", "uid-1") // assumed, then not bound there (Unreserve)
	c.Remove("a", "uid-1") // twice: as once
	if cpu, mem = c.UsageSince("a", 1_000_000); cpu != 500 || mem != 256 {
		t.Fatalf("the removed pod still counts: got %g, %g", cpu, mem)
	}
	c.Add("a", "", t0.Add(AssignHorizon+11*time.Second), 1, 1)
	if cpu, _ = c.UsageSince("a", 0); cpu != 1 {
		t.Fatalf("bindings older than the horizon are forgotten: got %g milli-cores", cpu)
	}
}
