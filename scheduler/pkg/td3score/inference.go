package td3score

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"td3-scheduler/scheduler/pkg/actor"
	enginev1 "td3-scheduler/scheduler/pkg/engine/v1"
	"td3-scheduler/scheduler/pkg/nodemetrics"
)

// In-process inference (inference: plugin): the engine's served model runs inside the scheduler. The
// plugin fetches the engine's ONNX graph (GetModel) in the background and, for each pod, computes the
// observation over its candidates (Observe), the actor's action (package actor), its score arguments
// (Decode) and every candidate's ActionScore: what the engine's ScoreNodes would answer, without a
// call on the scheduling cycle. The Python engine stays the model's registry (promotion and rollback
// reach the plugin at its next refresh), its assign cache (bindings are reported in batches) and the
// source of truth the shared test vectors hold this port to.

// Action-decoding constants (src/td3sched/rl/actions.py).
const (
	// LogitLimit bounds every pre-activation.
	LogitLimit = 5.0
	// RangeSlack is how far past LogitLimit an actor's output may be before it counts as out of range.
	RangeSlack = 1e-4
	// CeilingLow and CeilingHigh are the ceilings a pre-activation of -inf and +inf stand for.
	CeilingLow  = 0.5
	CeilingHigh = 1.5
)

// PluginActionModes are the action modes the plugin decodes and scores itself; a model of another mode
// (requests, balance: they score by the requests' share, which the plugin's score has no term for) is
// left to the engine. A fragmentation model's share is scored with FGD's (fragmentation.go) over the
// typical pods GetModel sends with it. A model whose card fixes a sibling spread (GetModel's
// sibling_spread) lowers the candidates that run the pod's siblings (SpreadSiblings), counted over the
// scheduler's own NodeInfo pods (SiblingsOn: bound and assumed pods alike, where the engine counts what
// its pod watch and ReportBinding have told it).
var PluginActionModes = []string{"full", "seed", "ceiling", "fragmentation"}

// GiB is the bytes of a gibibyte.
const GiB = 1 << 30

var actionWidth = map[string]int{"full": 5, "seed": 5, "ceiling": 6, "fragmentation": 6}

// ScoreArgs are an action's score arguments: weights on the simplex, the target utilisation, the
// hold-back ceiling (0: none) and the fragmentation share (0: none).
type ScoreArgs struct {
	Weights       [4]float64
	Tau           float64
	Ceiling       float64
	Fragmentation float64
}

// Decode is rl/actions.py decode for the plugin's action modes: weights = softmax(a[0:4]) and
// tau = sigmoid(a[4]) (0 in mode seed), ceiling = CeilingLow + (CeilingHigh - CeilingLow) *
// sigmoid(a[5]) in mode ceiling, the fragmentation share sigmoid(a[5]) in mode fragmentation, each
// pre-activation clipped to ±LogitLimit first. An error names a
// mode it cannot decode, a wrong width or a value that is not finite.
func Decode(pre []float32, mode string) (ScoreArgs, error) {
	width, ok := actionWidth[mode]
	if !ok {
		return ScoreArgs{}, fmt.Errorf("action mode %q: expected one of %v", mode, PluginActionModes)
	}
	if len(pre) != width {
		return ScoreArgs{}, fmt.Errorf("action of %d values: expected %d (action mode %q)", len(pre), width, mode)
	}
	var clipped [6]float64
	v := clipped[:width]
	for i, x := range pre {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return ScoreArgs{}, fmt.Errorf("action %v: expected finite numbers", pre)
		}
		v[i] = math.Min(math.Max(f, -LogitLimit), LogitLimit)
	}
	top := slices.Max(v[:4])
	var e [4]float64
	total := 0.0
	for r := range e {
		e[r] = math.Exp(v[r] - top)
		total += e[r]
	}
	var args ScoreArgs
	for r := range e {
		args.Weights[r] = e[r] / total
	}
	if mode != "seed" {
		args.Tau = sigmoid(v[4])
	}
	switch mode {
	case "ceiling":
		args.Ceiling = CeilingLow + (CeilingHigh-CeilingLow)*sigmoid(v[5])
	case "fragmentation":
		args.Fragmentation = sigmoid(v[5])
	}
	return args, nil
}

func sigmoid(x float64) float64 { return 1.0 / (1.0 + math.Exp(-x)) }

// servedModel is the engine's model as the plugin runs it.
type servedModel struct {
	actor   *actor.Actor
	version string
	mode    string
	// failClosed: the engine excludes nodes without fresh metrics (score 0) instead of scoring them neutral.
	failClosed bool
	// typical: a fragmentation model's typical pods per pool (GetModel's typical_pods); nil otherwise.
	typical PoolTypicalPods
	// spread: the card's sibling spread (GetModel's sibling_spread); 0: none.
	spread  float64
	scratch sync.Pool // *inferenceScratch
}

type inferenceScratch struct {
	fresh      []bool      // per node asked about
	candidates []Candidate // the fresh ones, in order
	sorted     []float64
	obs        []float32
}

// loadModel checks a GetModel reply and loads its graph; an error says why the plugin cannot run it.
func loadModel(reply *enginev1.GetModelResponse) (*servedModel, error) {
	if !slices.Contains(PluginActionModes, reply.ActionMode) {
		return nil, fmt.Errorf("action mode %q: the plugin scores %v; the engine scores the others", reply.ActionMode,
			PluginActionModes)
	}
	if !slices.Equal(reply.ObservationFields, ObservationFields) {
		return nil, fmt.Errorf("observation layout of %d fields differs from the plugin's %d", len(reply.ObservationFields),
			len(ObservationFields))
	}
	a, err := actor.Load(reply.Onnx)
	if err != nil {
		return nil, err
	}
	if a.InputSize() != ObservationSize || a.OutputSize() != actionWidth[reply.ActionMode] {
		return nil, fmt.Errorf("graph of %d inputs and %d outputs: expected %d and %d (action mode %q)", a.InputSize(),
			a.OutputSize(), ObservationSize, actionWidth[reply.ActionMode], reply.ActionMode)
	}
	spread := reply.SiblingSpread
	if math.IsNaN(spread) || spread < 0 || spread > MaxSpread {
		return nil, fmt.Errorf("sibling spread %g: expected [0, %g]", spread, MaxSpread)
	}
	m := &servedModel{actor: a, version: reply.ModelVersion, mode: reply.ActionMode, failClosed: reply.FailClosed,
		spread: spread}
	if reply.ActionMode == "fragmentation" {
		if m.typical, err = ParseTypicalPods([]byte(reply.TypicalPods)); err != nil {
			return nil, fmt.Errorf("the fragmentation share's typical pods: %w", err)
		}
	}
	return m, nil
}

// refreshModel asks the engine for its served model and keeps what the plugin can run: a new graph is
// loaded, the same version kept, and no model (none served, shadow mode, a model that holds its
// action, or one the plugin cannot run) leaves every pod to the engine's ScoreNodes.
func (pl *TD3Score) refreshModel(ctx context.Context) error {
	callCtx, cancel := context.WithTimeout(ctx, seconds(*pl.args.MetricsTimeoutSeconds))
	defer cancel()
	known := ""
	if m := pl.model.Load(); m != nil {
		known = m.version
	}
	reply, err := pl.engine.GetModel(callCtx, &enginev1.GetModelRequest{KnownVersion: known})
	if err != nil {
		modelRefreshes.WithLabelValues("error").Inc()
		return fmt.Errorf("GetModel: %w", err)
	}
	pl.oomKills.Store(math.Float64bits(reply.OomKillsRecent))
	switch {
	case reply.ModelVersion == "" || reply.Advisory || reply.ActionHoldS > 0:
		pl.model.Store(nil) // the engine's answers: none to run, advisory ones, or held ones (scoreHeldActions)
		modelRefreshes.WithLabelValues("engine").Inc()
		return nil
	case reply.ModelVersion == known && len(reply.Onnx) == 0:
		if m := pl.model.Load(); m != nil && m.failClosed != reply.FailClosed {
			pl.model.Store(&servedModel{actor: m.actor, version: m.version, mode: m.mode, failClosed: reply.FailClosed,
				typical: m.typical, spread: m.spread})
		}
		modelRefreshes.WithLabelValues("unchanged").Inc()
		return nil
	}
	m, err := loadModel(reply)
	if err != nil {
		pl.model.Store(nil)
		modelRefreshes.WithLabelValues("refused").Inc()
		return fmt.Errorf("model %s: %w", reply.ModelVersion, err)
	}
	pl.model.Store(m)
	modelRefreshes.WithLabelValues("loaded").Inc()
	klog.FromContext(ctx).Info("td3score: running the engine's model in the scheduler", "model", m.version,
		"actionMode", m.mode, "failClosed", m.failClosed)
	return nil
}

// refreshModelEvery refreshes the model every period until ctx ends; a failure is logged and keeps the
// model loaded before it (the engine being down does not change which model it serves).
func (pl *TD3Score) refreshModelEvery(ctx context.Context, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		if err := pl.refreshModel(ctx); err != nil && !errors.Is(ctx.Err(), context.Canceled) {
			klog.FromContext(ctx).V(2).Info("td3score: model refresh failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// inferScores is the served model's decision for the pod, taken here: node -> score 0-100, or the
// reason to fall back. The observation reads the plugin's node metrics and assign cache, and the
// cluster's recent OOM kills as the engine last reported them (GetModel). Nodes without fresh metrics
// score neutral (fail-open) or 0 (fail-closed) and stay out of the observation, as in the engine's
// decision.
func (pl *TD3Score) inferScores(m *servedModel, p *enginev1.Pod, nodes []fwk.NodeInfo) (map[string]int64, string, error) {
	snap, now := pl.metrics.Snapshot(), pl.now()
	s, _ := m.scratch.Get().(*inferenceScratch)
	if s == nil {
		s = &inferenceScratch{obs: make([]float32, ObservationSize)}
	}
	defer m.scratch.Put(s)
	s.fresh = slices.Grow(s.fresh[:0], len(nodes))[:len(nodes)]
	s.candidates = s.candidates[:0]
	for i, n := range nodes {
		node, fresh, recentCPU, recentMem := pl.nodeState(snap, n.Node().Name, now)
		if s.fresh[i] = fresh; fresh {
			s.candidates = append(s.candidates, Candidate{Allocatable: pl.allocatable(n),
				Utilisation: Utilisation(p.CpuMilli, p.MemMib, node, recentCPU, recentMem)})
		}
	}
	if len(s.candidates) == 0 {
		return nil, ReasonNoFreshMetrics, errors.New("no candidate has fresh metrics")
	}
	s.sorted = Observe([4]float64{p.CpuMilli, p.MemMib, p.DiskGib, p.RdmaPct}, qosIndex(p.Qos), s.candidates,
		len(snap.Nodes), math.Float64frombits(pl.oomKills.Load()), unixSecondsOf(now), s.obs, s.sorted)
	pre, err := m.actor.Act(s.obs)
	if err != nil {
		return nil, ReasonModelError, err
	}
	for _, x := range pre {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, ReasonNaN, fmt.Errorf("action %v", pre)
		}
		if math.Abs(float64(x)) > LogitLimit+RangeSlack {
			return nil, ReasonInvalid, fmt.Errorf("action %v: outside ±%g", pre, LogitLimit)
		}
	}
	args, err := Decode(pre, m.mode)
	if err != nil {
		return nil, ReasonModelError, err
	}
	var blended []float64 // with a fragmentation share: the fresh candidates' scores blended with FGD's
	if args.Fragmentation > 0 {
		u := make([][4]float64, len(s.candidates))
		for j, c := range s.candidates {
			u[j] = c.Utilisation
		}
		blended = pl.blendFragmentation(p, nodes, s.fresh, u, args.Weights, args.Tau, args.Fragmentation, m.typical)
	}
	scores := make(map[string]int64, len(nodes))
	next := 0 // the next fresh candidate
	owner := p.Owner
	for i, n := range nodes {
		switch {
		case s.fresh[i] && (blended != nil || m.spread > 0):
			u := s.candidates[next].Utilisation
			score := 0.0
			if blended != nil {
				score = blended[next]
			} else {
				score = WeightedCloseness(u, args.Weights, args.Tau)
			}
			if m.spread > 0 {
				score = SpreadSiblings(score, float64(SiblingsOn(n, owner)), m.spread)
			}
			if args.Ceiling > 0 && !(u[0] <= args.Ceiling) {
				score = 0
			}
			scores[n.Node().Name] = To100(score)
			next++
		case s.fresh[i]:
			scores[n.Node().Name] = UtilisationScore(s.candidates[next].Utilisation, args.Weights, args.Tau, args.Ceiling)
			next++
		case m.failClosed:
			scores[n.Node().Name] = fwk.MinNodeScore
		default:
			scores[n.Node().Name] = To100(NeutralScore)
		}
	}
	return scores, "", nil
}

// blendFragmentation is the scores in [0, 1] of the fresh candidates (fresh[i] for nodes[i]; u: their
// utilisations with the pod, in order): the weighted closeness blended with FGD's score by share
// (BlendFragmentation), FGD's measured with typical over the nodes' allocation, each node's pool from
// its poolLabel label. The engine's score of a fragmentation model, and its fallback's with a share.
func (pl *TD3Score) blendFragmentation(p *enginev1.Pod, nodes []fwk.NodeInfo, fresh []bool, u [][4]float64,
	weights [4]float64, tau, share float64, typical PoolTypicalPods) []float64 {
	static := make([]float64, 0, len(u))
	decrease := make([]float64, 0, len(u))
	request := [4]float64{p.CpuMilli, p.MemMib, p.DiskGib, p.RdmaPct}
	for i, n := range nodes {
		if !fresh[i] {
			continue
		}
		static = append(static, WeightedCloseness(u[len(static)], weights, tau))
		free, gpuFree := NodeAllocation(n, *pl.args.NodeDiskGiB, *pl.args.NodeRDMAPct)
		decrease = append(decrease, FragmentationDecrease(typical[n.Node().Labels[pl.args.PoolLabel]], request,
			int64(p.GpuCount), int64(p.GpuMilli), free, gpuFree))
	}
	return BlendFragmentation(static, decrease, share)
}

// allocatable is nodeAllocatable with the configured disk and RDMA of a node whose allocatable lists none.
func (pl *TD3Score) allocatable(n fwk.NodeInfo) [4]float64 {
	return nodeAllocatable(n, *pl.args.NodeDiskGiB, *pl.args.NodeRDMAPct)
}

// nodeAllocatable is a node's [CPU milli, memory MiB, disk GiB, RDMA %] as the engine's Kubernetes source
// reads it (kubernetes_source.node_allocatable): without ephemeral storage or RDMA, diskGiB and rdmaPct.
func nodeAllocatable(n fwk.NodeInfo, diskGiB, rdmaPct float64) [4]float64 {
	a := n.GetAllocatable()
	disk := float64(a.GetEphemeralStorage()) / GiB
	if !(disk > 0) {
		disk = diskGiB
	}
	rdma := rdmaPct
	if v, ok := a.GetScalarResources()[rdmaResource]; ok {
		rdma = float64(v)
	}
	return [4]float64{float64(a.GetMilliCPU()), float64(a.GetMemory()) / nodemetrics.MiB, disk, rdma}
}

// qosIndex is the observation's QoS index (Guaranteed 0, Burstable 1, BestEffort 2; unspecified reads as
// Burstable, as the engine reads it).
func qosIndex(q enginev1.QosClass) int {
	switch q {
	case enginev1.QosClass_QOS_CLASS_GUARANTEED:
		return 0
	case enginev1.QosClass_QOS_CLASS_BEST_EFFORT:
		return 2
	}
	return 1
}

func unixSecondsOf(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// MaxSpread is the largest sibling spread (policy/siblings.py MAX_SPREAD).
const MaxSpread = 100.0

// SpreadSiblings is a score in [0, 1] lowered for the pod's siblings on the node (policy/siblings.py
// spread_siblings): (score + spread/(siblings+1)) / (1+spread); a spread of 0 leaves it as it is.
func SpreadSiblings(score, siblings, spread float64) float64 {
	if spread == 0 {
		return score
	}
	return (score + spread/(siblings+1.0)) / (1.0 + spread)
}

// SiblingsOn counts the pods on the node (the scheduler's NodeInfo: bound and assumed pods) whose
// controller is owner (Owner); none for a pod of no controller.
func SiblingsOn(n fwk.NodeInfo, owner string) int {
	if owner == "" {
		return 0
	}
	count := 0
	for _, p := range n.GetPods() {
		if Owner(p.GetPod()) == owner {
			count++
		}
	}
	return count
}
