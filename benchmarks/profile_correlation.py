"""How alike are the usage profiles of a scenario's services? (issue 9: is there a peak to spread beyond siblings?)

    python benchmarks/profile_correlation.py --scenario dlrm-small

The sibling spread keeps the replicas of one service apart because they follow one usage profile and peak
together (docs/results/sibling-term). A score could spread any two pods whose profiles peak together, the
siblings being the case of correlation 1, if different services' profiles were alike. This prints, for the
latency-sensitive apps of the scenario's world (seed ``--seed``): how many there are, how many distinct
profiles they follow (two apps may draw the same trace series), and the quantiles of the pairwise
correlation of their CPU profiles over the days before the test span (what a scheduler could have learnt
from history), with the share of pairs above 0.5 and 0.8.
"""

from __future__ import annotations

import argparse

import numpy as np

from td3sched.scenario import load_scenario


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="dlrm-small")
    ap.add_argument("--seed", type=int, default=1, help="the world's seed")
    args = ap.parse_args()
    scenario = load_scenario(args.scenario)
    world = scenario.build(args.seed)
    workload, profiles = world.workload, world.profiles
    app, profile = np.asarray(workload.app), np.asarray(workload.profile)
    services = np.unique(app[np.asarray(workload.latency_sensitive, dtype=bool)])
    one = [a for a in services if len(np.unique(profile[app == a])) == 1]  # every replica on one profile
    rows = sorted({int(profile[app == a][0]) for a in one})
    history = min(int(scenario.span("test")[0] // profiles.step_s), profiles.slots)
    cpu = profiles.shape[0][rows, :history].astype(np.float64)
    cpu = cpu[cpu.std(axis=1) > 0]
    if len(cpu) < 2:
        raise SystemExit(f"{args.scenario}: {len(services)} latency-sensitive apps, {len(one)} with all replicas on "
                         "one profile: fewer than two profiles to correlate (each pod draws its own)")
    rho = np.corrcoef(cpu)[np.triu_indices(len(cpu), 1)]
    print(f"{args.scenario}, world seed {args.seed}: {len(services)} latency-sensitive apps, {len(one)} with all "
          f"replicas on one profile, following {len(rows)} distinct profiles ({len(cpu)} not constant over the "
          f"{history * profiles.step_s / 86400:g} days before the test span)")
    q = np.quantile(rho, [0.1, 0.5, 0.9, 0.99])
    print(f"pairwise CPU correlation of those profiles, {len(rho)} pairs: quantiles 10% {q[0]:+.3f}, 50% {q[1]:+.3f}, "
          f"90% {q[2]:+.3f}, 99% {q[3]:+.3f}; above 0.5: {np.mean(rho > 0.5):.1%}, above 0.8: {np.mean(rho > 0.8):.1%}")


if __name__ == "__main__":
    main()
