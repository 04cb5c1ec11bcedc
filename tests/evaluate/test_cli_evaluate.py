"""``td3sched evaluate``: bad arguments fail before anything runs (exit 2), a failed run makes the
command exit non-zero after the grid, a rerun resumes, and ``--ray [ADDRESS]`` parses."""

from __future__ import annotations

import json
import socket
import sys

import pytest
from typer.testing import CliRunner

from td3sched.cli import app
from td3sched.evaluate import grid as grid_mod

runner = CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.split())


def _evaluate(out, *args):
    return runner.invoke(app, ["evaluate", "--scenario", "tiny", "--span", "test", "--out", str(out),
                               "--no-progress", *args])


def test_help_lists_evaluate_and_its_options():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0 and "evaluate" in result.output
    result = runner.invoke(app, ["evaluate", "--help"])
    text = _flat(result.output)
    assert result.exit_code == 0
    for option in ("--scenario", "--span", "--policies", "--seeds", "--out", "--set", "--workers", "--ray"):
        assert option in text, option


@pytest.mark.parametrize("args, bad, choices", [
    (["--policies", "nope"], "nope", ["k8s-default", "all"]),
    (["--policies", "k8s-default,nope"], "nope", ["k8s-default", "all"]),
    (["--policies", "k8s-default:x=1"], "k8s-default", ["takes no arguments"]),
    (["--scenario", "nope"], "nope", ["tiny", "dlrm"]),
    (["--span", "nope"], "nope", ["full", "train", "test"]),
    (["--seeds", "0"], "--seeds 0", [">= 1"]),
    (["--workers", "0"], "--workers 0", [">= 1"]),
    (["--set", "simulator.nosuch=1"], "nosuch", ["tick_s"]),
])
def test_bad_arguments_exit_2_before_anything_runs(args, bad, choices, tmp_path):
    out = tmp_path / "never"
    result = _evaluate(out, "--policies", "k8s-default", *args)
    assert result.exit_code == 2, result.output
    text = _flat(result.output)
    assert "error:" in text and bad in text, text
    for choice in choices:
        assert choice in text, (choice, text)
    assert not out.exists(), "nothing may be written before the arguments are checked"


def test_bad_static_weights_spec_is_refused(tmp_path):
    out = tmp_path / "never"
    result = _evaluate(out, "--policies", "static-weights:w=banana")
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "static-weights" in _flat(result.output)
    assert not out.exists()


def test_missing_ray_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    out = tmp_path / "never"
    result = _evaluate(out, "--policies", "k8s-default", "--seeds", "1", "--ray")
    assert result.exit_code == 2, result.output
    assert "td3sched[ray]" in _flat(result.output)
    assert not out.exists()


def test_ray_option_takes_an_optional_address():
    from td3sched.cli import _ray_address_args

    assert _ray_address_args(["--ray"]) == ["--ray", "local"]
    assert _ray_address_args(["--ray", "--seeds", "2"]) == ["--ray", "local", "--seeds", "2"]
    assert _ray_address_args(["--seeds", "2", "--ray"]) == ["--seeds", "2", "--ray", "local"]
    assert _ray_address_args(["--ray", "auto"]) == ["--ray", "auto"]
    assert _ray_address_args(["--ray=ray://h:10001", "--seeds", "1"]) == ["--ray=ray://h:10001", "--seeds", "1"]


def test_progress_into_a_log_is_a_line_per_finished_run_with_failures_counted(tmp_path, monkeypatch):
    """Where a bar shows nothing (the output is not a terminal), the grid prints plain progress lines:
    throttled to progress.EVERY_S (0 here, so one a run), the last always."""
    import td3sched.progress as progress

    monkeypatch.setattr(grid_mod, "DEFAULT_RUNNER", "tests.evaluate.flaky:run")  # seed 2 raises
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    result = runner.invoke(app, ["evaluate", "--scenario", "tiny", "--span", "test", "--out", str(tmp_path / "g"),
                                 "--policies", "k8s-default", "--seeds", "2", "--workers", "1"])
    assert result.exit_code == 1, result.output
    text = _flat(result.output)
    assert "evaluate tiny/test: 1/2 runs (50%)" in text and "evaluate tiny/test: 2/2 runs (100%)" in text, text
    assert text.count("evaluate tiny/test: 2/2 runs (100%)") == 1 and "1 failed" in text


def test_failed_run_exits_nonzero_then_a_rerun_resumes(tmp_path, monkeypatch):
    out = tmp_path / "grid"
    monkeypatch.setattr(grid_mod, "DEFAULT_RUNNER", "tests.evaluate.flaky:run")  # seed 2 raises
    result = _evaluate(out, "--policies", "k8s-default", "--seeds", "2", "--workers", "2")
    assert result.exit_code == 1, result.output
    text = _flat(result.output)
    assert "injected failure" in text and "1 failed" in text
    assert (out / "runs" / "k8s-default__seed1.json").exists()
    assert (out / "report.md").exists() and (out / "vs-default.md").exists()
    seed1_mtime = (out / "runs" / "k8s-default__seed1.json").stat().st_mtime_ns

    monkeypatch.setattr(grid_mod, "DEFAULT_RUNNER", "td3sched.run:run_simulation")
    result = _evaluate(out, "--policies", "k8s-default", "--seeds", "2", "--workers", "1")
    assert result.exit_code == 0, result.output
    assert "1 runs computed, 1 reused, 0 failed" in _flat(result.output)
    assert (out / "runs" / "k8s-default__seed1.json").stat().st_mtime_ns == seed1_mtime
    assert not (out / "runs" / "k8s-default__seed2.error.txt").exists()
    grid = json.loads((out / "grid.json").read_text())
    assert grid["status"] == "done" and grid["backend"] == "local" and grid["workers"] == 1

    # Everything is on disk now: --ray (alone or with an address) parses and reuses, starting nothing.
    with socket.create_server(("127.0.0.1", 0)) as listener:  # something answers at this address
        port = listener.getsockname()[1]
        for args, address in ((["--ray", "--workers", "3"], "local"),
                              ([f"--ray=ray://127.0.0.1:{port}"], f"ray://127.0.0.1:{port}"),
                              (["--ray", f"127.0.0.1:{port}", "--seeds", "2"], f"127.0.0.1:{port}")):
            result = _evaluate(out, "--policies", "k8s-default", "--seeds", "2", *args)
            assert result.exit_code == 0, (args, result.output)
            assert "0 runs computed, 2 reused" in _flat(result.output)
            grid = json.loads((out / "grid.json").read_text())
            assert grid["backend"] == "ray" and grid["ray_address"] == address, args


@pytest.mark.parametrize("address, message", [("127.0.0.1:1", "no Ray cluster answers"),
                                              ("ray://127.0.0.1:1", "no Ray cluster answers"),
                                              ("nonsense", "expected host:port")])
def test_an_unreachable_or_malformed_ray_address_fails_fast(address, message, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "never"
    result = _evaluate(out, "--policies", "k8s-default", "--seeds", "1", "--ray", address)
    assert result.exit_code == 2, result.output
    assert message in _flat(result.output) and address in result.output
    assert not out.exists()


def test_runs_of_another_code_version_are_refused_unless_asked(tmp_path):
    out = tmp_path / "grid"
    assert _evaluate(out, "--policies", "k8s-default", "--seeds", "1", "--workers", "1").exit_code == 0
    path = out / "runs" / "k8s-default__seed1.json"
    record = json.loads(path.read_text())
    record["code_version"] = "0.1.0+0123456789ab"
    grid_mod.write_json_atomic(path, record)
    result = _evaluate(out, "--policies", "k8s-default", "--seeds", "2", "--workers", "1")
    assert result.exit_code == 2, result.output
    error = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and result.output.rstrip().endswith(error[0]), result.output  # one line, the last
    assert "0.1.0+0123456789ab (1 run)" in error[0] and "--mixed-versions" in error[0]
    assert not (out / "runs" / "k8s-default__seed2.json").exists()
    result = _evaluate(out, "--policies", "k8s-default", "--seeds", "2", "--workers", "1", "--mixed-versions")
    assert result.exit_code == 0, result.output
    assert "`0.1.0+0123456789ab` (1 run)" in (out / "report.md").read_text()
