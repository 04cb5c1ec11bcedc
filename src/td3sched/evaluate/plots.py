"""The grid's figures (matplotlib, Agg, PNG). Each function returns the files it wrote; a figure the
run records cannot support yet is skipped with a note instead (see ``Plots.notes``).

Figures are built with ``matplotlib.figure.Figure`` (no pyplot, no global state) and saved with
the Agg canvas, so they work headless and inside worker threads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from td3sched.evaluate.stats import Summary


@dataclass
class Plot:
    path: Path
    title: str
    caption: str


@dataclass
class Plots:
    items: list[Plot] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _figure(width: float = 7.0, height: float = 4.0):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Software": None})


def _file_part(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


DEFAULT_COLOUR = "#7f7f7f"
LOG_SPAN = 100.0
"""Bars go on a log axis when the largest mean is this many times the smallest (all above 0)."""


def policy_colours(policies: list[str]) -> dict[str, str]:
    """One colour per policy for every figure of a report: grey for k8s-default, the others in the
    grid's order through matplotlib's tab10 cycle."""
    others = [p for p in policies if p != "k8s-default"]
    colours = {p: f"C{i % 10}" for i, p in enumerate(others)}
    colours["k8s-default"] = DEFAULT_COLOUR
    return colours


def short_label(policy: str, width: int = 28) -> str:
    """A policy's label in figures and the terminal: a td3 model by its folder's name
    (``td3:runs/a/td3-dlrm`` -> ``td3:td3-dlrm``), anything else cut to ``width`` characters."""
    name, sep, args = policy.partition(":")
    if sep and name == "td3":
        policy = f"td3:{Path(args.rstrip('/')).name or args}"
    return policy if len(policy) <= width else policy[: width - 1] + "…"


_short = short_label


def metric_bars(out: Path, metric: str, label: str, policies: list[str], stats: dict[str, Summary],
                colours: dict[str, str] | None = None) -> Plot | None:
    """Horizontal bar of the mean per policy with its 95% interval as an error bar (none for 1 seed):
    labels never overlap, the axis is logarithmic when the means span orders of magnitude, and a
    metric that is 0 for every policy gets no figure (None)."""
    present = [p for p in policies if stats.get(p) and stats[p].mean is not None]
    if not present or all(stats[p].mean == 0 and (stats[p].high or 0) == 0 for p in present):
        return None
    colours = colours or policy_colours(policies)
    fig = _figure(7.0, 1.2 + 0.45 * len(present))
    ax = fig.add_subplot()
    means = np.array([stats[p].mean for p in present])
    errs = np.array([[s.mean - s.low, s.high - s.mean] if s.low is not None else [0.0, 0.0]
                     for s in (stats[p] for p in present)]).T  # asymmetric: a bootstrap interval stays >= 0
    y = np.arange(len(present))[::-1]  # the first policy on top
    ax.barh(y, means, xerr=errs, capsize=4, color=[colours.get(p, "C9") for p in present], edgecolor="black",
            linewidth=0.5)
    ax.set_yticks(y, [short_label(p) for p in present])
    if np.all(means > 0) and means.max() / means.min() >= LOG_SPAN:
        ax.set_xscale("log")
    ax.set_xlabel(label)
    ax.set_title(f"{metric} (mean, 95% CI over seeds)")
    ax.grid(axis="x", alpha=0.3, which="both")
    path = out / f"metric_{_file_part(metric)}.png"
    _save(fig, path)
    return Plot(path, metric, f"{label}: mean per policy with its 95% interval over seeds.")


def pareto(out: Path, cost: tuple[str, str], others: list[tuple[str, str]], policies: list[str],
           stats: dict[str, dict[str, Summary]], front: set[str], colours: dict[str, str] | None = None) -> Plot | None:
    """One panel per metric of ``others`` against the ``cost`` metric (each a (name, label), lower is
    better on both axes): each policy's means with their 95% intervals as error bars, the panel's own
    Pareto front as a step line, and the policies on the front over every metric (``front``) drawn with
    a black edge. None with fewer than two policies that have every metric."""
    names = [cost[0], *(m for m, _ in others)]
    present = [p for p in policies if all(stats.get(p, {}).get(m) and stats[p][m].mean is not None for m in names)]
    if len(present) < 2 or not others:
        return None
    colours = colours or policy_colours(policies)
    fig = _figure(4.2 * len(others), 4.4 + 0.25 * ((len(present) + 2) // 3))
    axes = fig.subplots(1, len(others), squeeze=False)[0]
    handles = {}

    def err(s: Summary) -> list[float]:
        return [s.mean - s.low, s.high - s.mean] if s.low is not None else [0.0, 0.0]

    for ax, (metric, label) in zip(axes, others):
        xs = np.array([stats[p][cost[0]].mean for p in present])
        ys = np.array([stats[p][metric].mean for p in present])
        for p, x, y in zip(present, xs, ys):
            sx, sy = stats[p][cost[0]], stats[p][metric]
            handles[p] = ax.errorbar([x], [y], xerr=np.array(err(sx))[:, None], yerr=np.array(err(sy))[:, None],
                                     fmt="o", color=colours.get(p, "C9"), ecolor=colours.get(p, "C9"), alpha=0.9,
                                     capsize=3, markeredgecolor="black" if p in front else colours.get(p, "C9"),
                                     markersize=7)
        order = np.lexsort((ys, xs))  # the panel's front: the running minimum of the metric by cost
        fx, fy, best = [], [], np.inf
        for i in order:
            if ys[i] < best:
                fx.append(xs[i])
                fy.append(ys[i])
                best = ys[i]
        ax.step(fx, fy, where="post", color="black", linewidth=0.8, alpha=0.6)
        ax.set_xlabel(cost[1])
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.suptitle("Trade-offs: means with 95% intervals; lower is better on both axes")
    fig.legend([handles[p] for p in present], [short_label(p, 48) + (" (front)" if p in front else "") for p in present],
               loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    path = out / "pareto.png"
    _save(fig, path)
    return Plot(path, "Pareto front", f"Each policy's {cost[0]} against {', '.join(m for m, _ in others)} (means, 95% "
                "intervals over seeds). The step line is each panel's Pareto front; a black edge marks a policy no "
                "other beats on every one of these metrics at once.")


def time_series(out: Path, series: dict[str, tuple[int, dict]], colours: dict[str, str] | None = None) -> Plot | None:
    """Cluster CPU utilisation and provisioned nodes per simulated hour, one line per policy."""
    usable = {p: (seed, s) for p, (seed, s) in series.items()
              if isinstance(s, dict) and (s.get("cpu_util") or s.get("nodes"))}
    if not usable:
        return None
    fig = _figure(8.0, 5.5)
    ax_cpu, ax_nodes = fig.subplots(2, 1, sharex=True)
    colours = colours or policy_colours(list(usable))
    for policy, (seed, s) in usable.items():
        color = colours.get(policy, "C9")
        label = f"{_short(policy)} (seed {seed})"
        if s.get("cpu_util"):
            ax_cpu.plot(np.arange(len(s["cpu_util"])), 100 * np.asarray(s["cpu_util"], float), color=color, label=label)
        if s.get("nodes"):
            ax_nodes.step(np.arange(len(s["nodes"])), np.asarray(s["nodes"], float), where="post", color=color,
                          label=label)
    ax_cpu.set_ylabel("cluster CPU utilisation (%)")
    ax_nodes.set_ylabel("provisioned nodes")
    ax_nodes.set_xlabel("hour of the span")
    ax_cpu.grid(alpha=0.3)
    ax_nodes.grid(alpha=0.3)
    ax_cpu.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside the data
    path = out / "timeseries.png"
    _save(fig, path)
    return Plot(path, "CPU utilisation and nodes over time",
                "Hourly means of cluster CPU utilisation and provisioned nodes (series_hourly), one seed per policy.")


def latency_cdf(out: Path, hists: dict[str, tuple[int, list]], colours: dict[str, str] | None = None) -> Plot | None:
    """CDF of latency-sensitive latency from ``latency_hist`` ([upper_edge_ms, count] pairs)."""
    fig = _figure(7.0, 4.0)
    ax = fig.add_subplot()
    drawn = 0
    colours = colours or policy_colours(list(hists))
    for policy, (seed, hist) in hists.items():
        try:
            arr = np.asarray(hist, dtype=float).reshape(-1, 2)
        except (TypeError, ValueError):
            continue
        arr = arr[np.isfinite(arr).all(axis=1) & (arr[:, 1] >= 0)]
        arr = arr[np.argsort(arr[:, 0])]
        total = arr[:, 1].sum()
        if total <= 0:
            continue
        cdf = np.cumsum(arr[:, 1]) / total
        color = colours.get(policy, "C9")
        ax.step(arr[:, 0], cdf, where="post", color=color, label=f"{_short(policy)} (seed {seed})")
        drawn += 1
    if not drawn:
        return None
    ax.set_xscale("log")
    ax.set_xlabel("latency of latency-sensitive pods (ms, bin upper edge)")
    ax.set_ylabel("fraction of samples")
    ax.set_ylim(0, 1.0)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside the data
    path = out / "latency_cdf.png"
    _save(fig, path)
    return Plot(path, "Latency CDF", "CDF of latency-sensitive pod latency (latency_hist), one seed per policy.")


def _matrix(rows) -> np.ndarray | None:
    """A [hour][node] list of lists as a float matrix, ragged rows padded with NaN."""
    try:
        rows = [np.asarray(r, dtype=float).ravel() for r in rows]
    except (TypeError, ValueError):
        return None
    width = max((len(r) for r in rows), default=0)
    if not rows or width == 0:
        return None
    m = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        m[i, : len(r)] = r
    return m


def node_heatmap(out: Path, policy: str, seed: int, rows, role: str, slots: list | None = None,
                 vmax: float | None = None) -> Plot | None:
    """Per-node utilisation over time (``node_util_hourly`` read as [hour][node slot]; None or NaN
    where a slot has no provisioned node, drawn blank). ``slots`` names the rows of the picture;
    ``vmax`` (percent) is the top of the colour scale, ``heatmap_scale``'s."""
    m = _matrix(rows)
    if m is None or not np.isfinite(m).any():
        return None
    top = vmax if vmax is not None else heatmap_scale([rows])[0]
    fig = _figure(8.0, 4.5)
    ax = fig.add_subplot()
    img = ax.imshow(100.0 * m.T, aspect="auto", origin="lower", interpolation="nearest", cmap="viridis",
                    vmin=0.0, vmax=top)
    bar = fig.colorbar(img, ax=ax, label="delivered CPU, % of allocatable")
    if top > 100.0:
        bar.ax.axhline(100.0, color="white", linewidth=1.2, linestyle="--")  # allocatable: all pods can get
        ticks = [t for t in range(0, 101, 20) if top - t > 8.0] + [top]  # the top tick: a node's cores
        bar.set_ticks(ticks, labels=[f"{t:.0f}" for t in ticks[:-1]] + [f"{top:.0f} cores"])
    ax.set_xlabel("hour of the span")
    if slots and len(slots) == m.shape[1] and len(slots) <= 40:
        ax.set_yticks(np.arange(len(slots)), [str(s) for s in slots], fontsize="x-small")
        ax.set_ylabel("node slot")
    else:
        ax.set_ylabel("node slot (index)")
    ax.set_title(f"{_short(policy, 40)} ({role}, seed {seed})")
    path = out / f"node_util_{_file_part(role)}.png"
    _save(fig, path)
    return Plot(path, f"Per-node utilisation: {policy}",
                f"Hourly CPU utilisation of a sample of node slots (node_util_hourly), {role} policy `{policy}`, "
                f"seed {seed}; blank: no node provisioned in that slot.")


HEATMAP_SCALE_NOTE = (
    "Heatmap colour: the CPU a node delivered in the hour (to its pods and its system daemons), as a share of "
    "its allocatable CPU. A node delivers at most its cores, allocatable + system overhead, so the scale "
    "ends at {top:.0f}%: the largest (cores / allocatable) of the nodes shown. 100% (dashed line on the "
    "scale) is the allocatable CPU, all its pods can get; the band above is its daemons' share, reached "
    "only by a saturated node. Both heatmaps share the scale.")
HEATMAP_SCALE_NOTE_OLD = (
    "Heatmap colour: the CPU a node delivered in the hour, as a share of its allocatable CPU, from 0 to "
    "{top:.0f}% (the records predate `node_util_ceiling`, so the scale ends at 100% or at the highest value "
    "shown). Both heatmaps share the scale.")


def heatmap_scale(matrices: list, ceilings: list | None = None) -> tuple[float, str]:
    """The heatmaps' common colour scale (percent) and the sentence that explains it. With the
    records' ``node_util_ceiling`` (a node's cores over its allocatable: delivered CPU cannot go
    above), the top is the largest ceiling: a saturated node is the top colour. Without (older
    records), 100% or the highest value shown."""
    limits = [float(c) for cs in (ceilings or []) if cs for c in cs if c is not None and np.isfinite(c)]
    if limits:
        top = 100.0 * max(max(limits), 1.0)
        return top, HEATMAP_SCALE_NOTE.format(top=top)
    top = 100.0
    for rows in matrices:
        m = _matrix(rows) if rows else None
        if m is not None and np.isfinite(m).any():
            top = max(top, float(np.nanmax(100.0 * m)))
    return top, HEATMAP_SCALE_NOTE_OLD.format(top=top)
