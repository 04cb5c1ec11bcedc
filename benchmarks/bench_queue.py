"""Scheduling-queue acceptance: unschedulable pods must not slow the simulator down.

Runs two pairs, each run in its own process, under k8s-default on the ``test`` span:

- ``dlrm`` days 21-24 with stock node shapes vs the same CPU pool as half-size nodes, twice as
  many (``nodes.pools.cpu.cpu_milli=96000 count=4806 max_count=5600``). DLRM's 192-vCPU
  instances fit no 96-vCPU node, so they stay pending for the whole span (unschedulable by shape).
- ``openb`` at ``workload.target_load=1.1`` vs the default 0.9.

Goal (issue: scheduling queue): the second run of each pair within 1.5x the time of the first.
The two runs of a pair run back to back, and their order alternates between repeats, so a noisy
machine affects both sides alike; with ``--repeats N`` the ratio uses each side's median.

    python benchmarks/bench_queue.py [--repeats 1] [--days 3] [--seed 1]

``run s`` is the record's ``runtime.wall_s`` (the run after the world is built); ``proc s`` is
the whole child process (imports, traces, workload build and run). ``attempts/pod`` is scheduling
cycles per arrived pod; ``unsched`` is pods still pending at the end; ``by shape`` is pods that fit
no node template.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

GOAL = 1.5
HALF_CPU = ["nodes.pools.cpu.cpu_milli=96000", "nodes.pools.cpu.count=4806", "nodes.pools.cpu.max_count=5600"]


def pairs(days: float) -> list[tuple[str, tuple[str, str, list[str]], tuple[str, str, list[str]]]]:
    window = [f"spans.test=[21,{21 + days:g}]"]
    return [
        ("dlrm half-size vs stock",
         ("dlrm stock", "dlrm", window),
         ("dlrm half-cpu", "dlrm", window + HALF_CPU)),
        ("openb load 1.1 vs 0.9",
         ("openb 0.9", "openb", []),
         ("openb 1.1", "openb", ["workload.target_load=1.1"])),
    ]


def child(scenario: str, seed: int, overrides: list[str]) -> dict:
    from td3sched.run import run_simulation

    rec = run_simulation(scenario, "k8s-default", seed, "test", overrides)
    m = rec["metrics"]
    return {
        "run_s": rec["runtime"]["wall_s"], "decisions": m["decisions"], "binds": m["binds"],
        "pods_arrived": m["pods_arrived"], "attempts_per_pod": m["attempts_per_pod"],
        "unschedulable": m["unschedulable"], "unschedulable_by_shape": m["unschedulable_by_shape"],
        "days": (rec["span"]["end_s"] - rec["span"]["start_s"]) / 86400,
    }


def run_child(scenario: str, seed: int, overrides: list[str]) -> dict:
    cmd = [sys.executable, __file__, "--child", scenario, "--seed", str(seed)]
    for o in overrides:
        cmd += ["--set", o]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    proc_s = time.perf_counter() - t0
    if out.returncode != 0:  # a crash fails the acceptance, but the other runs are still measured
        err = out.stderr.strip().splitlines()
        return {"failed": err[-1] if err else f"exit code {out.returncode}", "proc_s": proc_s}
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["proc_s"] = proc_s
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--days", type=float, default=3.0, help="dlrm window length from day 21 (default 3)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", choices=["dlrm", "openb"], help="run one pair only")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.seed, args.set)))
        return
    if not 0 < args.days <= 10:
        ap.error("--days must be in (0, 10] (the dlrm test span is days 21-31)")

    from td3sched.run import code_version

    print(f"code version {code_version()}, seed {args.seed}, policy k8s-default, span test, "
          f"dlrm window {args.days:g} days, repeats {args.repeats}")
    header = f"{'run':14} {'rep':>3} {'days':>5} {'run s':>8} {'proc s':>8} {'decisions':>10} {'binds':>9} " \
             f"{'arrived':>9} {'attempts/pod':>12} {'unsched':>8} {'by shape':>8}"
    print(header, flush=True)
    times: dict[str, list[float]] = {}
    failed = False
    plan = [p for p in pairs(args.days) if args.only is None or p[1][1] == args.only]
    for rep in range(args.repeats):
        for _, base, other in plan:
            for label, scenario, overrides in ((base, other) if rep % 2 == 0 else (other, base)):
                r = run_child(scenario, args.seed, overrides)
                if "failed" in r:
                    failed = True
                    print(f"{label:14} {rep + 1:>3} FAILED after {r['proc_s']:.1f} s: {r['failed']}", flush=True)
                    continue
                times.setdefault(label, []).append(r["run_s"])
                print(f"{label:14} {rep + 1:>3} {r['days']:>5g} {r['run_s']:>8.1f} {r['proc_s']:>8.1f} "
                      f"{r['decisions']:>10,} {r['binds']:>9,} {r['pods_arrived']:>9,} "
                      f"{r['attempts_per_pod']:>12.3f} {r['unschedulable']:>8,} {r['unschedulable_by_shape']:>8,}",
                      flush=True)
    print()
    for name, (base, _, _), (other, _, _) in plan:
        if base not in times or other not in times:
            print(f"{name:24} no ratio: a run failed (goal <= {GOAL}x: MISSED)")
            failed = True
            continue
        a, b = statistics.median(times[base]), statistics.median(times[other])
        ratio = b / a if a else float("inf")
        print(f"{name:24} run s {b:.1f} / {a:.1f} = {ratio:.2f}x  (goal <= {GOAL}x: "
              f"{'met' if ratio <= GOAL else 'MISSED'})")
        failed |= ratio > GOAL
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
