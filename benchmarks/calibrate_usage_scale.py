"""Calibrate the global usage scale: bisection so that scenario dlrm under k8s-default, over the
whole 31 days, has a time-averaged cpu_util of 42% (the reference case study's operating point).

Run once when the usage model changes; write the result into simulator/config.py's usage_scale
default and docs/simulator.md. Prints every probe.

    python benchmarks/calibrate_usage_scale.py [--lo 2] [--hi 8] [--tol 0.01] [--days 31]
"""

from __future__ import annotations

import argparse
import time

from td3sched.run import run_simulation

TARGET = 0.42


def cpu_util(scale: float, days: float) -> float:
    t0 = time.perf_counter()
    r = run_simulation("dlrm", "k8s-default", 1, "full", [f"days={days}", f"simulator.usage_scale={scale}"])
    u = r["metrics"]["cpu_util"]
    print(f"usage_scale={scale:.4f}  cpu_util={u:.4f}  ({time.perf_counter() - t0:.0f} s)", flush=True)
    return u


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lo", type=float, default=2.0)
    ap.add_argument("--hi", type=float, default=8.0)
    ap.add_argument("--tol", type=float, default=0.01, help="stop when |cpu_util - 0.42| is below this")
    ap.add_argument("--days", type=float, default=31)
    ap.add_argument("--max-probes", type=int, default=6)
    args = ap.parse_args()
    lo, hi = args.lo, args.hi
    best = None
    for _ in range(args.max_probes):
        mid = round((lo + hi) / 2, 4)
        u = cpu_util(mid, args.days)
        if best is None or abs(u - TARGET) < abs(best[1] - TARGET):
            best = (mid, u)
        if abs(u - TARGET) < args.tol:
            break
        lo, hi = (mid, hi) if u < TARGET else (lo, mid)
    print(f"calibrated usage_scale={best[0]} -> cpu_util={best[1]:.4f} (target {TARGET})")


if __name__ == "__main__":
    main()
