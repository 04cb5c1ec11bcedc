package td3score

import (
	"context"
	"fmt"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"td3-scheduler/scheduler/apis/config"
	enginev1 "td3-scheduler/scheduler/pkg/engine/v1"
	"td3-scheduler/scheduler/pkg/nodemetrics"
)

// fakeEngine is a DecisionEngine on a loopback port whose answer each test chooses.
type fakeEngine struct {
	enginev1.UnimplementedDecisionEngineServer
	mu       sync.Mutex
	answer   func(*enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error)
	delay    time.Duration
	calls    int
	bindings []*enginev1.ReportBindingRequest
	batches  int
	seen     []int // len(bindings) at each ScoreNodes call
}

func (f *fakeEngine) ScoreNodes(ctx context.Context, req *enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error) {
	f.mu.Lock()
	f.calls++
	f.seen = append(f.seen, len(f.bindings))
	answer, delay := f.answer, f.delay
	f.mu.Unlock()
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return answer(req)
}

func (f *fakeEngine) ReportBinding(_ context.Context, req *enginev1.ReportBindingRequest) (*enginev1.ReportBindingResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bindings = append(f.bindings, req)
	return &enginev1.ReportBindingResponse{}, nil
}

func (f *fakeEngine) ReportBindings(_ context.Context, req *enginev1.ReportBindingsRequest) (*enginev1.ReportBindingsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bindings = append(f.bindings, req.Bindings...)
	f.batches++
	return &enginev1.ReportBindingsResponse{Accepted: uint32(len(req.Bindings))}, nil
}

// scoresBy answers each candidate with score(node), a decision id and weights on the simplex.
func scoresBy(score func(node string) int64) func(*enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error) {
	return func(req *enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error) {
		reply := &enginev1.ScoreNodesResponse{DecisionId: "d-" + req.Pod.Name, ModelVersion: "test",
			Action: &enginev1.Action{Weights: []float64{0.25, 0.25, 0.25, 0.25}, Tau: 0.3}}
		for _, c := range req.Candidates {
			reply.Scores = append(reply.Scores, &enginev1.NodeScore{Node: c, Score: score(c)})
		}
		return reply, nil
	}
}

func startEngine(t *testing.T, f enginev1.DecisionEngineServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	enginev1.RegisterDecisionEngineServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// nodes n0..n(k-1): 16 cores, 64 GiB; node i's observed CPU is cpuBusy[i] of capacity.
func testNodes(cpuBusy []float64, sampleAge time.Duration) (*nodemetrics.Snapshot, []fwk.NodeInfo) {
	snap := &nodemetrics.Snapshot{Nodes: map[string]nodemetrics.Node{}, TakenAt: time.Now()}
	var infos []fwk.NodeInfo
	for i, busy := range cpuBusy {
		name := fmt.Sprintf("n%d", i)
		snap.Nodes[name] = nodemetrics.Node{
			Observed:   [4]float64{busy * 16000, 1024 * float64(8+4*i), 0.1 * float64(i%3), 200},
			Capacity:   [4]float64{16000, 65536, 1, 10000},
			SampleTime: float64(time.Now().Add(-sampleAge).UnixNano()) / 1e9,
		}
		info := framework.NewNodeInfo()
		info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		infos = append(infos, info)
	}
	return snap, infos
}

func testPod(name, cpu, mem string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: v1.PodSpec{
		Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}}}}}}
}

func newTestPlugin(t *testing.T, address string, edit func(*config.TD3ScoreArgs)) *TD3Score {
	t.Helper()
	registerMetrics()
	args := config.TD3ScoreArgs{EngineAddress: address}
	if edit != nil {
		edit(&args)
	}
	config.SetDefaults(&args)
	if err := config.Validate(&args); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return newPlugin(args, enginev1.NewDecisionEngineClient(conn), nodemetrics.NewSource(time.Hour, nodemetrics.NewPrometheus("http://127.0.0.1:1", nil, time.Second)))
}

// cycle runs PreScore, Score and NormalizeScore as the framework does and returns node -> score.
func cycle(t *testing.T, pl *TD3Score, pod *v1.Pod, nodes []fwk.NodeInfo) (map[string]int64, *framework.CycleState) {
	t.Helper()
	ctx := context.Background()
	state := framework.NewCycleState()
	if st := pl.PreScore(ctx, state, pod, nodes); !st.IsSuccess() {
		t.Fatalf("PreScore: %v", st)
	}
	list := make(fwk.NodeScoreList, len(nodes))
	for i, n := range nodes {
		s, st := pl.Score(ctx, state, pod, n)
		if !st.IsSuccess() {
			t.Fatalf("Score %s: %v", n.Node().Name, st)
		}
		list[i] = fwk.NodeScore{Name: n.Node().Name, Score: s}
	}
	if st := pl.ScoreExtensions().NormalizeScore(ctx, state, pod, list); !st.IsSuccess() {
		t.Fatalf("NormalizeScore: %v", st)
	}
	out := map[string]int64{}
	for _, s := range list {
		if s.Score < fwk.MinNodeScore || s.Score > fwk.MaxNodeScore {
			t.Fatalf("node %s: normalised score %d outside 0-100", s.Name, s.Score)
		}
		out[s.Name] = s.Score
	}
	return out, state
}

func counter(t *testing.T, reason string) float64 {
	v, err := testutil.GetCounterMetricValue(fallbacks.WithLabelValues(reason))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func staticScores(pl *TD3Score, pod *v1.Pod, snap *nodemetrics.Snapshot) map[string]int64 {
	p, _ := EnginePod(pod)
	out := map[string]int64{}
	for name, m := range snap.Nodes {
		out[name] = StaticScore(p.CpuMilli, p.MemMib, m, m.Fresh(time.Now(), time.Minute), 0, 0, pl.weights, *pl.args.FallbackTau)
	}
	return out
}

func TestScoreIsTheEnginesAnswer(t *testing.T) {
	f := &fakeEngine{answer: scoresBy(func(n string) int64 { return map[string]int64{"n0": 12, "n1": 87, "n2": 55}[n] })}
	pl := newTestPlugin(t, startEngine(t, f), nil)
	snap, nodes := testNodes([]float64{0.2, 0.5, 0.7}, 0)
	pl.metrics.Publish(snap)
	got, state := cycle(t, pl, testPod("web-1", "500m", "256Mi"), nodes)
	if got["n0"] != 12 || got["n1"] != 87 || got["n2"] != 55 {
		t.Fatalf("expected the engine's scores, got %v", got)
	}
	if f.calls != 1 {
		t.Fatalf("expected one ScoreNodes call per pod, got %d", f.calls)
	}
	pod := testPod("web-1", "500m", "256Mi")
	pod.UID = "uid-web-1"
	ctx := context.Background()
	if st := pl.Reserve(ctx, state, pod, "n0"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	pl.Unreserve(ctx, state, pod, "n0") // not bound there after all
	if cpu, _ := pl.assigned.UsageSince("n0", 0); cpu != 0 {
		t.Fatalf("Unreserve: the plugin's assign cache still holds %g m for n0", cpu)
	}
	if st := pl.Reserve(ctx, state, pod, "n1"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	pl.PostBind(ctx, state, pod, "n1")
	if len(f.bindings) != 1 || f.bindings[0].Node != "n1" || f.bindings[0].DecisionId != "d-web-1" ||
		f.bindings[0].Pod.CpuMilli != 500 {
		t.Fatalf("PostBind: expected ReportBinding(web-1 -> n1, d-web-1), got %v", f.bindings)
	}
	if cpu, mem := pl.assigned.UsageSince("n1", 0); cpu != 500 || mem != 256 {
		t.Fatalf("Reserve, PostBind: the plugin's assign cache holds %g m, %g MiB for n1", cpu, mem)
	}
}

// heldBy answers like scoresBy with an action that holds for validS seconds.
func heldBy(validS float64, weights []float64, tau, ceiling float64, score func(node string) int64) func(*enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error) {
	return func(req *enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error) {
		reply, _ := scoresBy(score)(req)
		reply.Action = &enginev1.Action{Weights: weights, Tau: tau, Ceiling: ceiling}
		reply.ActionValidS = validS
		return reply, nil
	}
}

func heldCount(t *testing.T) float64 {
	v, err := testutil.GetCounterMetricValue(decisions.WithLabelValues("held"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestAHeldActionIsScoredInThePluginUntilItExpires(t *testing.T) {
	weights, tau, ceiling := []float64{0.7, 0.1, 0.1, 0.1}, 0.6, 0.45
	f := &fakeEngine{answer: heldBy(600, weights, tau, ceiling, func(string) int64 { return 33 })}
	pl := newTestPlugin(t, startEngine(t, f), nil)
	clock := time.Now()
	pl.now = func() time.Time { return clock }
	snap, nodes := testNodes([]float64{0.1, 0.35, 0.5, 0.8}, 0)
	pl.metrics.Publish(snap)
	if got, _ := cycle(t, pl, testPod("first", "500m", "256Mi"), nodes); got["n0"] != 33 || f.calls != 1 {
		t.Fatalf("the first pod: expected the engine's answer (33) from one call, got %v after %d calls", got, f.calls)
	}
	before := heldCount(t)
	clock = clock.Add(599 * time.Second)
	snap, _ = testNodes([]float64{0.1, 0.35, 0.5, 0.8}, -599*time.Second) // sampled at the new clock
	pl.metrics.Publish(snap)
	pod := testPod("second", "2", "1Gi")
	got, state := cycle(t, pl, pod, nodes)
	if f.calls != 1 {
		t.Fatalf("within the hold: expected no engine call, got %d calls", f.calls)
	}
	p, _ := EnginePod(pod)
	var w [4]float64
	copy(w[:], weights)
	for name, m := range snap.Nodes {
		want := ActionScore(p.CpuMilli, p.MemMib, m, true, 0, 0, w, tau, ceiling)
		if got[name] != want {
			t.Fatalf("node %s: scored %d in the plugin, expected ActionScore's %d (scores %v)", name, got[name], want, got)
		}
	}
	if got["n2"] != 0 || got["n3"] != 0 || got["n0"] == 0 {
		t.Fatalf("the ceiling of %g: expected n2 and n3 (CPU 0.5, 0.8 before the pod) at 0 and n0 not, got %v", ceiling, got)
	}
	if after := heldCount(t); after != before+1 {
		t.Fatalf("decisions_total{source=held}: %g -> %g", before, after)
	}
	pl.PostBind(context.Background(), state, pod, "n0")
	pl.PostBind(context.Background(), state, pod, "n1") // (the same pod again: a second held binding)
	if len(f.bindings) != 0 {
		t.Fatalf("a held pod's binding is batched, not sent at once: the engine got %v", f.bindings)
	}
	clock = clock.Add(2 * time.Second) // the hold is over
	if cycle(t, pl, testPod("third", "500m", "256Mi"), nodes); f.calls != 2 {
		t.Fatalf("after the hold: expected the engine asked again, got %d calls", f.calls)
	}
	if f.batches != 1 || len(f.bindings) != 2 || f.seen[1] != 2 || f.bindings[0].Node != "n0" ||
		f.bindings[0].DecisionId != "d-first" || f.bindings[1].DecisionId != "d-first" {
		t.Fatalf("the held bindings: expected one ReportBindings (second -> n0, n1, naming the hold's decision d-first) before the "+
			"second ScoreNodes, got %d batches, %v, bindings at each call %v", f.batches, f.bindings, f.seen)
	}
}

func TestHeldBindingsAreFlushedPeriodically(t *testing.T) {
	f := &fakeEngine{answer: scoresBy(func(string) int64 { return 1 })}
	pl := newTestPlugin(t, startEngine(t, f), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 3 {
		pl.batch.add(&enginev1.ReportBindingRequest{Pod: &enginev1.Pod{Name: fmt.Sprintf("p%d", i)}, Node: "n0"})
	}
	go pl.flushBindingsEvery(ctx, 20*time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		n, batches := len(f.bindings), f.batches
		f.mu.Unlock()
		if n == 3 {
			if batches != 1 {
				t.Fatalf("3 bindings added at once: expected one ReportBindings, got %d", batches)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flusher sent %d of 3 bindings within 5 s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAnActionIsNotHeldWithoutAValidHold(t *testing.T) {
	uneven := []float64{0.5, 0.5, 0.5, 0.5}
	cases := []struct {
		name string
		edit func(*config.TD3ScoreArgs)
		f    func(*enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error)
	}{
		{"no hold", nil, heldBy(0, []float64{1, 0, 0, 0}, 0, 0, func(string) int64 { return 40 })},
		{"disabled by the args", func(a *config.TD3ScoreArgs) { a.ScoreHeldActions = ptrTo(false) },
			heldBy(600, []float64{1, 0, 0, 0}, 0, 0, func(string) int64 { return 40 })},
		{"weights off the simplex", nil, heldBy(600, uneven, 0, 0, func(string) int64 { return 40 })},
		{"NaN validity", nil, heldBy(math.NaN(), []float64{1, 0, 0, 0}, 0, 0, func(string) int64 { return 40 })},
		{"advisory", nil, func(req *enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error) {
			reply, _ := heldBy(600, []float64{1, 0, 0, 0}, 0, 0, func(string) int64 { return 40 })(req)
			reply.Advisory = true
			return reply, nil
		}},
		{"a requests share, which the plugin's score does not read", nil,
			func(req *enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error) {
				reply, _ := heldBy(600, []float64{1, 0, 0, 0}, 0, 0, func(string) int64 { return 40 })(req)
				reply.Action.Requests = 0.8
				return reply, nil
			}},
		{"a balance share, which the plugin's score has no term for", nil,
			func(req *enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error) {
				reply, _ := heldBy(600, []float64{1, 0, 0, 0}, 0, 0, func(string) int64 { return 40 })(req)
				reply.Action.Balance = 0.5
				return reply, nil
			}},
		{"a fragmentation share, which the plugin's score has no term for", nil,
			func(req *enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error) {
				reply, _ := heldBy(600, []float64{1, 0, 0, 0}, 0, 0, func(string) int64 { return 40 })(req)
				reply.Action.Fragmentation = 0.25
				return reply, nil
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeEngine{answer: c.f}
			pl := newTestPlugin(t, startEngine(t, f), c.edit)
			snap, nodes := testNodes([]float64{0.1, 0.5}, 0)
			pl.metrics.Publish(snap)
			for i := range 3 {
				cycle(t, pl, testPod(fmt.Sprintf("p%d", i), "500m", "256Mi"), nodes)
			}
			if f.calls != 3 {
				t.Fatalf("expected one engine call per pod, got %d for 3 pods", f.calls)
			}
		})
	}
}

func TestFallbacksUseTheStaticScoreAndCountTheReason(t *testing.T) {
	cases := []struct {
		reason string
		engine *fakeEngine
	}{
		{ReasonTimeout, &fakeEngine{delay: 200 * time.Millisecond, answer: scoresBy(func(string) int64 { return 99 })}},
		{ReasonError, &fakeEngine{answer: func(*enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error) {
			return nil, status.Error(codes.InvalidArgument, "pod.cpu_milli")
		}}},
		{ReasonNaN, &fakeEngine{answer: func(r *enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error) {
			reply, _ := scoresBy(func(string) int64 { return 99 })(r)
			reply.Action.Weights[1] = math.NaN()
			return reply, nil
		}}},
		{ReasonInvalid, &fakeEngine{answer: scoresBy(func(n string) int64 { return map[string]int64{"n1": 1000}[n] })}},
		{ReasonMissingNode, &fakeEngine{answer: func(r *enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error) {
			reply, _ := scoresBy(func(string) int64 { return 99 })(r)
			reply.Scores = reply.Scores[1:]
			return reply, nil
		}}},
		{ReasonAdvisory, &fakeEngine{answer: func(r *enginev1.ScoreNodesRequest) (*enginev1.ScoreNodesResponse, error) {
			reply, _ := scoresBy(func(string) int64 { return 99 })(r)
			reply.Advisory = true
			return reply, nil
		}}},
	}
	for _, c := range cases {
		t.Run(c.reason, func(t *testing.T) {
			pl := newTestPlugin(t, startEngine(t, c.engine), func(a *config.TD3ScoreArgs) {
				a.FallbackWeights, a.FallbackTau = []float64{0.7, 0.1, 0.1, 0.1}, ptrTo(0.4)
			})
			snap, nodes := testNodes([]float64{0.1, 0.4, 0.8}, 0)
			pl.metrics.Publish(snap)
			before := counter(t, c.reason)
			start := time.Now()
			pod := testPod("p-"+c.reason, "1", "1Gi")
			got, _ := cycle(t, pl, pod, nodes)
			if c.reason == ReasonTimeout && time.Since(start) > 150*time.Millisecond {
				t.Fatalf("the engine's 200 ms answer was waited for: %v (deadline 15 ms)", time.Since(start))
			}
			want := staticScores(pl, pod, snap)
			for n, s := range got {
				if s != want[n] {
					t.Fatalf("node %s: got %d, expected the static score %d (all %v, want %v)", n, s, want[n], got, want)
				}
			}
			if want["n0"] == want["n1"] && want["n1"] == want["n2"] {
				t.Fatalf("the static scores do not tell the nodes apart: %v", want)
			}
			if after := counter(t, c.reason); after != before+1 {
				t.Fatalf("fallbacks_total{reason=%q}: %g -> %g, expected one more", c.reason, before, after)
			}
		})
	}
}

func TestDeadEngineFallsBackAsUnavailable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := lis.Addr().String()
	_ = lis.Close() // nothing listens there any more
	pl := newTestPlugin(t, address, func(a *config.TD3ScoreArgs) { a.EngineTimeoutMillis = ptrTo(int64(500)) })
	snap, nodes := testNodes([]float64{0.3, 0.6}, 0)
	pl.metrics.Publish(snap)
	before := counter(t, ReasonUnavailable)
	pod := testPod("lonely", "250m", "128Mi")
	got, state := cycle(t, pl, pod, nodes)
	want := staticScores(pl, pod, snap)
	if got["n0"] != want["n0"] || got["n1"] != want["n1"] {
		t.Fatalf("got %v, expected the static scores %v", got, want)
	}
	if after := counter(t, ReasonUnavailable); after != before+1 {
		t.Fatalf("fallbacks_total{reason=unavailable}: %g -> %g", before, after)
	}
	pl.PostBind(context.Background(), state, pod, "n0") // must not block nor panic with the engine gone
}

func TestAPodReservedCountsOnItsNodeForTheNextPodsScore(t *testing.T) {
	// kube-scheduler scores the next pod of a burst before binding this one: what Reserve counted moves it
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := lis.Addr().String()
	_ = lis.Close() // no engine: the static score, idle-weighted (tau 0)
	pl := newTestPlugin(t, address, func(a *config.TD3ScoreArgs) { a.EngineTimeoutMillis = ptrTo(int64(500)) })
	snap, nodes := testNodes([]float64{0.3, 0.3}, 0)
	pl.metrics.Publish(snap)
	first := testPod("batch-0", "4", "1Gi")
	first.UID = "uid-batch-0"
	before, state := cycle(t, pl, first, nodes)
	if st := pl.Reserve(context.Background(), state, first, "n0"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	after, _ := cycle(t, pl, testPod("batch-1", "4", "1Gi"), nodes)
	if !(after["n0"] < before["n0"] && after["n1"] == before["n1"]) {
		t.Fatalf("a pod reserved on n0 (a quarter of it) must lower n0's score alone: %v, then %v", before, after)
	}
}

func TestStaticScoreOfANodeWithoutFreshMetricsIsNeutral(t *testing.T) {
	pl := newTestPlugin(t, "127.0.0.1:1", nil)
	pl.metrics.Publish(&nodemetrics.Snapshot{Nodes: map[string]nodemetrics.Node{}})
	_, nodes := testNodes([]float64{0.3}, 0)
	stale, _ := testNodes([]float64{0.3}, 10*time.Minute)
	for _, snap := range []*nodemetrics.Snapshot{{Nodes: map[string]nodemetrics.Node{}}, stale} {
		pl.metrics.Publish(snap)
		if s := pl.staticScore(context.Background(), &enginev1.Pod{CpuMilli: 100}, nodes[0]); s != To100(NeutralScore) {
			t.Fatalf("expected the neutral score %d, got %d", To100(NeutralScore), s)
		}
	}
}

func TestFilterDropsNodesOverTheSafetyThreshold(t *testing.T) {
	pl := newTestPlugin(t, "127.0.0.1:1", nil)
	pod := testPod("p", "100m", "64Mi")
	_, nodes := testNodes([]float64{0.89, 0.95, 0.5}, 0)
	if st := pl.Filter(context.Background(), nil, pod, nodes[1]); !st.IsSuccess() {
		t.Fatalf("without any metrics every node passes, got %v", st)
	}
	snap, _ := testNodes([]float64{0.89, 0.95, 0.5}, 0)
	pl.metrics.Publish(snap)
	for i, want := range []bool{true, false, true} {
		st := pl.Filter(context.Background(), nil, pod, nodes[i])
		if st.IsSuccess() != want || (!want && st.Code() != fwk.Unschedulable) {
			t.Fatalf("node n%d (CPU %g of capacity): passes %v, expected %v (%v)", i, []float64{0.89, 0.95, 0.5}[i],
				st.IsSuccess(), want, st)
		}
	}
	stale, _ := testNodes([]float64{0.89, 0.95, 0.5}, 10*time.Minute)
	pl.metrics.Publish(stale)
	if st := pl.Filter(context.Background(), nil, pod, nodes[1]); !st.IsSuccess() {
		t.Fatalf("a node with stale metrics passes (fail-open), got %v", st)
	}
}

func TestNormalizeScoreKeeps0To100(t *testing.T) {
	pl := newTestPlugin(t, "127.0.0.1:1", nil)
	list := fwk.NodeScoreList{{Name: "a", Score: -5}, {Name: "b", Score: 40}, {Name: "c", Score: 250}}
	if st := pl.NormalizeScore(context.Background(), nil, nil, list); !st.IsSuccess() {
		t.Fatal(st)
	}
	if list[0].Score != 0 || list[1].Score != 40 || list[2].Score != 100 {
		t.Fatalf("got %v", list)
	}
}

func TestSignPodSignsWhatTheEngineReads(t *testing.T) {
	pl := newTestPlugin(t, "127.0.0.1:1", nil)
	sign := func(p *v1.Pod) string {
		f, st := pl.SignPod(context.Background(), p)
		if !st.IsSuccess() {
			t.Fatalf("SignPod: %v", st)
		}
		return fmt.Sprint(f)
	}
	a, b := testPod("a", "500m", "256Mi"), testPod("b", "500m", "256Mi")
	if sign(a) != sign(b) {
		t.Fatalf("pods differing only by name must sign alike: %s vs %s", sign(a), sign(b))
	}
	if sign(a) == sign(testPod("c", "600m", "256Mi")) {
		t.Fatal("pods with different CPU requests must not sign alike")
	}
	limited := testPod("d", "500m", "256Mi")
	limited.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}
	if sign(a) == sign(limited) {
		t.Fatal("a CPU limit changes what the engine reads: the signature must change")
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestMetricsComeFromTheEngineThenPrometheus(t *testing.T) {
	for source, want := range map[string][]string{"": {"engine", "prometheus"}, "prometheus": {"prometheus"}} {
		args := config.TD3ScoreArgs{MetricsSource: source}
		config.SetDefaults(&args)
		var got []string
		for _, r := range metricsSource(args, nil).Readers {
			got = append(got, r.Name())
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("metricsSource %q: readers %v, want %v", source, got, want)
		}
	}
}
