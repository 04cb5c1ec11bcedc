"""The FGD openb reproduction's outputs: our curves beside the artifact's, a table of medians with
the difference per cell, and a plot with their points overlaid."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from td3sched.reproduce.fgd_openb import METRICS, POLICIES

TABLE_POINTS = (90, 95, 100, 130)
"""Arrived GPU demand (% of the cluster's GPUs) of the table's rows."""
LABELS = {"unallocated_pct": "unallocated GPU %", "frag_amount_pct": "fragmentation amount, % of all GPUs",
          "frag_ratio_pct": "fragmentation ratio, % of idle GPUs"}
CURVES_FILE, TABLE_FILE, PLOT_FILE, SUMMARY_FILE = "curves.csv", "table.csv", "fgd-openb.png", "summary.md"


@dataclass(frozen=True)
class Timing:
    policy: str
    seed: int
    wall_s: float
    pods: int
    failed: int


def comparison(ours: pd.DataFrame, theirs: pd.DataFrame, points=TABLE_POINTS) -> pd.DataFrame:
    """One row per metric, policy and arrived %: our median over seeds and range, theirs, the
    difference (ours - theirs), and whether our median lies within their seed range."""
    rows = []
    for metric in METRICS:
        for policy in dict.fromkeys(ours["policy"]):
            for x in points:
                a = ours[(ours.policy == policy) & (ours.arrived_pct == x)][metric].dropna()
                b = theirs[(theirs.policy == policy) & (theirs.arrived_pct == x)][metric].dropna()
                if a.empty or b.empty:
                    continue
                ours_med, theirs_med = float(a.median()), float(b.median())
                rows.append(dict(metric=metric, policy=policy, arrived_pct=x, ours=ours_med, ours_min=float(a.min()),
                                 ours_max=float(a.max()), theirs=theirs_med, theirs_min=float(b.min()),
                                 theirs_max=float(b.max()), diff=ours_med - theirs_med,
                                 in_their_range=bool(b.min() <= ours_med <= b.max()),
                                 within_1pt=bool(abs(ours_med - theirs_med) <= 1.0)))
    return pd.DataFrame(rows)


def markdown_table(table: pd.DataFrame, metric: str, points=TABLE_POINTS) -> str:
    """Arrived % down, policies across; each cell 'ours (theirs, diff)', '*' when outside their range."""
    t = table[table.metric == metric]
    policies = list(dict.fromkeys(t["policy"]))
    lines = ["| arrived | " + " | ".join(policies) + " |", "|---|" + "---|" * len(policies)]
    for x in points:
        cells = []
        for p in policies:
            r = t[(t.policy == p) & (t.arrived_pct == x)]
            if r.empty:
                cells.append("-")
                continue
            r = r.iloc[0]
            mark = "" if r.in_their_range else " *"
            cells.append(f"{r.ours:.2f} ({r.theirs:.2f}, {r['diff']:+.2f}){mark}")
        lines.append(f"| {x}% | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def spread_table(table: pd.DataFrame, metric: str, x: int = 100) -> str:
    """Seed ranges at one arrived %: ours and theirs, per policy."""
    t = table[(table.metric == metric) & (table.arrived_pct == x)]
    lines = ["| policy | ours median | ours range | theirs median | theirs range | diff | in their range |",
             "|---|---|---|---|---|---|---|"]
    for r in t.itertuples():
        lines.append(f"| {r.policy} | {r.ours:.2f} | {r.ours_min:.2f}-{r.ours_max:.2f} | {r.theirs:.2f} | "
                     f"{r.theirs_min:.2f}-{r.theirs_max:.2f} | {r.diff:+.2f} | {'yes' if r.in_their_range else 'no'} |")
    return "\n".join(lines)


def plot(ours: pd.DataFrame, theirs: pd.DataFrame, path: Path) -> None:
    """Median curves per policy (lines: ours; markers every 5 points: the artifact's medians)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METRICS), figsize=(6 * len(METRICS), 4.5))
    colors = dict(zip(POLICIES, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for ax, metric in zip(axes, METRICS):
        for policy in dict.fromkeys(ours["policy"]):
            mine = ours[ours.policy == policy].groupby("arrived_pct")[metric].median()
            ax.plot(mine.index, mine.values, color=colors.get(policy), label=f"{policy} (ours)")
            theirs_med = theirs[theirs.policy == policy].groupby("arrived_pct")[metric].median()
            theirs_med = theirs_med[theirs_med.index % 5 == 0]
            ax.plot(theirs_med.index, theirs_med.values, "o", color=colors.get(policy), markersize=3.5,
                    markerfacecolor="none", label=f"{policy} (paper)")
        ax.set_xlabel("arrived GPU demand, % of the cluster's GPUs")
        ax.set_ylabel(LABELS[metric])
        ax.set_xlim(0, 130)
        if metric != "frag_ratio_pct":
            ax.set_xlim(60, 130)
            ax.set_ylim(0, 20)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle("FGD (ATC'23) openb experiment: our medians (lines) vs the artifact's (circles), seeds 42-51")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary(table: pd.DataFrame, timings: list[Timing], command: str, code_version: str, seeds,
            specs: dict[str, str]) -> str:
    per_run = {p: statistics.median(t.wall_s for t in timings if t.policy == p)
               for p in dict.fromkeys(t.policy for t in timings)}
    pods = sorted({t.pods for t in timings})
    misses = table[~table.in_their_range]
    lines = [
        "# FGD (ATC'23) openb experiment, reproduced",
        "",
        f"Command: `{command}`  ",
        f"Code version: `{code_version}`  ",
        f"Seeds: {', '.join(str(s) for s in seeds)}; pods per experiment after tuning: "
        f"{pods[0]:,}-{pods[-1]:,}; medians over seeds.  ",
        "Policies: " + ", ".join(f"{name} = `{spec}`" for name, spec in specs.items()) + ".",
        "",
        "Each cell: our median (the artifact's median, ours - theirs); `*`: our median is outside their",
        "range over seeds 42-51.",
        "",
        "## Unallocated GPU %",
        "",
        markdown_table(table, "unallocated_pct"),
        "",
        "## Fragmentation amount, % of all GPUs",
        "",
        markdown_table(table, "frag_amount_pct"),
        "",
        "## Fragmentation ratio, % of idle GPUs",
        "",
        markdown_table(table, "frag_ratio_pct"),
        "",
        "## Seed spread at 100% arrived, unallocated GPU %",
        "",
        spread_table(table, "unallocated_pct"),
        "",
        "## Seed spread at 100% arrived, fragmentation amount %",
        "",
        spread_table(table, "frag_amount_pct"),
        "",
        "## Time per experiment (one policy, one seed; median over seeds)",
        "",
        "| policy | wall s |",
        "|---|---|",
        *[f"| {p} | {s:.1f} |" for p, s in per_run.items()],
        "",
        f"{len(table) - len(misses)} of {len(table)} cells have our median within the artifact's seed range; "
        f"{int(table.within_1pt.sum())} of {len(table)} are within 1 point of its median.",
    ]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, ours: pd.DataFrame, theirs: pd.DataFrame, timings: list[Timing], command: str,
                  code_version: str, seeds, specs: dict[str, str]) -> pd.DataFrame:
    """Write curves, table, plot and summary into ``out``; return the comparison table."""
    out.mkdir(parents=True, exist_ok=True)
    ours.to_csv(out / CURVES_FILE, index=False, float_format="%.4f")
    table = comparison(ours, theirs)
    table.to_csv(out / TABLE_FILE, index=False, float_format="%.4f")
    plot(ours, theirs, out / PLOT_FILE)
    (out / SUMMARY_FILE).write_text(summary(table, timings, command, code_version, seeds, specs))
    return table


def seeds_from(text: str) -> tuple[int, ...]:
    """'42-51' or '42,43,50' -> seeds; a ValueError names the bad text."""
    try:
        if "-" in text.strip()[1:]:
            first, last = (int(x) for x in text.split("-", 1))
            seeds = tuple(range(first, last + 1))
        else:
            seeds = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--seeds {text!r}: expected a range like 42-51 or a list like 42,43") from None
    if not seeds:
        raise ValueError(f"--seeds {text!r}: expected at least one seed")
    return seeds


def medians(ours: pd.DataFrame) -> pd.DataFrame:
    """Median over seeds per policy and arrived %."""
    return ours.groupby(["policy", "arrived_pct"], sort=False)[list(METRICS)].median().reset_index()


__all__ = ["Timing", "comparison", "markdown_table", "plot", "summary", "write_outputs", "seeds_from", "medians"]
