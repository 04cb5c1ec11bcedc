"""Simulator speed: decisions/s, simulated days per wall second and peak memory.

Runs the full 31-day ``dlrm`` scenario and ``openb`` under k8s-default, each in its own process
(so peak memory is that run's), and prints one row per run. Goals (issue: simulator): the 31-day
dlrm run in at most 120 s, and at least 5,000 decisions/s at 1,500 nodes (openb has 1,523).

    python benchmarks/bench_sim.py [--scenarios dlrm,openb] [--seed 1]

``decisions`` counts scheduling cycles (retries of pending pods included), ``binds`` the pods placed;
``decisions/s`` is cycles per second spent in them; ``wall s`` is the whole run after the world is
built; ``build s`` is loading traces and building the workload.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def one(scenario: str, seed: int) -> dict:
    from td3sched.policy import make_policy
    from td3sched.scenario import load_scenario
    from td3sched.simulator.engine import Simulation

    t0 = time.perf_counter()
    sc = load_scenario(scenario)
    world = sc.build(seed)
    build_s = time.perf_counter() - t0
    start, end = sc.span("full")
    r = Simulation(world, make_policy("k8s-default"), seed, start, end).run()
    nodes = sum(p.count for p in world.pools)
    return {
        "scenario": scenario, "nodes": nodes, "pods": len(world.workload), "days": (end - start) / 86400,
        "build_s": build_s, "wall_s": r["runtime"]["wall_s"], "decisions": r["metrics"]["decisions"],
        "binds": r["metrics"]["binds"],
        "decisions_per_s": r["runtime"]["decisions_per_s"],
        "sim_days_per_wall_s": r["runtime"]["sim_days_per_wall_s"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cpu_util": r["metrics"]["cpu_util"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default="dlrm,openb")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one(args.child, args.seed)))
        return
    header = f"{'scenario':8} {'nodes':>6} {'pods':>9} {'days':>5} {'build s':>8} {'wall s':>7} " \
             f"{'decisions':>10} {'binds':>10} {'decisions/s':>12} {'sim days/s':>10} {'peak MiB':>9} {'cpu_util':>8}"
    print(header)
    for name in args.scenarios.split(","):
        out = subprocess.run([sys.executable, __file__, "--child", name, "--seed", str(args.seed)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['scenario']:8} {r['nodes']:>6} {r['pods']:>9,} {r['days']:>5g} {r['build_s']:>8.1f} "
              f"{r['wall_s']:>7.1f} {r['decisions']:>10,} {r['binds']:>10,} {r['decisions_per_s']:>12,.0f} "
              f"{r['sim_days_per_wall_s']:>10.3f} {r['peak_rss_mib']:>9,.0f} {r['cpu_util']:>8.4f}", flush=True)


if __name__ == "__main__":
    main()
