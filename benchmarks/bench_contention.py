"""Speed of ``deliver_cpu``: one CFS split of every node's CPU, 100,000 pods over 3,000 nodes.

Prints the median (and the fastest) wall time of 20 calls for two loads: every node short of CPU
(the worst case: every pod goes through the water-filling sort) and a busy tick where about one
node in seven is. Goal: a few milliseconds, so a usage tick can afford it. In the worst case the
float argsort is ~2 ms and about a third of the time is minor page faults on fresh 100k-pod arrays
(glibc hands the freed memory back to the OS between calls; raising MALLOC_TRIM_THRESHOLD_ and
MALLOC_MMAP_THRESHOLD_ removes them).

    python benchmarks/bench_contention.py [--pods 100000] [--nodes 3000] [--calls 20]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from td3sched.simulator.contention import cpu_weight, deliver_cpu


def world(n_pods: int, n_nodes: int, load: float, seed: int = 0):
    """Pods with requests from a small menu, usage around their request, half with a CPU limit.
    ``load`` scales the node capacities: demand / capacity is about ``load`` on an average node."""
    rng = np.random.default_rng(seed)
    node_of = rng.integers(0, n_nodes, n_pods)
    request = rng.choice([0, 100, 250, 500, 1000, 2000, 4000], n_pods)
    demand = rng.exponential(1.0, n_pods) * np.maximum(request, 200)
    limit = np.where(rng.random(n_pods) < 0.5, np.inf, 2.0 * np.maximum(request, 100))
    node_demand = np.bincount(node_of, weights=np.minimum(demand, limit), minlength=n_nodes)
    capacity = node_demand.mean() / load * rng.uniform(0.8, 1.2, n_nodes)
    return node_of, demand, cpu_weight(request), limit, capacity


def times_ms(args, calls: int) -> np.ndarray:
    deliver_cpu(*args)  # warm-up
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        deliver_cpu(*args)
        times.append(time.perf_counter() - t0)
    return 1e3 * np.array(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=3_000)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    print(f"{'load':28} {'pods':>8} {'nodes':>6} {'short nodes':>11} {'median ms':>10} {'min ms':>7}")
    for label, load in (("every node short (worst)", 3.0), ("busy (~1 node in 7 short)", 0.7)):
        w = world(args.pods, args.nodes, load)
        share = deliver_cpu(*w)
        short = int((share.node_demand_milli > w[4]).sum())
        ms = times_ms(w, args.calls)
        print(f"{label:28} {args.pods:>8} {args.nodes:>6} {short:>11} {np.median(ms):>10.2f} {ms.min():>7.2f}")


if __name__ == "__main__":
    main()
