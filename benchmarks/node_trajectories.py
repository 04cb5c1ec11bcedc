"""Each policy's provisioned nodes hour by hour, from the run records of `td3sched evaluate` folders (no
rerun): how long the nodes a run starts with take to reach the policy's own level.

    python benchmarks/node_trajectories.py DIR[=LABEL] [DIR[=LABEL] ...] [--policies SUBSTR,...]
                                          [--every 24] --out FILE.png

Each folder's runs are grouped by policy; the figure draws, per policy and folder, the mean over its seeds
of the run's hourly node count (``series_hourly.nodes``, the measured span only), one line style per folder
(LABEL, default the folder's name), one colour per policy. The table printed beside it gives the same means
every ``--every`` hours, with the first and the last hour, and the code version(s) of the runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np


def load(folder: Path) -> tuple[dict[str, list[list[float]]], set[str]]:
    """policy -> every seed's hourly node counts, and the code versions, of an evaluate folder."""
    files = sorted((folder / "runs").glob("*.json"))
    if not files:
        raise SystemExit(f"{folder}: no run records under runs/: expected a td3sched evaluate --out folder")
    series: dict[str, list[list[float]]] = defaultdict(list)
    versions = set()
    for f in files:
        record = json.loads(f.read_text())
        nodes = record.get("series_hourly", {}).get("nodes")
        if not nodes:
            raise SystemExit(f"{f}: no series_hourly.nodes: expected a run record of td3sched simulate/evaluate")
        series[record["policy_spec"]].append([float(n) for n in nodes])
        versions.add(record.get("code_version"))
    return series, versions


def short(spec: str) -> str:
    """A policy spec without a model folder's path (td3:/a/b/name -> td3:name)."""
    kind, _, arg = spec.partition(":")
    return f"{kind}:{Path(arg).name}" if kind == "td3" else spec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="evaluate --out folders, each optionally =LABEL")
    parser.add_argument("--policies", default="", help="comma-separated substrings: only policies matching one")
    parser.add_argument("--every", type=int, default=24, help="hours between the table's rows (default 24)")
    parser.add_argument("--out", type=Path, required=True, help="the figure (.png)")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every {args.every}: expected hours >= 1")
    wanted = [s for s in args.policies.split(",") if s]

    curves: dict[tuple[str, str], np.ndarray] = {}
    for item in args.folders:
        path, _, label = item.partition("=")
        folder = Path(path)
        series, versions = load(folder)
        label = label or folder.name
        print(f"{label}: {folder}, code version(s) {', '.join(sorted(v or '?' for v in versions))}")
        for spec, runs in series.items():
            if wanted and not any(w in spec for w in wanted):
                continue
            hours = min(len(r) for r in runs)
            curves[label, short(spec)] = np.mean([r[:hours] for r in runs], axis=0)
    if not curves:
        print("no policy matched --policies", file=sys.stderr)
        return 2

    hours = min(len(c) for c in curves.values())
    rows = sorted(set(range(0, hours, args.every)) | {hours - 1})
    names = list(curves)
    print()
    print("| hour | " + " | ".join(f"{p} ({label})" for label, p in names) + " |")
    print("| ---: | " + " | ".join("---:" for _ in names) + " |")
    for h in rows:
        print(f"| {h} | " + " | ".join(f"{curves[n][h]:.1f}" for n in names) + " |")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(label for label, _ in names))
    policies = list(dict.fromkeys(p for _, p in names))
    styles = ["-", "--", ":", "-."]
    fig, ax = plt.subplots(figsize=(10, 5))
    for (label, p), curve in curves.items():
        ax.plot(np.arange(len(curve)) / 24, curve, styles[labels.index(label) % len(styles)],
                color=f"C{policies.index(p) % 10}", label=f"{p} ({label})")
    ax.set_xlabel("days into the measured span")
    ax.set_ylabel("provisioned nodes (mean over seeds)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
