"""The discrimination table and the ranking of policies under other weightings of the objective,
from the run records of `td3sched evaluate` folders or the rows of `td3sched rehearse` folders (no
rerun: the cost's components are in each record, weighted with the default weights of reward.py).

    python benchmarks/rerank.py DIR [DIR ...] [--node-hour 0.5,1,2] [--overload 5,10,20]
                                [--slo-hour 0,1] [--against POLICY] [--pareto FILE.png]

An evaluate folder gives its policies' runs by seed; a rehearsal folder its model's runs (``DIR:frozen``,
and ``DIR:rolling`` when a candidate was promoted) and its references', by (period, seed). Prints the code
version(s) of the runs, then per policy the mean and a 95% interval (t, over its runs) of cpu_util,
fragmentation, P99, OOM kills, the hours latency-sensitive pods spent above their SLO, the nodes' cost
(node-hours) and the cost; then, for each weighting, the policies ranked by mean cost, lowest first, and with
``--against``, each policy's paired difference to that one (its runs minus the other's, over the runs
both have). A weight w' for a component whose default is w scales that component by w'/w; ``slo_hour``
prices each run's hours above the SLO (``latency_breach_hours``) in place of what its own run charged;
every other weight stays at its default. ``--pareto`` draws each policy's mean over its runs: the nodes'
cost against the hours above the SLO, P99, OOM kills and fragmentation, one panel each.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from td3sched.evaluate.stats import paired_difference, summarize
from td3sched.reward import RewardConfig

METRICS = ("cpu_util", "fragmentation", "latency_p99_ms", "oom_kills_total", "latency_breach_hours", "cost_nodes",
           "cost_node_hours")


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t interval (evaluate.stats, as the reports; 0 for one value)."""
    summary = summarize(values)
    return summary.mean, summary.half or 0.0


def load(folder: Path, runs: dict, versions: set) -> None:
    """Add ``folder``'s runs to ``runs`` (policy -> run key -> metrics) and their code versions to ``versions``."""
    rows_file = folder / "rows.jsonl"
    if rows_file.is_file():
        settings = json.loads((folder / "rehearsal.json").read_text())
        versions.add(settings.get("code_version"))
        rows = [json.loads(line) for line in rows_file.read_text().splitlines() if line.strip()]
        promoted = any(r.get("gate", {}).get("promote") for r in rows)
        for r in rows:
            for seed, by_who in r["runs"].items():
                for who, metrics in by_who.items():
                    if who == "rolling" and not promoted:
                        continue  # the frozen model's runs, every one
                    name = f"{folder.name}:{who}" if who in ("frozen", "rolling") else who
                    runs[name][(r["day"], int(seed))] = metrics
        return
    files = sorted((folder / "runs").glob("*.json"))
    if not files:
        raise SystemExit(f"{folder}: no run records under runs/ and no rows.jsonl: expected an evaluate or a "
                         "rehearse --out folder")
    for f in files:
        r = json.loads(f.read_text())
        versions.add(r["code_version"])
        runs[r["policy"]][r["seed"]] = r["metrics"]


def cost(m: dict, node_hour: float, overload: float, slo_hour: float | None) -> float:
    """The run's cost with node-hours and overload weighted anew and, unless ``slo_hour`` is None, its hours
    above the SLO priced at ``slo_hour`` in place of what its run charged for them."""
    default = RewardConfig()
    c = m["cost_node_hours"] + (node_hour / default.node_hour - 1.0) * m["cost_nodes"] \
        + (overload / default.overload - 1.0) * m["cost_overload"]
    if slo_hour is not None:
        c += slo_hour * m["latency_breach_hours"] - m.get("cost_slo_time", 0.0)
    return c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="+", help="evaluate or rehearse --out folders")
    ap.add_argument("--node-hour", default="0.5,1,2", help="node_hour weights to rank under (default 0.5,1,2)")
    ap.add_argument("--overload", default="10", help="overload weights to rank under (default 10)")
    ap.add_argument("--slo-hour", default=None, help="slo_hour weights to rank under (default: as each run priced "
                    "them); needs runs that report latency_breach_hours")
    ap.add_argument("--against", default=None, help="a policy each is compared with, paired by run")
    ap.add_argument("--pareto", type=Path, default=None, help="a PNG of the policies' means: the nodes' cost "
                    "against the tail and fragmentation")
    args = ap.parse_args(argv)
    runs: dict[str, dict] = defaultdict(dict)
    versions: set = set()
    for folder in args.results:
        load(folder, runs, versions)
    print("code version(s):", ", ".join(sorted(str(v) for v in versions)),
          f"({sum(len(r) for r in runs.values())} runs)")
    if args.against is not None and args.against not in runs:
        print(f"--against {args.against!r}: no such policy; expected one of {sorted(runs)}", file=sys.stderr)
        return 2
    slo_hours = [None] if args.slo_hour is None else [float(x) for x in args.slo_hour.split(",")]
    if slo_hours != [None] and any("latency_breach_hours" not in m for by in runs.values() for m in by.values()):
        print("--slo-hour: some runs do not report latency_breach_hours (run before it existed)", file=sys.stderr)
        return 2
    print("| policy | runs | " + " | ".join(METRICS) + " |")
    print("|---|---|" + "---|" * len(METRICS))
    for policy, by in sorted(runs.items()):
        cells = []
        for k in METRICS:
            values = [m[k] for m in by.values() if k in m]
            mean, half = interval(values) if values else (float("nan"), 0.0)
            cells.append(f"{mean:.4g} +/- {half:.2g}")
        print(f"| {policy} | {len(by)} | " + " | ".join(cells) + " |")
    for nh in (float(x) for x in args.node_hour.split(",")):
        for ov in (float(x) for x in args.overload.split(",")):
            for sh in slo_hours:
                costs = {p: {k: cost(m, nh, ov, sh) for k, m in by.items()} for p, by in runs.items()}
                means = {p: interval(list(c.values())) for p, c in costs.items()}
                ranked = sorted(means, key=lambda p: means[p][0])
                label = f"node_hour {nh:g}, overload {ov:g}" + ("" if sh is None else f", slo_hour {sh:g}")
                print(f"{label}: " + " < ".join(f"{p} {means[p][0]:,.0f} (+/- {means[p][1]:,.0f})" for p in ranked))
                if args.against is not None:
                    for p in ranked:
                        if p != args.against:
                            d = paired_difference(costs[args.against], costs[p])
                            span = "" if d.low is None else f" [{d.low:,.1f}, {d.high:,.1f}]"
                            print(f"    {p} - {args.against}: {d.mean:+,.1f}{span} a run ({d.n} pairs)")
    if args.pareto is not None:
        pareto(runs, args.pareto)
        print(f"figure: {args.pareto}")
    return 0


PARETO = (("latency_breach_hours", "hours above the latency SLO"), ("latency_p99_ms", "P99 latency (ms)"),
          ("oom_kills_total", "OOM kills"), ("fragmentation", "fragmentation"))


def pareto(runs: dict, path: Path) -> None:
    """Each policy's mean over its runs, the nodes' cost (x) against each of ``PARETO`` (y): lower-left is
    better on both axes."""
    from td3sched.evaluate.plots import _figure, _save

    fig = _figure(11.0, 8.0)
    axes = fig.subplots(2, 2).ravel()
    for ax, (metric, label) in zip(axes, PARETO):
        for i, (policy, by) in enumerate(sorted(runs.items())):
            ms = list(by.values())
            x = sum(m["cost_nodes"] for m in ms) / len(ms)
            y = sum(m[metric] for m in ms) / len(ms)
            ax.scatter([x], [y], color=f"C{i % 10}", marker="os^D"[i // 10 % 4],  # 40 policies apart
                       label=policy if ax is axes[0] else None)
        ax.set_xlabel("nodes' cost a run (node-hours)")
        ax.set_ylabel(f"{label}, mean a run")
        ax.grid(alpha=0.3)
    fig.legend(loc="outside lower center", ncols=2, fontsize=7)
    _save(fig, path)


if __name__ == "__main__":
    sys.exit(main())
