"""Output paths are checked before a run starts, and files are written whole (temporary file, then
rename) with the permissions the umask gives, never 0600."""

from __future__ import annotations

import os
import stat

import pytest
from typer.testing import CliRunner

from td3sched import run as run_mod
from td3sched.cli import app
from td3sched.evaluate import grid as grid_mod
from td3sched.outputs import atomic_stream, check_file, write_json_atomic

runner = CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def no_run(monkeypatch):
    """Fail the test if a simulation starts."""
    def refuse(*args, **kwargs):
        raise AssertionError("the run started before its output paths were checked")

    monkeypatch.setattr(run_mod, "Simulation", refuse)
    monkeypatch.setattr(run_mod, "run_simulation", refuse)


@pytest.mark.parametrize("option", ["--out", "--events"])
def test_unwritable_output_path_fails_before_the_run(option, tmp_path, no_run):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    target = blocker / "run.json"                       # its folder is a file: cannot be written (even by root)
    result = runner.invoke(app, ["simulate", "--no-progress", option, str(target)])
    assert result.exit_code == 2, result.output
    text = _flat(result.output)
    assert text.startswith(f"error: {option} {target}: cannot write there"), text


def test_output_path_that_is_a_folder_is_refused(tmp_path, no_run):
    result = runner.invoke(app, ["simulate", "--no-progress", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "is a folder" in _flat(result.output)


def test_evaluate_checks_its_out_folder_first(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(grid_mod, "run_grid", lambda *a, **k: pytest.fail("the grid ran"))
    result = runner.invoke(app, ["evaluate", "--scenario", "tiny", "--policies", "k8s-default", "--seeds", "1",
                                 "--out", str(blocker / "res"), "--no-progress"])
    assert result.exit_code == 2, result.output
    assert "cannot write there" in _flat(result.output)


def test_a_failed_run_leaves_no_event_log(tmp_path, monkeypatch):
    events = tmp_path / "events.jsonl"
    events.write_text("the previous log\n")

    class Failing:
        def __init__(self, world, policy, seed, start_s, end_s, events, **kwargs):
            self.events = events

        def run(self):
            raise RuntimeError("the run failed halfway")

    monkeypatch.setattr(run_mod, "Simulation", Failing)
    with pytest.raises(RuntimeError):
        run_mod.run_simulation("tiny", "k8s-default", 1, "test", events_path=events)
    assert events.read_text() == "the previous log\n"             # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.jsonl"]  # no temporary file left


def test_atomic_stream_replaces_only_on_success(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    with pytest.raises(KeyError):
        with atomic_stream(path) as f:
            f.write("half")
            raise KeyError("stop")
    assert path.read_text() == "old" and len(list(tmp_path.iterdir())) == 1
    with atomic_stream(path) as f:
        f.write("new")
    assert path.read_text() == "new"


def test_written_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "a.json", {"x": 1})
        assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
        os.umask(0o027)
        write_json_atomic(tmp_path / "b.json", {"x": 1})
        assert stat.S_IMODE((tmp_path / "b.json").stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_checking_a_path_leaves_nothing_behind(tmp_path):
    check_file(tmp_path / "new" / "deeper" / "x.json", "--out")
    check_file(tmp_path / "x.json", "--out")
    assert list(tmp_path.iterdir()) == []


def test_events_into_a_new_folder(tmp_path):
    events = tmp_path / "new" / "events.jsonl"
    result = runner.invoke(app, ["simulate", "--no-progress", "--span", "test", "--set", "days=0.8",
                                 "--set", "spans.test=[0.75,0.8]", "--events", str(events)])
    assert result.exit_code == 0, result.output
    assert events.read_text().count("\n") > 10
    assert sorted(p.name for p in events.parent.iterdir()) == ["events.jsonl"]


def test_interrupted_training_says_how_to_resume(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from td3sched.rl import train as train_mod

    out = tmp_path / "run"

    def interrupted(out_dir, *args, **kwargs):
        out_dir.mkdir(parents=True)
        (out_dir / train_mod.CHECKPOINT_FILE).write_bytes(b"")
        raise KeyboardInterrupt

    monkeypatch.setattr(train_mod, "train", interrupted)
    result = runner.invoke(app, ["train", "--steps", "50", "--out", str(out), "--scenario", "tiny", "--no-progress"])
    assert result.exit_code == 130, result.output
    text = _flat(result.output)
    assert f"the last checkpoint is {out / 'checkpoint.pt'}" in text
    assert f"td3sched train --steps 50 --out {out} --resume" in text
