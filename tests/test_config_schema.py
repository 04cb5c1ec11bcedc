"""Scenario settings are checked by one schema: a bad ``--set`` (or file value) is refused before
anything runs, with one line naming the key, the value and what is allowed; every setting, with
its default, range and description, is printed by ``td3sched scenarios --show NAME``."""

from __future__ import annotations

import dataclasses
import json
import re
import string

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from td3sched.cli import SET_HELP, app
from td3sched.reward import RewardConfig
from td3sched.scenario import ScenarioError, load_scenario
from td3sched.scenario.schema import resolve, to_yaml
from td3sched.simulator.config import Autoscaler, LatencyModel, SimConfig

runner = CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.split())


# --- the defects of issue 13 §1, each refused with its key, value and range -------------------------

@pytest.mark.parametrize("override, allowed", [
    # accepted silently before, changing the results
    ("latency.rho_cap=1.5", "a number in (0, 1)"),
    ("latency.base_median_ms=-40", "a number > 0"),
    ("autoscaler.provision_delay_s=-100", "a number > 0"),
    ("fragmentation.max_shapes=0", "a whole number >= 1"),
    # a traceback or an unclear line before
    ("nodes.pools=foo", "a section of key: value pairs"),
    ("spans.test=abc", "[first day, end day]"),
    ("nodes.count=800", "unknown key 'count' in nodes; expected one of: pools"),
    ("simulator.kubelet=1", "unknown key 'kubelet' in simulator"),
    ("kubelet.backoff_initial_s=0", "a number >= 1"),
    ("queue.pod_max_backoff_s=abc", "a number >= 1"),
    ("reward.overload=-1", "a number >= 0"),
    ("workload.kind=nope", "'dlrm', 'openb', 'files'"),
    ("workload.path=nosuch", "expected a folder holding pods.csv.gz"),
    ("nodes.pools.cpu.count=30", "count (30) <= max_count (20)"),
])
def test_bad_override_is_refused_naming_key_value_and_range(override, allowed):
    with pytest.raises(ScenarioError) as info:
        load_scenario("tiny", [override])
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"--set {override}: "), message
    assert allowed in message, message


@pytest.mark.parametrize("override", ["latency.rho_cap=1.5", "nodes.pools=foo", "spans.test=abc", "nodes.count=800"])
def test_simulate_with_a_bad_override_exits_2_with_one_line(override, tmp_path):
    result = runner.invoke(app, ["simulate", "--no-progress", "--set", override])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert _flat(result.output).startswith(f"error: --set {override}: ")
    assert "Traceback" not in result.output


def test_a_bad_value_in_a_scenario_file_names_the_file():
    expected = r"^scenario file x.yaml: latency.rho_cap=2: expected a number in \(0, 1\)$"
    with pytest.raises(ScenarioError, match=expected):
        resolve({**load_scenario("tiny").config, "latency": {"rho_cap": 2}}, source="scenario file x.yaml")


def test_the_help_example_of_set_is_valid_on_the_default_scenario():
    example = re.search(r"e\.g\. --set (\S+)", SET_HELP).group(1)
    assert load_scenario("tiny", [example]).sim_config().autoscaler.enabled is False


def test_negative_seed_names_the_option():
    result = runner.invoke(app, ["simulate", "--no-progress", "--seed", "-1"])
    assert result.exit_code == 2
    assert "--seed" in _flat(result.output)


def test_config_classes_refuse_values_out_of_range_themselves():
    for cls, kw in ((LatencyModel, {"rho_cap": 1.0}), (Autoscaler, {"provision_delay_s": -100}),
                    (SimConfig, {"tick_s": float("nan")}), (RewardConfig, {"beta": True}),
                    (SimConfig, {"window_s": 10.0, "scrape_s": 30.0})):
        with pytest.raises(ValueError):
            cls(**kw)


# --- one source of truth: defaults from the config classes, printed by --show ---------------------------

def test_defaults_come_from_the_config_classes():
    config = load_scenario("tiny").config
    for section, cls in (("latency", LatencyModel), ("autoscaler", Autoscaler), ("reward", RewardConfig)):
        assert config[section] == dataclasses.asdict(cls()), section
    assert load_scenario("tiny").sim_config().queue == SimConfig().queue


def test_show_prints_the_resolved_scenario_with_ranges_and_descriptions():
    result = runner.invoke(app, ["scenarios", "--show", "tiny", "--set", "latency.rho_cap=0.9"])
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.stdout)
    assert shown["latency"]["rho_cap"] == 0.9
    expected = json.loads(json.dumps(load_scenario("tiny", ["latency.rho_cap=0.9"]).config))
    assert json.loads(json.dumps(resolve(shown))) == expected       # the printout is itself a valid scenario
    assert re.search(r"rho_cap: 0\.9 +# \(a number in \(0, 1\)\) Utilisation", result.stdout)
    assert "tick_s: 60.0  # (a number >= 1)" in result.stdout


def test_show_with_a_bad_override_exits_2():
    result = runner.invoke(app, ["scenarios", "--show", "tiny", "--set", "latency.rho_cap=2"])
    assert result.exit_code == 2 and "--set latency.rho_cap=2" in _flat(result.output)


def test_every_shipped_scenario_resolves_and_round_trips():
    for name in ("tiny", "dlrm", "dlrm-small", "openb"):
        config = load_scenario(name).config
        assert json.dumps(resolve(yaml.safe_load(to_yaml(config)))) == json.dumps(config), name


# --- evaluate and train check the settings before the first run -----------------------------------------

def test_evaluate_with_a_bad_override_runs_nothing(tmp_path):
    out = tmp_path / "never"
    result = runner.invoke(app, ["evaluate", "--scenario", "tiny", "--policies", "k8s-default", "--seeds", "2",
                                 "--out", str(out), "--no-progress", "--set", "nodes.pools=foo"])
    assert result.exit_code == 2, result.output
    assert "--set nodes.pools=foo" in _flat(result.output)
    assert not out.exists()


def test_train_with_a_bad_override_runs_nothing(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "never"
    result = runner.invoke(app, ["train", "--steps", "10", "--out", str(out), "--scenario", "tiny", "--no-progress",
                                 "--set", "latency.rho_cap=1.5"])
    assert result.exit_code == 2, result.output
    assert "--set latency.rho_cap=1.5" in _flat(result.output)
    assert not out.exists()


# --- random overrides: valid, or refused in one line naming the key -------------------------------------

def _leaf_keys(config: dict, prefix: str = "") -> list[str]:
    keys = []
    for k, v in config.items():
        keys += _leaf_keys(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]
    return keys


KNOWN_KEYS = [k for k in _leaf_keys(load_scenario("tiny").config) if k != "name"]
_word = st.text(string.ascii_lowercase + "_", min_size=1, max_size=8)
KEYS = st.one_of(st.sampled_from(KNOWN_KEYS),
                 st.builds(lambda k, w: f"{k.rsplit('.', 1)[0]}.{w}", st.sampled_from(KNOWN_KEYS), _word),
                 st.lists(_word, min_size=1, max_size=3).map(".".join))
SCALARS = st.one_of(st.integers(-5, 2000), st.floats(-10, 3000, allow_nan=False), st.booleans(), st.none(),
                    st.sampled_from(["nan", "inf", "-inf", "1e3", "abc", "[", "{a: 1}", "[1, 2]", "''", "~", "[/x]"]),
                    _word)
VALUES = st.one_of(SCALARS.map(lambda v: v if isinstance(v, str) else json.dumps(v)),
                   st.lists(st.floats(-1, 5, allow_nan=False), max_size=3).map(json.dumps))


def _check_refusal(message: str, key: str) -> None:
    assert "\n" not in message
    assert message.startswith(f"--set {key}="), message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=KEYS, value=VALUES)
def test_any_override_is_valid_or_refused_naming_its_key(key, value):
    try:
        sc = load_scenario("tiny", [f"{key}={value}"])
    except ScenarioError as exc:
        _check_refusal(str(exc), key)
        return
    sc.sim_config()                      # what a run is made of, built without error
    sc.pools(1)
    for span in ("full", *sc.config["spans"]):
        try:
            sc.span(span)
        except ScenarioError as exc:     # past a shortened scenario, or within the warm-up: names the setting
            assert "past its days" in str(exc) or "simulator.warmup_days" in str(exc)


RUN_KEYS = st.sampled_from([k for k in KNOWN_KEYS if not k.startswith(("days", "spans", "workload"))])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.one_of(RUN_KEYS, KEYS.filter(lambda k: not k.startswith(("days", "spans", "workload")))),
       value=VALUES)
def test_simulate_with_any_override_runs_or_exits_2_in_one_line(key, value):
    result = runner.invoke(app, ["simulate", "--no-progress", "--span", "full", "--set", "days=0.05",
                                 "--set", "simulator.warmup_days=0", "--set", f"{key}={value}"])
    if result.exit_code == 0:
        return
    assert result.exit_code == 2, (key, value, result.output, result.exception)
    message = _flat(result.output).removeprefix("error: ")
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert key in message, message
