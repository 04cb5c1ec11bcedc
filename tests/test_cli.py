"""The ``td3sched`` command line: commands, the simulate record, and errors on bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from td3sched.cli import app
from td3sched.metrics import collector
from td3sched.scenario import load_scenario
from td3sched.trace.location import traces_dir

runner = CliRunner()

#: The metrics named in metrics/collector.py's docstring ("Definitions ...").
DOC_METRICS = ("cpu_util", "mem_util", "fragmentation", "latency_p99_ms", "oom_per_week", "overload_node_frac",
               "sla_violations", "sla_violations_per_1k_pods", "latency_breach_frac", "container_oom",
               "pending_p99_s", "unschedulable", "node_hours")


def _flat(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


def test_doc_metrics_list_matches_the_collector_docstring():
    doc = collector.__doc__
    for name in DOC_METRICS:
        if name == "sla_violations_per_1k_pods":
            assert "per 1,000 pods" in doc
        else:
            assert re.search(rf"\b{name}\b", doc), name


def test_help_lists_the_commands():
    proc = subprocess.run([sys.executable, "-c", "from td3sched.cli import app; app()", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for command in ("simulate", "scenarios", "build-tiny"):
        assert command in proc.stdout


def _commands(group, prefix=""):
    """Every command of the app, by its full name ("reproduce fgd")."""
    import click

    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", command


#: What each command is for: the span it defaults to follows from it.
MEASURE = {"simulate", "evaluate", "inspect-model", "gate"}
LEARN = {"train", "search-static", "overestimation"}


def test_every_command_follows_one_scenario_and_span_rule():
    """--scenario defaults to tiny everywhere (train's default is TrainSettings'); --span to test where a
    policy is measured, to train where one is learnt; outputs go to --out; the rule is in --help."""
    import typer

    from td3sched import cli
    from td3sched.rl.train import TrainSettings

    group = typer.main.get_command(app)
    spans = {}
    for name, command in _commands(group):
        params = {p.name: p for p in command.params}
        if "scenario" in params:
            default = params["scenario"].default
            assert default == "tiny" or (name == "train" and default is None), (name, default)
            assert "default tiny" in params["scenario"].help, name
        if "span" in params:
            spans[name] = params["span"].default
            assert f"default {params['span'].default or 'train'}" in params["span"].help, name
        outputs = [o for p in command.params for o in getattr(p, "opts", []) if o.startswith("--out")]
        assert outputs in ([], ["--out"]), (name, outputs)
    assert spans == {"simulate": "test", "evaluate": "test", "inspect-model": "test", "gate": "test", "train": None}
    assert (TrainSettings().scenario, TrainSettings().span) == ("tiny", "train")  # train's defaults
    assert set(spans) <= MEASURE | LEARN
    text = _flat(runner.invoke(app, ["--help"]).output)
    assert "--scenario defaults to tiny" in text and "test in commands that measure" in text
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert _flat(cli.CONVENTIONS) in _flat(readme)


def test_old_invocations_still_run(tmp_path):
    """simulate's old default span still runs, by name; the new default is test. (evaluate with the
    --scenario it used to require: tests/evaluate/test_cli_evaluate.py.)"""
    result = runner.invoke(app, ["simulate", "--span", "full", "--no-progress", "--out", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "r.json").read_text())["span"]["name"] == "full"
    result = runner.invoke(app, ["simulate", "--no-progress", "--out", str(tmp_path / "d.json")])
    assert result.exit_code == 0 and json.loads((tmp_path / "d.json").read_text())["span"]["name"] == "test"


def test_version_and_python_dash_m():
    import td3sched

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith(f"td3sched {td3sched.__version__}")
    proc = subprocess.run([sys.executable, "-m", "td3sched", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == result.output.strip()
    proc = subprocess.run([sys.executable, "-m", "td3sched", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "Usage: td3sched" in proc.stdout and "simulate" in proc.stdout


def test_build_tiny_writes_into_the_working_directory(tmp_path, monkeypatch):
    """Not into the installed package's scenarios/tiny (read-only, or shared by every user)."""
    from td3sched.scenario import SCENARIO_DIR
    from td3sched.scenario import tiny

    written = []

    def fake_build(out, seed):  # records where the real one would write, writes nothing
        written.append(Path(out).resolve())
        return [None] * 7

    monkeypatch.setattr(tiny, "build_tiny", fake_build)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["build-tiny"])
    assert result.exit_code == 0, result.output
    assert written == [tmp_path / "tiny"] and written[0] != (SCENARIO_DIR / "tiny").resolve() and "7 pods written to tiny" in _flat(result.output)
    assert f"workload.path={tmp_path / 'tiny'}" in _flat(result.output)
    result = runner.invoke(app, ["build-tiny", "--out", str(tmp_path / "other")])
    assert written[-1] == tmp_path / "other"


def test_entry_point_is_installed():
    exe = Path(sys.executable).parent / "td3sched"
    if not exe.exists():
        pytest.skip("td3sched console script not installed in this environment")
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "simulate" in proc.stdout


def test_simulate_writes_json_with_every_documented_metric(tmp_path):
    out = tmp_path / "sub" / "run.json"
    result = runner.invoke(app, ["simulate", "--scenario", "tiny", "--span", "test", "--no-progress",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text())
    assert record["scenario"] == "tiny" and record["policy"] == "k8s-default" and record["seed"] == 1
    # the test span of tiny is days [0.75, 1), measured from its start after a 0.25-day warm-up
    assert record["span"] == {"name": "test", "start_s": 0.75 * 86400, "end_s": 86400.0,
                              "measured_from_s": 0.75 * 86400}
    assert record["runtime"]["warmup_s"] == 0.25 * 86400
    for name in DOC_METRICS:
        assert name in record["metrics"], name
        assert isinstance(record["metrics"][name], (int, float))
    assert not out.with_suffix(".json.tmp").exists()
    # binds beside decisions, and what the difference is
    m = record["metrics"]
    text = " ".join(result.output.split())
    assert f"decisions │ {m['decisions']}" in text and f"binds │ {m['binds']}" in text
    assert "is tried again" in text and f"(here {m['decisions'] - m['binds']:,})" in text


@pytest.mark.parametrize("args,bad,choices", [
    (["--scenario", "nosuch"], "nosuch", ["dlrm", "openb", "tiny"]),
    (["--policy", "nosuch"], "nosuch", ["k8s-default"]),
    (["--span", "nosuch"], "nosuch", ["full", "train", "test"]),
    (["--set", "nosuch.key=1"], "nosuch", ["simulator", "autoscaler", "latency", "nodes"]),
    (["--set", "simulator.nosuch=1"], "nosuch", ["tick_s", "scrape_s", "usage_scale"]),
    (["--set", "simulator.tick_s=abc"], "abc", ["a number"]),
    (["--set", "simulator.tick_s=-5"], "-5", ["a number >= 1"]),
    (["--set", "autoscaler.enabled=maybe"], "maybe", ["true or false"]),
])
def test_bad_input_exits_2_naming_the_value_and_the_choices(args, bad, choices, tmp_path):
    out = tmp_path / "never.json"
    result = runner.invoke(app, ["simulate", "--no-progress", "--out", str(out), *args])
    assert result.exit_code == 2, result.output
    text = _flat(result.output)
    assert "error" in text
    assert bad in text
    for choice in choices:
        assert choice in text, (choice, text)
    assert not out.exists()


def test_bad_input_with_brackets_is_reported_not_crashed():
    result = runner.invoke(app, ["simulate", "--no-progress", "--set", "simulator.tick_s=[/x]"])
    assert result.exit_code == 2
    assert "[/x]" in _flat(result.output)


def test_boolean_is_not_a_number_for_numeric_settings():
    with pytest.raises(ValueError, match="expected a number"):
        load_scenario("tiny", ["simulator.tick_s=true"])


def test_override_reaches_the_simulator_config():
    sc = load_scenario("tiny", ["simulator.tick_s=120", "autoscaler.enabled=false", "latency.slo_factor=3"])
    cfg = sc.sim_config()
    assert cfg.tick_s == 120 and cfg.autoscaler.enabled is False and cfg.latency.slo_factor == 3


@pytest.mark.parametrize("args,bad,choices", [
    (["--policies", "Nosuch"], "Nosuch", ["Random", "FGD"]),
    (["--seeds", "forty"], "forty", ["42-51"]),
    (["--variant", "FGD"], "FGD", ["POLICY=SPEC"]),
    (["--variant", "FGD=nosuch"], "nosuch", ["fgd"]),
])
def test_reproduce_fgd_bad_input_exits_2_naming_the_value(args, bad, choices, tmp_path):
    result = runner.invoke(app, ["reproduce", "fgd", "--no-progress", "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 2, result.output
    text = _flat(result.output)
    assert "error" in text and bad in text
    for choice in choices:
        assert choice in text, (choice, text)
    assert not (tmp_path / "out").exists()


def test_reproduce_fgd_writes_its_table(tmp_path):
    try:
        traces_dir()
    except FileNotFoundError as exc:
        pytest.skip(f"real traces not available ({exc})")
    out = tmp_path / "fgd"
    result = runner.invoke(app, ["reproduce", "fgd", "--no-progress", "--out", str(out), "--seeds", "42",
                                 "--policies", "BestFit"])
    assert result.exit_code == 0, result.output
    assert "| 100% |" in result.output and "7.09" in result.output   # the paper's BestFit median at 100%
    for name in ("curves.csv", "table.csv", "summary.md", "fgd-openb.png"):
        assert (out / name).exists(), name


def test_scenarios_says_what_it_builds_before_building_it(monkeypatch):
    """Listing builds every workload (tens of seconds for dlrm and openb): each is announced first."""
    import td3sched.scenario as scenario_mod

    monkeypatch.setattr(scenario_mod, "scenario_names", lambda: ["tiny"])
    result = runner.invoke(app, ["scenarios"])
    assert result.exit_code == 0, result.output
    text = _flat(result.output)
    assert text.index("building tiny (1/1") < text.index("built in") < text.index("┏")  # the table starts
