"""The grid's reports: summary.md/.csv, vs-default.md, plots/, report.md and report.html.

Every document is built once as a small list of blocks (``Doc``: headings, paragraphs, lists,
tables, images) and rendered to Markdown and to a self-contained HTML page from the same blocks,
so the two never disagree and no Markdown library is needed.
"""

from __future__ import annotations

import csv
import html
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from td3sched.evaluate.grid import GridResult, check_versions, versions_of, write_text_atomic
from td3sched.version import is_clean
from td3sched.evaluate.stats import CONFIDENCE, Summary, dominators, paired_difference, summarize

DEFAULT_POLICY = "k8s-default"

#: The case-study metrics of vs-default.md, in order: (name, what it is, which way is better).
KEY_METRICS: tuple[tuple[str, str, str], ...] = (
    ("cpu_util", "cluster CPU utilisation (fraction)", "higher"),
    ("fragmentation", "CPU fragmentation (fraction)", "lower"),
    ("latency_p99_ms", "p99 latency of latency-sensitive pods (ms)", "lower"),
    ("oom_per_week", "node OOM kills per week", "lower"),
    ("overload_node_frac", "share of node samples above 85% CPU", "lower"),
    ("sla_violations_per_1k_pods", "SLA violations per 1,000 pods", "lower"),
    ("pending_p99_s", "p99 pending time (s)", "lower"),
    ("node_hours", "provisioned node-hours", "lower"),
    ("cost_node_hours", "the objective: the cluster's cost (node-hours, reward.py)", "lower"),
    ("episode_reward", "episode reward of the RL environment", "higher"),
)
KEY_NAMES = tuple(m for m, _, _ in KEY_METRICS)
DIRECTION = {m: d for m, _, d in KEY_METRICS}
LABEL = {m: label for m, label, _ in KEY_METRICS}


# ---------------------------------------------------------------------------------------------
# Document model


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    align: list[str] | None = None  # "l" or "r" per column


@dataclass
class Doc:
    title: str
    blocks: list[tuple[str, object]] = field(default_factory=list)

    def h2(self, text: str) -> None:
        self.blocks.append(("h2", text))

    def h3(self, text: str) -> None:
        self.blocks.append(("h3", text))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def bullets(self, items: list[str]) -> None:
        if items:
            self.blocks.append(("ul", list(items)))

    def table(self, table: Table) -> None:
        self.blocks.append(("table", table))

    def image(self, src: str, alt: str, caption: str = "") -> None:
        self.blocks.append(("img", (src, alt, caption)))

    def extend(self, other: "Doc", shift: bool = True) -> None:
        """Append ``other``'s blocks (its title becomes an h2 when ``shift``)."""
        if shift:
            self.h2(other.title)
        for kind, value in other.blocks:
            self.blocks.append(("h3" if shift and kind == "h2" else kind, value))

    # -- rendering

    def markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for kind, value in self.blocks:
            if kind == "h2":
                out += [f"## {value}", ""]
            elif kind == "h3":
                out += [f"### {value}", ""]
            elif kind == "p":
                out += [str(value), ""]
            elif kind == "ul":
                out += [f"- {item}" for item in value] + [""]
            elif kind == "table":
                out += _md_table(value) + [""]
            elif kind == "img":
                src, alt, caption = value
                out += [f"![{alt}]({src})", ""]
                if caption:
                    out += [f"*{caption}*", ""]
        return "\n".join(out).rstrip() + "\n"

    def html(self, base: Path | None = None) -> str:
        """One self-contained page: images under ``base`` are inlined (base64), so the file can be
        mailed alone; consecutive figures share a grid."""
        body = [f"<h1>{_inline(self.title)}</h1>"]
        figures: list[str] = []
        for kind, value in self.blocks:
            if kind != "img" and figures:
                body.append('<div class="figures">' + "".join(figures) + "</div>")
                figures = []
            if kind in ("h2", "h3"):
                body.append(f"<{kind}>{_inline(str(value))}</{kind}>")
            elif kind == "p":
                body.append(f"<p>{_inline(str(value))}</p>")
            elif kind == "ul":
                body.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in value) + "</ul>")
            elif kind == "table":
                body.append(_html_table(value))
            elif kind == "img":
                src, alt, caption = value
                cap = f"<figcaption>{_inline(caption)}</figcaption>" if caption else ""
                figures.append(f'<figure><img src="{_image_src(src, base)}" alt="{html.escape(alt, quote=True)}">'
                               f"{cap}</figure>")
        if figures:
            body.append('<div class="figures">' + "".join(figures) + "</div>")
        return _PAGE.format(title=html.escape(self.title), body="\n".join(body))


def _image_src(src: str, base: Path | None) -> str:
    """A data: URI of the PNG ``base / src`` when it exists, else the link as it is."""
    import base64

    path = base / src if base is not None else None
    if path is not None and path.is_file() and path.suffix.lower() == ".png":
        return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    return html.escape(src, quote=True)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(t: Table) -> list[str]:
    align = t.align or ["l"] * len(t.header)
    lines = ["| " + " | ".join(_md_cell(h) for h in t.header) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
    return lines


_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_ITALIC = re.compile(r"(?<![*\w])\*([^*]+)\*(?![*\w])")


def _inline(text: str) -> str:
    """Markdown inline code, bold and italics to HTML; everything else escaped."""
    parts = _CODE.split(str(text))
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"<code>{html.escape(part)}</code>")
        else:
            s = html.escape(part)
            s = _BOLD.sub(r"<strong>\1</strong>", s)
            s = _ITALIC.sub(r"<em>\1</em>", s)
            out.append(s)
    return "".join(out)


def _html_table(t: Table) -> str:
    align = t.align or ["l"] * len(t.header)
    cls = lambda a: ' class="num"' if a == "r" else ""  # noqa: E731
    head = "".join(f"<th{cls(a)}>{_inline(h)}</th>" for h, a in zip(t.header, align))
    rows = "".join("<tr>" + "".join(f"<td{cls(a)}>{_inline(c)}</td>" for c, a in zip(row, align)) + "</tr>"
                   for row in t.rows)
    return f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 1200px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }}
h1, h2, h3 {{ line-height: 1.2; }}
h2 {{ border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 1.6em; }}
.table-wrap {{ max-width: 100%; overflow-x: auto; margin: 1em 0; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: .3em .6em; text-align: left; white-space: nowrap; }}
th {{ background: #f3f3f3; }}
td.num, th.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
tr:nth-child(even) td {{ background: #fafafa; }}
code {{ background: #f3f3f3; padding: 0 .25em; border-radius: 3px; }}
.figures {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(460px, 1fr)); gap: 1em; }}
figure {{ margin: 0; }}
figure img {{ max-width: 100%; border: 1px solid #eee; }}
figcaption {{ color: #555; font-size: 0.9em; }}
</style>
</head>
<body>
{body}
</body>
</html>
"""


# ---------------------------------------------------------------------------------------------
# Numbers


def fmt(x: float | None, sign: str = "") -> str:
    """A number for a table: thousands separators from 10,000 up, else 4 significant digits;
    ``sign="+"`` always shows the sign."""
    if x is None:
        return "n/a"
    if abs(x) >= 10000:
        return f"{x:{sign},.0f}"
    return f"{x:{sign}.4g}"


def fmt_signed(x: float | None) -> str:
    return fmt(x, "+")


def fmt_ci(s: Summary | None) -> str:
    """``mean ± half`` for a t interval, ``mean [low, high]`` for a bootstrap one, ``± n/a`` for none."""
    if s is None or s.mean is None:
        return "n/a"
    if s.low is None:
        return f"{fmt(s.mean)} ± n/a"
    if s.half is None:
        return f"{fmt(s.mean)} [{fmt(s.low)}, {fmt(s.high)}]"
    return f"{fmt(s.mean)} ± {fmt(s.half)}"


def bounded_at_zero(metric: str, values) -> bool:
    """Whether ``metric`` cannot be negative (times, counts, rates, fractions): its interval is then
    the bootstrap's (``stats.summarize``). Rewards, and any metric with a negative value, are not."""
    return "reward" not in metric and all(v >= 0 for v in values)


def metric_value(record: dict, name: str):
    """A metric of a run record: ``metrics[name]``, else a top-level field of that name, else None."""
    metrics = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
    if name in metrics:
        return metrics[name]
    return record.get(name) if name in ("episode_reward",) else None


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# ---------------------------------------------------------------------------------------------
# Analysis


@dataclass
class Analysis:
    result: GridResult
    policies: list[str]
    metrics: list[str]
    values: dict[str, dict[str, dict[int, float]]]  # policy -> metric -> seed -> value
    stats: dict[str, dict[str, Summary]]  # policy -> metric -> summary
    missing_metrics: list[str]

    @property
    def has_default(self) -> bool:
        return DEFAULT_POLICY in self.policies

    def first_record(self, policy: str) -> tuple[int, dict] | None:
        """The run of ``policy`` with the lowest seed (seed 1 unless it failed)."""
        seeds = sorted(s for p, s in self.result.records if p == policy)
        return (seeds[0], self.result.records[(policy, seeds[0])]) if seeds else None

    def best_policy(self) -> tuple[str | None, str]:
        """The best non-default policy and the rule that chose it; never a hindsight bound (oracle)."""
        from td3sched.policy import REFERENCE_POLICIES

        others = [p for p in self.policies if p != DEFAULT_POLICY and p.partition(":")[0] not in REFERENCE_POLICIES
                  and any(s.mean is not None for s in self.stats[p].values())]
        if not others:
            return None, "no policy other than the default has results"

        def mean(p, m):
            s = self.stats[p].get(m)
            return s.mean if s and s.mean is not None else None

        costed = [p for p in others if mean(p, "cost_node_hours") is not None]
        if costed:
            return min(costed, key=lambda p: mean(p, "cost_node_hours")), "lowest mean cost (node-hours) besides the default"
        rewarded = [p for p in others if mean(p, "episode_reward") is not None]
        if rewarded:
            return max(rewarded, key=lambda p: mean(p, "episode_reward")), "highest mean episode_reward besides the default"
        scored = [p for p in others if mean(p, "sla_violations_per_1k_pods") is not None]
        if scored:
            best = min(scored, key=lambda p: (mean(p, "sla_violations_per_1k_pods"), -(mean(p, "cpu_util") or 0.0)))
            return best, "fewest mean sla_violations_per_1k_pods (episode_reward not in the records), then highest cpu_util"
        return others[0], "first policy with results"


def analyse(result: GridResult) -> Analysis:
    policies = list(result.spec.policies)
    names: list[str] = list(KEY_NAMES)
    for (p, _seed), record in sorted(result.records.items(), key=lambda kv: kv[0][1]):
        if p not in policies or not isinstance(record.get("metrics"), dict):
            continue
        for k, v in record["metrics"].items():
            if k not in names and _is_number(v):
                names.append(k)
    values: dict[str, dict[str, dict[int, float]]] = {p: {m: {} for m in names} for p in policies}
    for (p, seed), record in result.records.items():
        if p not in values:
            continue
        for m in names:
            v = metric_value(record, m)
            if _is_number(v):
                values[p][m][seed] = float(v)
    present = [m for m in names if any(values[p][m] for p in policies)]
    missing = [m for m in KEY_NAMES if m not in present]
    metrics = [m for m in names if m in present]
    zero = {m: bounded_at_zero(m, [v for p in policies for v in values[p][m].values()]) for m in names}
    stats = {p: {m: summarize(values[p][m].values(), lower_bound=0.0 if zero[m] else None) for m in names}
             for p in policies}
    return Analysis(result, policies, metrics, values, stats, missing)


# ---------------------------------------------------------------------------------------------
# Documents


def _setup_line(result: GridResult) -> str:
    spec = result.spec
    ov = ", ".join(f"`{o}`" for o in spec.overrides) if spec.overrides else "none"
    return (f"Scenario `{spec.scenario}`, span `{spec.span}`, seeds 1..{spec.seeds}, overrides: {ov}. "
            f"Values are means over seeds with their {CONFIDENCE:.0%} confidence interval: `mean [low, high]`, the "
            f"percentile bootstrap of the mean, for metrics that cannot be negative (skewed across seeds: a "
            f"t interval would reach below 0); `mean ± half-width` (Student t, n-1 degrees of freedom) for the "
            f"others.")


def summary_doc(a: Analysis) -> tuple[Doc, str]:
    """summary.md (rows: metrics, columns: policies) and summary.csv (one row per policy x metric)."""
    spec = a.result.spec
    doc = Doc(f"Summary: {spec.scenario} / {spec.span}")
    doc.p(_setup_line(a.result))
    if spec.seeds == 1:
        doc.p(f"**One seed:** the {CONFIDENCE:.0%} interval is undefined with a single seed (shown as `± n/a`); "
              f"run with `--seeds 2` or more for intervals.")
    short = [p for p in a.policies if any(a.stats[p][m].n < spec.seeds for m in a.metrics if a.stats[p][m].n)]
    rows = []
    for m in a.metrics:
        row = [f"`{m}`"]
        for p in a.policies:
            s = a.stats[p][m]
            cell = fmt_ci(s)
            if 0 < s.n < spec.seeds:
                cell += f" (n={s.n})"
            row.append(cell)
        rows.append(row)
    doc.table(Table(["metric", *[f"`{p}`" for p in a.policies]], rows, ["l"] + ["r"] * len(a.policies)))
    notes = []
    if short:
        notes.append(f"Fewer runs than seeds for: {', '.join(f'`{p}`' for p in short)} (failed runs; see the report).")
    for m in a.missing_metrics:
        notes.append(f"`{m}` is not in the run records yet: left out.")
    if "decisions" in a.metrics and "binds" in a.metrics:
        from td3sched.metrics.collector import DECISIONS_AND_BINDS

        notes.append(f"`decisions` and `binds`: {DECISIONS_AND_BINDS}.")
    for p in a.policies:
        if not any(a.values[p][m] for m in a.metrics):
            notes.append(f"`{p}`: no successful run.")
    doc.bullets(notes)

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["policy", "metric", "n", "mean", "std", "ci95_half", "ci95_low", "ci95_high", "ci_method"])
    for p in a.policies:
        for m in a.metrics:
            s = a.stats[p][m]
            w.writerow([p, m, s.n, *("" if v is None else repr(v) for v in (s.mean, s.std, s.half, s.low, s.high)),
                        s.method if s.low is not None else ""])
    return doc, buf.getvalue()


def _verdict(metric: str, diff: Summary) -> str:
    excl = diff.excludes_zero()
    if excl is None:
        return ""
    if not excl:
        return "≈"
    better = (diff.mean > 0) == (DIRECTION.get(metric, "higher") == "higher")
    return "better" if better else "worse"


def vs_default_doc(a: Analysis) -> Doc:
    """vs-default.md: rows = case-study metrics; columns = k8s-default, then per policy its value,
    the change vs the default (paired by seed, with its interval) and the relative change."""
    spec = a.result.spec
    doc = Doc(f"Policies vs the default kube-scheduler: {spec.scenario} / {spec.span}")
    if not a.has_default:
        doc.p(f"**No comparison:** the grid has no `{DEFAULT_POLICY}` (the default kube-scheduler), which this "
              f"table compares against. Add it, e.g. `--policies {DEFAULT_POLICY},{','.join(a.policies)}`.")
        return doc
    doc.p(_setup_line(a.result))
    doc.p("Δ is the policy minus the default, paired by seed (the same seed gives both the same workload), "
          f"± the half-width of its {CONFIDENCE:.0%} interval. Δ% is relative to the default's mean. "
          "*better*/*worse*: the interval of Δ excludes 0 in the better/worse direction (↑ higher is better, "
          "↓ lower is better); ≈: it includes 0. Without intervals (one seed) no verdict is given.")
    others = [p for p in a.policies if p != DEFAULT_POLICY]
    header = ["metric", f"`{DEFAULT_POLICY}`"]
    align = ["l", "r"]
    for p in others:
        header += [f"`{p}`", f"Δ `{p}`", f"Δ% `{p}`"]  # each delta column names its policy
        align += ["r", "r", "r"]
    rows = []
    for m in KEY_NAMES:
        arrow = "↑" if DIRECTION[m] == "higher" else "↓"
        base = a.stats[DEFAULT_POLICY][m]
        row = [f"`{m}` {arrow}", fmt_ci(base)]
        for p in others:
            s = a.stats[p][m]
            diff = paired_difference(a.values[DEFAULT_POLICY][m], a.values[p][m])
            if s.mean is None or base.mean is None:
                row += [fmt_ci(s), "n/a", "n/a"]
                continue
            delta = s.mean - base.mean
            d_cell = fmt_signed(delta) + (f" ± {fmt(diff.half)}" if diff.half is not None else "")
            if base.mean != 0:
                pct = f"{100.0 * delta / abs(base.mean):+.1f}%"
            else:
                pct = "0.0%" if delta == 0 else "n/a (default is 0)"
            verdict = _verdict(m, diff)
            row += [fmt_ci(s), d_cell, pct + (f" {verdict}" if verdict else "")]
        rows.append(row)
    doc.table(Table(header, rows, align))
    notes = [f"`{m}` is not in the run records yet (the row stays n/a)." for m in a.missing_metrics]
    if not others:
        notes.append("The grid has only the default policy: nothing to compare yet.")
    doc.bullets(notes)
    return doc


LEARNED_FAMILIES = ("td3",)
"""Policy families whose spec names a trained model: the head-to-head table is theirs."""
SAFETY_METRICS = ("latency_p99_ms", "oom_per_week", "overload_node_frac", "pending_p99_s")
"""Shown beside the objective in the head-to-head table: what a cheaper cluster may have paid with."""
PARETO_METRICS = ("node_hours", "latency_p99_ms", "oom_per_week", "fragmentation")
"""The trade-off the case study's goals pull apart (every one lower is better): what the cluster costs
against what its pods suffer and what it wastes. The first is the figure's x axis."""


def objective_metric(a: Analysis) -> str | None:
    """The metric policies are ranked by: the cost (node-hours) when the records have it, else the
    episode reward; None when they have neither."""
    for m in ("cost_node_hours", "episode_reward"):
        if m in a.metrics:
            return m
    return None


def _paired_cell(a: Analysis, base: str, other: str, metric: str) -> tuple[str, Summary]:
    """``other - base`` on ``metric``, paired by seed, as ``+x ± half`` (or ``+x ± n/a``)."""
    diff = paired_difference(a.values[base][metric], a.values[other][metric])
    if diff.mean is None:
        return "n/a", diff
    return fmt_signed(diff.mean) + (f" ± {fmt(diff.half)}" if diff.half is not None else " ± n/a"), diff


def head_to_head_doc(a: Analysis) -> Doc | None:
    """head-to-head.md: each learned policy against every other policy of the grid on the objective,
    paired by seed, with the safety metrics beside it, and whether it beats them all. None when the
    grid has no learned policy or its records no objective."""
    from td3sched.policy import REFERENCE_POLICIES

    learned = [p for p in a.policies if p.partition(":")[0] in LEARNED_FAMILIES]
    objective = objective_metric(a)
    if not learned or objective is None:
        return None
    spec = a.result.spec
    arrow = "↑" if DIRECTION[objective] == "higher" else "↓"
    doc = Doc(f"The learned policies against every other policy: {spec.scenario} / {spec.span}")
    doc.p(f"Each learned policy minus each other policy, paired by seed (the same seed gives both the same "
          f"workload), ± the half-width of its {CONFIDENCE:.0%} interval, on the objective `{objective}` {arrow} "
          f"and on the safety metrics. *wins*/*loses*: the objective's interval excludes 0 in the learned "
          f"policy's favour/against it; *level*: it includes 0; no verdict without intervals (one seed). A "
          f"hindsight bound (`oracle`) is shown for scale, not competed with.")
    safety = [m for m in SAFETY_METRICS if m in a.metrics]
    for p in learned:
        others = [o for o in a.policies if o != p]
        rows, verdicts = [], {}
        for o in others:
            cell, diff = _paired_cell(a, o, p, objective)
            excl = diff.excludes_zero()
            if excl is None:
                verdict = ""
            elif not excl:
                verdict = "level"
            else:
                verdict = "wins" if (diff.mean > 0) == (DIRECTION[objective] == "higher") else "loses"
            bound = o.partition(":")[0] in REFERENCE_POLICIES
            if not bound:
                verdicts[o] = verdict
            base = a.stats[o][objective].mean
            pct = f"{100.0 * diff.mean / abs(base):+.1f}%" if diff.mean is not None and base else "n/a"
            rows.append([f"`{o}`" + (" (bound)" if bound else ""), fmt_ci(a.stats[o][objective]), cell, pct,
                         verdict, *(_paired_cell(a, o, p, m)[0] for m in safety)])
        doc.h3(f"`{p}`")
        competitors = list(verdicts)
        if not competitors:
            doc.p("No other competing policy in the grid.")
        elif any(v == "" for v in verdicts.values()):
            doc.p(f"Beats every other policy on `{objective}` with an interval that excludes 0: not decided (one "
                  f"seed gives no interval).")
        else:
            if all(v == "wins" for v in verdicts.values()):
                answer = f"**yes**, all {len(competitors)}"
            else:
                parts = []
                for verdict, words in (("loses", "loses to"), ("level", "level with"), ("wins", "wins against")):
                    names = [f"`{o}`" for o in competitors if verdicts[o] == verdict]
                    if names:
                        parts.append(f"{words} {', '.join(names)}")
                answer = "**no**: " + "; ".join(parts)
            doc.p(f"Beats every other policy on `{objective}` with an interval that excludes 0: {answer}.")
        header = ["against", f"its `{objective}`", f"Δ `{objective}`", "Δ%", "verdict",
                  *(f"Δ `{m}`" for m in safety)]
        doc.table(Table(header, rows, ["l", "r", "r", "r", "l"] + ["r"] * len(safety)))
    return doc


ATTEMPT_METRICS = ("pods_arrived", "decisions", "binds", "attempts_per_pod", "unschedulable")


def attempts_doc(a: Analysis) -> Doc | None:
    """Decisions beside binds, per policy (means over seeds): retries explain the gap. None when the
    records have no ``binds``."""
    from td3sched.metrics.collector import DECISIONS_AND_BINDS

    if "decisions" not in a.metrics or "binds" not in a.metrics:
        return None
    doc = Doc("Scheduling attempts: decisions and binds")
    doc.p(f"Means over seeds. {DECISIONS_AND_BINDS[0].upper()}{DECISIONS_AND_BINDS[1:]} (*retries*). "
          "`pods_arrived` counts the pods already running when the span starts (placed before it: no decision "
          "in the span) and those arriving in it; `attempts_per_pod` is decisions / pods arrived; "
          "`unschedulable`: pods still waiting at the end.")
    shown = [m for m in ATTEMPT_METRICS if m in a.metrics]
    header = ["policy", *(f"`{m}`" for m in shown[:3]), "retries (decisions - binds)", *(f"`{m}`" for m in shown[3:])]
    mean = lambda p, m: a.stats[p][m].mean  # noqa: E731
    rows = []
    for p in a.policies:
        d, b = mean(p, "decisions"), mean(p, "binds")
        retries = fmt(d - b) if d is not None and b is not None else "n/a"
        rows.append([f"`{p}`", *(fmt(mean(p, m)) for m in shown[:3]), retries, *(fmt(mean(p, m)) for m in shown[3:])])
    doc.table(Table(header, rows, ["l"] + ["r"] * (len(header) - 1)))
    return doc


@dataclass
class ReportFiles:
    summary_md: Path
    summary_csv: Path
    vs_default_md: Path
    report_md: Path
    report_html: Path
    plots: list[Path]
    notes: list[str]
    head_to_head_md: Path | None = None
    """None: the grid has no learned policy."""


def make_plots(a: Analysis, out: Path):
    from td3sched.evaluate import plots as P

    plots_dir = out / "plots"
    for stale in plots_dir.glob("*.png"):  # figures of an earlier invocation that may not apply now
        stale.unlink()
    result = P.Plots()
    colours = P.policy_colours(a.policies)  # one colour per policy in every figure
    zero = []
    for m in a.metrics:
        if m not in KEY_NAMES:
            continue
        plot = P.metric_bars(plots_dir, m, LABEL.get(m, m), a.policies, {p: a.stats[p][m] for p in a.policies},
                             colours)
        if plot:
            result.items.append(plot)
        else:
            zero.append(m)
    if zero:
        result.notes.append(f"No figure for {', '.join(f'`{m}`' for m in zero)}: 0 for every policy.")
    firsts = {p: a.first_record(p) for p in a.policies}
    firsts = {p: v for p, v in firsts.items() if v is not None}
    series = {p: (seed, rec.get("series_hourly")) for p, (seed, rec) in firsts.items()}
    plot = P.time_series(plots_dir, series, colours)
    if plot:
        result.items.append(plot)
    else:
        result.notes.append("CPU utilisation / nodes over time: skipped, no run record has `series_hourly`.")
    front = {p for p, d in dominators(pareto_points(a)).items() if not d}
    cost, *others = ((m, LABEL.get(m, m)) for m in PARETO_METRICS)
    plot = P.pareto(plots_dir, cost, others, a.policies, a.stats, front, colours)
    if plot:
        result.items.append(plot)
    else:
        result.notes.append(f"Pareto front: skipped, fewer than two policies have {', '.join(PARETO_METRICS)}.")
    hists = {p: (seed, rec["latency_hist"]) for p, (seed, rec) in firsts.items() if rec.get("latency_hist")}
    plot = P.latency_cdf(plots_dir, hists, colours) if hists else None
    if plot:
        result.items.append(plot)
    else:
        result.notes.append("Latency CDF: skipped, the run records have no `latency_hist` "
                            "([upper_edge_ms, count] pairs) yet.")
    best, rule = a.best_policy()
    drawn = []
    roles = [(role, policy) for role, policy in (("default", DEFAULT_POLICY if a.has_default else None),
                                                 ("best", best)) if policy is not None and policy in firsts]
    vmax, scale_note = P.heatmap_scale([firsts[policy][1].get("node_util_hourly") for _, policy in roles],
                                       [firsts[policy][1].get("node_util_ceiling") for _, policy in roles])
    for role, policy in roles:
        seed, rec = firsts[policy]
        rows = rec.get("node_util_hourly")
        plot = P.node_heatmap(plots_dir, policy, seed, rows, role, rec.get("node_util_slots"), vmax) if rows else None
        if plot:
            plot.caption += " " + scale_note
            result.items.append(plot)
            drawn.append(policy)
    if not drawn:
        result.notes.append("Per-node utilisation heatmaps: skipped, the run records have no `node_util_hourly` "
                            "(a list per hour of per-node utilisation) yet.")
    elif best is not None:
        result.notes.append(f"Heatmap 'best' policy: `{best}` ({rule}).")
    return result


def pareto_points(a: Analysis) -> dict[str, tuple[float, ...]]:
    """Each policy's means of ``PARETO_METRICS`` (policies missing one are left out)."""
    points = {}
    for p in a.policies:
        means = [a.stats[p][m].mean if m in a.stats[p] else None for m in PARETO_METRICS]
        if all(x is not None for x in means):
            points[p] = tuple(means)
    return points


def pareto_doc(a: Analysis) -> Doc | None:
    """The policies on the Pareto front of ``PARETO_METRICS`` (means), and what dominates the others.
    None when the records lack one of the metrics or fewer than two policies have them all."""
    points = pareto_points(a)
    if len(points) < 2:
        return None
    doms = dominators(points)
    doc = Doc("Trade-offs")
    doc.p(f"Which policies no other beats on {', '.join(f'`{m}`' for m in PARETO_METRICS)} at once (means over "
          "seeds, every one lower is better): *front* is a policy on that Pareto front; otherwise the policies that "
          "are no worse on all four and better on one. A goal a policy misses against the default is limited by "
          "this front: to gain on one metric a policy on it gives up another. The means only: a point behind "
          "another by less than their intervals is not shown to be behind (`summary.md` has the intervals).")
    rows = [[f"`{p}`", *(fmt(x) for x in xs), "front" if not doms[p] else "behind " + ", ".join(f"`{d}`" for d in doms[p])]
            for p, xs in points.items()]
    doc.table(Table(["policy", *(f"`{m}`" for m in PARETO_METRICS), "Pareto"], rows, ["l"] + ["r"] * 4 + ["l"]))
    return doc


def report_doc(a: Analysis, summary: Doc, vs_default: Doc, plots, out: Path, head_to_head: Doc | None = None) -> Doc:
    r = a.result
    spec = r.spec
    doc = Doc(f"Evaluation report: {spec.scenario} / {spec.span}")
    versions = versions_of(r.records.values())
    span_days = f"days {spec.span_s[0] / 86400:g} to {spec.span_s[1] / 86400:g}"
    if spec.ray is None:
        backend = f"local processes ({spec.workers} workers)"
    elif spec.ray in ("", "local"):
        backend = f"Ray, local instance ({spec.workers} CPUs)"
    else:
        backend = f"Ray at `{spec.ray}`"
    run_wall = sum(float((rec.get("runtime") or {}).get("wall_s", 0.0) or 0.0) for rec in r.records.values())
    rows = [
        ["scenario", f"`{spec.scenario}`"],
        ["overrides", ", ".join(f"`{o}`" for o in spec.overrides) if spec.overrides else "none"],
        ["span", f"`{spec.span}` ({span_days})"],
        ["seeds", f"1..{spec.seeds} ({spec.seeds} per policy)"],
        ["policies", ", ".join(f"`{p}`" for p in spec.policies)
         + ("; skipped from `all`: " + "; ".join(f"`{n}` ({why})" for n, why in spec.skipped) if spec.skipped else "")],
        ["code version", _version_cell(versions)],
        ["backend", backend],
        ["grid wall-clock", f"{r.wall_s:,.1f} s (this invocation, {r.started_at} to {r.finished_at})"],
        ["runs", f"{len(spec.tasks())} in the grid: {len(r.computed)} computed now, {len(r.reused)} reused from "
                 f"earlier invocations, {len(r.failures)} failed"],
        ["simulation time of the runs", f"{run_wall:,.1f} s (sum of the records' `runtime.wall_s`)"],
    ]
    doc.h2("Setup")
    doc.table(Table(["item", "value"], rows, ["l", "l"]))
    if len(versions) > 1:
        doc.p(f"**Mixed code versions** (`--mixed-versions`): the runs come from {len(versions)} code versions "
              f"(runs on disk from an earlier invocation are reused as they are). Move `{spec.out / 'runs'}` away "
              "and rerun to make them all with one.")
    if any(not is_clean(v) for v in versions):
        doc.p("**Uncommitted code:** a version marked `.dirty` ran with local changes to the package, so no commit "
              "reproduces it; commit, then rerun, before committing this report.")
    if r.failures:
        doc.h2("Failed runs")
        doc.bullets([f"`{p}` seed {s}: {e}" for (p, s), e in sorted(r.failures.items())])
        doc.p("Their tracebacks are in `runs/*.error.txt`; rerunning the same command retries only them.")
    doc.extend(vs_default)
    if head_to_head is not None:
        doc.extend(head_to_head)
    trade_offs = pareto_doc(a)
    if trade_offs is not None:
        doc.extend(trade_offs)
    attempts = attempts_doc(a)
    if attempts is not None:
        doc.extend(attempts)
    doc.extend(summary)
    doc.h2("Plots")
    for plot in plots.items:
        doc.image(plot.path.relative_to(out).as_posix(), plot.title, plot.caption)
    notes = list(plots.notes)
    doc.bullets(notes)
    doc.h2("Files")
    doc.bullets(["`grid.json`: the grid's arguments and its last invocation",
                 "`runs/<policy>__seed<k>.json`: one record per run (what `td3sched simulate --out` writes)",
                 "`summary.md`, `summary.csv`: every metric per policy, mean and interval",
                 "`vs-default.md`: the case-study table against the default kube-scheduler",
                 *(["`head-to-head.md`: each learned policy against every other, on the objective"]
                   if head_to_head is not None else []),
                 "`plots/*.png`: the figures above (inlined in `report.html`, which stands alone)"])
    return doc


def _version_cell(versions: dict[str, int]) -> str:
    """The code version, once: the one version, or each with its number of runs when mixed."""
    if not versions:
        return "n/a (no run record)"
    if len(versions) == 1:
        return f"`{next(iter(versions))}`"
    return "; ".join(f"`{v}` ({n} run{'s' if n != 1 else ''})" for v, n in versions.items())


def write_reports(result: GridResult) -> ReportFiles:
    """Write every report of ``result``; a MixedVersionsError (nothing written) when its runs come from
    more than one code version and the grid did not allow it."""
    out = result.spec.out
    check_versions(result.spec, result.records.values())
    a = analyse(result)
    summary, summary_csv = summary_doc(a)
    vs = vs_default_doc(a)
    h2h = head_to_head_doc(a)
    plots = make_plots(a, out)
    report = report_doc(a, summary, vs, plots, out, h2h)
    files = ReportFiles(out / "summary.md", out / "summary.csv", out / "vs-default.md", out / "report.md",
                        out / "report.html", [p.path for p in plots.items], plots.notes,
                        out / "head-to-head.md" if h2h is not None else None)
    write_text_atomic(files.summary_md, summary.markdown())
    write_text_atomic(files.summary_csv, summary_csv)
    write_text_atomic(files.vs_default_md, vs.markdown())
    if h2h is not None:
        write_text_atomic(files.head_to_head_md, h2h.markdown())
    write_text_atomic(files.report_md, report.markdown())
    write_text_atomic(files.report_html, report.html(out))
    return files
