"""What a placement does to its own pod: the pod's life on its node (history schema 4) against the state of
the node it was put on (issue 9: learning that can hear one placement).

    python benchmarks/placement_outcomes.py --scenario dlrm-small --set 'spans.day=[21,22]' --span day \\
        --policy static-weights:w=1/0/0/0:tau=0.4:frag=0.25 --seeds 2

Each seed's run is recorded (``td3sched simulate --record-history``), its warm-up too; every decision then
has the pod's hours above its latency SLO on that node (``outcome_slo_h``) and its node's hours over the
objective's overload threshold (``outcome_overload_h``), over its whole stay there (so far for a pod
still there at the end). Latency-sensitive pods (the workload's flag) are long-lived: most of those a
day sees were placed before it, so every placement of the run counts, warm-up included. For them it
prints:

- their hours above the SLO on a node, and the share of those that the pods placed on the hottest tenth
  of nodes (by the chosen node's CPU utilisation with the pod, ``u_cpu``, as the deciding policy saw it)
  spent;
- by tenth of the chosen node's ``u_cpu``: the placements, their candidates (the nodes with fresh
  metrics the policy scored) and the pod's CPU request, the coolest candidate's ``u_cpu`` (what another
  choice could have given the pod), their mean hours on the node, the hours above the SLO per hour on
  the node, and the hours of node overload per hour on the node;
- the rank correlation (Spearman) of the chosen ``u_cpu`` with the pod's rate above the SLO, and how
  much lower the coolest candidate's ``u_cpu`` was than the chosen one's (what another choice could have
  given it).

A pod's own outcome is a per-placement signal; the reward, the cluster's cost until the next decision,
is not (docs/td3.md, *How much one decision is heard*). These figures say how much of a pod's time
above its SLO the state of its node at the placement already tells.
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np

from td3sched.lifecycle.history import read_history
from td3sched.lifecycle.record import record_simulation
from td3sched.scenario import load_scenario


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Rank correlation (average ranks for ties)."""
    def ranks(a):
        order = np.argsort(a, kind="stable")
        r = np.empty(len(a))
        r[order] = np.arange(len(a))
        _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
        sums = np.bincount(inverse, weights=r)
        return (sums / counts)[inverse]
    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="dlrm-small")
    ap.add_argument("--span", default="test")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="A scenario override (repeatable).")
    ap.add_argument("--policy", default="static-weights:w=1/0/0/0:tau=0.4:frag=0.25")
    ap.add_argument("--seeds", type=int, default=2, help="Runs (seeds 1..N).")
    args = ap.parse_args()

    chosen_u, coolest_u, on_h, slo_h, over_h, k_cands, cores = [], [], [], [], [], [], []
    for seed in range(1, args.seeds + 1):
        with tempfile.TemporaryDirectory(prefix="placement-outcomes-") as tmp:
            # every candidate kept: the coolest one and their count are read below
            record, path, n = record_simulation(args.scenario, args.policy, seed, args.span, tmp, args.overrides,
                                                candidates=0)
            table = read_history(path, ["pod_name", "cpu_milli", "candidates", "chosen_index", "outcome_left_s",
                                        "outcome_slo_h", "outcome_overload_h"]).to_pylist()
        world = load_scenario(args.scenario, args.overrides).build(seed).workload
        ls = dict(zip(world.name, world.latency_sensitive))
        end_s = record["span"]["end_s"]
        kept = 0
        for row in table:
            i = row["chosen_index"]
            # placements of latency-sensitive pods with the chosen node's features known
            if not ls[row["pod_name"]] or i is None or row["candidates"][i]["stale"]:
                continue
            u = [c["u_cpu"] for c in row["candidates"] if not c["stale"]]
            left = row["outcome_left_s"] if row["outcome_left_s"] is not None else end_s
            chosen_u.append(row["candidates"][i]["u_cpu"])
            coolest_u.append(min(u))
            on_h.append((left - row["time_s"]) / 3600.0)
            slo_h.append(row["outcome_slo_h"])
            over_h.append(row["outcome_overload_h"])
            k_cands.append(len(u))
            cores.append(row["cpu_milli"] / 1000.0)
            kept += 1
        print(f"seed {seed}: {n:,} decisions, {kept:,} placements of latency-sensitive pods; the measured span's "
              f"hours above the SLO {record['metrics']['latency_breach_hours']:,.1f}", flush=True)
    chosen_u, coolest_u, on_h, slo_h, over_h, k_cands, cores = (
        np.asarray(x, dtype=np.float64) for x in (chosen_u, coolest_u, on_h, slo_h, over_h, k_cands, cores))
    if not len(chosen_u):
        raise SystemExit("no placement of a latency-sensitive pod")
    order = np.argsort(chosen_u, kind="stable")  # tenths of equal counts, by the chosen node's u_cpu
    tenth = np.empty(len(chosen_u), dtype=np.int64)
    tenth[order] = np.arange(len(chosen_u)) * 10 // len(chosen_u)
    hot = tenth == 9
    print(f"\n{args.policy} on {args.scenario} {args.span} {' '.join(args.overrides)}, seeds 1-{args.seeds}")
    print(f"hours above the SLO on a node, over the placements' stays: {slo_h.sum():,.1f} in {on_h.sum():,.0f} "
          f"hours there; by the pods placed on the hottest tenth of nodes: "
          f"{100 * slo_h[hot].sum() / max(slo_h.sum(), 1e-12):.1f}% of those")
    print("| chosen node's u_cpu (tenth) | placements | candidates (mean) | the pod's CPU request, cores (mean) "
          "| coolest candidate's u_cpu (mean) | hours on the node (mean) | hours above the SLO per hour there "
          "| node overload hours per hour there |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for k in range(10):
        m = tenth == k
        hours = on_h[m].sum()
        if not m.any():
            continue
        print(f"| {chosen_u[m].min():.2f}-{chosen_u[m].max():.2f} | {m.sum():,} | {k_cands[m].mean():.1f} | "
              f"{cores[m].mean():.1f} | {coolest_u[m].mean():.2f} | "
              f"{on_h[m].mean():.2f} | "
              f"{slo_h[m].sum() / hours if hours else float('nan'):.4f} | "
              f"{over_h[m].sum() / hours if hours else float('nan'):.4f} |")
    rate = np.divide(slo_h, on_h, out=np.zeros_like(slo_h), where=on_h > 0)
    print(f"\nSpearman correlation of the chosen u_cpu with the pod's hours above the SLO per hour on its node: "
          f"{spearman(chosen_u, rate):+.3f} ({len(rate):,} placements); the coolest candidate's u_cpu was "
          f"{np.mean(chosen_u - coolest_u):.3f} below the chosen one's on the mean "
          f"({np.mean(chosen_u - coolest_u > 0.1):.0%} of placements by more than 0.1)")


if __name__ == "__main__":
    main()
