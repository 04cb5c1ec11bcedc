"""Training speed: our TD3 against Stable-Baselines3's TD3, side by side in one process.

Both train on the same env (``td3sched/ClusterScheduling-v0``: the same scenario, span, episode
length and seed, hence the same episodes during the warm-up) with the same networks (an actor and
twin critics, ReLU MLPs of 256-256), batch (256), one gradient step per env step, policy delay 2,
learning rate, gamma, tau, replay capacity and warm-up, on the CPU with the same number of torch
threads. SB3 gets the same running observation normalisation as ours (``VecNormalize``, observations
only, clipped at 10, normalised when sampled) and the same noises (ours are in units of the [-5, 5]
pre-activations, SB3's of the env's [-1, 1] action box: divided by 5). One difference remains in the work:
our critics read the action squashed (softmax weights, sigmoid tau), SB3's read it as it is; a few
element-wise ops on [256, 5]. The script checks that both runs have the same numbers of parameters
and of actor and critic updates. Goal (issue: training speed): ours at least 2x SB3's env steps/s.

    python benchmarks/bench_train.py [--scenario tiny] [--episode-hours 6] [--steps 1500]
                                     [--learning-starts 500] [--repeats 3] [--threads 1]

Runs alternate, ours first then SB3 first (ours, SB3, SB3, ours, ours, SB3, ...), so both see the
same load on a shared machine; the ratio of the medians is the figure to read, the absolute steps/s
move with the load. Columns:

``train steps/s``      env steps per wall second after the warm-up, from the start of the first env
                       step whose transition is followed by a gradient step to the end of ``learn``
                       (each such step: act, env step, store, one gradient step): the headline.
``train steps/cpu-s``  the same steps per CPU second of the process (all its threads): steadier
                       than wall time when other jobs take the cores.
``total steps/s``      the whole ``learn`` call, warm-up included (random actions, no gradient steps).
``env ms/step``        wall time inside the env's ``step``/``reset`` per step after the warm-up (the
                       simulator: the same for both); ``agent ms/step`` is the rest (acting, storing,
                       normalising, sampling, the gradient step).

Exits non-zero only on errors; missing the goal is printed, not fatal.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import gymnasium as gym
import numpy as np
import torch

GOAL_RATIO = 2.0


class StepClock(gym.Wrapper):
    """Times the env: wall time inside ``step``/``reset``, and the moment ``step`` number
    ``mark_step + 1`` starts (the first step whose transition is followed by a gradient step)."""

    def __init__(self, env, mark_step: int):
        super().__init__(env)
        self.mark_step = mark_step
        self.steps = 0
        self.env_s = 0.0
        self.env_s_at_mark = 0.0
        self.marked_at: float | None = None
        self.marked_cpu_s = 0.0

    def step(self, action):  # SB3: actions in the env's [-1, 1] box
        return self._timed(self.env.step, action)

    def step_logits(self, logits):  # ours: pre-activations (td3sched.rl.train.learn)
        return self._timed(self.env.unwrapped.step_logits, logits)

    def _timed(self, step, action):
        if self.steps == self.mark_step:
            self.marked_at, self.marked_cpu_s = time.perf_counter(), time.process_time()
            self.env_s_at_mark = self.env_s
        t = time.perf_counter()
        out = step(action)
        self.steps += 1
        self.env_s += time.perf_counter() - t
        return out

    def reset(self, **kwargs):
        t = time.perf_counter()
        out = self.env.reset(**kwargs)
        self.env_s += time.perf_counter() - t
        return out


def make_env(args) -> StepClock:
    from td3sched.rl.env import ClusterSchedulingEnv

    env = ClusterSchedulingEnv(args.scenario, args.span, args.episode_hours)
    return StepClock(env, args.learning_starts)


def figures(clock: StepClock, started: float, finished: float, finished_cpu_s: float, args) -> dict:
    if clock.steps != args.steps or clock.marked_at is None:
        raise RuntimeError(f"the run took {clock.steps} env steps: expected {args.steps}")
    train_steps = args.steps - args.learning_starts
    train_s = finished - clock.marked_at
    env_s = clock.env_s - clock.env_s_at_mark
    return {"train_sps": train_steps / train_s, "cpu_sps": train_steps / (finished_cpu_s - clock.marked_cpu_s),
            "total_sps": args.steps / (finished - started),
            "env_ms": 1e3 * env_s / train_steps, "agent_ms": 1e3 * (train_s - env_s) / train_steps}


def work(actor: torch.nn.Module, critic: torch.nn.Module, actor_optimizer, critic_optimizer) -> dict:
    """What a run computed: network sizes and the number of Adam steps of each optimiser."""

    def steps(optimizer) -> int:
        return int(next(iter(optimizer.state.values()))["step"]) if optimizer.state else 0

    return {"actor params": sum(p.numel() for p in actor.parameters()),
            "critic params": sum(p.numel() for p in critic.parameters()),
            "critic updates": steps(critic_optimizer), "actor updates": steps(actor_optimizer)}


def run_ours(args) -> dict:
    from td3sched.rl.observation import OBSERVATION_SIZE
    from td3sched.rl.td3 import TD3, TD3Config
    from td3sched.rl.train import learn

    env = make_env(args)
    config = TD3Config(hidden=args.hidden, batch_size=args.batch_size, learning_rate=args.learning_rate,
                       buffer_size=args.buffer_size, learning_starts=args.learning_starts, policy_frequency=2)
    agent = TD3(OBSERVATION_SIZE, config, seed=args.seed)
    started = time.perf_counter()
    learn(agent, env, args.steps)
    finished, finished_cpu_s = time.perf_counter(), time.process_time()
    env.close()
    return {**figures(env, started, finished, finished_cpu_s, args),
            **work(agent.actor, agent.critic, agent.actor_optimizer, agent.critic_optimizer)}


def run_sb3(args) -> dict:
    from stable_baselines3 import TD3 as SB3TD3
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from td3sched.rl.actions import ACTION_SIZE, LOGIT_LIMIT
    from td3sched.rl.td3 import TD3Config

    ours = TD3Config()
    clock = make_env(args)
    venv = VecNormalize(DummyVecEnv([lambda: clock]), norm_obs=True, norm_reward=False, clip_obs=10.0)
    # SB3 acts in the env's [-1, 1] box: our noises, in units of the [-5, 5] pre-activations, shrink by 5.
    scale = LOGIT_LIMIT
    sigma = np.full(ACTION_SIZE, ours.exploration_noise / scale)
    model = SB3TD3(
        "MlpPolicy", venv, learning_rate=args.learning_rate, buffer_size=args.buffer_size,
        learning_starts=args.learning_starts, batch_size=args.batch_size, tau=ours.tau, gamma=ours.gamma,
        train_freq=1, gradient_steps=1, policy_delay=2, target_policy_noise=ours.policy_noise / scale,
        target_noise_clip=ours.noise_clip / scale, action_noise=NormalActionNoise(np.zeros(ACTION_SIZE), sigma),
        policy_kwargs=dict(net_arch=list(args.hidden)), seed=args.seed, device="cpu", verbose=0)
    started = time.perf_counter()
    model.learn(args.steps)
    finished, finished_cpu_s = time.perf_counter(), time.process_time()
    venv.close()
    return {**figures(clock, started, finished, finished_cpu_s, args),
            **work(model.actor, model.critic, model.actor.optimizer, model.critic.optimizer)}


RUNNERS = {"ours": run_ours, "sb3": run_sb3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="tiny")
    ap.add_argument("--span", default="train")
    ap.add_argument("--episode-hours", type=float, default=6.0)
    ap.add_argument("--steps", type=int, default=1500, help="env steps per run, warm-up included")
    ap.add_argument("--learning-starts", type=int, default=500, help="warm-up steps (random actions)")
    ap.add_argument("--buffer-size", type=int, default=None, help="replay capacity (default: --steps)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--hidden", default="256,256", help="hidden widths of the actor and of each critic")
    ap.add_argument("--learning-rate", type=float, default=3e-4)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each, alternating")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    args.hidden = tuple(int(w) for w in args.hidden.split(","))
    args.buffer_size = args.buffer_size or args.steps
    if not 0 < args.learning_starts < args.steps:
        ap.error(f"--learning-starts {args.learning_starts}: expected between 1 and --steps - 1 ({args.steps - 1})")
    torch.set_num_threads(args.threads)

    import stable_baselines3

    print(f"{args.scenario}/{args.span}, {args.episode_hours:g} h episodes, {args.steps} steps "
          f"({args.learning_starts} warm-up), networks {'-'.join(map(str, args.hidden))}, batch "
          f"{args.batch_size}, torch {torch.__version__} ({args.threads} thread{'s' * (args.threads > 1)}), "
          f"SB3 {stable_baselines3.__version__}")
    columns = (("train_sps", "train steps/s", ",.1f"), ("cpu_sps", "train steps/cpu-s", ",.1f"),
               ("total_sps", "total steps/s", ",.1f"), ("env_ms", "env ms/step", ".2f"),
               ("agent_ms", "agent ms/step", ".2f"))

    def row(label: str, name: str, r: dict) -> str:
        return f"{label:>6} {name:5} " + " ".join(f"{r[key]:>{len(title)}{fmt}}" for key, title, fmt in columns)

    print(f"{'run':>6} {'impl':5} " + " ".join(title for _, title, _ in columns))
    results: dict[str, list[dict]] = {name: [] for name in RUNNERS}
    for repeat in range(args.repeats):
        order = list(RUNNERS) if repeat % 2 == 0 else list(reversed(RUNNERS))
        for name in order:
            results[name].append(RUNNERS[name](args))
            print(row(str(repeat + 1), name, results[name][-1]), flush=True)
    checks = ("actor params", "critic params", "critic updates", "actor updates")
    done = {tuple(r[key] for key in checks) for rs in results.values() for r in rs}
    if len(done) != 1:
        raise RuntimeError(f"the runs did different work ({', '.join(checks)}): {sorted(done)}")
    print("each run: " + ", ".join(f"{value:,} {key}" for key, value in zip(checks, done.pop())))
    median = {name: {key: statistics.median(r[key] for r in rs) for key, _, _ in columns}
              for name, rs in results.items()}
    for name, m in median.items():
        print(row("median", name, m))
    ratio = median["ours"]["train_sps"] / median["sb3"]["train_sps"]
    cpu_ratio = median["ours"]["cpu_sps"] / median["sb3"]["cpu_sps"]
    print(f"ours / SB3, train steps/s (ratio of medians): {ratio:.2f}x (per CPU second: {cpu_ratio:.2f}x); "
          f"goal >= {GOAL_RATIO:g}x: {'met' if ratio >= GOAL_RATIO else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
