"""How much of the tail does one placement cause? (issue 9: a critic that can hear one placement.)

    python benchmarks/placement_effect.py --scenario dlrm-small --days 21:23 --windows 4 --states 25 \\
        --ls-states 25 --alternatives 3 --horizon-h 6 --workers 2

The critics of ``outcome_scorer.py`` are fitted on what happened to a pod, or to its node's
latency-sensitive pods, after a placement: that mixes the placement's effect with what was there anyway.
The simulator can separate them. At a decision it forks the run (``rl.counterfactual``: common random
numbers) and puts the pod on the node the blend chooses, and in the other branches on ``--alternatives``
other feasible nodes drawn at random; every branch then goes on with the blend for ``--horizon-h`` hours.
The objective's weights are set to the hours latency-sensitive pods spend above their SLO alone
(``reward.slo_hour`` 1, every other weight 0), so a branch's charge is those hours over the horizon, the
whole cluster's, and the difference between two branches is what moving that one pod did to the tail,
nothing else.

Each of ``--windows`` episodes (seeds 1..N) starts at a random time of ``--days`` after a 12-hour warm-up
under the blend and walks on with the blend (the blend's weights, tau and fragmentation share as the
action mode ``fragmentation`` encodes them; the warm-up is the exact blend). Every decision of a
latency-sensitive pod is branched, up to ``--ls-states`` a window, and every ``--every``-th of the others,
up to ``--states`` (a decision needs more feasible nodes than ``--alternatives``). Printed, for latency-sensitive pods and
the others: how often the node a pod goes to changes the tail at all, the effect's size (an alternative's
hours minus the blend's choice's) against the tail itself (the blend's branch's hours over the horizon),
and the rank correlation of the effect with the alternative's CPU utilisation with the pod: how much of
it the node's heat at the placement tells.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from td3sched.rl.actions import LOGIT_LIMIT, encode, static_score_args
from td3sched.rl.env import ClusterSchedulingEnv
from td3sched.version import code_version

BLEND = "static-weights:w=1/0/0/0:tau=0.4:frag=0.25"
SLO_HOURS_ONLY = ["reward.node_hour=0", "reward.fragmentation=0", "reward.overload=0", "reward.pending=0",
                  "reward.oom_kill=0", "reward.slo_breach=0", "reward.slo_hour=1"]
"""The objective's weights that make a run's cost the hours latency-sensitive pods spend above their SLO."""


def rank_corr(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def collect(args) -> dict[str, np.ndarray]:
    first, end = (int(v) for v in args.days.split(":"))
    overrides = [f"spans.effect=[{first},{end}]", *SLO_HOURS_ONLY, *args.overrides]
    env = ClusterSchedulingEnv(args.scenario, "effect", args.episode_h, "fragmentation", overrides=overrides,
                               warmup_hours=12.0, warmup_score=BLEND)
    blend = encode(static_score_args(BLEND, "fragmentation"), "fragmentation", bound=LOGIT_LIMIT)
    rng = np.random.default_rng(args.seed)
    ls_l, chosen_l, alt_l, u_l, k_l = [], [], [], [], []
    started = time.perf_counter()
    try:
        for window in range(args.windows):
            env.reset(seed=args.seed + window)
            ls_of = env.world.workload.latency_sensitive
            taken = {True: 0, False: 0}
            wanted = {True: args.ls_states, False: args.states}
            step = 0
            while taken[True] < wanted[True] or taken[False] < wanted[False]:
                ls = bool(ls_of[env.pending_pod()])
                if (ls or step % args.every == 0) and taken[ls] < wanted[ls]:
                    u = env.pending_utilisation()
                    if len(u) > args.alternatives:
                        others = rng.choice(len(u), args.alternatives, replace=False)
                        branches = env.branches(np.tile(blend, (args.alternatives + 1, 1)), args.horizon_h * 3600.0,
                                                None, workers=args.workers, nodes=(-1, *others.tolist()))
                        hours = np.array([-float(np.sum(b.rewards)) * env.max_nodes for b in branches])
                        ls_l.append(ls)
                        chosen_l.append(hours[0])
                        alt_l.append(hours[1:])
                        u_l.append(u[others, 0])
                        k_l.append(len(u))
                        taken[ls] += 1
                _, _, terminated, truncated, _ = env.step_logits(blend)
                step += 1
                if terminated or truncated:
                    break
            print(f"window {window + 1}/{args.windows}: {len(ls_l)} decisions branched, "
                  f"{time.perf_counter() - started:,.0f} s", flush=True)
    finally:
        env.close()
    return {"ls": np.array(ls_l), "chosen": np.array(chosen_l), "alternatives": np.array(alt_l).reshape(-1, args.alternatives),
            "u_cpu": np.array(u_l).reshape(-1, args.alternatives), "candidates": np.array(k_l)}


def report(d: dict[str, np.ndarray], horizon_h: float) -> None:
    effect = d["alternatives"] - d["chosen"][:, None]  # hours above the SLO: the alternative's minus the blend's node
    print(f"\nhours latency-sensitive pods spent above their SLO over the {horizon_h:g} h after the decision, the pod "
          "on another feasible node minus on the blend's; per decision and alternative")
    print("| pods | decisions | the tail (blend's branch), mean h | any alternative moves it | |effect| mean h "
          "| |effect| p90 h | effect mean h | rank corr. of effect and the node's u_cpu |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, rows in (("latency-sensitive", d["ls"]), ("the others", ~d["ls"]), ("all", np.ones_like(d["ls"]))):
        if not rows.any():
            continue
        e = effect[rows]
        moved = (np.abs(e) > 1e-9).any(axis=1).mean()
        print(f"| {name} | {rows.sum():,} | {d['chosen'][rows].mean():,.2f} | {moved:.0%} | {np.abs(e).mean():.3f} | "
              f"{np.quantile(np.abs(e), 0.9):.3f} | {e.mean():+.3f} | {rank_corr(e.ravel(), d['u_cpu'][rows].ravel()):+.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="dlrm-small")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="A scenario override (repeatable).")
    ap.add_argument("--days", default="21:23", help="FIRST:END, the days the episodes start in")
    ap.add_argument("--episode-h", type=float, default=24.0, help="each window's length (the horizon must fit)")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--states", type=int, default=25, help="decisions of other pods branched a window")
    ap.add_argument("--ls-states", type=int, default=25, help="decisions of latency-sensitive pods branched a window")
    ap.add_argument("--every", type=int, default=50, help="decisions of other pods between two branched ones")
    ap.add_argument("--alternatives", type=int, default=3, help="other feasible nodes a decision's pod is put on")
    ap.add_argument("--horizon-h", type=float, default=6.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2, help="branches run at a time")
    ap.add_argument("--save", default=None, help="Also write the branched decisions to this .npz file.")
    args = ap.parse_args()
    print(f"code version {code_version()}", flush=True)
    t0 = time.perf_counter()
    data = collect(args)
    if args.save:
        np.savez_compressed(args.save, **data)
    report(data, args.horizon_h)
    print(f"\n{time.perf_counter() - t0:,.0f} s")


if __name__ == "__main__":
    main()
