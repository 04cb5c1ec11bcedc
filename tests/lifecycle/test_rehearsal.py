"""The lifecycle's rehearsal on tiny's last hours: each period's row holds both models' paired runs, a
reference policy's and the gate's verdict, recorded in the rehearsal's own registry; a rerun goes on after the last row done
(a row cut by a crash runs again), other settings in the same folder are refused; the report and the
figure are written."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

from td3sched.cli import app  # noqa: E402
from td3sched.lifecycle.history import read_history  # noqa: E402
from td3sched.lifecycle.registry import Registry  # noqa: E402
from td3sched.lifecycle.rehearsal import ROWS_FILE, RehearsalConfig, read_rows, rehearse, report  # noqa: E402

runner = CliRunner()
REFERENCE = "static-weights:w=1/0/0/0:tau=0.4"
CONFIG = RehearsalConfig("tiny", 0.5, 0.75, 0.125, (1, 2), "3h", 10, 1e-4, "3h", (1, 2), references=(REFERENCE,))


def _held():
    from td3sched.shipped import SHIPPED_MODELS

    return SHIPPED_MODELS / "td3-dlrm-held"


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("rehearsal")
    rows = rehearse(_held(), out, CONFIG)
    return out, rows


def test_each_period_has_paired_runs_and_a_gated_candidate(rehearsed):
    out, rows = rehearsed
    assert [r["day"] for r in rows] == [0.5, 0.625] and read_rows(out) == rows
    reg = Registry(out / "registry")
    first = rows[0]
    assert first["serving"] == first["frozen"] and reg.folder(first["frozen"]).is_dir()
    for r in rows:
        assert set(r["runs"]) == {"1", "2"}
        for runs in r["runs"].values():
            assert runs["frozen"]["cost_node_hours"] > 0 and runs["rolling"]["cost_node_hours"] > 0
            assert runs[REFERENCE]["cost_node_hours"] > 0 and runs[REFERENCE] != runs["frozen"]
            if r["serving"] == r["frozen"]:  # the same model on the same world: the same run
                assert runs["frozen"] == runs["rolling"]
    gate = json.loads((reg.folder(first["candidate"]) / "gate.json").read_text())
    assert gate["promote"] == first["gate"]["promote"] and gate["config"]["span"] == "recent"
    assert rows[1]["serving"] == (first["candidate"] if first["gate"]["promote"] else first["frozen"])
    assert "gate" not in rows[-1]  # the last period's candidate would serve nothing
    history = sorted((out / "history").glob("*.parquet"))
    assert len(history) == 2  # seed 1 of each period, served by the serving model
    for r in rows:  # each period's own decisions, not its warm-up's (days an earlier period served)
        times = [read_history(f, ["time_s"]).column("time_s").to_numpy() for f in history
                 if f"-period{rows.index(r)}-" in f.name]
        assert len(times) == 1 and times[0].min() >= r["day"] * 86400 and times[0].max() < r["end_day"] * 86400


def test_a_rerun_goes_on_after_the_last_row_and_a_cut_row_runs_again(rehearsed, tmp_path):
    import shutil

    out, rows = rehearsed
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, symlinks=True)
    assert rehearse(_held(), copy, CONFIG) == rows  # nothing left to do
    lines = (copy / ROWS_FILE).read_text().splitlines()
    (copy / ROWS_FILE).write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # a crash mid-write
    again = rehearse(_held(), copy, CONFIG)
    assert [r["day"] for r in again] == [0.5, 0.625]
    assert again[1]["runs"] == rows[1]["runs"]  # the period ran again whole, the same runs


def test_a_period_cut_short_runs_only_what_it_lacks(rehearsed, tmp_path, monkeypatch):
    """Every run's record and the candidate are kept as they finish. A rehearsal that crashed after its
    first period's gate, before the period's row: its rerun simulates and trains nothing for that period,
    and writes the rows of an uninterrupted rehearsal."""
    import td3sched.lifecycle.finetune
    import td3sched.lifecycle.rehearsal as rehearsal_module
    import td3sched.run

    _, rows = rehearsed
    out = tmp_path / "crashed"

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # the row of the first period is never written

    with monkeypatch.context() as m:
        m.setattr(rehearsal_module, "_append_row", crash)
        with pytest.raises(KeyboardInterrupt):
            rehearse(_held(), out, CONFIG)
    assert read_rows(out) == [] and (out / "candidates" / "day-0.5.json").is_file()

    runs = []
    real = td3sched.run.run_simulation

    def counted(*args, **kwargs):
        runs.append(args[3])  # the span: the periods' are period<k>, the gate's recent
        return real(*args, **kwargs)

    def never(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(td3sched.run, "run_simulation", counted)
    monkeypatch.setattr(td3sched.lifecycle.finetune, "finetune_on_replay", never)
    again = rehearse(_held(), out, CONFIG)
    assert runs and set(runs) == {"period1"}  # the second period's runs alone: the first's were kept
    assert [_deterministic(r) for r in again] == [_deterministic(r) for r in rows]


def _deterministic(row: dict) -> dict:
    """A row without what differs between two runs of the same rehearsal: the wall times, and the
    candidate's version (its content's hash: its card holds its training's wall time), and so which
    version serves (kept: whether it is the frozen one)."""
    return {**{k: ({**v, "wall_s": None} if k == "finetune" else v) for k, v in row.items()
               if k not in ("wall_s", "candidate")}, "serving": row["serving"] == row["frozen"]}


def test_other_settings_in_the_same_folder_are_refused(rehearsed, tmp_path):
    import dataclasses
    import shutil

    out, _ = rehearsed
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, symlinks=True)
    with pytest.raises(ValueError, match="holds a rehearsal of other settings"):
        rehearse(_held(), copy, dataclasses.replace(CONFIG, steps=11))


def test_the_report_has_a_row_per_period_and_the_totals(rehearsed, tmp_path):
    out, rows = rehearsed
    md, png = report(out)
    text = md.read_text()
    assert text.count("\n| 0.5") == 1 and text.count("\n| 0.625") == 1
    frozen = sum(r["runs"][s]["frozen"]["cost_node_hours"] for r in rows for s in r["runs"])
    assert f"Total cost: frozen {frozen:.1f}" in text and "(4 pairs)" in text
    reference = sum(r["runs"][s][REFERENCE]["cost_node_hours"] for r in rows for s in r["runs"])
    assert f"| cost {REFERENCE} |" in text and f"- `{REFERENCE}`: total {reference:.1f}; frozen - it" in text
    hours = sum(r["runs"][s][REFERENCE]["latency_breach_hours"] for r in rows for s in r["runs"])
    oom = sum(r["runs"][s][REFERENCE]["oom_kills_total"] for r in rows for s in r["runs"])
    totals = [line for line in text.splitlines() if line.startswith(f"| `{REFERENCE}` | ")]
    assert len(totals) == 1
    cells = totals[0].strip("| ").split(" | ")  # policy, cost, cpu_util, fragmentation, P99, OOM, overload, hours
    assert (cells[1], cells[5], cells[7]) == (f"{reference:,.1f}", f"{oom:,.0f}", f"{hours:,.1f}")
    assert png.stat().st_size > 10_000


def test_without_the_lifecycle_the_model_serves_every_period_beside_the_references(rehearsed, tmp_path):
    """``steps`` 0: no history, candidate or gate; each period's runs are the ones the lifecycle's rehearsal
    ran with the same model serving (its first period's, run for run), and the rows keep the objective's
    parts, which add up to its cost."""
    import dataclasses

    _, rows = rehearsed
    out = tmp_path / "plain"
    plain = rehearse(_held(), out, dataclasses.replace(CONFIG, steps=0))
    assert [r["day"] for r in plain] == [0.5, 0.625]
    assert all("candidate" not in r and "gate" not in r and r["serving"] == r["frozen"] for r in plain)
    assert plain[0]["runs"] == rows[0]["runs"]
    assert not list((out / "history").glob("*.parquet")) and not (out / "candidates").exists()
    for r in plain:
        for runs in r["runs"].values():
            m = runs[REFERENCE]
            parts = sum(v for k, v in m.items() if k.startswith("cost_") and k != "cost_node_hours")
            assert parts == pytest.approx(m["cost_node_hours"], rel=1e-12)
    text = report(out)[0].read_text()
    assert "No fine-tune (steps 0)" in text and "Candidates promoted" not in text
    with pytest.raises(ValueError, match="rehearsal steps 1: expected 0"):
        dataclasses.replace(CONFIG, steps=1)


@pytest.mark.parametrize("args, message", [
    (["--days", "14"], "--days '14': expected FIRST:END"),
    (["--days", "0.5:0.5"], "expected a span of at least one positive period"),
    (["--window", "7w", "--days", "0.5:0.75", "--period", "0.125"], "--window '7w': expected a positive duration"),
    ([], "rehearsal days 0.75 to 1.0 by periods of 1.0 day(s)"),  # tiny's test span is 6 hours
    (["--days", "0.5:0.75", "--period", "0.125", "--reference", "no-such-policy"],
     "rehearsal reference 'no-such-policy': unknown policy 'no-such-policy'"),
    (["--days", "0.5:0.75", "--period", "0.125", "--reference", "k8s-default", "--reference", "k8s-default"],
     "expected distinct policy specs"),
])
def test_bad_settings_are_refused_naming_the_value(args, message, tmp_path):
    result = runner.invoke(app, ["rehearse", "--model", str(_held()), "--out", str(tmp_path / "r"),
                                 "--scenario", "tiny", *args])
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


def test_a_crash_after_a_promotion_runs_the_period_again_from_the_model_that_served_it(rehearsed, tmp_path):
    import shutil

    out, rows = rehearsed
    assert not rows[0]["gate"]["promote"]  # the premise: the first candidate was refused (deterministic runs)
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, symlinks=True)
    (copy / ROWS_FILE).write_text(json.dumps(rows[0]) + "\n")  # the second period's row never written ...
    reg = Registry(copy / "registry")
    reg.promote(rows[0]["candidate"], require_gate=False)  # ... after a promotion (its gate is not read here)
    again = rehearse(_held(), copy, CONFIG)
    assert again[1]["serving"] == rows[1]["serving"] and again[1]["runs"] == rows[1]["runs"]


def test_settings_without_references_keep_the_form_written_before_references_existed():
    import dataclasses

    assert "references" not in dataclasses.replace(CONFIG, references=()).to_json()
    assert CONFIG.to_json()["references"] == [REFERENCE]


def test_runs_side_by_side_in_worker_processes_give_the_same_rows(rehearsed, tmp_path):
    """``workers=2``: each period's runs and the gate's replays in two processes; the rows are the one
    process's, run for run and verdict for verdict (the times differ, and so do the versions of the
    candidates, whose cards record their fine-tune's wall time)."""
    _, rows = rehearsed
    side_by_side = rehearse(_held(), tmp_path / "two", CONFIG, workers=2)

    def same(row: dict) -> dict:
        return {k: v for k, v in row.items() if k not in ("wall_s", "finetune", "candidate", "frozen", "serving")}

    assert [same(r) for r in side_by_side] == [same(r) for r in rows]
    assert [r["serving"] == r["frozen"] for r in side_by_side] == [r["serving"] == r["frozen"] for r in rows]
