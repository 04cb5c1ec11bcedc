"""The action-design ablation on ``tiny`` (issue 9, section 2): weights only vs + tau vs + hold-back
ceiling, each as a static best (``td3sched search-static``) and as a learned TD3 policy (``td3sched
train --action ...``, a short training, the same budget for every design, a few training seeds), all
evaluated with ``td3sched evaluate`` on tiny's test span beside k8s-default and koord-loadaware.

    python benchmarks/action_ablation.py                      # everything, then the table (about 40 min on 2 busy cores)
    python benchmarks/action_ablation.py --table-only         # the table of what --out holds
    python benchmarks/action_ablation.py --no-learned --set nodes.pools.cpu.count=8 --set nodes.pools.cpu.max_count=8 \
        --out runs/action-ablation-loaded                     # the static rows on a loaded tiny (8 CPU nodes, no scale-up)

Every step is a td3sched command, printed before it runs; a step whose output is already in --out is
skipped (delete the folder to rerun it). One process at a time (searches with one worker, trainings
with one torch thread, the evaluation with one worker). The table: each policy's mean over the
evaluation seeds of the objective (episode_reward, cluster-hours; higher is better) with its 95%
interval, the paired difference from k8s-default, the cost in node-hours, CPU utilisation, P99
latency and, for the learned policies, the share of the actor's pre-activations at the bound on the
last logged training batch. Each learned design is trained with and without the pre-activation
penalty (``--penalties``) and, with ``--branches 0,10``, without and with counterfactual branches
every 10 steps (``td3sched train --branch-every``); a second table averages each design's training
seeds. The variance-reduction ablation (docs/td3.md):

    python benchmarks/action_ablation.py --designs weights+tau --penalties 1 --branches 0,10 --out runs/branch-ablation
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import subprocess
import sys
from pathlib import Path

DESIGNS = ("weights", "weights+tau", "weights+tau+ceiling")
SEARCH = {  # design -> search-static options
    "weights": ["--tau-fixed", "0"],
    "weights+tau": [],
    "weights+tau+ceiling": ["--ceiling-values", "none,0.6,0.7,0.8,0.9"],
}
BASELINES = ("k8s-default", "koord-loadaware")


def run(cmd: list[str]) -> None:
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def td3sched(*args: str) -> list[str]:
    return [sys.executable, "-m", "td3sched", *args]


SETS: list[str] = []
"""``--set`` overrides of tiny, passed to every command (main)."""


def sets() -> list[str]:
    return [x for o in SETS for x in ("--set", o)]


def search_static(out: Path, design: str, budget_min: float) -> str:
    """The static best of ``design`` (a static-weights spec), searched on tiny's train span."""
    folder = out / "best-static" / design.replace("+", "-")
    found = sorted(folder.glob("*.json"))
    if not found:
        run(td3sched("search-static", "--scenario", "tiny", "--budget-min", f"{budget_min:g}", "--workers", "1",
                     "--step", "0.25", "--no-progress", "--out", str(folder), *SEARCH[design], *sets()))
        found = sorted(folder.glob("*.json"))
    return json.loads(found[-1].read_text())["policy"]


def model_folder(out: Path, design: str, penalty: float, seed: int, branch_every: int = 0,
                 imitation: float = 0.0, hold: float = 0.0) -> Path:
    variant = ((f"-b{branch_every}" if branch_every else "") + (f"-i{imitation:g}" if imitation else "")
               + (f"-h{hold:g}" if hold else ""))
    return out / "td3" / f"{design.replace('+', '-')}-p{penalty:g}{variant}-seed{seed}"


TRAIN_OPTIONS: list[str] = []
"""Options passed to every training (main: --gamma-per-hour)."""


def train(out: Path, design: str, penalty: float, seed: int, steps: int, learning_starts: int,
          episode_hours: float, branch_every: int = 0, imitation: float = 0.0, hold: float = 0.0) -> Path:
    folder = model_folder(out, design, penalty, seed, branch_every, imitation, hold)
    if not (folder / "model.json").exists() or json.loads((folder / "model.json").read_text())["training"]["steps"] < steps:
        run(td3sched("train", "--scenario", "tiny", "--action", design, "--seed", str(seed), "--steps", str(steps),
                     "--learning-starts", str(learning_starts), "--episode-hours", f"{episode_hours:g}",
                     "--preactivation-penalty", f"{penalty:g}", "--branch-every", str(branch_every),
                     *(("--branch-imitation", f"{imitation:g}") if imitation else ()),
                     *(("--action-hold", f"{hold:g}") if hold else ()), *TRAIN_OPTIONS,
                     "--checkpoint-every", "0", "--no-progress", "--out", str(folder), *sets()))
    return folder


def read_summary(folder: Path) -> dict[tuple[str, str], dict]:
    with open(folder / "summary.csv", newline="") as f:
        return {(r["policy"], r["metric"]): r for r in csv.DictReader(f)}


def read_runs(folder: Path) -> dict[str, dict[int, dict]]:
    """policy -> seed -> metrics, from the evaluation's run records (runs/<policy>__seed<k>.json)."""
    out: dict[str, dict[int, dict]] = {}
    for path in (folder / "runs").glob("*.json"):
        record = json.loads(path.read_text())
        out.setdefault(record["policy"], {})[int(record["seed"])] = record["metrics"]
    return out


def paired(runs, policy: str, base: str = "k8s-default") -> tuple[float, float]:
    """Mean and 95% half-width of (policy - base) episode_reward, paired by evaluation seed (the
    evaluation's own statistics, ``td3sched.evaluate.stats``)."""
    from td3sched.evaluate.stats import paired_difference

    d = paired_difference({s: m["episode_reward"] for s, m in runs[base].items()},
                          {s: m["episode_reward"] for s, m in runs[policy].items()})
    return d.mean, d.half if d.half is not None else float("nan")


def groups_table(out: Path, groups: dict[str, list[str]], saturation: dict[str, float]) -> str:
    """One row per learned design and penalty: the training seeds' mean episode rewards averaged, their
    spread, and the paired difference from k8s-default averaged over seeds and training seeds."""
    import numpy as np

    runs = read_runs(out / "evaluation")
    lines = ["| learned design | training seeds | episode_reward (mean of seeds' means) | spread over training seeds "
             "(min / max) | Δ vs k8s-default | at the bound (mean) |", "|---|---:|---:|---:|---:|---:|"]
    for label, policies in groups.items():
        policies = [p for p in policies if p in runs]
        if not policies:
            continue
        means = [np.mean([m["episode_reward"] for m in runs[p].values()]) for p in policies]
        deltas = [paired(runs, p)[0] for p in policies]
        sat = [saturation[p] for p in policies if p in saturation]
        lines.append(f"| {label} | {len(policies)} | {np.mean(means):.3f} | {min(means):.3f} / {max(means):.3f} | "
                     f"{np.mean(deltas):+.3f} | {np.mean(sat):.0%} |" if sat else
                     f"| {label} | {len(policies)} | {np.mean(means):.3f} | {min(means):.3f} / {max(means):.3f} | "
                     f"{np.mean(deltas):+.3f} | |")
    return "\n".join(lines)


def table(out: Path, labels: dict[str, str], saturation: dict[str, float]) -> str:
    evaluation = out / "evaluation"
    summary, runs = read_summary(evaluation), read_runs(evaluation)

    def cell(policy: str, metric: str, fmt: str) -> str:
        r = summary.get((policy, metric))
        if r is None:
            return "-"
        return f"{float(r['mean']):{fmt}} ± {float(r['ci95_half']):{fmt}}" if r["ci95_half"] not in ("", "nan") \
            else f"{float(r['mean']):{fmt}}"

    lines = ["| action design | policy | episode_reward | Δ vs k8s-default (paired) | cost node-hours | cpu_util | "
             "latency_p99_ms | pre-activations at the bound |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for policy, label in labels.items():
        if policy not in runs:
            continue
        delta, half = paired(runs, policy)
        sat = f"{saturation[policy]:.0%}" if policy in saturation else ""
        lines.append(f"| {label} | `{policy}` | {cell(policy, 'episode_reward', '.3f')} | {delta:+.3f} ± {half:.3f} | "
                     f"{cell(policy, 'cost_node_hours', '.1f')} | {cell(policy, 'cpu_util', '.3f')} | "
                     f"{cell(policy, 'latency_p99_ms', '.0f')} | {sat} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/action-ablation"), help="Working folder.")
    ap.add_argument("--train-seeds", default="1,2,3", help="Training seeds of each learned design.")
    ap.add_argument("--penalties", default="0,1", help="Pre-activation penalties (train --preactivation-penalty) "
                                                      "each learned design is trained with.")
    ap.add_argument("--designs", default=",".join(DESIGNS), help="Action designs to run (comma-separated).")
    ap.add_argument("--branches", default="0", help="train --branch-every values each learned design is trained "
                                                   "with (0: no counterfactual branches).")
    ap.add_argument("--imitation", default="0", help="train --branch-imitation weights each learned design with "
                                                    "branches is trained with (0: none).")
    ap.add_argument("--holds", default="0", help="train --action-hold values (simulated seconds) each learned design "
                                                "is trained with (0: an action per decision).")
    ap.add_argument("--gamma-per-hour", type=float, default=None, help="train --gamma-per-hour for every training "
                                                                       "(default: train's, 0.99 per decision).")
    ap.add_argument("--steps", type=int, default=10000, help="Training steps of each learned policy.")
    ap.add_argument("--learning-starts", type=int, default=2000, help="Random warm-up steps of each training.")
    ap.add_argument("--episode-hours", type=float, default=6.0, help="Training episode window (simulated hours).")
    ap.add_argument("--search-budget-min", type=float, default=6.0, help="Budget of each static search.")
    ap.add_argument("--eval-seeds", type=int, default=5, help="Evaluation seeds (1..N) on tiny's test span.")
    ap.add_argument("--table-only", action="store_true", help="Print the table of what --out holds.")
    ap.add_argument("--no-learned", action="store_true", help="The baselines and static bests only (no training).")
    ap.add_argument("--set", action="append", default=[], help="A --set override of tiny for every command.")
    args = ap.parse_args()
    out = args.out
    SETS[:] = args.set
    TRAIN_OPTIONS[:] = ["--gamma-per-hour", f"{args.gamma_per_hour:g}"] if args.gamma_per_hour is not None else []
    labels: dict[str, str] = {b: "baseline" for b in BASELINES}
    saturation: dict[str, float] = {}
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    unknown = sorted(set(designs) - set(DESIGNS))
    if unknown:
        ap.error(f"--designs {unknown}: expected some of {', '.join(DESIGNS)}")
    for design in designs:
        spec = (search_static(out, design, args.search_budget_min) if not args.table_only else
                json.loads(sorted((out / "best-static" / design.replace("+", "-")).glob("*.json"))[-1].read_text())
                ["policy"])
        label = f"{design}: static best"
        labels[spec] = f"{labels[spec]}; {label}" if spec in labels else label  # two searches may pick one spec
    groups: dict[str, list[str]] = {}
    for design in designs if not args.no_learned else ():
        variants = [(every, w, hold) for every in (int(b) for b in args.branches.split(","))
                    for w in ((float(i) for i in args.imitation.split(",")) if every else (0.0,))
                    for hold in (float(h) for h in args.holds.split(","))]
        for penalty, (every, imitation, hold) in itertools.product((float(p) for p in args.penalties.split(",")),
                                                                   variants):
            branches = ((f", branches every {every}" if every else "") + (f", imitation {imitation:g}" if imitation else "")
                        + (f", held {hold:g} s" if hold else ""))
            group = groups.setdefault(f"{design}, penalty {penalty:g}{branches}", [])
            for seed in (int(s) for s in args.train_seeds.split(",")):
                folder = (train(out, design, penalty, seed, args.steps, args.learning_starts, args.episode_hours, every,
                                imitation, hold)
                          if not args.table_only else model_folder(out, design, penalty, seed, every, imitation, hold))
                policy = f"td3:{folder}"
                labels[policy] = f"{design}: TD3, penalty {penalty:g}{branches}, seed {seed}"
                group.append(policy)
                card = json.loads((folder / "model.json").read_text())
                last = card["training"].get("preactivation_saturation", {}).get("last")
                if last is not None:
                    saturation[policy] = last
    if not args.table_only:
        run(td3sched("evaluate", "--scenario", "tiny", "--span", "test", "--seeds", str(args.eval_seeds),
                     "--workers", "1", "--no-progress", "--out", str(out / "evaluation"), *sets(),
                     *(x for p in labels for x in ("--policies", p))))
    print(table(out, labels, saturation))
    if groups:
        print()
        print(groups_table(out, groups, saturation))


if __name__ == "__main__":
    main()
