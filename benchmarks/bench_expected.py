"""What counting the pods it answered costs the engine's decision (``ShadowState.expect_pod``).

    python benchmarks/bench_expected.py [--candidates 100,5000] [--calls 500] [--trials 7]

Until a pod's binding is reported, the engine counts it where its answer ranked it first, so that the next
pod of a burst does not read that node as cool as before (docs/engine.md, *Pods answered, not yet bound*).
Three services over one synthetic snapshot (``engine.loadgen.synthetic_snapshot``) and the shipped model
``models/static-spread-dlrm-small``, called in alternating blocks of ``--calls`` ScoreNodes each (the
machine is shared: only figures measured side by side are compared):

- ``off``: the count switched off (``EngineService._expect`` does nothing): the engine before it; each
  pod's binding reported after its answer, as a cluster reports it;
- ``on``: the same with the count: one pod in flight at a time;
- ``unbound``: the count, and no binding ever reported: every pod answered in the last ``EXPECT_S`` seconds
  counts (the worst case, thousands of pods here).

Prints each service's median microseconds per call over the trials (ScoreNodes and, but for ``unbound``,
the ReportBinding after it), and its ratio to ``off`` trial by trial (median and range).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from td3sched.engine.decision import DecisionEngine, ModelSlot, PodSpec
from td3sched.engine.loadgen import synthetic_snapshot
from td3sched.engine.service import EngineService
from td3sched.engine.state import ShadowState
from td3sched.rl.onnx_actor import load_actor

MODEL = Path(__file__).resolve().parents[1] / "models" / "static-spread-dlrm-small"
MODES = ("off", "on", "unbound")


def service_for(mode: str, nodes: int, actor) -> EngineService:
    state = ShadowState()
    state.publish(synthetic_snapshot(nodes, 0))
    state.set_pods({})  # a pod watch: the spread's siblings are known
    service = EngineService(DecisionEngine(state, ModelSlot(actor)))
    if mode == "off":
        service._expect = lambda *a, **k: None
    service.engine.decide(PodSpec("warm-up", 500.0, 512.0), list(state.snapshot.names))
    return service


def block(service: EngineService, mode: str, names: list[str], calls: int, start: int) -> float:
    """Seconds per call over ``calls`` pods (of 8 services, so that siblings are counted too)."""
    t0 = time.perf_counter()
    for i in range(start, start + calls):
        pod = PodSpec(f"web-{i}", 250.0 + 50 * (i % 7), 512.0, namespace="bench", owner=f"bench/ReplicaSet/web-{i % 8}")
        _, d = service.score_nodes(pod, names)
        if mode != "unbound":
            service.report_binding(pod, d.candidates[int(np.argmax(d.scores))])
    return (time.perf_counter() - t0) / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidates", default="100,5000", help="comma-separated candidate counts (the nodes)")
    ap.add_argument("--calls", type=int, default=500, help="ScoreNodes calls per block")
    ap.add_argument("--trials", type=int, default=7, help="alternating blocks per service")
    args = ap.parse_args()
    actor = load_actor(MODEL)
    print(f"model {MODEL.name}; {args.trials} trials of {args.calls} calls per service, alternating")
    print(f"{'candidates':>10} {'service':>8} {'us/call':>9} {'x off (median, range)':>24} {'expected at end':>16}")
    for n in (int(c) for c in args.candidates.split(",")):
        services = {m: service_for(m, n, actor) for m in MODES}
        names = list(services["off"].engine.state.snapshot.names)
        per_call = {m: [] for m in MODES}
        for trial in range(args.trials):
            for m in (MODES if trial % 2 == 0 else MODES[::-1]):
                per_call[m].append(block(services[m], m, names, args.calls, trial * args.calls))
        off = np.array(per_call["off"])
        for m in MODES:
            t = np.array(per_call[m])
            ratio = t / off
            held = len(services[m].engine.state._expected)
            print(f"{n:>10,} {m:>8} {np.median(t) * 1e6:>9,.0f} "
                  f"{np.median(ratio):>10.3f} ({ratio.min():.3f}-{ratio.max():.3f}) {held:>16,}")


if __name__ == "__main__":
    main()
