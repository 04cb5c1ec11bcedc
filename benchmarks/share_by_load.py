"""Does the best fragmentation share move with the load? (issue 9: room for a policy that reads its
cluster's regime rather than one placement.)

    python benchmarks/share_by_load.py --scenario dlrm-small --days 21:27 --seeds 2 \\
        --loads 0.035,0.05,0.065,0.08 --shares 0.25,0,0.5,1 --workers 2

The blend (``static-weights:w=1/0/0/0:tau=0.4:frag=0.25``) is the best static score measured on
dlrm-small as shipped, and within one scenario no state-dependent choice of its share gains more than
0.2% (docs/td3.md, *Which way the action points*). Across scenarios it may: with 30% more load fgd (the
share at its most) was 6% below the blend on the mean (docs/results/dlrm-small-fragmentation). If the
best share follows the load, a policy that reads the load (and holds its share for a day, as the
score's arguments are tuned) has room over any one static score on clusters whose load differs from
the one the score was tuned on.

Each load (``workload.sample``, the share of dlrm's instances; dlrm-small ships 0.05) is run with each
share (``:frag=S`` on the blend's weights and tau) on every (day, seed): one run of the day after the
scenario's warm-up, as ``td3sched rehearse --steps 0`` measures a policy a day at a time. Per load,
``daily.print_table``'s table with the first share as the reference (the objective's cost, the paired
difference per (day, seed) with its 95% t interval, and the parts the cost trades), then a summary: the
best share at each load and what choosing it per load gains over each single share.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from daily import add_arguments, day_span, days_of, metrics, numbers, print_table, run_all
from td3sched.evaluate.stats import summarize
from td3sched.run import run_simulation
from td3sched.version import code_version

WEIGHTS = "static-weights:w=1/0/0/0:tau=0.4"


def one(job: tuple) -> tuple:
    scenario, load, share, day, seed = job
    record = run_simulation(scenario, f"{WEIGHTS}:frag={share:g}", seed, "d",
                            [day_span(day), f"workload.sample={load:g}"])
    return load, share, day, seed, metrics(record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--loads", default="0.035,0.05,0.065,0.08", help="workload.sample values, comma-separated")
    parser.add_argument("--shares", default="0.25,0,0.5,1",
                        help="fragmentation shares, comma-separated; the first is the reference")
    args = parser.parse_args()
    days = days_of(parser, args)
    loads, shares = numbers(parser, args.loads, "loads"), numbers(parser, args.shares, "shares")
    if not loads or not shares or not all(0 < v <= 1 for v in loads) or not all(0 <= v <= 1 for v in shares):
        parser.error(f"--loads {args.loads} --shares {args.shares}: expected loads in (0, 1] and shares in [0, 1]")
    jobs = [(args.scenario, load, share, day, seed) for load in loads for day in days
            for seed in range(1, args.seeds + 1) for share in shares]
    print(f"code version {code_version()}; {args.scenario} days {days[0]}-{days[-1]}, seeds 1-{args.seeds}, "
          f"loads {loads}, shares {shares}: {len(jobs)} runs on {args.workers} workers", flush=True)
    started = time.perf_counter()
    runs: dict[float, dict[str, dict[tuple, dict]]] = {load: {f"share {s:g}": {} for s in shares} for load in loads}
    for load, share, day, seed, m in run_all(one, jobs, args.workers, every=20):
        runs[load][f"share {share:g}"][day, seed] = m

    labels = [f"share {s:g}" for s in shares]
    for load in loads:
        print(f"\n### workload.sample={load:g} (the first row is the reference)")
        print_table(labels, runs[load])

    # the best share at each load (lowest summed cost), and choosing it per load against each single share
    keys = sorted(runs[loads[0]][labels[0]])
    best = {load: min(labels, key=lambda lb: sum(runs[load][lb][k]["cost_node_hours"] for k in keys))
            for load in loads}
    print("\n| load | best share | its cost | the reference's |")
    print("| ---: | --- | ---: | ---: |")
    for load in loads:
        cost = lambda lb: sum(runs[load][lb][k]["cost_node_hours"] for k in keys)  # noqa: E731
        print(f"| {load:g} | {best[load]} | {cost(best[load]):,.0f} | {cost(labels[0]):,.0f} |")
    print("\nChoosing the best share per load (with hindsight of these runs) against one share at every load, "
          "per (load, day, seed), 95% interval, and as a share of that share's cost:\n")
    print("| single share | - it, a (load, day, seed) | share of its cost |")
    print("| --- | --- | ---: |")
    for lb in labels:
        d = [runs[load][best[load]][k]["cost_node_hours"] - runs[load][lb][k]["cost_node_hours"]
             for load in loads for k in keys]
        s = summarize(d)
        total = sum(runs[load][lb][k]["cost_node_hours"] for load in loads for k in keys)
        print(f"| {lb} | {s.mean:+.1f} [{s.low:+.1f}, {s.high:+.1f}] | {100 * np.sum(d) / total:+.2f}% |")
    print(f"\n{len(keys)} (day, seed) pairs a load, {time.perf_counter() - started:,.0f} s")


if __name__ == "__main__":
    main()
