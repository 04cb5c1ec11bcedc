package nodemetrics

import (
	"context"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	enginev1 "td3-scheduler/scheduler/pkg/engine/v1"
)

// fakeEngine is a DecisionEngine on a loopback port that answers GetNodeMetrics as each test sets it (the
// Python engine's answers are tested against the Python state in tests/engine/test_grpc.py).
type fakeEngine struct {
	enginev1.UnimplementedDecisionEngineServer
	mu    sync.Mutex
	reply *enginev1.GetNodeMetricsResponse
	known []float64 // known_taken_at_s of each call
}

func (f *fakeEngine) GetNodeMetrics(_ context.Context, req *enginev1.GetNodeMetricsRequest) (*enginev1.GetNodeMetricsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.known = append(f.known, req.KnownTakenAtS)
	if req.KnownTakenAtS != 0 && req.KnownTakenAtS == f.reply.TakenAtS {
		return &enginev1.GetNodeMetricsResponse{TakenAtS: f.reply.TakenAtS, Unchanged: true}, nil
	}
	return f.reply, nil
}

// engineReader serves f on loopback and returns a reader of it (address "": a port nothing listens on).
func engineReader(t *testing.T, f *fakeEngine) *Engine {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := lis.Addr().String()
	if f == nil {
		_ = lis.Close()
	} else {
		srv := grpc.NewServer()
		enginev1.RegisterDecisionEngineServer(srv, f)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
	}
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &Engine{Client: enginev1.NewDecisionEngineClient(conn), Timeout: 2 * time.Second}
}

func twoNodes(takenAt float64) *enginev1.GetNodeMetricsResponse {
	return &enginev1.GetNodeMetricsResponse{TakenAtS: takenAt, Nodes: []string{"a", "b"},
		Observed:    []float64{4000, 16384, 0.2, 1000, 7500, math.NaN(), 0.5, 0},
		Capacity:    []float64{16000, 65536, 1, 10000, 8000, 32768, 1, 1000},
		SampleTimeS: []float64{takenAt - 1, math.Inf(-1)}}
}

func TestEngineReaderTakesTheEnginesSnapshotAndSkipsAnUnchangedOne(t *testing.T) {
	taken := 1_750_000_000.123456789
	f := &fakeEngine{reply: twoNodes(taken)}
	src := NewSource(time.Second, engineReader(t, f), NewPrometheus("http://127.0.0.1:1", nil, time.Second))
	var reads []string
	src.OnRefresh = func(reader string, err error) { reads = append(reads, reader+":"+errString(err)) }
	if err := src.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := src.Snapshot()
	a, b := first.Nodes["a"], first.Nodes["b"]
	if want := (Node{Observed: [4]float64{4000, 16384, 0.2, 1000}, Capacity: [4]float64{16000, 65536, 1, 10000},
		SampleTime: taken - 1}); a != want {
		t.Fatalf("node a: got %+v, want %+v", a, want)
	}
	if b.Complete() || !math.IsInf(b.SampleTime, -1) || b.Capacity != [4]float64{8000, 32768, 1, 1000} {
		t.Fatalf("node b (memory missing, never sampled): got %+v", b)
	}
	if first.Reader != "engine" || first.Stamp != taken || math.Abs(unixSeconds(first.TakenAt)-taken) > 1e-6 {
		t.Fatalf("snapshot reader %q, stamp %v, taken at %v: expected the engine's %v", first.Reader, first.Stamp,
			first.TakenAt, taken)
	}
	if err := src.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if src.Snapshot() != first || len(f.known) != 2 || f.known[0] != 0 || f.known[1] != taken {
		t.Fatalf("an unchanged snapshot is kept as it is: known_taken_at_s sent %v", f.known)
	}
	f.mu.Lock()
	f.reply = twoNodes(taken + 2)
	f.mu.Unlock()
	if err := src.Refresh(context.Background()); err != nil || src.Snapshot().Stamp != taken+2 {
		t.Fatalf("a newer engine snapshot is taken: err %v, stamp %v", err, src.Snapshot().Stamp)
	}
	if strings.Join(reads, " ") != "engine:ok engine:ok engine:ok" {
		t.Fatalf("Prometheus is not asked while the engine answers: reads %v", reads)
	}
}

func TestPrometheusIsAskedWhenTheEngineCannotAnswer(t *testing.T) {
	promValues := map[string]map[string]string{"cpu_cores": {"p": "4"}, "mem_total_bytes": {"p": "1073741824"}}
	failed := twoNodes(1_750_000_000)
	failed.RefreshFailed, failed.RefreshError = true, "query cpu_cores: connection refused"
	malformed := twoNodes(1_750_000_000)
	malformed.Capacity = malformed.Capacity[:7]
	for _, tc := range []struct {
		name   string
		engine *fakeEngine
		want   string // in the engine reader's error
	}{
		{"engine down", nil, "GetNodeMetrics"},
		{"its own refresh failed", &fakeEngine{reply: failed}, "connection refused"},
		{"malformed answer", &fakeEngine{reply: malformed}, "7 capacities"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := prometheusStub(t, promValues)
			defer srv.Close()
			src := NewSource(time.Second, engineReader(t, tc.engine), NewPrometheus(srv.URL, nil, time.Second))
			var reads []string
			var engineErr error
			src.OnRefresh = func(reader string, err error) {
				reads = append(reads, reader+":"+errString(err))
				if reader == "engine" {
					engineErr = err
				}
			}
			if err := src.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(reads, " "); got != "engine:error prometheus:ok" {
				t.Fatalf("reads %s", got)
			}
			if !strings.Contains(engineErr.Error(), tc.want) {
				t.Fatalf("the engine reader's error %q does not name %q", engineErr, tc.want)
			}
			if snap := src.Snapshot(); snap.Reader != "prometheus" || len(snap.Nodes) != 1 {
				t.Fatalf("expected Prometheus' one node, got %s's %v", snap.Reader, snap.Names())
			}
		})
	}
}

func TestEveryReaderFailingKeepsTheSnapshotAndNamesEach(t *testing.T) {
	src := NewSource(time.Second, engineReader(t, nil), NewPrometheus("http://127.0.0.1:1", nil, time.Second))
	old := &Snapshot{Nodes: map[string]Node{"x": {}}}
	src.Publish(old)
	err := src.Refresh(context.Background())
	if err == nil || !strings.Contains(err.Error(), "engine: ") || !strings.Contains(err.Error(), "prometheus: ") {
		t.Fatalf("expected both readers' failures, got %v", err)
	}
	if src.Snapshot() != old {
		t.Fatal("a failed refresh must keep the last snapshot")
	}
}

func errString(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}
