"""The discrimination table and the ranking of policies under other weightings of the objective,
from the run records of one `td3sched evaluate` folder (no rerun: the cost's components are in each
record, weighted with the default weights of reward.py).

    python benchmarks/rerank.py RESULTS_DIR [--node-hour 0.5,1,2] [--overload 5,10,20]

Prints the code version(s) of the records, then per policy the mean and a 95% interval (t, over
seeds) of cpu_util, fragmentation, P99, OOM kills per week (oom_per_week), node-hours and the cost; then, for each
weighting, the policies ranked by mean cost, lowest first. A weight w' for a component whose
default is w scales that component by w'/w; every other weight stays at its default.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from td3sched.evaluate.stats import summarize
from td3sched.reward import RewardConfig

METRICS = ("cpu_util", "fragmentation", "latency_p99_ms", "oom_per_week", "node_hours", "cost_node_hours")


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t interval (evaluate.stats, as the reports; 0 for one value)."""
    summary = summarize(values)
    return summary.mean, summary.half or 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="an evaluate --out folder (its runs/*.json are read)")
    ap.add_argument("--node-hour", default="0.5,1,2", help="node_hour weights to rank under (default 0.5,1,2)")
    ap.add_argument("--overload", default="10", help="overload weights to rank under (default 10)")
    args = ap.parse_args(argv)
    files = sorted((args.results / "runs").glob("*.json"))
    if not files:
        print(f"{args.results}: no run records under runs/: expected an evaluate --out folder", file=sys.stderr)
        return 2
    runs = defaultdict(list)
    versions = set()
    for f in files:
        r = json.loads(f.read_text())
        versions.add(r["code_version"])
        runs[r["policy"]].append(r["metrics"])
    print("code version(s):", ", ".join(sorted(versions)), f"({len(files)} runs)")
    print("| policy | seeds | " + " | ".join(METRICS) + " |")
    print("|---|---|" + "---|" * len(METRICS))
    for policy, ms in sorted(runs.items()):
        cells = []
        for k in METRICS:
            mean, half = interval([m[k] for m in ms])
            cells.append(f"{mean:.4g} +/- {half:.2g}")
        print(f"| {policy} | {len(ms)} | " + " | ".join(cells) + " |")
    default = RewardConfig()
    for nh in (float(x) for x in args.node_hour.split(",")):
        for ov in (float(x) for x in args.overload.split(",")):
            scale = {"cost_nodes": nh / default.node_hour, "cost_overload": ov / default.overload}
            means = {}
            for policy, ms in runs.items():
                costs = [m["cost_node_hours"] + sum((f - 1.0) * m[k] for k, f in scale.items()) for m in ms]
                means[policy] = interval(costs)
            ranked = sorted(means, key=lambda p: means[p][0])
            print(f"node_hour {nh:g}, overload {ov:g}: " + " < ".join(
                f"{p} {means[p][0]:,.0f} (+/- {means[p][1]:,.0f})" for p in ranked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
