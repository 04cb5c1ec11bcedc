"""Model selection on held-out days (``rl.select``, ``train --select-span``): every checkpoint is
validated on the same seeds, the best is kept and is what the harness measures, a resumed run goes on
with the record (and validates a checkpoint its interruption skipped), and a span the episodes are
drawn from is refused."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")

from td3sched.cli import app  # noqa: E402
from td3sched.rl.select import SELECTION_FILE, SelectionConfig, SelectionError, Selector, objective_of  # noqa: E402
from td3sched.run import run_simulation  # noqa: E402

runner = CliRunner()
SPANS = ["--set", "spans.fit=[0,0.5]", "--set", "spans.validation=[0.5,0.75]", "--span", "fit"]
ARGS = ["train", "--scenario", "tiny", "--episode-hours", "2", "--learning-starts", "20", "--action-hold", "600",
        "--checkpoint-every", "20", *SPANS, "--select-span", "validation", "--no-progress"]


def _record(out):
    return json.loads((out / SELECTION_FILE).read_text())


def test_every_checkpoint_is_validated_and_the_best_is_the_one_measured(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ARGS + ["--steps", "50", "--out", str(out)])
    assert result.exit_code == 0, result.output
    record = _record(out)
    table = {c["step"]: c for c in record["candidates"]}
    assert sorted(table) == [20, 40, 50]  # every checkpoint and the last step
    assert record["selection"] == {"span": "validation", "seeds": [1, 2]} and record["train_span"] == "fit"
    best = min(table.values(), key=lambda c: (c["objective"], c["step"]))
    assert record["best"]["step"] == best["step"]
    assert (out / "best").resolve() == (out / "candidates" / f"step-{best['step']}").resolve()
    assert f"selected: step {best['step']}" in " ".join(result.output.split())
    # the figures are the harness's: a run of the kept candidate on the validation span gives them again
    spans = [a for a in SPANS[:4] if a != "--set"]
    again = run_simulation("tiny", f"td3:{out / 'best'}", 2, "validation", spans)
    assert again["metrics"]["cost_node_hours"] == best["per_seed"]["2"]
    assert best["objective"] == pytest.approx(sum(best["per_seed"].values()) / 2, rel=1e-12)
    card = json.loads((out / "best" / "model.json").read_text())
    assert card["training"]["steps"] == best["step"]
    assert card["training"]["selection"]["objective"] == best["objective"]
    # the candidates differ (the actor learns between checkpoints), so the choice is a real one
    assert len({c["objective"] for c in table.values()}) > 1


def test_a_resumed_run_goes_on_with_its_record_and_validates_a_skipped_checkpoint(tmp_path):
    out = tmp_path / "run"
    first = runner.invoke(app, ARGS + ["--steps", "40", "--out", str(out)])
    assert first.exit_code == 0, first.output
    before = {c["step"]: c for c in _record(out)["candidates"]}
    # an interruption between the checkpoint at 40 and its validation: the record lacks step 40
    record = _record(out)
    record["candidates"] = [c for c in record["candidates"] if c["step"] != 40]
    (out / SELECTION_FILE).write_text(json.dumps(record))
    clash = runner.invoke(app, ["train", "--steps", "60", "--out", str(out), "--resume", "--select-span",
                                "validation", "--select-seeds", "3", "--no-progress"])
    assert clash.exit_code == 2 and "selected with" in " ".join(clash.output.split()), clash.output
    resumed = runner.invoke(app, ["train", "--steps", "60", "--out", str(out), "--resume", "--no-progress"])
    assert resumed.exit_code == 0, resumed.output
    after = {c["step"]: c for c in _record(out)["candidates"]}
    assert sorted(after) == [20, 40, 60]
    assert after[40]["per_seed"] == before[40]["per_seed"]  # the checkpoint's actor, validated on resume
    assert after[20] == before[20]


def test_days_the_episodes_are_drawn_from_are_refused_for_selection(tmp_path):
    refused = runner.invoke(app, ["train", "--scenario", "tiny", "--steps", "20", "--checkpoint-every", "10",
                                  "--set", "spans.validation=[0.5,0.8]", "--select-span", "validation",
                                  "--out", str(tmp_path / "bad"), "--no-progress"])
    message = " ".join(refused.output.split())
    assert refused.exit_code == 2
    assert "--select-span validation (days [0.5, 0.8)) overlaps the training span train (days [0, 0.75))" in message
    unknown = runner.invoke(app, ["train", "--scenario", "tiny", "--steps", "20", "--select-span", "holdout",
                                  "--out", str(tmp_path / "bad"), "--no-progress"])
    assert unknown.exit_code == 2 and "has no span 'holdout'" in unknown.output
    no_checkpoints = runner.invoke(app, ["train", "--scenario", "tiny", "--steps", "20", "--checkpoint-every", "0",
                                         "--select-span", "test", "--out", str(tmp_path / "bad"), "--no-progress"])
    assert no_checkpoints.exit_code == 2 and "expected --checkpoint-every > 0" in no_checkpoints.output
    with pytest.raises(SelectionError, match="expected distinct seeds"):
        SelectionConfig("validation", (1, 1))


def test_the_objective_is_the_cost_else_the_reward_and_ties_go_to_the_earlier_step(tmp_path):
    assert objective_of({"cost_node_hours": 5.0, "episode_reward": -3.0}) == ("cost_node_hours", 5.0)
    assert objective_of({"episode_reward": -3.0}) == ("episode_reward", 3.0)  # higher reward, lower objective
    with pytest.raises(SelectionError, match="hold none of"):
        objective_of({"latency_p99_ms": 1.0})
    selector = Selector(tmp_path, SelectionConfig("validation"), settings=None, every=10, last=30)
    selector.table = [{"step": 20, "objective": 1.0}, {"step": 10, "objective": 1.0}, {"step": 30, "objective": 2.0}]
    assert selector.best["step"] == 10


def test_a_warm_started_run_keeps_its_warm_start_as_a_candidate(tmp_path):
    """With --anchor the actor fitted to the static score (right after the warm-up's steps) is validated
    too, so a run that learns nothing better on the held-out days keeps its warm start."""
    out = tmp_path / "anchored"
    score = "static-weights:w=1/0/0/0:tau=0.4"
    result = runner.invoke(app, ARGS + ["--steps", "30", "--anchor", score, "--bc-alpha", "2.5", "--out", str(out)])
    assert result.exit_code == 0, result.output
    steps = [c["step"] for c in _record(out)["candidates"]]
    assert steps == [20, 21, 30]  # a checkpoint, the warm start (learning starts at step 20), the last step
