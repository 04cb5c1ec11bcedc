"""One policy of an evaluation against every other, paired by seed (issue 9: is the product's score ahead?).

    python benchmarks/paired.py results/NAME --policy static-weights:w=1/0/0/0:tau=0.4:frag=0.25:spread=3

Reads the run records ``td3sched evaluate`` wrote under ``results/NAME/runs`` (nothing is run again) and
prints, for each other policy of the grid, the chosen policy minus it on each metric asked for, paired by
seed (the same seed gives both the same workload), with the 95% t interval of the mean difference, and
whether that interval excludes 0; then the ratio of the two means on each metric (the case study's
goals are ratios against the default scheduler). ``head-to-head.md`` does this for the learned policies; this does it
for any policy, a static score with arguments included.

``--with FOLDER`` (repeatable) adds another evaluation's runs, named ``FOLDER-NAME/spec``: the same policy run
with another setting (``td3sched evaluate --set``) on the same scenario, span and seeds pairs by seed as well.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from td3sched.evaluate.stats import paired_difference

METRICS = ("cost_node_hours", "node_hours", "latency_p99_ms", "latency_breach_hours", "oom_per_week",
           "fragmentation", "cpu_util")


def num(x: float, sign: str = "") -> str:
    """A figure as the tables print it: whole numbers with separators from 100 up, three significant digits below."""
    return f"{x:{sign},.0f}" if abs(x) >= 100 else f"{x:{sign}.3g}"


def read_runs(folder: Path) -> tuple[dict[str, dict[int, dict]], set[str]]:
    """policy spec -> seed -> metrics, and the code versions of the runs."""
    runs: dict[str, dict[int, dict]] = {}
    versions = set()
    files = sorted((folder / "runs").glob("*.json"))
    if not files:
        raise SystemExit(f"{folder}: no run records under runs/: expected a folder td3sched evaluate wrote")
    for path in files:
        record = json.loads(path.read_text())
        if "metrics" not in record:  # a failed run
            continue
        runs.setdefault(record["policy_spec"], {})[int(record["seed"])] = record["metrics"]
        versions.add(record.get("code_version", "unknown"))
    return runs, versions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="an evaluation's results folder (td3sched evaluate --out)")
    parser.add_argument("--policy", required=True, help="the policy spec compared with every other")
    parser.add_argument("--metrics", default=",".join(METRICS), help="comma-separated run metrics")
    parser.add_argument("--with", dest="others", type=Path, action="append", default=[],
                        help="another results folder whose runs join the comparison as FOLDER-NAME/spec")
    args = parser.parse_args()
    runs, versions = read_runs(args.folder)
    for folder in args.others:
        more, their = read_runs(folder)
        runs.update({f"{folder.name}/{spec}": seeds for spec, seeds in more.items()})
        versions |= their
    if args.policy not in runs:
        parser.error(f"--policy {args.policy!r}: not in {args.folder} (its policies: {', '.join(sorted(runs))})")
    metrics = [m for m in args.metrics.split(",") if m]
    mine = runs[args.policy]
    print(f"{args.folder}: {args.policy} minus each other policy, paired by seed ({len(mine)} seeds); code "
          f"version(s) {', '.join(sorted(versions))}")
    print("| against | " + " | ".join(f"{m}: its mean" if i == 0 else m for i, m in enumerate(metrics)) + " |")
    print("|---|" + "---:|" * len(metrics))
    for other in sorted(p for p in runs if p != args.policy):
        cells = []
        for i, m in enumerate(metrics):
            a = {s: r[m] for s, r in runs[other].items() if m in r}
            b = {s: r[m] for s, r in mine.items() if m in r}
            d = paired_difference(a, b)
            if d.mean is None:
                cells.append("n/a")
                continue
            interval = f" [{num(d.low, '+')}, {num(d.high, '+')}]" if d.low is not None else ""
            mark = " *" if d.excludes_zero() else ""
            base = sum(a.values()) / len(a)
            cells.append((f"{num(base)}; " if i == 0 else "") + f"{num(d.mean, '+')}{interval}{mark}")
        print(f"| `{other}` | " + " | ".join(cells) + " |")
    print("(* the 95% interval excludes 0)")
    print()
    print(f"Means, {args.policy} / each other policy:")
    print("| against | " + " | ".join(metrics) + " |")
    print("|---|" + "---:|" * len(metrics))
    for other in sorted(p for p in runs if p != args.policy):
        cells = []
        for m in metrics:
            a = [r[m] for r in runs[other].values() if m in r]
            b = [r[m] for r in mine.values() if m in r]
            base = sum(a) / len(a) if a else 0.0
            cells.append(f"{(sum(b) / len(b)) / base:.3f}x" if a and b and base else "n/a")
        print(f"| `{other}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
