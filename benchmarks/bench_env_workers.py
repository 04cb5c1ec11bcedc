"""Parallel experience collection: training steps/s with 1 and 2 env copies (``rl.workers``), side by side.

Each run is ``td3sched train`` in process (``rl.train.train``) with the shipped held models' settings by
default: 10-minute holds, 24-hour episodes after a 12-hour warm-up under the static score, weights and
tau, penalty 1, 0.5 per simulated hour; on dlrm-small, whose 24-hour episode is seconds of simulation,
so that the simulator is most of a step. Runs alternate (1, 2, 2, 1, 1, 2, ...) so that both see the
same load on a shared machine; the ratio of the medians is the figure to read.

    python benchmarks/bench_env_workers.py [--scenario dlrm-small] [--steps 576] [--repeats 3]
    python benchmarks/bench_env_workers.py --curve --steps 2880 --eval-every 288   # returns against wall time

Columns: ``start s`` is the time before the first step (building the world, the workers' too, and
each copy's first warm-up); ``steps/s`` the training loop's steps per wall second after it (acting,
the simulator, storing, the gradient steps); ``cpu s`` the CPU of the learner's process and of its
workers over the whole run.

``--curve`` trains once with each count and evaluates the deterministic actor every ``--eval-every``
steps on ``--eval-windows`` fixed windows of the train span (the same for both), beside the static
score's return on those windows: the return against the training's wall time (the evaluations' time
left out), and the first time each run's return reaches the static score's.

Exits non-zero only on errors.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from dataclasses import asdict

import numpy as np
import torch


def cpu_s() -> float:
    """CPU seconds of this process and of its children waited for (the workers, once joined)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def settings_and_config(args, workers: int):
    from td3sched.rl.td3 import TD3Config
    from td3sched.rl.train import TrainSettings

    settings = TrainSettings(args.scenario, seed=args.seed, episode_hours=args.episode_hours,
                             action_hold_s=args.hold, warmup_hours=args.warmup_h,
                             warmup_score=args.static if args.warmup_h else None, env_workers=workers)
    config = TD3Config(learning_starts=args.learning_starts, preactivation_penalty=1.0, gamma_per_hour=0.5)
    return settings, config


def run_once(args, workers: int, folder) -> dict:
    from td3sched.rl.train import train

    settings, config = settings_and_config(args, workers)
    started, cpu0 = time.perf_counter(), cpu_s()
    result = train(folder, args.steps, settings, config)
    wall = time.perf_counter() - started
    return {"start_s": wall - result.steps / result.sps, "sps": result.sps, "cpu_s": cpu_s() - cpu0, "wall_s": wall}


def static_logits(spec: str, action_mode: str) -> np.ndarray:
    from td3sched.rl.actions import encode, static_score_args

    return encode(static_score_args(spec, action_mode), action_mode)


def curve(args, workers: int, folder, windows: list[dict], eval_env) -> list[tuple[int, float, float]]:
    """(steps, training wall s, mean return on the windows) at every evaluation."""
    from td3sched.rl.env import episode_return
    from td3sched.rl.observation import OBSERVATION_SIZE
    from td3sched.rl.td3 import TD3
    from td3sched.rl.train import learn

    settings, config = settings_and_config(args, workers)
    env = settings.make_env()
    agent = TD3(OBSERVATION_SIZE, config, settings.seed, settings.action_mode)
    points: list[tuple[int, float, float]] = []
    clock = {"started": time.perf_counter(), "eval_s": 0.0}

    def evaluate(steps: int, agent: TD3) -> None:
        if steps % args.eval_every:
            return
        t = time.perf_counter()
        training_s = t - clock["started"] - clock["eval_s"]
        mean = float(np.mean([episode_return(eval_env, w, agent.predict) for w in windows]))
        clock["eval_s"] += time.perf_counter() - t
        points.append((steps, training_s, mean))
        print(f"  {workers} worker(s), step {steps:>6,}: return {mean:9.4f} at {points[-1][1]:7.1f} s", flush=True)

    try:
        learn(agent, env, args.steps, out=folder, settings=settings, callback=evaluate)
    finally:
        env.close()
    return points


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="dlrm-small")
    ap.add_argument("--episode-hours", type=float, default=24.0)
    ap.add_argument("--hold", type=float, default=600.0, help="simulated seconds an action holds (0: per decision)")
    ap.add_argument("--warmup-h", type=float, default=12.0)
    ap.add_argument("--static", default="static-weights:w=1/0/0/0:tau=0.4",
                    help="the warm-up's score, and the return to reach with --curve")
    ap.add_argument("--steps", type=int, default=576, help="steps per run (a multiple of 2)")
    ap.add_argument("--learning-starts", type=int, default=144)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each count, alternating")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--curve", action="store_true", help="returns against wall time instead of steps/s")
    ap.add_argument("--eval-every", type=int, default=288)
    ap.add_argument("--eval-windows", type=int, default=2)
    args = ap.parse_args()
    if args.steps % 2 or args.eval_every % 2:
        ap.error(f"--steps {args.steps} and --eval-every {args.eval_every}: expected multiples of 2")
    torch.set_num_threads(1)
    import tempfile

    from td3sched.run import code_version

    print(f"{args.scenario}, {args.episode_hours:g} h episodes, hold {args.hold:g} s, warm-up {args.warmup_h:g} h "
          f"under {args.static}, {args.steps} steps ({args.learning_starts} warm-up), code {code_version()}")
    if args.curve:
        from td3sched.rl.env import episode_return

        eval_env = settings_and_config(args, 1)[0].make_env()
        eval_env.reset(seed=1000 + args.seed)  # windows apart from the training's draws
        windows = []
        for _ in range(args.eval_windows):
            windows.append(asdict(eval_env.episode))
            eval_env.reset()
        static = static_logits(args.static, "full")
        target = float(np.mean([episode_return(eval_env, w, lambda _: static) for w in windows]))
        print(f"the static score's return on the {len(windows)} windows: {target:.4f}")
        for workers in (1, 2):
            with tempfile.TemporaryDirectory() as folder:
                points = curve(args, workers, folder, windows, eval_env)
            reached = next(((s, t) for s, t, r in points if r >= target), None)
            print(f"{workers} worker(s): " + (f"reached the static score's return at step {reached[0]:,}, "
                                              f"{reached[1]:.0f} s of training" if reached else
                                              f"best {max(r for _, _, r in points):.4f}, not the static score's "
                                              f"{target:.4f} in {args.steps:,} steps"))
        eval_env.close()
        return 0

    rows: dict[int, list[dict]] = {1: [], 2: []}
    print(f"{'run':>4} {'workers':>7} {'start s':>8} {'steps/s':>8} {'cpu s':>7} {'wall s':>7}")
    for repeat in range(args.repeats):
        for workers in ((1, 2) if repeat % 2 == 0 else (2, 1)):
            with tempfile.TemporaryDirectory() as folder:
                r = run_once(args, workers, folder)
            rows[workers].append(r)
            print(f"{repeat + 1:>4} {workers:>7} {r['start_s']:>8.1f} {r['sps']:>8.2f} {r['cpu_s']:>7.1f} "
                  f"{r['wall_s']:>7.1f}", flush=True)
    med = {w: statistics.median(r["sps"] for r in rows[w]) for w in rows}
    pairs = [b["sps"] / a["sps"] for a, b in zip(rows[1], rows[2])]
    print(f"steps/s, median of {args.repeats}: 1 worker {med[1]:.2f}, 2 workers {med[2]:.2f}: {med[2] / med[1]:.2f}x "
          f"(pairs {', '.join(f'{p:.2f}' for p in pairs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
