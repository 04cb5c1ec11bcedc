"""Calibrate scenario dlrm to the reference case study's default row, and report it.

The reference default row (kube-scheduler, before td3-scheduler): CPU utilisation 42.1%,
fragmentation 18.4%, P99 latency 124 ms, 14 OOM kills per week. Calibration runs k8s-default on the
dlrm **train** span (mean of seeds 1-3); the test span is then reported (5 seeds) without refitting.

Steps, each printed:
1. ``usage_scale``: the largest scale (on a grid) at which at most 10% of DLRM (pod, 5-minute
   slot) samples over the train span are at their CPU limit (the profiles keep their shape).
2. The default row under the current constants (``--set`` overrides apply), train span: each
   metric against its target and tolerance, with a 95% interval over seeds.
3. With ``--test``, the same on the test span with 5 seeds.

    python benchmarks/calibrate_dlrm.py [--seeds 3] [--days-cap D] [--set key=value ...] [--test]

``--days-cap`` shortens the train span (its first D days after the warm-up) for a quick look;
the figures in docs/simulator.md name the command that made them.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from td3sched.evaluate.stats import summarize
from td3sched.run import code_version, run_simulation
from td3sched.scenario import load_scenario

TARGETS = {  # metric: (target, tolerance, kind)
    "cpu_util": (0.421, 0.02, "abs"),
    "fragmentation": (0.184, 0.04, "abs"),
    "latency_p99_ms": (124.0, 0.25, "rel"),
    "oom_per_week": (14.0, 0.50, "rel"),
}
MAX_AT_LIMIT = 0.10


def share_at_limit(scales, overrides) -> list[float]:
    """Share of DLRM (pod, slot) samples over the train span whose CPU demand reaches the limit,
    for each usage scale: demand = scale x shape x size, and DLRM sizes equal limits."""
    scenario = load_scenario("dlrm", overrides)
    world = scenario.build(1)
    w, prof = world.workload, world.profiles
    start, end = scenario.span("train")
    dlrm = np.flatnonzero(w.latency_sensitive)
    first = np.maximum(w.arrival_s[dlrm], start)
    last = np.minimum(w.arrival_s[dlrm] + w.duration_s[dlrm], end)
    alive = last > first
    dlrm, first, last = dlrm[alive], first[alive], last[alive]
    step, slots = prof.step_s, prof.slots
    s0 = (first // step).astype(np.int64)
    s1 = np.ceil(last / step).astype(np.int64)
    n_samples = float((s1 - s0).sum())
    vm = w.profile[dlrm]
    ratio = w.size_cpu_milli[dlrm] / w.cpu_limit_milli[dlrm]  # 1 for DLRM (sizes are requests = limits)
    out = []
    for scale in scales:
        # at the limit when scale x shape x ratio >= 1; per VM, a cumulative count over wrapped slots
        hits = 0.0
        for r in np.unique(ratio):
            mine = ratio == r
            at = (prof.shape[0] * scale * r >= 1.0).astype(np.int64)   # [V, T]
            cum = np.concatenate([np.zeros((at.shape[0], 1), np.int64), np.cumsum(at, axis=1)], axis=1)
            per_wrap = cum[:, -1]

            def count(v, upto):  # hits in slots [0, upto) of the wrapped profile
                return (upto // slots) * per_wrap[v] + cum[v, upto % slots]

            hits += float((count(vm[mine], s1[mine]) - count(vm[mine], s0[mine])).sum())
        out.append(hits / n_samples)
    return out


def _run(job: tuple[str, int, list[str]]) -> dict:
    span, seed, overrides = job
    t0 = time.perf_counter()
    m = run_simulation("dlrm", "k8s-default", seed, span, overrides)["metrics"]
    print(f"  {span} seed {seed}: cpu_util {m['cpu_util']:.4f}  fragmentation {m['fragmentation']:.4f}  "
          f"p99 {m['latency_p99_ms']:.1f} ms  oom/week {m['oom_per_week']:.1f} (kills {m['oom_kills']}, "
          f"container {m['container_oom']})  batch share of CPU {m['batch_cpu_share']:.3f}  "
          f"node-hours {m['node_hours']:.0f}  ({time.perf_counter() - t0:.0f} s)", flush=True)
    return m


def default_row(span: str, seeds: int, overrides: list[str], jobs: int = 1) -> dict[str, tuple[float, float, float]]:
    tasks = [(span, seed, overrides) for seed in range(1, seeds + 1)]
    if jobs > 1:
        from multiprocessing import Pool

        with Pool(jobs) as pool:
            runs = pool.map(_run, tasks)
    else:
        runs = [_run(task) for task in tasks]
    out = {}
    for k in TARGETS:
        s = summarize([m[k] for m in runs])
        half = s.half if s.half is not None else math.nan
        out[k] = (s.mean, s.mean - half, s.mean + half)
    return out


def report(row: dict, title: str) -> None:
    print(f"\n{title}")
    print(f"  {'metric':<16} {'target':>10} {'value':>12} {'95% interval':>26}  within")
    for k, (target, tol, kind) in TARGETS.items():
        mean, lo, hi = row[k]
        ok = abs(mean - target) <= (tol if kind == "abs" else tol * target)
        band = f"+/- {tol:g}" if kind == "abs" else f"+/- {tol:.0%}"
        print(f"  {k:<16} {target:>10.3f} {mean:>12.4f} [{lo:>11.4f}, {hi:>11.4f}]  {'yes' if ok else 'NO'} ({band})")
    mean, lo, hi = row["oom_per_week"]
    print(f"  OOM interval narrower than its mean: {'yes' if (hi - lo) < mean else 'NO'} (width {hi - lo:.1f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--days-cap", type=float, default=None, help="measure only the first D days of the train span")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--test", action="store_true", help="also report the test span (5 seeds)")
    ap.add_argument("--skip-scale", action="store_true", help="skip step 1")
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel (processes)")
    args = ap.parse_args()
    print(f"code version {code_version()}; overrides {args.overrides or 'none'}")
    if not args.skip_scale:
        scales = [round(x, 2) for x in np.arange(0.8, 2.005, 0.01)]
        shares = share_at_limit(scales, args.overrides)
        print("usage_scale -> share of DLRM samples at the CPU limit (train span):")
        for s, f in zip(scales, shares):
            print(f"  {s:4.2f}  {f:.4f}{'  <- largest with <= 10%' if f <= MAX_AT_LIMIT and (s == scales[-1] or shares[scales.index(s) + 1] > MAX_AT_LIMIT) else ''}")
    overrides = list(args.overrides)
    if args.days_cap:
        warm = load_scenario("dlrm", overrides).sim_config().warmup_days
        overrides.append(f"spans.train=[0,{warm + args.days_cap}]")
    cap = f", first {args.days_cap:g} days after the warm-up" if args.days_cap else ""
    report(default_row("train", args.seeds, overrides, args.jobs), f"dlrm train span{cap}, k8s-default, {args.seeds} seeds")
    if args.test:
        report(default_row("test", 5, args.overrides, args.jobs), "dlrm test span, k8s-default, 5 seeds (not refitted)")


if __name__ == "__main__":
    main()
