"""Does keeping an app's replicas apart beat the blend? (issue 9: a lever the score lacks.)

    python benchmarks/sibling_term.py --scenario dlrm-small --days 21:27 --seeds 2 --spread 0.1,0.3,1 \\
        --workers 2

On the dlrm scenarios the replicas of one service follow the same usage (docs/simulator.md: all replicas
of an app follow the same Bitbrains VM), so two of them on one node peak together. The blend
(``static-weights:w=1/0/0/0:tau=0.4:frag=0.25``) reads each node's observed usage and not whose pods make
it: a node holding a replica looks as cool as any other between the service's peaks. This adds a penalty to
the blend's score (scaled to [0, 1] over the candidates) for the pod's siblings already on a node:
``lam x n / (n + 1)`` for ``n`` running pods of the pod's app there, so that replicas spread and their peaks
land on different nodes. A scheduler knows a pod's app (its owner or labels), so this is information a
real one has; kube-scheduler's default topology spreading does the same by node.

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


def sibling_penalty(lam: float):
    """``wrap_policy`` and ``on_simulation`` for ``run_simulation``: the blend's scores minus the penalty
    for the pod's siblings on each node."""
    held = {}

    def wrap(policy, world, spec):
        plain = policy.score_nodes
        app = np.asarray(world.workload.app)

        def score_nodes(self, pod, nodes, cluster, u):
            s = plain(pod, nodes, cluster, u)
            running = held["sim"].running_pods
            n = running.n
            mine = running.node[:n][app[running.pods[:n]] == app[pod.index]]
            siblings = np.bincount(mine, minlength=cluster.size)[nodes]
            return s - lam * siblings / (siblings + 1.0)

        policy.score_nodes = MethodType(score_nodes, policy)
        return policy

    return wrap, lambda sim: held.__setitem__("sim", sim)


def one(job: tuple) -> tuple:
    scenario, day, seed, label, lam, overrides = job
    wrap, attach = sibling_penalty(lam) if lam else (None, None)
    record = run_simulation(scenario, BLEND, seed, "d", [day_span(day), *overrides], wrap_policy=wrap,
                            on_simulation=attach)
    return label, day, seed, metrics(record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--spread", default="0.1,0.3,1", help="penalty strengths, comma-separated")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a scenario override for every run (a variant of the scenario), repeatable")
    args = parser.parse_args()
    days = days_of(parser, args)
    strengths = numbers(parser, args.spread, "spread")
    if not strengths or not all(v > 0 for v in strengths):
        parser.error(f"--spread {args.spread!r}: expected positive strengths")
    overrides = tuple(args.set)
    compare(args, days, [("the blend", 0.0, overrides)] + [(f"spread {v:g}", v, overrides) for v in strengths], one,
            setting="".join(f", --set {o}" for o in overrides))


if __name__ == "__main__":
    main()
