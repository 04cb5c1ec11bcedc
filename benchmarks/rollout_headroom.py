"""How much a held action could gain over the best static weights, measured with hindsight (issue 9).

    python benchmarks/rollout_headroom.py                       # tiny's test span, 5 seeds, 10-minute holds
    python benchmarks/rollout_headroom.py --hold 1800 --horizon 7200 --candidates 16
    python benchmarks/rollout_headroom.py --action ceiling --base static-weights:w=0.5/0.25/0/0.25:tau=0:ceiling=0.9
    python benchmarks/rollout_headroom.py --choose node --hold 0 --episode-hours 2 --horizon 1800
    python benchmarks/rollout_headroom.py --scenario openb --action fragmentation --vary frag --warmup-h 12 \
        --episode-hours 2 --base static-weights:w=1/0/0/0:tau=0.4:frag=0.25

A rollout policy (one step of policy improvement over a base policy, Bertsekas): at every held step of
an episode (``ClusterSchedulingEnv(action_hold_s=--hold)``) the simulator is forked into the base
action and ``--candidates - 1`` others (``rl.counterfactual``), each held for one step and then
continued with the base action for ``--horizon`` simulated seconds; the step takes the action whose
branch was charged least (the base on a tie). The branches see the episode's own future (the same
trace and random numbers), so this is a hindsight bound for the held-action design, not a policy a
cluster can run: if it does not beat the base, no policy of weights and tau held for that long can
by much; what it gains is the head-room a learned policy could close.

``--choose node`` asks the same of a per-node scorer, which may put a pod on any feasible node: each
step's branches put its pod (the first of a hold) on the node the base's score chooses, on the next
``(K - 1) / 2`` nodes of that score (rounded up) and on nodes drawn at random from the rest
(``ClusterSchedulingEnv``'s *placing a pod by hand*), each then continued with the base; the step places the
pod where the branch was charged least. With ``--hold 0`` that is every decision.

``--vary`` names the action's dimensions the other candidates draw (``rl.actions.ACTION_DIMENSIONS``;
default: all of them); the rest keep the base's value. ``--vary frag`` asks whether a fragmentation
share chosen per step could beat the base's fixed one, whatever the weights and tau.

Printed per seed (the env's draw of a ``--episode-hours`` window and its random numbers): the base's
episode reward (the static policy as a constant action, which the env runs exactly as static-weights
up to the softmax's floor on a zero weight), the rollout's, and their paired difference with its
95% interval over seeds.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from td3sched.evaluate.stats import summarize
from td3sched.rl.actions import ACTION_DIMENSIONS, ACTION_MODES, LOGIT_LIMIT, action_size, decode, encode, static_score_args
from td3sched.rl.env import ClusterSchedulingEnv, episode_return


SHARE_FIELDS = {"tau": "tau", "ceiling": "ceiling", "requests": "requests", "balance": "balance",
                "frag": "fragmentation"}
"""The action's dimensions past the weights, by name, and the ``ScoreArgs`` field each decodes to: the
mean a rollout chose of each one it varies is printed."""


def base_action(spec: str, mode: str = "full") -> np.ndarray:
    """The pre-activations of a static-weights spec's weights and tau (and, for the ceiling mode, its
    hold-back ceiling; none: the box's highest, 1.493), as near as the action box allows."""
    return encode(static_score_args(spec, mode), mode, LOGIT_LIMIT)


def node_candidates(scores: np.ndarray, k: int, rng: np.random.Generator) -> list[int]:
    """The nodes a step's branches try, as indices into its feasible nodes: -1 (the base score's own
    choice, ties broken as the run breaks them), then the next nodes by ``scores`` (half the rest,
    rounded up; the first is skipped when it is the score's unique best, which -1 places already),
    then nodes drawn at random from the others; at most ``k`` in all, fewer on a small decision."""
    order = np.argsort(-scores, kind="stable")
    if len(order) == 1 or scores[order[0]] > scores[order[1]]:
        order = order[1:]
    top = order[: -(-(k - 1) // 2)]
    rest = order[len(top):]
    drawn = rng.choice(rest, size=min(k - 1 - len(top), len(rest)), replace=False) if len(rest) else rest
    return [-1] + [int(n) for n in top] + [int(n) for n in drawn]


def least_charged(branches) -> int:
    """The index of the branch charged least (0, the base's, unless another is charged strictly less)."""
    returns = np.array([b.discounted() for b in branches])
    return int(np.argmax(returns)) if returns.max() > returns[0] else 0


def placed_return(env: ClusterSchedulingEnv, episode: dict, choose) -> float:
    """The return of ``episode`` replayed on ``env`` with ``choose(obs) -> (pre-activations, node or None)``."""
    obs, _ = env.reset(options={"episode": episode})
    total = 0.0
    while True:
        action, node = choose(obs)
        obs, reward, terminated, truncated, _ = env.step_logits(action, node=node)
        total += reward
        if terminated or truncated:
            return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="tiny")
    ap.add_argument("--span", default="test")
    ap.add_argument("--episode-hours", type=float, default=6.0)
    ap.add_argument("--seeds", type=int, default=5, help="Episodes (env seeds 1..N).")
    ap.add_argument("--base", default="static-weights:w=0.5/0.25/0/0.25:tau=0",
                    help="The base policy, a static-weights spec; its sibling spread, if any, scores every "
                         "candidate too (default: tiny's static best, docs/td3.md).")
    ap.add_argument("--hold", type=float, default=600.0, help="Seconds each action holds.")
    ap.add_argument("--warmup-h", type=float, default=0.0,
                    help="Start each episode from the cluster the base leaves after this many hours (default 0: empty).")
    ap.add_argument("--horizon", type=float, default=3600.0, help="Seconds each branch runs.")
    ap.add_argument("--candidates", type=int, default=8, help="Actions tried per step, the base's included.")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--action", default="full", choices=[m for m in ACTION_MODES if m != "seed"],
                    help="The action design: full (weights and tau) or ceiling (and the hold-back ceiling).")
    ap.add_argument("--vary", default="",
                    help="Comma-separated action dimensions the other candidates draw (default: all); the rest keep "
                         "the base's values. E.g. frag, with --action fragmentation.")
    ap.add_argument("--choose", default="action", choices=("action", "node"),
                    help="What the branches try: other actions (default) or other nodes for the step's pod.")
    args = ap.parse_args()
    if args.candidates < 2:
        ap.error(f"--candidates {args.candidates}: expected at least 2 (the base and one other)")
    if args.choose == "node" and args.action != "full":
        ap.error(f"--choose node with --action {args.action}: nodes are chosen under the full action's score only")
    try:
        base = base_action(args.base, args.action)
    except ValueError as exc:
        ap.error(str(exc))
    dims = ACTION_DIMENSIONS[args.action]
    vary = [d for d in args.vary.split(",") if d] or list(dims)
    unknown = [d for d in vary if d not in dims]
    if unknown:
        ap.error(f"--vary {args.vary}: {unknown} not among the {args.action} action's dimensions {list(dims)}")
    varied = np.array([d in vary for d in dims])
    score_args = decode(base, args.action)
    spread = static_score_args(args.base, None).spread  # fixed by the env, as a card fixes it: not an action
    ceiling = f", ceiling {score_args.ceiling:.4f}" if score_args.ceiling is not None else ""
    print(f"base {args.base}: pre-activations {np.round(base, 3).tolist()} (weights "
          f"{np.round(score_args.weights, 5).tolist()}, tau {score_args.tau:.4f}{ceiling}); hold {args.hold:g} s, horizon "
          f"{args.horizon:g} s, {args.candidates} {'nodes' if args.choose == 'node' else 'candidates'} per step"
          + (f" varying {', '.join(vary)}" if args.choose == "action" else "")
          + (f", episodes warmed up for {args.warmup_h:g} h under the base" if args.warmup_h else ""))
    shown = [d for d in vary if d in SHARE_FIELDS] if args.choose == "action" else []
    print("| seed | window (h) | steps | base episode_reward | rollout episode_reward | rollout - base | base chosen | "
          + "".join(f"{d} chosen (mean) | " for d in shown) + "wall s |")
    print("|---:|---|---:|---:|---:|---:|---:|" + "---:|" * len(shown) + "---:|")
    env = ClusterSchedulingEnv(args.scenario, args.span, args.episode_hours, args.action, action_hold_s=args.hold,
                               warmup_hours=args.warmup_h, warmup_score=args.base if args.warmup_h else None,
                               sibling_spread=spread)
    gains = []
    try:
        for seed in range(1, args.seeds + 1):
            started = time.perf_counter()
            env.reset(seed=seed)
            episode = {**vars(env.episode)}
            static = episode_return(env, episode, lambda obs: base)
            rng = np.random.default_rng([seed, 29])
            steps = kept = 0
            chosen = {d: [] for d in shown}

            def choose(obs):
                nonlocal steps, kept
                drawn = rng.uniform(-LOGIT_LIMIT, LOGIT_LIMIT, (args.candidates - 1, action_size(args.action)))
                others = np.where(varied, drawn, base)
                candidates = np.vstack([base, others])
                branches = env.branches(candidates.astype(np.float32), args.horizon, lambda o: base,
                                        workers=args.workers)
                best = least_charged(branches)
                steps, kept = steps + 1, kept + (best == 0)
                picked = decode(candidates[best], args.action)
                for d in shown:
                    chosen[d].append(getattr(picked, SHARE_FIELDS[d]))
                return candidates[best].astype(np.float32), None

            def choose_node(obs):
                nonlocal steps, kept
                nodes = node_candidates(env.pending_scores(base)[0], args.candidates, rng)
                branches = env.branches(np.repeat(base[None], len(nodes), axis=0), args.horizon, lambda o: base,
                                        workers=args.workers, nodes=nodes)
                best = least_charged(branches)
                steps, kept = steps + 1, kept + (best == 0)
                return base, (nodes[best] if best else None)

            rollout = placed_return(env, episode, choose_node if args.choose == "node" else choose)
            gains.append(rollout - static)
            print(f"| {seed} | {episode['start_s'] / 3600:.1f}-{episode['end_s'] / 3600:.1f} | {steps} | {static:.4f} | "
                  f"{rollout:.4f} | {rollout - static:+.4f} | {kept / max(steps, 1):.0%} | "
                  + "".join(f"{np.mean(chosen[d]):.3f} | " for d in shown) +
                  f"{time.perf_counter() - started:.0f} |", flush=True)
    finally:
        env.close()
    s = summarize(gains)
    half = f" ± {s.half:.4f} (95% interval)" if s.half is not None else ""
    print(f"\nrollout - base over {s.n} seeds: {s.mean:+.4f}{half}")


if __name__ == "__main__":
    main()
