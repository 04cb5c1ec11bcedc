package nodemetrics

// The engine reader: the decision engine's own copy of the node metrics (GetNodeMetrics).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	enginev1 "td3-scheduler/scheduler/pkg/engine/v1"
)

// Engine reads the node metrics the decision engine holds, as its metrics source took them. It fails,
// so that the next reader is asked, when the engine does not answer, answers something malformed, or
// says that its own last refresh failed (its snapshot is then only its last good one).
type Engine struct {
	Client  enginev1.DecisionEngineClient
	Timeout time.Duration // the call's deadline
}

// Name is the reader's name in the refresh metric.
func (e *Engine) Name() string { return "engine" }

// Read asks the engine for its snapshot; when last is the engine's and the engine has nothing newer, it
// is returned as it is (the engine sends no nodes then).
func (e *Engine) Read(ctx context.Context, last *Snapshot) (*Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, e.Timeout)
	defer cancel()
	known := 0.0
	if last != nil && last.Reader == e.Name() {
		known = last.Stamp
	}
	reply, err := e.Client.GetNodeMetrics(ctx, &enginev1.GetNodeMetricsRequest{KnownTakenAtS: known})
	if err != nil {
		return nil, fmt.Errorf("GetNodeMetrics: %w", err)
	}
	if reply.RefreshFailed {
		return nil, fmt.Errorf("the engine's last metrics refresh failed: %s", reply.RefreshError)
	}
	if reply.Unchanged {
		if known == 0 {
			return nil, errors.New("GetNodeMetrics: unchanged, but no snapshot was named")
		}
		return last, nil
	}
	return snapshotOf(reply)
}

// snapshotOf checks the reply's shapes and builds the snapshot; a malformed reply is an error naming what.
func snapshotOf(r *enginev1.GetNodeMetricsResponse) (*Snapshot, error) {
	n := len(r.Nodes)
	if len(r.Observed) != 4*n || len(r.Capacity) != 4*n || len(r.SampleTimeS) != n {
		return nil, fmt.Errorf("GetNodeMetrics: %d observed values, %d capacities and %d sample times for %d nodes: "+
			"expected %d, %d and %d", len(r.Observed), len(r.Capacity), len(r.SampleTimeS), n, 4*n, 4*n, n)
	}
	if math.IsNaN(r.TakenAtS) || math.IsInf(r.TakenAtS, 0) || r.TakenAtS <= 0 {
		return nil, fmt.Errorf("GetNodeMetrics: taken_at_s %v: expected a time", r.TakenAtS)
	}
	nodes := make(map[string]Node, n)
	for i, name := range r.Nodes {
		if _, dup := nodes[name]; dup || name == "" {
			return nil, fmt.Errorf("GetNodeMetrics: node %q: empty or listed twice", name)
		}
		m := Node{SampleTime: r.SampleTimeS[i]}
		copy(m.Observed[:], r.Observed[4*i:4*i+4])
		copy(m.Capacity[:], r.Capacity[4*i:4*i+4])
		if math.IsNaN(m.SampleTime) {
			m.SampleTime = math.Inf(-1)
		}
		nodes[name] = m
	}
	sec, frac := math.Modf(r.TakenAtS)
	return &Snapshot{Nodes: nodes, TakenAt: time.Unix(int64(sec), int64(frac*1e9)), Reader: "engine", Stamp: r.TakenAtS}, nil
}
