// Package td3score is the td3-scheduler's Score plugin: the decision engine's scores, a safety
// Filter on live metrics and a static fallback score computed here (README.md has the formulas).
package td3score

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"td3-scheduler/scheduler/apis/config"
	enginev1 "td3-scheduler/scheduler/pkg/engine/v1"
	"td3-scheduler/scheduler/pkg/nodemetrics"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "TD3Score"

// reconnectBackoff caps gRPC's reconnection backoff (default: up to 120 s) at 1 s: while the
// connection is down every call fails at once and the pod is scored statically, so without the cap
// a restarted engine would go unused for up to two minutes (found by the engine-restart e2e test).
var reconnectBackoff = backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2,
	MaxDelay: time.Second}

const stateKey fwk.StateKey = Name + "/decision"

// TD3Score implements Filter, PreScore, Score (with NormalizeScore), Reserve, PostBind and SignPod.
type TD3Score struct {
	args     config.TD3ScoreArgs
	weights  [4]float64
	engine   enginev1.DecisionEngineClient
	conn     *grpc.ClientConn
	metrics  *nodemetrics.Source
	assigned *nodemetrics.AssignCache
	now      func() time.Time
	held     atomic.Pointer[heldAction]
	model    atomic.Pointer[servedModel] // inference: plugin; nil: the engine answers
	oomKills atomic.Uint64               // float64 bits: the engine's recent node OOM kills (GetModel)
	batch    bindingBatch
	typical  PoolTypicalPods // the static score's fragmentation share's typical pods (fallbackTypicalPods)
}

// heldBindingFlush is how often the bindings of held pods are sent to the engine, in one ReportBindings.
const heldBindingFlush = 100 * time.Millisecond

// bindingBatch holds the bindings of pods scored with a held action until they are sent: the engine is
// not asked about the pods of a hold, so its assign cache needs them only by its next decision, and
// PreScore sends them before that. One call per batch instead of one per pod (docs/kubernetes.md).
type bindingBatch struct {
	mu      sync.Mutex
	pending []*enginev1.ReportBindingRequest
}

func (b *bindingBatch) add(r *enginev1.ReportBindingRequest) {
	b.mu.Lock()
	b.pending = append(b.pending, r)
	b.mu.Unlock()
}

func (b *bindingBatch) take() []*enginev1.ReportBindingRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.pending
	b.pending = nil
	return out
}

// maxActionValidity bounds how long an engine answer's action is reused, whatever action_valid_s says.
const maxActionValidity = 24 * time.Hour

// heldAction is the engine's action while it holds (ScoreNodes' action_valid_s > 0): until it expires
// every pod would get it from the engine, so PreScore scores with it here (ActionScore, over the
// plugin's own metrics and assign cache) instead of calling the engine.
type heldAction struct {
	weights    [4]float64
	tau        float64
	ceiling    float64 // 0: none
	version    string
	decisionID string // the engine decision that took it
	until      time.Time
}

// holdFrom is the reply's action as a heldAction when the engine says it holds and it is a usable score
// argument set that ActionScore can score (no requests, balance or fragmentation share), else nil (the next pod
// asks the engine).
func holdFrom(reply *enginev1.ScoreNodesResponse, now time.Time) *heldAction {
	valid := reply.GetActionValidS()
	a := reply.GetAction()
	if !(valid > 0) || math.IsInf(valid, 0) || reply.Fallback || reply.Advisory || len(a.GetWeights()) != 4 ||
		a.GetRequests() != 0 || a.GetBalance() != 0 || a.GetFragmentation() != 0 { // ActionScore reads usage alone: such an action is the engine's to score
		return nil
	}
	h := &heldAction{tau: a.GetTau(), ceiling: a.GetCeiling(), version: reply.ModelVersion,
		decisionID: reply.DecisionId, until: now.Add(min(seconds(valid), maxActionValidity))}
	sum := 0.0
	for r, w := range a.GetWeights() {
		if !(w >= 0) {
			return nil
		}
		h.weights[r], sum = w, sum+w
	}
	if math.Abs(sum-1) > 1e-6 || !(h.tau >= 0 && h.tau <= 1) || !(h.ceiling >= 0) || math.IsInf(h.ceiling, 0) {
		return nil
	}
	return h
}

var (
	_ fwk.FilterPlugin   = &TD3Score{}
	_ fwk.PreScorePlugin = &TD3Score{}
	_ fwk.ScorePlugin    = &TD3Score{}
	_ fwk.ReservePlugin  = &TD3Score{}
	_ fwk.PostBindPlugin = &TD3Score{}
	_ fwk.SignPlugin     = &TD3Score{}
)

// New decodes, defaults and validates the args, dials the engine (lazily: a dead engine is not an
// error here, every Score falls back until it answers) and starts the node metrics refresher.
func New(ctx context.Context, obj runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	args := config.TD3ScoreArgs{}
	if err := frameworkruntime.DecodeInto(obj, &args); err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	config.SetDefaults(&args)
	if err := config.Validate(&args); err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	creds, err := transportCredentials(args.TLS)
	if err != nil {
		return nil, fmt.Errorf("%s args.tls: %w", Name, err)
	}
	var typical PoolTypicalPods
	if *args.FallbackFragmentation > 0 {
		if typical, err = LoadTypicalPods(args.FallbackTypicalPods); err != nil {
			return nil, fmt.Errorf("%s args.fallbackTypicalPods: %w", Name, err)
		}
	}
	conn, err := grpc.NewClient(args.EngineAddress, grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnectBackoff, MinConnectTimeout: time.Second}))
	if err != nil {
		return nil, fmt.Errorf("%s args.engineAddress %q: %w", Name, args.EngineAddress, err)
	}
	registerMetrics()
	engine := enginev1.NewDecisionEngineClient(conn)
	source := metricsSource(args, engine)
	source.OnRefresh = func(reader string, err error) {
		if err != nil {
			metricsRefreshes.WithLabelValues(reader, "error").Inc()
			return
		}
		metricsRefreshes.WithLabelValues(reader, "ok").Inc()
		if snap := source.Snapshot(); snap != nil {
			metricsAge.Set(oldestSampleAge(snap, time.Now()))
		}
	}
	// The first refresh before the scheduler starts, so that its first pods already meet the safety
	// filter; bounded by one timeout per reader, and a failure only logged (fail-open, like a stale node).
	first, cancel := context.WithTimeout(ctx, time.Duration(len(source.Readers))*seconds(*args.MetricsTimeoutSeconds))
	if err := source.Refresh(first); err != nil {
		klog.FromContext(ctx).Info("td3score: no node metrics yet; Filter lets every node through until they come",
			"metricsSource", args.MetricsSource, "prometheus", args.PrometheusURL, "err", err)
	}
	cancel()
	go source.RunAfter(ctx, source.Interval)
	go func() { <-ctx.Done(); _ = conn.Close() }()
	pl := newPlugin(args, engine, source)
	pl.conn, pl.typical = conn, typical
	go pl.flushBindingsEvery(ctx, heldBindingFlush)
	if args.Inference == config.InferencePlugin {
		go pl.refreshModelEvery(ctx, seconds(*args.ModelRefreshSeconds))
	}
	klog.FromContext(ctx).Info("td3score ready", "engine", args.EngineAddress, "inference", args.Inference,
		"deadline_ms", *args.EngineTimeoutMillis,
		"metricsSource", args.MetricsSource, "prometheus", args.PrometheusURL, "safetyCPUUtil", *args.SafetyCPUUtil, "fallbackWeights", args.FallbackWeights,
		"fallbackTau", *args.FallbackTau, "fallbackFragmentation", *args.FallbackFragmentation,
		"fallbackTypicalPods", args.FallbackTypicalPods, "fallbackSpread", *args.FallbackSpread)
	return pl, nil
}

// metricsSource reads the node metrics from the engine's copy, then Prometheus (metricsSource: engine), or
// from Prometheus alone; each reader under metricsTimeoutSeconds.
func metricsSource(args config.TD3ScoreArgs, engine enginev1.DecisionEngineClient) *nodemetrics.Source {
	timeout := seconds(*args.MetricsTimeoutSeconds)
	prometheus := nodemetrics.NewPrometheus(args.PrometheusURL, args.Queries, timeout)
	interval := seconds(*args.MetricsIntervalSeconds)
	if args.MetricsSource == config.MetricsFromEngine {
		return nodemetrics.NewSource(interval, &nodemetrics.Engine{Client: engine, Timeout: timeout}, prometheus)
	}
	return nodemetrics.NewSource(interval, prometheus)
}

func newPlugin(args config.TD3ScoreArgs, engine enginev1.DecisionEngineClient, source *nodemetrics.Source) *TD3Score {
	pl := &TD3Score{args: args, engine: engine, metrics: source, assigned: nodemetrics.NewAssignCache(), now: time.Now}
	copy(pl.weights[:], args.FallbackWeights)
	return pl
}

func (pl *TD3Score) Name() string { return Name }

// decision is what PreScore learnt for the pod: the engine's scores, the engine's held action to score
// with, the engine's model's scores computed here, or why the static score is used.
type decision struct {
	pod            *enginev1.Pod
	scores         map[string]int64 // the engine's, the held action's or the model's; nil when falling back
	held           *heldAction      // non-nil: the scores are the engine's held action's, computed here
	model          string           // non-empty: the scores are this engine model's, run here (inference: plugin)
	fallbackReason string
	decisionID     string
}

func (d *decision) Clone() fwk.StateData { return d } // read-only once written

// SignPod lets the scheduler batch identical pods (KEP-5598): the engine's answer depends on the pod only
// through its requests, limits and QoS, so those are the signature. A batched pod (the previous identical
// pod took the best node and it no longer fits) is placed on the previous decision's runner-up without a
// new engine call; Filter still runs on that node, so the safety rule holds.
func (pl *TD3Score) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	p, err := EnginePod(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, err.Error()) // not signed: scheduled alone
	}
	return []fwk.SignFragment{{Key: "td3score.EnginePod()", Value: []any{p.CpuMilli, p.MemMib, p.DiskGib, p.RdmaPct,
		p.GpuCount, p.GpuMilli, int32(p.Qos), p.CpuLimitMilli, p.MemLimitMib}}}, nil
}

// Filter drops a node whose observed CPU is above safetyCPUUtil of its capacity, whatever the engine
// says. A node without fresh metrics passes (fail-open, the engine's default staleness).
func (pl *TD3Score) Filter(ctx context.Context, _ fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	snap := pl.metrics.Snapshot()
	if snap == nil {
		return nil
	}
	name := nodeInfo.Node().Name
	m, ok := snap.Nodes[name]
	if !ok || !m.Fresh(pl.now(), pl.maxAge()) {
		return nil
	}
	threshold := *pl.args.SafetyCPUUtil
	if !SafetyOK(m.Observed[0], m.Capacity[0], threshold) {
		safetyFiltered.Inc()
		klog.FromContext(ctx).V(4).Info("td3score: safety filter", "node", name, "observedCPUMilli", m.Observed[0],
			"capacityCPUMilli", m.Capacity[0], "threshold", threshold)
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("td3score safety filter: observed CPU %.0f%% of capacity "+
			"is above %.0f%%", 100*m.Observed[0]/m.Capacity[0], 100*threshold))
	}
	return nil
}

// PreScore asks the engine once for the pod, under the deadline, and keeps its answer or the reason to fall
// back; while the engine's last action holds (scoreHeldActions), it keeps that action instead of asking.
func (pl *TD3Score) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	logger := klog.FromContext(ctx)
	d := &decision{}
	state.Write(stateKey, d)
	p, err := EnginePod(pod)
	if err != nil {
		d.pod = &enginev1.Pod{Name: pod.Name, Namespace: pod.Namespace}
		pl.fallBack(logger, d, nodes, ReasonBadPod, err)
		return nil
	}
	d.pod = p
	if h := pl.held.Load(); h != nil && pl.now().Before(h.until) {
		d.held, d.scores = h, pl.heldScores(p, nodes, h)
		decisions.WithLabelValues("held").Inc()
		logger.V(4).Info("td3score: held action", "pod", klog.KObj(pod), "decision", h.decisionID, "model", h.version,
			"weights", h.weights, "tau", h.tau, "ceiling", h.ceiling, "until", h.until)
		return nil
	}
	if m := pl.model.Load(); m != nil {
		scores, reason, err := pl.inferScores(m, p, nodes)
		if reason != "" {
			pl.fallBack(logger, d, nodes, reason, err)
			return nil
		}
		d.scores, d.model = scores, m.version
		decisions.WithLabelValues("plugin").Inc()
		logger.V(4).Info("td3score: model run in the plugin", "pod", klog.KObj(pod), "model", m.version,
			"candidates", len(nodes))
		return nil
	}
	candidates := make([]string, len(nodes))
	for i, n := range nodes {
		candidates[i] = n.Node().Name
	}
	pl.flushBindings(ctx) // the batched pods' bindings first, so that the engine decides with them
	callCtx, cancel := context.WithTimeout(ctx, millis(*pl.args.EngineTimeoutMillis))
	defer cancel()
	start := time.Now()
	reply, err := pl.engine.ScoreNodes(callCtx, &enginev1.ScoreNodesRequest{Pod: p, Candidates: candidates})
	elapsed := time.Since(start)
	if err != nil {
		reason := callFailure(callCtx, err)
		engineLatency.WithLabelValues("score_nodes", reason).Observe(elapsed.Seconds())
		pl.fallBack(logger, d, nodes, reason, err)
		return nil
	}
	engineLatency.WithLabelValues("score_nodes", "ok").Observe(elapsed.Seconds())
	scores, reason, why := readAnswer(reply, candidates)
	if reason != "" {
		pl.fallBack(logger, d, nodes, reason, why)
		return nil
	}
	d.scores, d.decisionID = scores, reply.DecisionId
	decisions.WithLabelValues("engine").Inc()
	if *pl.args.ScoreHeldActions {
		pl.held.Store(holdFrom(reply, pl.now()))
	}
	logger.V(4).Info("td3score: engine answer", "pod", klog.KObj(pod), "decision", reply.DecisionId,
		"model", reply.ModelVersion, "weights", reply.Action.GetWeights(), "tau", reply.Action.GetTau(),
		"engineFallback", reply.FallbackReason, "candidates", len(candidates), "latency", elapsed)
	return nil
}

// fallBack records why the pod gets the static score. With a fragmentation share the score of each
// candidate depends on the others' (the blend scales over them), so all are scored here at once;
// without one, Score scores each node alone.
func (pl *TD3Score) fallBack(logger klog.Logger, d *decision, nodes []fwk.NodeInfo, reason string, err error) {
	d.fallbackReason = reason
	fallbacks.WithLabelValues(reason).Inc()
	decisions.WithLabelValues("static").Inc()
	if *pl.args.FallbackFragmentation > 0 {
		d.scores = pl.blendedStaticScores(d.pod, nodes)
	}
	logger.V(2).Info("td3score: static score", "pod", d.pod.Namespace+"/"+d.pod.Name, "reason", reason, "err", err)
}

// blendedStaticScores is the static score of every candidate blended with FGD's by the fragmentation
// share over the fresh ones (blendFragmentation), as the engine's fallback scores them; a candidate
// without fresh metrics scores NeutralScore.
func (pl *TD3Score) blendedStaticScores(p *enginev1.Pod, nodes []fwk.NodeInfo) map[string]int64 {
	snap, now := pl.metrics.Snapshot(), pl.now()
	scores := make(map[string]int64, len(nodes))
	isFresh := make([]bool, len(nodes))
	var fresh []string
	var u [][4]float64
	for i, n := range nodes {
		name := n.Node().Name
		m, ok, recentCPU, recentMem := pl.nodeState(snap, name, now)
		if isFresh[i] = ok; !ok {
			scores[name] = To100(NeutralScore)
			continue
		}
		fresh = append(fresh, name)
		u = append(u, Utilisation(p.CpuMilli, p.MemMib, m, recentCPU, recentMem))
	}
	blended := pl.blendFragmentation(p, nodes, isFresh, u, pl.weights, *pl.args.FallbackTau,
		*pl.args.FallbackFragmentation, pl.typical)
	var freshNodes []fwk.NodeInfo
	for i, n := range nodes {
		if isFresh[i] {
			freshNodes = append(freshNodes, n)
		}
	}
	for i, score := range blended {
		scores[fresh[i]] = To100(pl.spread(score, p, freshNodes[i]))
	}
	return scores
}

// spread is a fresh candidate's static score in [0, 1] lowered by the fallback's sibling spread for the
// pod's siblings on the node (SpreadSiblings over SiblingsOn), as the engine's fallback lowers it.
func (pl *TD3Score) spread(score float64, p *enginev1.Pod, n fwk.NodeInfo) float64 {
	if *pl.args.FallbackSpread == 0 || p.Owner == "" {
		return score
	}
	return SpreadSiblings(score, float64(SiblingsOn(n, p.Owner)), *pl.args.FallbackSpread)
}

// callFailure names the fallback reason of a failed ScoreNodes call.
func callFailure(ctx context.Context, err error) string {
	switch code := status.Code(err); {
	case code == codes.DeadlineExceeded || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ReasonTimeout
	case code == codes.Unavailable:
		return ReasonUnavailable
	}
	return ReasonError
}

// readAnswer checks the engine's reply against the candidates: node -> score, or a fallback reason.
func readAnswer(reply *enginev1.ScoreNodesResponse, candidates []string) (map[string]int64, string, error) {
	if reply.Advisory {
		return nil, ReasonAdvisory, errors.New("the engine runs in shadow mode")
	}
	action := reply.GetAction()
	for _, x := range append(append([]float64{action.GetTau()}, action.GetWeights()...), float32s(action.GetPreActivations())...) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, ReasonNaN, fmt.Errorf("action %v, tau %v", action.GetWeights(), action.GetTau())
		}
	}
	scores := make(map[string]int64, len(reply.Scores))
	for _, s := range reply.Scores {
		if s.Score < fwk.MinNodeScore || s.Score > fwk.MaxNodeScore {
			return nil, ReasonInvalid, fmt.Errorf("node %q: score %d outside %d-%d", s.Node, s.Score, fwk.MinNodeScore, fwk.MaxNodeScore)
		}
		if _, dup := scores[s.Node]; dup {
			return nil, ReasonInvalid, fmt.Errorf("node %q scored twice", s.Node)
		}
		if s.Excluded {
			scores[s.Node] = fwk.MinNodeScore
		} else {
			scores[s.Node] = s.Score
		}
	}
	for _, c := range candidates {
		if _, ok := scores[c]; !ok {
			return nil, ReasonMissingNode, fmt.Errorf("candidate %q not in the answer (%d scores for %d candidates)",
				c, len(reply.Scores), len(candidates))
		}
	}
	if len(scores) != len(candidates) {
		return nil, ReasonInvalid, fmt.Errorf("%d scores for %d candidates: nodes that were not asked", len(scores), len(candidates))
	}
	return scores, "", nil
}

// heldScores scores every candidate with the held action at once, as the engine would have answered:
// one snapshot, one pass, so that Score reads a map for either source.
func (pl *TD3Score) heldScores(p *enginev1.Pod, nodes []fwk.NodeInfo, h *heldAction) map[string]int64 {
	snap, now := pl.metrics.Snapshot(), pl.now()
	scores := make(map[string]int64, len(nodes))
	for _, n := range nodes {
		name := n.Node().Name
		m, fresh, recentCPU, recentMem := pl.nodeState(snap, name, now)
		scores[name] = ActionScore(p.CpuMilli, p.MemMib, m, fresh, recentCPU, recentMem, h.weights, h.tau, h.ceiling)
	}
	return scores
}

// nodeState is what a score reads of a node: its metrics, whether they are fresh, and the CPU and
// memory of the pods bound there since its sample (the assign cache; 0 for a stale node).
func (pl *TD3Score) nodeState(snap *nodemetrics.Snapshot, node string, now time.Time) (
	m nodemetrics.Node, fresh bool, recentCPU, recentMem float64) {
	if snap != nil {
		m, fresh = snap.Nodes[node]
		fresh = fresh && m.Fresh(now, pl.maxAge())
	}
	if fresh {
		recentCPU, recentMem = pl.assigned.UsageSince(node, m.SampleTime)
	}
	return m, fresh, recentCPU, recentMem
}

// Score is the engine's score of the node (or its held action's, computed in PreScore), or the static
// score when PreScore fell back.
func (pl *TD3Score) Score(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	name := nodeInfo.Node().Name
	d, err := readDecision(state)
	if err == nil && d.scores != nil {
		return d.scores[name], nil
	}
	var p *enginev1.Pod
	if err == nil {
		p = d.pod
	} else if p, err = EnginePod(pod); err != nil {
		p = &enginev1.Pod{}
	}
	return pl.staticScore(ctx, p, nodeInfo), nil
}

// staticScore is StaticScore of the node over the plugin's live metrics and assign cache, lowered by the
// fallback's sibling spread on a fresh node.
func (pl *TD3Score) staticScore(ctx context.Context, p *enginev1.Pod, nodeInfo fwk.NodeInfo) int64 {
	node := nodeInfo.Node().Name
	m, fresh, recentCPU, recentMem := pl.nodeState(pl.metrics.Snapshot(), node, pl.now())
	score := To100(NeutralScore) // StaticScore's, with the spread on a fresh node
	if fresh {
		u := Utilisation(p.CpuMilli, p.MemMib, m, recentCPU, recentMem)
		score = To100(pl.spread(WeightedCloseness(u, pl.weights, *pl.args.FallbackTau), p, nodeInfo))
	}
	klog.FromContext(ctx).V(5).Info("td3score: static score", "node", node, "fresh", fresh, "observed", m.Observed,
		"capacity", m.Capacity, "recentCPUMilli", recentCPU, "recentMemMiB", recentMem, "score", score)
	return score
}

// ScoreExtensions returns the plugin itself: NormalizeScore keeps every score within 0-100.
func (pl *TD3Score) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore clamps to [MinNodeScore, MaxNodeScore]; both score sources are already in that range.
func (pl *TD3Score) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	for i := range scores {
		scores[i].Score = min(max(scores[i].Score, fwk.MinNodeScore), fwk.MaxNodeScore)
	}
	return nil
}

// Reserve counts the pod on its node in the plugin's own assign cache (the correction its static score,
// held actions and in-process model read) the moment kube-scheduler assumes it there: the next pod of a
// burst is scored before this one is bound, and must not read the node as cool as it was. A pod whose
// requests cannot be read is not counted (Score fell back for it too).
func (pl *TD3Score) Reserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	p, err := podOf(state, pod)
	if err != nil {
		return nil
	}
	cpu, mem := NonZeroRequests(p.CpuMilli, p.MemMib)
	pl.assigned.Add(nodeName, string(pod.UID), pl.now(), cpu, mem)
	return nil
}

// Unreserve takes back what Reserve counted: the pod was not bound there.
func (pl *TD3Score) Unreserve(_ context.Context, _ fwk.CycleState, pod *v1.Pod, nodeName string) {
	pl.assigned.Remove(nodeName, string(pod.UID))
}

// podOf is the pod as the engine reads it: the decision's, else converted.
func podOf(state fwk.CycleState, pod *v1.Pod) (*enginev1.Pod, error) {
	if d, err := readDecision(state); err == nil {
		return d.pod, nil
	}
	return EnginePod(pod)
}

// PostBind reports the binding to the engine (its assign cache and decision log; the plugin's own counted
// the pod at Reserve). Off the scheduling path; a failure is logged, not retried.
// A pod scored with a held action is reported in a batch (bindingBatch), naming the decision that took the
// action; so is a pod scored by the model run here (no engine decision to name).
func (pl *TD3Score) PostBind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) {
	logger := klog.FromContext(ctx)
	d, err := readDecision(state)
	var p *enginev1.Pod
	id, batched := "", false
	if err == nil {
		p, id, batched = d.pod, d.decisionID, d.held != nil || d.model != ""
		if d.held != nil {
			id = d.held.decisionID // the engine decision whose action scored the pod (its decision log links them)
		}
	} else if p, err = EnginePod(pod); err != nil {
		logger.V(2).Info("td3score: binding not reported", "pod", klog.KObj(pod), "err", err)
		return
	}
	if batched {
		pl.batch.add(&enginev1.ReportBindingRequest{Pod: p, Node: nodeName, DecisionId: id})
		return
	}
	callCtx, cancel := context.WithTimeout(ctx, millis(*pl.args.BindingTimeoutMillis))
	defer cancel()
	start := time.Now()
	_, err = pl.engine.ReportBinding(callCtx, &enginev1.ReportBindingRequest{Pod: p, Node: nodeName, DecisionId: id})
	result := "ok"
	if err != nil {
		result = callFailure(callCtx, err)
		logger.V(2).Info("td3score: ReportBinding failed", "pod", klog.KObj(pod), "node", nodeName, "err", err)
	}
	engineLatency.WithLabelValues("report_binding", result).Observe(time.Since(start).Seconds())
}

// flushBindings sends the batched bindings in one ReportBindings call, under bindingTimeoutMillis; a
// failure is logged, not retried (as a single ReportBinding's).
func (pl *TD3Score) flushBindings(ctx context.Context) {
	batch := pl.batch.take()
	if len(batch) == 0 {
		return
	}
	logger := klog.FromContext(ctx)
	callCtx, cancel := context.WithTimeout(ctx, millis(*pl.args.BindingTimeoutMillis))
	defer cancel()
	start := time.Now()
	reply, err := pl.engine.ReportBindings(callCtx, &enginev1.ReportBindingsRequest{Bindings: batch})
	result := "ok"
	if err != nil {
		result = callFailure(callCtx, err)
		logger.V(2).Info("td3score: ReportBindings failed", "bindings", len(batch), "err", err)
	} else if len(reply.Rejected) > 0 {
		logger.V(2).Info("td3score: bindings refused by the engine", "refused", reply.Rejected)
	}
	engineLatency.WithLabelValues("report_bindings", result).Observe(time.Since(start).Seconds())
}

// flushBindingsEvery flushes the batched bindings every period until ctx ends.
func (pl *TD3Score) flushBindingsEvery(ctx context.Context, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			pl.flushBindings(ctx)
		}
	}
}

func readDecision(state fwk.CycleState) (*decision, error) {
	if state == nil {
		return nil, errors.New("no cycle state")
	}
	data, err := state.Read(stateKey)
	if err != nil {
		return nil, err
	}
	d, ok := data.(*decision)
	if !ok {
		return nil, fmt.Errorf("cycle state %s holds %T", stateKey, data)
	}
	return d, nil
}

func (pl *TD3Score) maxAge() time.Duration { return seconds(*pl.args.MetricsMaxAgeSeconds) }

func transportCredentials(t *config.TLSArgs) (credentials.TransportCredentials, error) {
	if t == nil {
		return insecure.NewCredentials(), nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, err
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("caFile %s: no PEM certificate", t.CAFile)
		}
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(c), nil
}

func oldestSampleAge(snap *nodemetrics.Snapshot, now time.Time) float64 {
	oldest := math.Inf(1)
	for _, n := range snap.Nodes {
		oldest = math.Min(oldest, n.SampleTime)
	}
	return float64(now.UnixNano())/1e9 - oldest
}

func float32s(xs []float32) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
func millis(ms int64) time.Duration   { return time.Duration(ms) * time.Millisecond }
