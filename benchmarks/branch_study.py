"""How much one decision's action moves the return, with and without common random numbers, and
how well a critic hears it (issue 9, section 3: variance reduction).

    python benchmarks/branch_study.py                                     # tiny's test span, no model
    python benchmarks/branch_study.py --models runs/branch-ablation/td3/weights-tau-p1-seed1 \
        --models runs/branch-ablation/td3/weights-tau-p1-b10-seed1 --horizons 1800

At ``--states`` decisions of one window (every ``--every``-th), the simulator is forked into
``--actions`` uniformly random actions (``rl.diagnose.branch_study``), twice: the second replicate
draws the tie-breaking after the fork from a fresh generator. Printed per horizon (and per model,
whose actor walks the window and continues the branches; without one, equal weights at tau 0):

- the action's share of the pooled returns' variance: what a critic regressing on returns hears of
  the action, beside the states' values and the noise (the audit measured 0.72% for the full
  gamma-0.99 return on tiny);
- its share of the variance of the returns centred per state (common random numbers): the target
  of the critic's branch loss (``TD3Config.branch_every``), where the state's value cancels;
- with a model, the correlation of its critic's centred Q1 with the centred returns: 1 when the
  critic ranks a state's actions as the branches did.
"""

from __future__ import annotations

import argparse
import time

from td3sched.rl.diagnose import branch_study
from td3sched.rl.model import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="tiny")
    ap.add_argument("--span", default="test")
    ap.add_argument("--episode-hours", type=float, default=6.0)
    ap.add_argument("--seed", type=int, default=1, help="Seed of the window and of the random actions.")
    ap.add_argument("--states", type=int, default=30)
    ap.add_argument("--actions", type=int, default=6)
    ap.add_argument("--every", type=int, default=5, help="Decisions between two branched states.")
    ap.add_argument("--horizons", default="600,1800,7200", help="Branch horizons in simulated seconds.")
    ap.add_argument("--models", action="append", default=[], help="A model folder (repeatable); none: no model.")
    ap.add_argument("--around-actor", type=float, default=None, help="Draw the branches' actions as the actor's "
                    "plus noise of this std (training's TD3Config.branch_noise is 1.5); default: uniform.")
    ap.add_argument("--hold", action="store_true", help="Each branch holds its action for the whole horizon "
                    "(the action of a policy that decides once per horizon) instead of one decision.")
    ap.add_argument("--action-hold", type=float, default=0.0, help="Without a model: seconds every action holds "
                    "in the walk and the branches (a model's card says its own).")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    models = [load_model(m) for m in args.models] or [None]
    print("| continuation | actions | horizon (s) | states x actions | return std | action RMS | noise RMS | action share of "
          "returns | action share of centred returns | critic corr | critic centred-Q RMS | wall s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model in models:
        for horizon in (float(h) for h in args.horizons.split(",")):
            started = time.perf_counter()
            s = branch_study(model, args.scenario, args.span, args.episode_hours, args.seed, args.states,
                             args.actions, horizon, args.every, workers=args.workers,
                             around_actor=args.around_actor, hold=args.hold,
                             action_hold_s=args.action_hold)
            corr = f"{s.critic_corr:.3f}" if s.critic_corr is not None else ""
            rms = f"{s.critic_action_rms:.2e}" if s.critic_action_rms is not None else ""
            print(f"| {s.continuation} | {s.actions_drawn} | {horizon:.0f} | {s.states} x {s.actions} | {s.return_std:.2e} | "
                  f"{s.action_rms:.2e} | {s.noise_rms:.2e} | {s.action_share_returns:.1%} | "
                  f"{s.action_share_differences:.1%} | {corr} | {rms} | {time.perf_counter() - started:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
