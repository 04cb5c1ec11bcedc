"""A per-node scorer distilled from counterfactual placements: issue 9's second action design, measured.

    python benchmarks/node_scorer.py                                   # tiny: 10 train episodes, 5 test seeds
    python benchmarks/node_scorer.py --scenario dlrm-small --episode-hours 2 --train-episodes 8
    python benchmarks/node_scorer.py --scenario dlrm-small --base static-weights:w=1/0/0/0:tau=0.4:frag=0.25:spread=3 ...

The reference action (weights and tau) orders the nodes by one formula for every node of a decision.
A per-node scorer is a function of each candidate's own features, so it can put a pod on a node no
weights and tau rank first. Whether that is worth a learned actor depends on two things, measured here
in one run:

1. **Collect.** Episodes of the train span under the base score. At every ``--every``-th decision
   the simulator is forked (``ClusterSchedulingEnv.branches``, common random numbers) and the pending
   pod put on ``--candidates`` nodes: the base's own choice, the next nodes of its score and nodes
   drawn at random (``rollout_headroom.node_candidates``), each branch then continued with the base
   for ``--horizon`` simulated seconds. A branch's advantage is its return minus the base choice's.
2. **Fit.** A small network ``f(node features, observation)`` trained so that ``f(node) - f(base's
   choice)`` predicts the advantage (squared error; node features: its four utilisations with the
   pod, their distance from the decision's mean, the base's score of it, and how many of the pod's
   siblings it runs, counted when the base has a sibling spread). The last fifth of the
   decisions is held out: the correlation of predicted and measured advantages says how much of a
   placement's effect a scorer that reads the candidates can know. A ridge regression on the feature
   differences is printed beside it, a check that the network's figure is not its own overfitting.
   With a spread, the same two fits without the siblings column are printed too: what knowing the
   siblings adds.
3. **Evaluate.** Episodes of the test span, for the network and for the ridge regression as ``f``:
   at every decision the pod goes to ``argmax f`` when ``f``
   puts that node more than ``--margin`` (in units of the advantages' standard deviation; repeatable)
   above the base's choice, otherwise where the base puts it; paired with the base on the same episodes.

Printed: the collection's size and time, the hold-out correlation and the share of branches whose
node beat the base's, and per test seed the base's and the scorer's episode_reward with the paired
difference and its 95% interval.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rollout_headroom import base_action, node_candidates, placed_return  # noqa: E402

from td3sched.evaluate.stats import summarize  # noqa: E402
from td3sched.rl.actions import static_score_args  # noqa: E402
from td3sched.rl.env import ClusterSchedulingEnv, episode_return  # noqa: E402


SIBLINGS_COLUMN = 9
"""The node features' column of the pod's siblings on the node (``node_features``)."""


def node_features(u: np.ndarray, base_scores: np.ndarray, siblings: np.ndarray, obs: np.ndarray) -> np.ndarray:
    """[k, 10 + len(obs)]: each feasible node's utilisations with the pod, their distance from the
    decision's mean, the base's score, the pod's siblings on it, and the decision's observation."""
    k = len(u)
    return np.hstack([u, u - u.mean(axis=0), base_scores[:, None], siblings[:, None],
                      np.broadcast_to(obs, (k, len(obs)))]).astype(np.float32)


def collect(env, base, args, rng):
    """Rows (decision id, features of the branch's node, features of the base's choice, advantage)."""
    decisions, nodes_x, base_x, adv = [], [], [], []
    d = 0
    for ep in range(args.train_episodes):
        started = time.perf_counter()
        obs, _ = env.reset(seed=1000 + ep)
        step = 0
        while True:
            if step % args.every == 0:
                u = env.pending_utilisation()
                scores, siblings = env.pending_scores(base)
                if len(u) >= 2:
                    nodes = node_candidates(scores, args.candidates, rng)
                    branches = env.branches(np.repeat(base[None], len(nodes), axis=0), args.horizon, lambda o: base,
                                            workers=args.workers, nodes=nodes)
                    g = np.array([b.discounted() for b in branches])
                    x = node_features(u, scores, siblings, obs)
                    chosen = int(np.argmax(scores))  # the base's choice (the first of tied bests)
                    for n, gk in zip(nodes[1:], g[1:]):
                        decisions.append(d)
                        nodes_x.append(x[n])
                        base_x.append(x[chosen])
                        adv.append(gk - g[0])
                    d += 1
            obs, _, terminated, truncated, _ = env.step_logits(base)
            step += 1
            if terminated or truncated:
                break
        print(f"collect: episode {ep + 1}/{args.train_episodes} ({env.episode.start_s / 3600:.1f}-"
              f"{env.episode.end_s / 3600:.1f} h), {d} decisions branched so far, "
              f"{time.perf_counter() - started:.0f} s", flush=True)
    return np.array(decisions), np.array(nodes_x), np.array(base_x), np.array(adv)


def fit(nodes_x, base_x, adv, train, args):
    """The scorer f (a torch module over standardised features) fitted on the rows ``train``."""
    import torch

    torch.manual_seed(args.seed)
    mean = nodes_x[train].mean(axis=0)
    std = nodes_x[train].std(axis=0) + 1e-6
    scale = float(adv[train].std()) or 1.0
    net = torch.nn.Sequential(torch.nn.Linear(nodes_x.shape[1], 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                              torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-4)
    xa = torch.as_tensor((nodes_x[train] - mean) / std)
    xb = torch.as_tensor((base_x[train] - mean) / std)
    y = torch.as_tensor(adv[train] / scale, dtype=torch.float32)
    gen = torch.Generator().manual_seed(args.seed)
    for _ in range(args.epochs):
        for idx in torch.randperm(len(y), generator=gen).split(256):
            loss = ((net(xa[idx]).squeeze(-1) - net(xb[idx]).squeeze(-1) - y[idx]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    def f(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return net(torch.as_tensor((x - mean) / std, dtype=torch.float32)).squeeze(-1).numpy() * scale

    return f


def ridge(dx: np.ndarray, adv: np.ndarray, train: np.ndarray, alpha: float = 1.0):
    """A linear advantage model ``w . (x_node - x_base)`` (standardised, ridge ``alpha``) fitted on ``train``."""
    scale = dx[train].std(axis=0) + 1e-9
    z = dx[train] / scale
    w = np.linalg.solve(z.T @ z + alpha * np.eye(z.shape[1]), z.T @ adv[train])
    return lambda d: (d / scale) @ w


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's correlation of ``a`` and ``b`` (NaN when either is constant)."""
    return float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="tiny")
    ap.add_argument("--episode-hours", type=float, default=6.0)
    ap.add_argument("--base", default="static-weights:w=0.5/0.25/0/0.25:tau=0",
                    help="The base score, a static-weights spec, with a fragmentation share and a sibling spread "
                         "if it has them (default: tiny's static best, docs/td3.md).")
    ap.add_argument("--train-episodes", type=int, default=10, help="Episodes of the train span to collect from.")
    ap.add_argument("--every", type=int, default=1, help="Branch every N-th decision of a collected episode.")
    ap.add_argument("--candidates", type=int, default=8, help="Nodes tried per branched decision, the base's included.")
    ap.add_argument("--horizon", type=float, default=1800.0, help="Seconds each branch runs.")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--margin", type=float, action="append",
                    help="Leave the base's choice only for a node f puts this many advantage std above it; "
                         "repeat to evaluate several (default: 0 and 1).")
    ap.add_argument("--warmup-h", type=float, default=0.0,
                    help="Start every episode from the cluster the base leaves after this many hours (default 0: empty).")
    ap.add_argument("--test-seeds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", type=Path,
                    help="An .npz of the collection: written after collecting, read instead of collecting if it exists.")
    args = ap.parse_args()
    if args.candidates < 2 or args.every < 1 or args.train_episodes < 1 or args.test_seeds < 1:
        ap.error("--candidates >= 2, --every >= 1, --train-episodes >= 1 and --test-seeds >= 1 expected")
    spec = static_score_args(args.base, None)
    mode = "fragmentation" if spec.fragmentation else "full"
    base = base_action(args.base, mode)
    env_args = {"sibling_spread": spec.spread}
    rng = np.random.default_rng(args.seed)
    print(f"base {args.base}; {args.scenario}, {args.episode_hours:g} h episodes; {args.candidates} nodes per "
          f"branched decision, every {args.every}, horizon {args.horizon:g} s"
          + (f", episodes warmed up for {args.warmup_h:g} h under the base" if args.warmup_h else ""), flush=True)

    if args.warmup_h:
        env_args.update(warmup_hours=args.warmup_h, warmup_score=args.base)
    started = time.perf_counter()
    if args.data is not None and args.data.exists():
        with np.load(args.data) as z:
            decisions, nodes_x, base_x, adv = z["decisions"], z["nodes_x"], z["base_x"], z["adv"]
        print(f"read the collection from {args.data}")
    else:
        env = ClusterSchedulingEnv(args.scenario, "train", args.episode_hours, mode, **env_args)
        try:
            decisions, nodes_x, base_x, adv = collect(env, base, args, rng)
        finally:
            env.close()
        if args.data is not None:
            np.savez(args.data, decisions=decisions, nodes_x=nodes_x, base_x=base_x, adv=adv)
    n_dec = int(decisions.max()) + 1
    print(f"collection: {len(adv)} branches of {n_dec} decisions ({time.perf_counter() - started:.0f} s); "
          f"a node beat the base's choice in {np.mean(adv > 0):.1%} of branches, tied in {np.mean(adv == 0):.1%}; "
          f"advantage std {adv.std():.3g}")
    cut = int(0.8 * n_dec)
    train, held = decisions < cut, decisions >= cut
    f = fit(nodes_x, base_x, adv, train, args)
    linear = ridge(nodes_x - base_x, adv, train)
    for name, rows in (("train", train), ("held out", held)):
        pred = f(nodes_x[rows]) - f(base_x[rows])
        print(f"fit, {name}: correlation of predicted and measured advantage {correlation(pred, adv[rows]):+.3f} "
              f"(ridge {correlation(linear(nodes_x[rows] - base_x[rows]), adv[rows]):+.3f}) over {rows.sum()} branches")
    if spec.spread:  # the same fits blind to the siblings: what knowing them adds
        keep = np.arange(nodes_x.shape[1]) != SIBLINGS_COLUMN
        blind = fit(nodes_x[:, keep], base_x[:, keep], adv, train, args)
        blind_linear = ridge(nodes_x[:, keep] - base_x[:, keep], adv, train)
        pred = blind(nodes_x[held][:, keep]) - blind(base_x[held][:, keep])
        print(f"fit without the siblings, held out: correlation {correlation(pred, adv[held]):+.3f} (ridge "
              f"{correlation(blind_linear(nodes_x[held][:, keep] - base_x[held][:, keep]), adv[held]):+.3f})")
        column = nodes_x[:, SIBLINGS_COLUMN] - base_x[:, SIBLINGS_COLUMN]
        for name, rows in (("more siblings than", column > 0), ("as many siblings as", column == 0),
                           ("fewer siblings than", column < 0)):
            if rows.any():
                print(f"branches to a node with {name} the base's choice: {rows.sum()}, mean "
                      f"advantage {adv[rows].mean():+.3g}, beat the base in {np.mean(adv[rows] > 0):.1%}")

    margins = args.margin or [0.0, 1.0]
    test = ClusterSchedulingEnv(args.scenario, "test", args.episode_hours, mode, **env_args)
    print("| model | margin | seed | window (h) | decisions | moved | base episode_reward | scorer episode_reward | "
          "scorer - base |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    models = {"network": f, "ridge": linear}
    gains = {(m, margin): [] for m in models for margin in margins}
    try:
        for seed in range(1, args.test_seeds + 1):
            test.reset(seed=seed)
            episode = {**vars(test.episode)}
            static = episode_return(test, episode, lambda obs: base)
            for (model, margin), got in gains.items():
                total, steps, moved = scored_return(test, episode, base, models[model],
                                                    margin * adv[train].std())
                got.append(total - static)
                print(f"| {model} | {margin:g} | {seed} | {episode['start_s'] / 3600:.1f}-{episode['end_s'] / 3600:.1f} | "
                      f"{steps} | {moved} | {static:.4f} | {total:.4f} | {total - static:+.4f} |", flush=True)
    finally:
        test.close()
    print()
    for (model, margin), got in gains.items():
        s = summarize(got)
        half = f" ± {s.half:.4f} (95% interval)" if s.half is not None else ""
        print(f"scorer ({model}, margin {margin:g}) - base over {s.n} test seeds: {s.mean:+.4f}{half}")

def scored_return(env, episode, base, f, threshold):
    """The return of ``episode`` with each pod on ``argmax f`` when that beats the base's choice by more
    than ``threshold``; with the number of decisions and of pods moved off the base's choice."""
    steps = moved = 0

    def choose(obs):
        nonlocal steps, moved
        steps += 1
        u = env.pending_utilisation()
        if len(u) < 2:
            return base, None
        scores, siblings = env.pending_scores(base)
        v = f(node_features(u, scores, siblings, obs))
        best, chosen = int(np.argmax(v)), int(np.argmax(scores))
        if best == chosen or v[best] - v[chosen] <= threshold:
            return base, None
        moved += 1
        return base, best

    total = placed_return(env, episode, choose)
    return total, steps, moved


if __name__ == "__main__":
    main()
