"""README as a new user reads it: the first two commands exist and do what it says, and the
configuration it gives for one's own cluster is valid for the engine and points at its extender."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
pytestmark = pytest.mark.skipif(not README.is_file(), reason="no README in this tree (an installed package)")


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _yaml_blocks(text: str) -> list[dict]:
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)]


def test_the_first_two_commands_are_make_targets_that_do_what_the_readme_says():
    first = re.search(r"```\n(make \w+).*\n(make \w+)", README.read_text(encoding="utf-8"))
    assert first and (first.group(1), first.group(2)) == ("make demo", "make test")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    demo = re.search(r"^demo:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE).group(1)
    assert "--scenario tiny" in demo and "--out results/demo" in demo and "rm -rf results/demo" in demo
    assert "results/demo/report.html" in README.read_text(encoding="utf-8")
    from td3sched.policy import make_policy

    for spec in re.findall(r"--policies (\S+)", demo)[0].split(","):
        make_policy(spec)  # every policy of the demo runs from a checkout
    assert re.search(r"^test:.*\n\t.*pytest", makefile, re.MULTILINE)


def test_the_own_cluster_configuration_is_valid_and_names_the_extender(tmp_path):
    pytest.importorskip("grpc", reason="the engine extra")
    from td3sched.engine.config import load_config
    from td3sched.rl.onnx_actor import load_actor

    engine, scheduler = _yaml_blocks(_section("On your own cluster"))
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump(engine))
    config = load_config(path)
    assert config.shadow is True and config.prometheus is not None and config.decision_log is not None
    load_actor(ROOT / engine["model"])  # the model, from an engine.yaml at the checkout's root
    assert scheduler["kind"] == "KubeSchedulerConfiguration"
    (extender,) = scheduler["extenders"]
    assert extender["urlPrefix"] == f"http://{config.http.address}:{config.http.port}"
    assert (extender["filterVerb"], extender["prioritizeVerb"]) == ("filter", "prioritize")  # /filter, /prioritize
