"""Does placing a pod where it does not outlive its node's other pods beat the blend? (issue 9: a lever
the score lacks.)

    python benchmarks/lifetime_term.py --scenario dlrm-small --days 21:27 --seeds 2 --oracle 0.3,1 \\
        --shape 0.3,1 --workers 2

A node the autoscaler can remove is one whose pods have left. The blend
(``static-weights:w=1/0/0/0:tau=0.4:frag=0.25``) spreads pods by observed CPU and knows nothing of how
long they will run, so a short pod lands on a node that was about to empty as readily as on one that
holds pods for days, and keeps the first one up. This adds a penalty to the blend's score (scaled to
[0, 1] over the candidates) for how far the pod would extend its node's life: with ``e`` the pod's
expected end and ``E`` the latest expected end of the pods already on the node (now, for an empty
node), the penalty is ``lam x min(max(e - max(E, now), 0) / horizon, 1)``. Pods that end before their
node's others cost nothing wherever they go, so short pods join long-lived nodes and leave the emptying
ones alone (lifetime-aligned placement, as Google's LAVA does for VMs).

Three sources of the expected end:

- ``--oracle LAM``: the run's own ground truth, each pod's start plus the time it will run (a hindsight
  bound on the lever: no scheduler knows it).
- ``--shape LAM``: what a scheduler can know, the geometric mean run time of the instances of the pod's
  shape (its requests, GPUs, QoS class and pool) that have run to their end in this run so far (warm-up
  included), told to the policy as each one leaves; a pod of a shape with none finished yet is neutral
  (no penalty anywhere), and a running pod that has run for A, longer than its estimate or of a shape
  with none finished, is expected to run A more (most of the cluster's CPU-hours are pods that run for
  days, and none of them finishes in a run).
- ``--app LAM``: the same, grouped by the pod's app. On the mixed scenarios this is not what a
  scheduler could know: a batch pod's app is the openb row it copies, lifetime included, so the estimate
  of every batch pod of an app seen before is its exact run time (the oracle's, for those pods).

Each (day, seed) is one run of the day after the scenario's warm-up, every variant on the same days and
seeds; the table is ``daily.print_table``'s (the objective's cost, the paired difference to the blend with its
95% t interval, and the parts the cost trades).
"""

from __future__ import annotations

import argparse
from types import MethodType

import numpy as np

from daily import BLEND, add_arguments, compare, day_span, days_of, metrics, numbers
from td3sched.run import run_simulation


def estimate_keys(w, source: str) -> np.ndarray:
    """Each pod's group for the estimate: its app, or its shape (requests, GPUs, QoS and pool)."""
    if source == "app":
        return np.asarray(w.app)
    shape = np.column_stack([w.request, w.gpu_count, w.gpu_milli, w.qos, w.pool])
    return np.unique(shape, axis=0, return_inverse=True)[1].ravel()


class Lifetimes:
    """Each pod's expected end, from the run's ground truth (``source`` "oracle") or from the finished
    instances of its group, "app" or "shape" (``estimate_keys``; told through ``finished``)."""

    def __init__(self, source: str):
        self.oracle = source == "oracle"
        self.source = source
        self.sim = None
        self.key = self.log_sum = self.count = None

    def attach(self, sim) -> None:
        self.sim = sim
        if not self.oracle:
            self.key = estimate_keys(sim.w, self.source)
            n = int(self.key.max()) + 1
            self.log_sum, self.count = np.zeros(n), np.zeros(n)

    def finished(self, pod: int) -> None:
        if self.oracle:
            return
        k = self.key[pod]
        self.log_sum[k] += np.log(max(float(self.sim.w.duration_s[pod]), 1.0))
        self.count[k] += 1

    def run_time(self, pods: np.ndarray) -> np.ndarray:
        """Expected full run time of ``pods`` (NaN: not known)."""
        if self.oracle:
            return self.sim.remaining[pods]
        keys = self.key[pods]
        n = self.count[keys]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, np.exp(self.log_sum[keys] / np.maximum(n, 1)), np.nan)

    def node_ends(self, now: float, size: int) -> np.ndarray:
        """The latest expected end of each node's running pods (``now`` for a node with none)."""
        sim = self.sim
        running = sim.running_pods
        n = running.n
        pods, nodes = running.pods[:n], running.node[:n]
        ends = sim.started[pods] + self.run_time(pods)
        if not self.oracle:  # a pod that has run for A is expected to run about A more (Lindy's rule)
            ends = np.fmax(ends, 2.0 * now - sim.started[pods])
        out = np.full(size, now)
        np.maximum.at(out, nodes, np.maximum(ends, now))
        return out

    def pod_end(self, pod: int, now: float) -> float:
        if self.oracle:
            return now + float(self.sim.remaining[pod])
        return now + float(self.run_time(np.array([pod]))[0])


def lifetime_penalty(lam: float, source: str, horizon_s: float):
    """``wrap_policy`` and ``on_simulation`` for ``run_simulation``: the blend's scores minus the
    penalty for extending a node's life."""
    lifetimes = Lifetimes(source)

    def wrap(policy, world, spec):
        plain = policy.score_nodes
        plain_released = policy.released

        def score_nodes(self, pod, nodes, cluster, u):
            s = plain(pod, nodes, cluster, u)
            end = lifetimes.pod_end(pod.index, pod.time_s)
            if np.isnan(end):
                return s  # an app with no instance finished yet: neutral
            node_end = lifetimes.node_ends(pod.time_s, cluster.size)[nodes]
            with np.errstate(invalid="ignore"):
                extension = np.where(np.isinf(end) & np.isinf(node_end), 0.0, end - node_end)
            return s - lam * np.clip(extension / horizon_s, 0.0, 1.0)

        def released(self, pod, node, cluster, reason="departure"):
            plain_released(pod, node, cluster, reason)
            if reason == "departure":
                lifetimes.finished(pod.index)

        # the simulator tells a policy of releases only when its class overrides ``released``
        policy.__class__ = type(f"Lifetime{type(policy).__name__}", (type(policy),), {"released": released})
        policy.score_nodes = MethodType(score_nodes, policy)
        return policy

    return wrap, lifetimes.attach


def rank_estimates(scenario: str, day: int, seed: int, history_days: float = 3.0) -> None:
    """How well each group's estimate ranks the run times of one day's arrivals: the geometric mean run
    time of the group's pods that ended (by the trace) in the ``history_days`` before the day, against
    each arriving pod's own; printed per group with the share of arrivals whose group had a finished pod."""
    from scipy.stats import spearmanr

    from td3sched.scenario import load_scenario

    w = load_scenario(scenario, []).build(seed).workload
    run, arrival = np.asarray(w.duration_s, dtype=float), np.asarray(w.arrival_s, dtype=float)
    start = day * 86400.0
    arriving = np.flatnonzero((arrival >= start) & (arrival < start + 86400.0) & np.isfinite(run))
    ended = np.flatnonzero((arrival + run < start) & (arrival + run >= start - history_days * 86400.0))
    print(f"the run times of day {day}'s {len(arriving):,} arrivals (seed {seed}) against their group's "
          f"estimate from the pods that ended in the {history_days:g} days before:")
    for source in ("app", "shape"):
        key = estimate_keys(w, source)
        n = np.bincount(key[ended], minlength=key.max() + 1)
        log_sum = np.bincount(key[ended], np.log(np.maximum(run[ended], 1.0)), minlength=key.max() + 1)
        known = arriving[n[key[arriving]] > 0]
        rho = spearmanr(log_sum[key[known]] / n[key[known]], run[known]).correlation
        print(f"  {source}: {len(known) / len(arriving):.1%} with an estimate, Spearman {rho:+.3f}")


def one(job: tuple) -> tuple:
    scenario, day, seed, label, lam, source, horizon_s = job
    wrap, attach = lifetime_penalty(lam, source, horizon_s) if lam else (None, None)
    record = run_simulation(scenario, BLEND, seed, "d", [day_span(day)], wrap_policy=wrap, on_simulation=attach)
    return label, day, seed, metrics(record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--oracle", default="0.3,1", help="penalty strengths with the true run times ('' for none)")
    parser.add_argument("--app", default="", help="penalty strengths with the apps' estimates ('' for none)")
    parser.add_argument("--shape", default="0.3,1", help="penalty strengths with the shapes' estimates ('' for none)")
    parser.add_argument("--horizon-h", type=float, default=1.0, help="an extension this long or longer costs LAM")
    parser.add_argument("--rank-only", action="store_true",
                        help="print how well the estimates rank the first day's run times (seed 1), and stop")
    args = parser.parse_args()
    days = days_of(parser, args)
    if not args.horizon_h > 0:
        parser.error(f"--horizon-h {args.horizon_h}: expected a positive number of hours")
    if args.rank_only:
        rank_estimates(args.scenario, days[0], 1)
        return
    horizon_s = args.horizon_h * 3600.0
    variants = [("the blend", 0.0, "", horizon_s)]
    for source in ("oracle", "app", "shape"):
        variants += [(f"{source} {v:g}", v, source, horizon_s) for v in numbers(parser, getattr(args, source), source)]
    compare(args, days, variants, one, setting=f", horizon {args.horizon_h:g} h")


if __name__ == "__main__":
    main()
