"""Can a critic learn, from what it is shown, how a decision's action changes the return? (issue 9,
section 3: a critic that can hear one placement.)

    python benchmarks/branch_learnability.py                       # tiny's train span, ~10 min on 2 cores
    python benchmarks/branch_learnability.py --states 600 --windows 2   # a quick look

Counterfactual branches (``rl.counterfactual``) give, at ``--states`` decisions over ``--windows``
6-hour windows of the train span (walked with uniformly random actions, as training's warm-up),
``--actions`` uniformly random actions each and their returns over ``--horizon`` simulated seconds
under common random numbers, all branches continued by one fixed policy (equal weights, tau 0), so
that the returns differ by the first action alone. The target is each state's returns centred over
its actions (the critic's branch loss, ``TD3Config.branch_every``). A small MLP (the critic's shape)
learns it from growing numbers of states and is scored on held-out states (the last fifth, never
trained on) by the correlation of its centred prediction with the centred returns. Two inputs:

- ``obs+action``: the observation and the score arguments (weights, tau): what TD3's critic sees;
- ``obs+action+chosen``: the same plus the utilisation (CPU, memory, disk IO, network, pod included)
  of the node the action's score ranks first: the placement itself.

If the first stays low however many states it learns from while the second rises, the observation
and the weights do not tell which node an action picks, and the critic cannot hear a placement
through them; a critic (or actor) that reads the candidate nodes can.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

from td3sched.policy.static_weights import weighted_closeness
from td3sched.rl.actions import LOGIT_LIMIT, decode
from td3sched.rl.diagnose import HOLD_SPREAD
from td3sched.rl.env import ClusterSchedulingEnv


def collect(args) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(args.seed)
    fixed = HOLD_SPREAD[:5].copy()
    obs_l, args_l, chosen_l, returns_l = [], [], [], []
    env = ClusterSchedulingEnv("tiny", "train", 6.0, "full")
    per_window = -(-args.states // args.windows)
    started = time.perf_counter()
    try:
        for window in range(args.windows):
            obs, _ = env.reset(seed=args.seed + window)
            taken, step = 0, 0
            while taken < per_window:
                if step % args.every == 0:
                    actions = rng.uniform(-LOGIT_LIMIT, LOGIT_LIMIT, (args.actions, 5)).astype(np.float32)
                    u = env.pending_utilisation()
                    decoded = [decode(a, "full") for a in actions]
                    chosen = np.array([u[int(np.argmax(weighted_closeness(u, d.weights, d.tau)))] for d in decoded])
                    branches = env.branches(actions, args.horizon, lambda o: fixed, workers=args.workers)
                    obs_l.append(obs)
                    args_l.append([np.r_[d.weights, d.tau] for d in decoded])
                    chosen_l.append(chosen)
                    returns_l.append([b.discounted() for b in branches])
                    taken += 1
                obs, _, terminated, truncated, _ = env.step_logits(rng.uniform(-LOGIT_LIMIT, LOGIT_LIMIT, 5))
                step += 1
                if terminated or truncated:
                    break
            print(f"window {window + 1}/{args.windows}: {len(obs_l)} states, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
    finally:
        env.close()
    return {"obs": np.array(obs_l, np.float32), "args": np.array(args_l, np.float32),
            "chosen": np.array(chosen_l, np.float32), "returns": np.array(returns_l, np.float64)}


def fit(x_state, x_action, returns, train_idx, test_idx, steps: int, seed: int) -> float:
    """Held-out correlation of a critic-shaped MLP trained on the centred returns of ``train_idx``."""
    torch.manual_seed(seed)
    mean, std = x_state[train_idx].mean(0), x_state[train_idx].std(0) + 1e-6
    s = torch.from_numpy(((x_state - mean) / std).astype(np.float32))
    a = torch.from_numpy(x_action.astype(np.float32))
    k = a.shape[1]
    target = returns - returns.mean(axis=1, keepdims=True)
    scale = target[train_idx].std() + 1e-12
    y = torch.from_numpy((target / scale).astype(np.float32))
    net = torch.nn.Sequential(torch.nn.Linear(s.shape[1] + a.shape[2], 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.Adam(net.parameters(), lr=3e-4)

    def predict(idx):
        inp = torch.cat([s[idx].unsqueeze(1).expand(-1, k, -1), a[idx]], dim=2)
        q = net(inp).squeeze(-1)
        return q - q.mean(dim=1, keepdim=True)

    gen = np.random.default_rng(seed)
    for _ in range(steps):
        batch = gen.choice(train_idx, size=min(64, len(train_idx)))
        loss = F.mse_loss(predict(batch), y[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        p, t = predict(test_idx).flatten().numpy(), y[test_idx].flatten().numpy()
    return float(p @ t / (np.linalg.norm(p) * np.linalg.norm(t) + 1e-12))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--states", type=int, default=2000)
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--actions", type=int, default=6)
    ap.add_argument("--every", type=int, default=3, help="Decisions between two branched states.")
    ap.add_argument("--horizon", type=float, default=1800.0)
    ap.add_argument("--steps", type=int, default=3000, help="Gradient steps of each fit.")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--save", default=None, help="Also write the branched states to this .npz file.")
    args = ap.parse_args()
    torch.set_num_threads(1)
    data = collect(args)
    if args.save:
        np.savez_compressed(args.save, **data)
    n = len(data["obs"])
    moving = np.ptp(data["returns"], axis=1) > 0
    print(f"{n} states, {moving.mean():.0%} of them with branches that differ; returns' centred RMS "
          f"{np.sqrt(np.mean((data['returns'] - data['returns'].mean(1, keepdims=True)) ** 2)):.2e}")
    test_idx = np.arange(n - n // 5, n)  # the last fifth: later states, never trained on
    inputs = {"obs+action": data["args"],
              "obs+action+chosen": np.concatenate([data["args"], data["chosen"]], axis=2)}
    sizes = [m for m in (100, 250, 500, 1000, 2000, 4000) if m < n - n // 5] + [n - n // 5]
    print("| input | " + " | ".join(f"{m} states" for m in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for name, x_action in inputs.items():
        cells = [f"{fit(data['obs'], x_action, data['returns'], np.arange(m), test_idx, args.steps, args.seed):.3f}"
                 for m in sizes]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
