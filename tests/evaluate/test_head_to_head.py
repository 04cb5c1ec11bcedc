"""The head-to-head table: each learned policy against every other policy on the objective, paired by
seed, and whether it beats them all (the learning issue's goal, read off a report)."""

from __future__ import annotations

from types import SimpleNamespace

from td3sched.evaluate import prepare, run_grid, write_reports
from td3sched.evaluate.report import Analysis, head_to_head_doc
from td3sched.evaluate.stats import summarize

LEARNED = "td3:some/model"


def _analysis(costs: dict[str, list[float]], p99: dict[str, list[float]] | None = None) -> Analysis:
    """An analysis of made-up runs: ``costs[policy]`` per seed 1..n (and the P99 when given)."""
    metrics = {"cost_node_hours": costs, **({"latency_p99_ms": p99} if p99 else {})}
    policies = list(costs)
    values = {p: {m: dict(enumerate(by[p], start=1)) for m, by in metrics.items()} for p in policies}
    stats = {p: {m: summarize(values[p][m].values(), lower_bound=0.0) for m in metrics} for p in policies}
    result = SimpleNamespace(spec=SimpleNamespace(scenario="made-up", span="test"))
    return Analysis(result, policies, list(metrics), values, stats, [])


def _rows(doc) -> dict[str, list[str]]:
    tables = [block for kind, block in doc.blocks if kind == "table"]
    return {row[0]: row for table in tables for row in table.rows}


def test_verdicts_follow_the_paired_interval_and_the_headline_names_who_it_loses_to():
    costs = {
        "k8s-default": [110.0, 120.0, 130.0],       # learned is 10 cheaper every seed: wins
        LEARNED: [100.0, 110.0, 120.0],
        "fgd": [95.0, 104.0, 116.0],                # 4-6 cheaper than learned every seed: learned loses
        "static-weights:w=1/0/0/0:tau=0.4": [99.0, 113.0, 118.0],  # +1, -3, +2: level
        "oracle": [90.0, 100.0, 110.0],             # a bound: shown, never competed with
    }
    doc = head_to_head_doc(_analysis(costs, p99={p: [100.0, 100.0, 100.0] for p in costs}))
    rows = _rows(doc)
    assert rows["`k8s-default`"][4] == "wins" and rows["`k8s-default`"][2].startswith("-10")
    assert rows["`fgd`"][4] == "loses"
    assert rows["`static-weights:w=1/0/0/0:tau=0.4`"][4] == "level"
    assert "`oracle` (bound)" in rows
    text = doc.markdown()
    assert "**no**: loses to `fgd`; level with `static-weights:w=1/0/0/0:tau=0.4`; wins against `k8s-default`" in text
    assert "Δ `latency_p99_ms`" in text


def test_a_policy_that_wins_every_pair_is_said_to_beat_them_all():
    costs = {"k8s-default": [110.0, 121.0, 130.0], LEARNED: [100.0, 110.0, 120.0], "fgd": [104.0, 115.0, 123.0]}
    assert "**yes**, all 2" in head_to_head_doc(_analysis(costs)).markdown()


def test_one_seed_gives_no_verdict_and_no_learned_policy_gives_no_table():
    one = head_to_head_doc(_analysis({"k8s-default": [110.0], LEARNED: [100.0]}))
    assert "not decided" in one.markdown() and _rows(one)["`k8s-default`"][4] == ""
    assert head_to_head_doc(_analysis({"k8s-default": [1.0, 2.0], "fgd": [1.0, 2.0]})) is None


def test_a_grid_with_a_model_writes_the_table_into_its_report(tmp_path):
    spec = prepare(scenario="tiny", span="test", policies=["k8s-default,td3:td3-dlrm-held"], seeds=2,
                   out=tmp_path / "grid", workers=2)
    files = write_reports(run_grid(spec, progress=False))
    assert files.head_to_head_md is not None
    table = files.head_to_head_md.read_text()
    assert "### `td3:td3-dlrm-held`" in table and "| `k8s-default` |" in table
    assert "The learned policies against every other policy" in files.report_md.read_text()
    assert "head-to-head.md" in files.report_md.read_text()
