"""Target-policy-smoothing noise, unscaled (0.2, clip 0.5) against scaled to the pre-activation
bound as sfujim/TD3 scales by max_action (1.0, clip 2.5), in the short run of
tests/rl/test_train.py: 3,000 steps on tiny's 6-hour windows, then the deterministic actor and
uniformly random actions on the same evaluation windows. Prints the paired difference of the
returns (learned - random; positive: the actor is better) for each setting.

    python benchmarks/smoothing_ablation.py [--seed 1] [--windows 6]

Run the two settings side by side (two processes) for a fair comparison of their time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import numpy as np


def one(policy_noise: float, noise_clip: float, seed: int, windows: int) -> str:
    from td3sched.rl.env import episode_return
    from td3sched.rl.observation import OBSERVATION_SIZE
    from td3sched.rl.td3 import TD3, TD3Config
    from td3sched.rl.train import TrainSettings

    env = TrainSettings("tiny", seed=seed, episode_hours=6.0).make_env()
    config = TD3Config(hidden=(64, 64), batch_size=64, learning_rate=1e-3, gamma=0.9, learning_starts=500,
                       buffer_size=3000, policy_noise=policy_noise, noise_clip=noise_clip)
    agent = TD3(OBSERVATION_SIZE, config, seed=seed)
    agent.learn(env, 3000)
    env.reset(seed=100)
    drawn = []
    for _ in range(windows):
        drawn.append(dict(env.state_dict()["episode"]))
        env.reset()

    rng = np.random.default_rng(0)
    learned = np.array([episode_return(env, w, agent.predict) for w in drawn])
    random = np.array([episode_return(env, w, lambda _: rng.uniform(-5, 5, 5).astype(np.float32)) for w in drawn])
    d = learned - random
    return (f"smoothing {policy_noise:g} clip {noise_clip:g} seed {seed}: learned - random {d.mean():+.3f} "
            f"(standard error {d.std(ddof=1) / np.sqrt(len(d)):.3f}, {len(d)} windows)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--child", nargs=2, type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(one(args.child[0], args.child[1], args.seed, args.windows))
        return
    procs = [subprocess.Popen([sys.executable, __file__, "--child", str(n), str(c), "--seed", str(args.seed),
                               "--windows", str(args.windows)], stdout=subprocess.PIPE, text=True)
             for n, c in ((0.2, 0.5), (1.0, 2.5))]
    for p in procs:
        out, _ = p.communicate()
        print(out.strip())


if __name__ == "__main__":
    main()
