"""Does leaving the autoscaler's unneeded nodes alone beat the blend? (issue 9: a lever the score lacks.)

    python benchmarks/drain_term.py --scenario dlrm-small --days 21:27 --seeds 2 --drain 0.3,1,3 \\
        --ramp 1 --workers 2

cluster-autoscaler removes a node once its requested share (the larger of CPU and memory requested over
allocatable; GPUs alone on a GPU node) has stayed under its threshold (0.5) for ten minutes and its pods
fit elsewhere. The blend (``static-weights:w=1/0/0/0:tau=0.4:frag=0.25``) spreads pods by observed CPU, so
it keeps placing pods on such nodes, and they stay. This adds a bonus to the blend's score (scaled to [0, 1]
over the candidates) for the nodes the autoscaler still needs: ``d`` for a node whose requested share
before the pod is at or above the scenario's threshold (``--drain d``), or ``d x min(share / threshold,
1)`` (``--ramp d``), so that the pods go to nodes that are needed anyway and the others drain.

Each (day, seed) is one run of the day after the scenario's warm-up (as ``td3sched rehearse --steps 0``
measures a policy a day at a time), every variant on the same days and seeds. Printed per variant: the
objective's cost summed, the paired difference to the blend per (day, seed) with its 95% t interval, and
the parts the cost trades (node-hours, hours latency-sensitive pods spent above their SLO, the overload
and SLO terms), P99, OOM kills and the scale-down's evictions.
"""

from __future__ import annotations

import argparse
from types import MethodType

import numpy as np

from daily import BLEND, add_arguments, compare, day_span, days_of, metrics, numbers
from td3sched.run import run_simulation
from td3sched.simulator.kernels import requested_utilisation


def needed_bonus(strength: float, ramp: bool):
    """``wrap_policy`` for ``run_simulation``: the blend's scores plus the bonus for needed nodes."""

    def wrap(policy, world, spec):
        threshold = float(world.config.autoscaler.scale_down_utilization_threshold)
        plain = policy.score_nodes

        def score_nodes(self, pod, nodes, cluster, u):
            s = plain(pod, nodes, cluster, u)
            share = requested_utilisation(cluster.requested[nodes], cluster.allocatable[nodes],
                                          cluster.gpu_capacity[nodes], cluster.gpu_used[nodes], np.empty(len(nodes)))
            needed = np.minimum(share / threshold, 1.0) if ramp else (share >= threshold).astype(float)
            return s + strength * needed

        policy.score_nodes = MethodType(score_nodes, policy)
        return policy

    return wrap


def one(job: tuple) -> tuple:
    scenario, day, seed, label, strength, ramp = job
    wrap = needed_bonus(strength, ramp) if strength else None
    return label, day, seed, metrics(run_simulation(scenario, BLEND, seed, "d", [day_span(day)], wrap_policy=wrap))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--drain", default="0.3,1,3", help="bonus strengths of the step form, comma-separated")
    parser.add_argument("--ramp", default="1", help="bonus strengths of the ramp form, comma-separated ('' for none)")
    args = parser.parse_args()
    days = days_of(parser, args)
    variants = [("the blend", 0.0, False)]
    variants += [(f"drain {d:g}", d, False) for d in numbers(parser, args.drain, "drain")]
    variants += [(f"ramp {d:g}", d, True) for d in numbers(parser, args.ramp, "ramp")]
    compare(args, days, variants, one)


if __name__ == "__main__":
    main()
