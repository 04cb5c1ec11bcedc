"""Which way an action points, by horizon: the charges of branches that change one dimension of a base
score, against the base's own branch, from one hour to a day ahead, and what a model's critic says of
the same actions (issue 9).

    python benchmarks/action_horizon.py --scenario dlrm-small --set 'spans.first=[0,14]' --span first \\
        --base static-weights:w=1/0/0/0:tau=0.4:frag=0.25 --action fragmentation --vary tau --values 0.2,0.63,0.8 \\
        --model runs/need-frag-s3

A TD3 trained with ``--gamma-per-hour 0.5`` judges an action by what it costs over the next hour or
two; the month is charged in node-hours over weeks. When the two disagree on the sign of an action's
effect, no critic can learn the month's ranking from that discount. This measures both.

One ``--episode-hours`` window per seed (the env's draw, as training draws them), started after
``--warmup-h`` hours under the base and walked by the base, every action held ``--hold`` seconds. Every
``--every`` simulated seconds the simulator is forked (``rl.counterfactual``, common random numbers):
the base's action, and for each of ``--values`` the base with dimension ``--vary`` set to it, twice:

- *one step*: the changed action for one held step, then the base (what one decision of a held policy
  changes; what its critic is trained on);
- *kept*: the changed action kept for the whole branch (a static score with that value, from that state).

Each branch runs ``--horizon`` simulated seconds; states are branched only where the whole horizon fits
in the window (so ``--episode-hours`` is the branching hours plus the horizon). Printed per value and kind: the mean difference of its
cost from the base branch's, in node-hours, over the first 1, 3, 6, 12 and 24 hours (``--hours``), and over
the cost discounted at ``--gamma-per-hour`` (the training's discount, in node-hours), each
with its 95% interval over the branched states and the share of states where the value costs less. With
``--model`` (repeatable) a line per model: its critic's Q1 of each value's one-step action minus the
base's, at the same states (in the same units), its correlation over states with the one-step
branches' discounted differences, and the model's own mean value of the dimension there. Last, the room
for a choice that follows the state: at each state the kept value (or the base) that cost least over the
last horizon, against the one value that costs least over every state.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
import torch

from td3sched.evaluate.stats import summarize
from td3sched.rl.actions import ACTION_DIMENSIONS, ACTION_MODES, LOGIT_LIMIT, decode, encode, static_score_args
from td3sched.rl.card import ModelError
from td3sched.rl.counterfactual import numpy_actor
from td3sched.rl.env import ClusterSchedulingEnv
from td3sched.rl.model import load_model

FIELDS = {"tau": "tau", "ceiling": "ceiling", "requests": "requests", "balance": "balance", "frag": "fragmentation"}
"""The dimensions ``--vary`` may name, and the ``ScoreArgs`` field each one sets."""


def cost_within(branch, hours: float) -> float:
    """Node-hours a branch was charged within ``hours`` of its fork (its rewards are -cost / max nodes;
    the caller scales)."""
    settled = branch.times_s - branch.start_s <= hours * 3600.0 + 1e-9
    return -float(np.sum(branch.rewards[settled]))


def interval(xs) -> str:
    s = summarize(np.asarray(xs, dtype=np.float64).tolist())
    if s.half is None:
        return f"{s.mean:+.3f}"
    return f"{s.mean:+.3f} [{s.mean - s.half:+.3f}, {s.mean + s.half:+.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="dlrm-small")
    ap.add_argument("--span", default="test")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="A scenario override (repeatable).")
    ap.add_argument("--episode-hours", type=float, default=36.0)
    ap.add_argument("--warmup-h", type=float, default=12.0)
    ap.add_argument("--seeds", type=int, default=1, help="Windows (env seeds 1..N).")
    ap.add_argument("--base", default="static-weights:w=1/0/0/0:tau=0.4:frag=0.25")
    ap.add_argument("--action", default="fragmentation", choices=[m for m in ACTION_MODES if m != "seed"])
    ap.add_argument("--vary", default="tau", choices=sorted(FIELDS))
    ap.add_argument("--values", default="0.2,0.63,0.8", help="Comma-separated values of the varied dimension.")
    ap.add_argument("--hold", type=float, default=600.0, help="Seconds each action holds, in the walk and the branches (the models here were trained at 600).")
    ap.add_argument("--every", type=float, default=7200.0, help="Simulated seconds between two branched states.")
    ap.add_argument("--horizon", type=float, default=86400.0, help="Simulated seconds each branch runs.")
    ap.add_argument("--hours", default="1,3,6,12,24", help="Horizons the costs are summed over, in hours.")
    ap.add_argument("--gamma-per-hour", type=float, default=0.5)
    ap.add_argument("--model", action="append", default=[], help="A model folder whose critic is read (repeatable).")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if args.vary not in ACTION_DIMENSIONS[args.action]:
        ap.error(f"--vary {args.vary}: not a dimension of the {args.action} action {list(ACTION_DIMENSIONS[args.action])}")
    try:
        base_args = static_score_args(args.base, args.action)
        values = [float(v) for v in args.values.split(",") if v]
    except ValueError as exc:
        ap.error(str(exc))
    try:
        models = [load_model(m) for m in args.model]
    except ModelError as exc:
        ap.error(str(exc))
    for m in models:
        if m.action_mode != args.action:
            ap.error(f"--model {m.folder}: action mode {m.action_mode!r}, expected --action's {args.action!r}")
    hours = [float(h) for h in args.hours.split(",") if h]
    if not hours or max(hours) * 3600.0 > args.horizon + 1e-9:
        ap.error(f"--hours {args.hours}: expected horizons within the branches' --horizon ({args.horizon:g} s)")
    base = encode(base_args, args.action, LOGIT_LIMIT)
    changed = np.array([encode(replace(base_args, **{FIELDS[args.vary]: v}), args.action, LOGIT_LIMIT) for v in values])
    field = FIELDS[args.vary]
    print(f"base {args.base}; {args.vary} in {values} (decoded {[round(getattr(decode(a, args.action), field), 4) for a in changed]}); "
          f"hold {args.hold:g} s, a state every {args.every:g} s, branches of {args.horizon:g} s, "
          f"{args.warmup_h:g} h warm-up under the base")
    actors = [numpy_actor(m) for m in models]
    env = ClusterSchedulingEnv(args.scenario, args.span, args.episode_hours, args.action, tuple(args.overrides),
                               action_hold_s=args.hold, warmup_hours=args.warmup_h,
                               warmup_score=args.base if args.warmup_h else None)
    # per state: [value] -> one-step and kept costs at each horizon, discounted returns; the observations
    step_cost, kept_cost, step_disc, kept_disc, observations, own, base_cost = [], [], [], [], [], [], []
    started = time.perf_counter()
    try:
        for seed in range(1, args.seeds + 1):
            obs, _ = env.reset(seed=seed)
            max_nodes = env.max_nodes
            next_t = env.decision_time_s
            print(f"seed {seed}: window {env.episode.start_s / 3600:.1f}-{env.episode.end_s / 3600:.1f} h, "
                  f"max nodes {max_nodes:g}", flush=True)
            while True:
                if env.decision_time_s >= next_t and env.decision_time_s + args.horizon <= env.episode.end_s:
                    one = env.branches(np.vstack([base, changed]), args.horizon, lambda o: base, workers=args.workers)
                    kept = env.branches(changed, args.horizon, None, workers=args.workers)
                    b0 = one[0]
                    base_cost.append([cost_within(b0, h) * max_nodes for h in hours])
                    step_cost.append([[(cost_within(b, h) - cost_within(b0, h)) * max_nodes for h in hours] for b in one[1:]])
                    kept_cost.append([[(cost_within(b, h) - cost_within(b0, h)) * max_nodes for h in hours] for b in kept])
                    d0 = b0.discounted(gamma_per_hour=args.gamma_per_hour)
                    step_disc.append([(d0 - b.discounted(gamma_per_hour=args.gamma_per_hour)) * max_nodes for b in one[1:]])
                    kept_disc.append([(d0 - b.discounted(gamma_per_hour=args.gamma_per_hour)) * max_nodes for b in kept])
                    observations.append(obs)
                    own.append([getattr(decode(act(obs), args.action), field) for act in actors])
                    print(f"  state {len(observations)} at {env.decision_time_s / 3600:.2f} h: one step "
                          f"{np.round(np.array(step_cost[-1])[:, -1], 2).tolist()}, kept "
                          f"{np.round(np.array(kept_cost[-1])[:, -1], 2).tolist()} node-hours at {hours[-1]:g} h "
                          f"({time.perf_counter() - started:.0f} s)", flush=True)
                    next_t = env.decision_time_s + args.every
                obs, _, terminated, truncated, _ = env.step_logits(base)
                if terminated or truncated:
                    break
    finally:
        env.close()
    if not observations:
        raise SystemExit(f"no state branched: a branch of {args.horizon:g} s fits in no {args.episode_hours:g}-hour "
                         "window; expected --episode-hours above --horizon")
    sc, kc, sd, kd = (np.array(x) for x in (step_cost, kept_cost, step_disc, kept_disc))
    n = len(observations)
    print(f"\n{n} states; cost of the value's branch minus the base's, node-hours (negative: the value costs less), "
          f"95% interval over states; 'better' is the share of states where it costs less")
    print("| " + args.vary + " | kind | " + " | ".join(f"{h:g} h" for h in hours)
          + f" | discounted at {args.gamma_per_hour:g}/h | better at {hours[-1]:g} h |")
    print("|---:|---|" + "---:|" * len(hours) + "---:|---:|")
    for i, v in enumerate(values):
        for kind, c, d in (("one step", sc, sd), ("kept", kc, kd)):
            print(f"| {v:g} | {kind} | " + " | ".join(interval(c[:, i, j]) for j in range(len(hours)))
                  + f" | {interval(d[:, i])} | {np.mean(c[:, i, -1] < 0):.0%} |")
    # The room for a choice that depends on the state: among the base and the kept values, the value that costs
    # least at each state (hindsight) against the one value that costs least over all of them.
    final = np.hstack([np.zeros((n, 1)), kc[:, :, -1]])  # the base's column is 0: costs relative to it
    names = [f"{getattr(base_args, field):g} (base)"] + [f"{v:g}" for v in values]
    single = int(np.argmin(final.mean(axis=0)))
    best = final.argmin(axis=1)
    room = final.min(axis=1) - final[:, single]
    base_total = np.array(base_cost)[:, -1]
    print(f"\nkept for {hours[-1]:g} h, the value that costs least: {names[single]} over all states; per state "
          + ", ".join(f"{names[i]} at {np.sum(best == i)}" for i in range(len(names)) if np.any(best == i))
          + f". Choosing per state with hindsight instead of {names[single]}: "
          f"{interval(room)} node-hours a state, {100 * np.mean(room) / np.mean(base_total):+.2f}% of the base's "
          f"{np.mean(base_total):,.0f} node-hours over those {hours[-1]:g} h")
    for m, model in enumerate(models):
        with torch.no_grad():
            x = torch.from_numpy(model.normalizer.normalize(np.asarray(observations, dtype=np.float32)))
            q0 = model.critic.q1(x, torch.from_numpy(np.repeat(base[None], n, axis=0))).numpy().ravel()
            qs = [model.critic.q1(x, torch.from_numpy(np.repeat(a[None], n, axis=0))).numpy().ravel() - q0 for a in changed]
        print(f"\nmodel {model.folder}: its own {args.vary} at these states {np.mean([o[m] for o in own]):.3f} (mean)")
        print(f"| {args.vary} | critic Q1 - base's (x max nodes; + is better) | the one-step branches' discounted return - base's "
              f"| correlation over states |")
        print("|---:|---:|---:|---:|")
        for i, v in enumerate(values):
            q = qs[i] * max_nodes
            r = -sd[:, i]  # a return difference: + is better, as Q
            corr = float(np.corrcoef(q, r)[0, 1]) if n > 2 and q.std() > 0 and r.std() > 0 else float("nan")
            print(f"| {v:g} | {interval(q)} | {interval(r)} | {corr:+.2f} |")


if __name__ == "__main__":
    main()
