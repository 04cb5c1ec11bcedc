"""The gate replays candidate and current on the same seeds: it promotes a better candidate, refuses a
worse one (its reasons name the objective), refuses one that is unsafe (naming the safety metrics),
and records its verdict in the registry, where td3sched models lists it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")

from td3sched.cli import app  # noqa: E402
from td3sched.lifecycle.bc import static_model  # noqa: E402
from td3sched.lifecycle.gate import GateConfig, decide, run_gate  # noqa: E402
from td3sched.lifecycle.history import read_history  # noqa: E402
from td3sched.lifecycle.registry import Registry  # noqa: E402

runner = CliRunner()
SEEDS = ("--seeds", "3")
# static-weights as models (their actors output one action: the runs are the static policies' exactly).
# On tiny's test span, seeds 1-3: GOOD ~93 node-hours, SPREAD ~101, PACK ~104 with P99 ~1,200 ms.
GOOD = ([0.6, 0.2, 0.1, 0.1], 0.3)
SPREAD = ([0.25, 0.25, 0.25, 0.25], 0.0)
PACK = ([0.45, 0.45, 0.05, 0.05], 0.95)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    for name, (w, tau) in {"good": GOOD, "spread": SPREAD, "pack": PACK}.items():
        static_model(folder / name, w, tau, {"scenario": "tiny"})
    return folder


def test_the_gate_promotes_a_better_candidate_and_refuses_it_the_other_way(models, tmp_path):
    reg = Registry(tmp_path / "registry")
    spread = reg.register(models / "spread")
    reg.promote(spread, require_gate=False)
    result = runner.invoke(app, ["gate", str(models / "good"), "--registry", str(reg.root), *SEEDS, "--promote"])
    assert result.exit_code == 0, result.output
    good = reg.serving()
    assert good != spread and "passed; promoted (replacing " + spread in result.output
    gate = json.loads((reg.folder(good) / "gate.json").read_text())
    assert gate["promote"] and gate["objective"]["improvement_low"] > 0 and gate["current"].endswith(spread)
    listed = runner.invoke(app, ["models", "--registry", str(reg.root), "--json"])
    rows = {r["version"]: r for r in json.loads(listed.output)}
    assert rows[good]["serving"] and rows[good]["gate"]["promote"] and rows[spread]["gate"] is None
    # the same paired runs, the roles swapped: the spreading model is worse, and refused
    swapped = decide({int(s): m for s, m in gate["runs"]["candidate"].items()},
                     {int(s): m for s, m in gate["runs"]["current"].items()}, GateConfig(seeds=(1, 2, 3)))
    assert not swapped["promote"]
    assert any(r.startswith("cost_node_hours improves by -") for r in swapped["reasons"]), swapped["reasons"]


def test_the_gate_s_replays_side_by_side_in_two_processes_are_the_same_runs(models, tmp_path):
    verdicts = []
    for workers in ("1", "2"):
        reg = Registry(tmp_path / f"registry-{workers}")
        reg.promote(reg.register(models / "spread"), require_gate=False)
        result = runner.invoke(app, ["gate", str(models / "good"), "--registry", str(reg.root), *SEEDS,
                                     "--workers", workers])
        assert result.exit_code == 0, result.output
        assert result.output.count("seed ") == 6, result.output  # every replay's progress line
        gate = json.loads((reg.folder(reg.register(models / "good")) / "gate.json").read_text())
        verdicts.append((gate["runs"], gate["objective"], gate["promote"]))
    assert verdicts[0] == verdicts[1]


def test_the_gate_refuses_an_unsafe_candidate_and_keeps_the_serving_model(models, tmp_path):
    reg = Registry(tmp_path / "registry")
    spread = reg.register(models / "spread")
    reg.promote(spread, require_gate=False)
    result = runner.invoke(app, ["gate", str(models / "pack"), "--registry", str(reg.root), *SEEDS, "--promote"])
    assert result.exit_code == 1 and "refused" in result.output, result.output
    assert reg.serving() == spread
    pack = next(v for v in reg.list() if v.version != spread)
    assert not pack.gate["promote"] and pack.gate["safety"]["latency_p99_ms"]["worse"]
    assert any(r.startswith("latency_p99_ms is worse") for r in pack.gate["reasons"])
    promote = runner.invoke(app, ["promote", pack.version, "--registry", str(reg.root)])
    assert promote.exit_code == 2 and "its gate refused it: " in promote.output and reg.serving() == spread


def _runs(costs, p99s, ooms=(0, 0, 0)):
    return {s: {"cost_node_hours": c, "latency_p99_ms": p, "oom_kills_total": o, "overload_node_frac": 0.0,
                "pending_p99_s": 0.0} for s, (c, p, o) in enumerate(zip(costs, p99s, ooms), 1)}


@pytest.mark.parametrize("candidate, reason", [
    (_runs([90, 91, 92], [130, 131, 129]), "latency_p99_ms is worse"),          # cheaper, but slower
    (_runs([90, 91, 92], [100, 100, 100], (0, 1, 0)), "oom_kills_total is worse"),  # cheaper, one more OOM kill
    (_runs([99.5, 99.6, 99.4], [100, 100, 100]), "expected at least the margin"),  # better by less than 1%
    (_runs([90, 110, 95], [100, 100, 100]), "does not lie above zero"),         # better on average, by chance
])
def test_each_rule_of_the_gate_can_refuse(candidate, reason):
    current = _runs([100, 100, 100], [100, 100, 100])
    verdict = decide(current, candidate, GateConfig(seeds=(1, 2, 3)))
    assert not verdict["promote"] and any(reason in r for r in verdict["reasons"]), verdict["reasons"]
    assert decide(current, _runs([90, 91, 92], [100, 100, 100]), GateConfig(seeds=(1, 2, 3)))["promote"]


def test_one_seed_gives_no_interval_and_is_refused():
    current, candidate = _runs([100], [100]), _runs([50], [100])
    verdict = decide(current, candidate, GateConfig(seeds=(1,)))
    assert not verdict["promote"] and "expected at least 2" in verdict["reasons"][0]


def test_run_gate_replays_a_policy_spec_as_the_current_one(models):
    result = run_gate(models / "good", "k8s-default", GateConfig(seeds=(1, 2)))
    assert result["current"] == "k8s-default" and set(result["runs"]["current"]) == {"1", "2"}


def test_the_gate_replays_the_recent_window_of_a_simulator_history(models, tmp_path):
    from td3sched.lifecycle.gate import recent_span
    from td3sched.lifecycle.record import record_simulation

    _, _, n = record_simulation("tiny", "k8s-default", 1, "train", tmp_path / "history")
    scenario, overrides = recent_span(tmp_path / "history", 6 * 3600.0)
    last = max(read_history(tmp_path / "history").column("time_s").to_pylist())
    assert scenario == "tiny" and overrides == [f"spans.recent=[{(last - 21600) / 86400!r},{(int(last) + 1) / 86400!r}]"]
    reg = tmp_path / "registry"
    result = runner.invoke(app, ["gate", str(models / "good"), "--against", "k8s-default", "--history",
                                 str(tmp_path / "history"), "--window", "6h", "--seeds", "2", "--registry", str(reg)])
    assert result.exit_code in (0, 1) and "cost_node_hours: current" in result.output, result.output
    gate = next(v.gate for v in Registry(reg).list())
    assert gate["config"]["span"] == "recent" and gate["config"]["overrides"] == overrides


def test_the_gate_replays_a_cluster_history_on_a_scenario_rebuilt_in_the_registry(models, tmp_path):
    from td3sched.lifecycle.history import write_history
    from td3sched.lifecycle.record import record_simulation
    from td3sched.scenario import load_scenario
    from tests.lifecycle.test_rebuild import CLUSTER_ONLY, FIXED, node_list_of

    _, path, _ = record_simulation("tiny", "k8s-default", 1, "test", tmp_path / "sim", list(FIXED))
    rows = [{k: v for k, v in {**row, **CLUSTER_ONLY}.items() if k != "schema_version"}
            for row in read_history(path).to_pylist()]
    history = write_history(tmp_path / "cluster.parquet", rows)
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps(node_list_of(load_scenario("tiny", FIXED))))
    reg = tmp_path / "registry"
    args = ["gate", str(models / "good"), "--against", "k8s-default", "--history", str(history), "--window", "6h",
            "--seeds", "2", "--registry", str(reg)]
    refused = runner.invoke(app, args)
    assert refused.exit_code != 0 and "--nodes" in refused.output, refused.output
    result = runner.invoke(app, [*args, "--nodes", str(nodes)])
    assert result.exit_code in (0, 1) and "cost_node_hours: current" in result.output, result.output
    version = next(v for v in Registry(reg).list())
    replay = Registry(reg).folder(version.version) / "replay"
    assert version.gate["config"]["scenario"] == str(replay / "scenario.yaml") and version.gate["config"]["span"] == "recent"
    assert json.loads((replay / "rebuild.json").read_text())["nodes"] == 26
