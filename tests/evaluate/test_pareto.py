"""The trade-offs section and figure: which policies no other beats on node-hours, P99, OOM kills and
fragmentation at once (the learning issue's "show what limits it"), read off made-up runs."""

from __future__ import annotations

from types import SimpleNamespace

from td3sched.evaluate import plots as P
from td3sched.evaluate.report import PARETO_METRICS, Analysis, pareto_doc, pareto_points
from td3sched.evaluate.stats import dominators, summarize


def test_a_point_is_behind_exactly_the_points_no_worse_everywhere_and_better_somewhere():
    points = {"a": (1, 5), "b": (2, 2), "c": (3, 3), "d": (2, 2), "e": (1, 6), "f": (4, 1)}
    assert dominators(points) == {"a": [], "b": [], "c": ["b", "d"], "d": [], "e": ["a"], "f": []}
    # equal points do not dominate each other (b and d); one coordinate leaves only its minima on the front
    assert {k for k, v in dominators({"x": (2,), "y": (1,), "z": (1,)}).items() if not v} == {"y", "z"}


def _analysis(means: dict[str, tuple[float, ...]], seeds: int = 3) -> Analysis:
    """Made-up runs: each policy's PARETO_METRICS at ``means`` give or take 1% over the seeds."""
    policies = list(means)
    values = {p: {m: {s: x * (1 + 0.01 * (s - 2)) for s in range(1, seeds + 1)} for m, x in zip(PARETO_METRICS, xs)}
              for p, xs in means.items()}
    stats = {p: {m: summarize(v.values(), lower_bound=0.0) for m, v in values[p].items()} for p in policies}
    result = SimpleNamespace(spec=SimpleNamespace(scenario="made-up", span="test"))
    return Analysis(result, policies, list(PARETO_METRICS), values, stats, [])


MEANS = {  # node-hours, P99 ms, OOM/week, fragmentation
    "k8s-default": (37_600, 157, 0.8, 0.15),
    "fgd": (31_000, 371, 3.5, 0.023),
    "td3:runs/x": (31_100, 435, 7.4, 0.051),    # fgd is no worse anywhere and better everywhere
    "static-weights:w=1/0/0/0:tau=0.4": (32_900, 205, 0.28, 0.10),
}


def test_the_section_names_the_front_and_who_is_ahead_of_the_rest():
    doc = pareto_doc(_analysis(MEANS))
    rows = {r[0]: r for kind, t in doc.blocks if kind == "table" for r in t.rows}
    assert rows["`td3:runs/x`"][-1] == "behind `fgd`"
    assert [r[-1] for name, r in rows.items() if name != "`td3:runs/x`"] == ["front"] * 3
    assert pareto_doc(_analysis({"fgd": MEANS["fgd"]})) is None  # nothing to trade off against
    partial = _analysis(MEANS)
    del partial.stats["fgd"]["oom_per_week"]
    assert "fgd" not in pareto_points(partial)


def test_the_figure_draws_one_panel_per_metric_and_needs_two_policies(tmp_path):
    a = _analysis(MEANS)
    cost, *others = ((m, m) for m in PARETO_METRICS)
    plot = P.pareto(tmp_path, cost, others, a.policies, a.stats, {"fgd"})
    assert plot.path == tmp_path / "pareto.png" and plot.path.stat().st_size > 10_000
    from matplotlib.image import imread

    height, width = imread(plot.path).shape[:2]
    assert width > 2 * height  # three panels side by side
    assert P.pareto(tmp_path, cost, others, ["fgd"], a.stats, set()) is None


def test_one_seed_still_places_every_policy(tmp_path):
    a = _analysis(MEANS, seeds=1)
    cost, *others = ((m, m) for m in PARETO_METRICS)
    assert P.pareto(tmp_path, cost, others, a.policies, a.stats, set()) is not None  # no error bars, no crash
