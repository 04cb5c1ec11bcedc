"""The Go plugin's test vectors (scheduler/testdata/vectors.json) are what the Python rules give today:
change a rule, and this test fails until the vectors are rewritten (`td3sched plugin-vectors`) and the Go
tests (`cd scheduler && go test ./...`) are run against them.

Floats are compared to 1e-9 relative, not byte for byte: numpy releases move the last digit of the random
inputs and of the sums (numpy 2.4 did), which changes no rule; the Go tests hold their own tolerance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from td3sched.engine.plugin_vectors import SCHEMA, render, static_score, vectors

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "scheduler" / "testdata" / "vectors.json"


REL = 1e-9


def _differences(committed, current, where="$"):
    """Where two parsed vector files differ: keys, lengths, strings, bools and ints exactly, floats to REL."""
    if isinstance(committed, dict) and isinstance(current, dict):
        if set(committed) != set(current):
            yield f"{where}: keys {sorted(set(committed) ^ set(current))} on one side only"
            return
        for key in committed:
            yield from _differences(committed[key], current[key], f"{where}.{key}")
    elif isinstance(committed, list) and isinstance(current, list):
        if len(committed) != len(current):
            yield f"{where}: {len(committed)} items committed, {len(current)} now"
            return
        for i, (a, b) in enumerate(zip(committed, current)):
            yield from _differences(a, b, f"{where}[{i}]")
    elif isinstance(committed, float) or isinstance(current, float):
        if isinstance(committed, bool) or isinstance(current, bool) or \
                abs(committed - current) > REL * max(1.0, abs(committed), abs(current)):
            yield f"{where}: {committed!r} committed, {current!r} now"
    elif committed != current or type(committed) is not type(current):
        yield f"{where}: {committed!r} committed, {current!r} now"


def test_committed_vectors_are_current():
    diff = list(_differences(json.loads(VECTORS.read_text(encoding="utf-8")), json.loads(render())))
    assert not diff, (f"{VECTORS.relative_to(REPO)} is out of date ({len(diff)} values, first: {diff[:3]}): "
                      "run `td3sched plugin-vectors` and the Go tests")


def test_the_comparison_sees_a_changed_score_and_ignores_the_last_digit():
    data = json.loads(render())
    nudged = json.loads(render())
    nudged["static_score"][0]["score"] *= 1 + 1e-14
    assert not list(_differences(data, nudged))
    nudged["static_score"][0]["score_0_100"] += 1
    nudged["safety"][0]["ok"] = not nudged["safety"][0]["ok"]
    assert len(list(_differences(data, nudged))) == 2


def test_vectors_cover_the_rules_edges():
    v = vectors()
    scores = v["static_score"]
    assert {0, 100} & {s["score_0_100"] for s in scores}, "no vector reaches either end of the score range"
    assert any(not s["fresh"] for s in scores) and any(s["pod_cpu_milli"] == 0 for s in scores)
    assert any(u > 1 for s in scores if s["fresh"] for u in s["utilisation"]), "no over-full node"
    assert {True, False} == {s["ok"] for s in v["safety"]}
    assert len({s["score_0_100"] for s in scores}) > 20
    ceilings = [s for s in scores if s["fresh"] and s["ceiling"] is not None]
    assert {True, False} == {s["held_back"] for s in ceilings}, "no ceiling vector on both sides of its ceiling"


def test_static_score_is_the_engines_for_one_node():
    """The vector's score is the decision engine's weighted closeness (a hand-checked case):
    u = ([4000 + 500 + 100] / 16000, [8192 + 0 + 200] / 65536, 0.25, 0.1), tau 0: score = mean(1 - u)."""
    u, score, score_100, held_back = static_score(100, 0, [4000, 8192, 0.25, 1000], [16000, 65536, 1, 10000],
                                                  [500, 0], [0.25] * 4, 0.0, True)
    expected_u = np.array([4600 / 16000, 8392 / 65536, 0.25, 0.1])
    np.testing.assert_allclose(u, expected_u)
    assert abs(score - float(np.mean(1 - expected_u))) < 1e-12
    assert score_100 == int(np.rint(100 * score))
    assert not held_back
    assert static_score(100, 0, [0] * 4, [1] * 4, [0, 0], [0.25] * 4, 0.0, False)[1:] == (0.5, 50, False)


def test_a_node_above_the_ceiling_scores_zero():
    """u_cpu = 4600 / 16000 = 0.2875: a ceiling of 0.28 holds the node back (score 0), 0.29 keeps its score."""
    args = (100, 0, [4000, 8192, 0.25, 1000], [16000, 65536, 1, 10000], [500, 0], [0.25] * 4, 0.0, True)
    _, free, _, _ = static_score(*args)
    assert static_score(*args, ceiling=0.28)[1:] == (0.0, 0, True)
    assert static_score(*args, ceiling=0.29)[1:] == (free, int(np.rint(100 * free)), False)


def test_vectors_file_is_json_with_the_schema():
    data = json.loads(VECTORS.read_text(encoding="utf-8"))
    assert data["schema"] == SCHEMA and set(data) >= {"static_score", "safety", "pods", "prometheus_queries",
                                                      "observation", "actor", "decisions", "fallback_fragmentation",
                                                      "fragmentation_decisions"}


def test_inference_vectors_cover_what_the_plugin_must_get_right():
    """Observations over some and all of the known nodes, with and without the assign cache; actor cases
    off the bound (a graph evaluated wrong moves them); decodings of every mode the plugin scores; engine
    decisions with stale candidates under both staleness modes."""
    v = vectors()
    obs = v["observation"]
    assert {True, False} == {len(o["candidates"]) == o["known_nodes"] for o in obs}
    assert any(c["recent"] != [0.0, 0.0] for o in obs for c in o["candidates"])
    assert {"Guaranteed", "Burstable", "BestEffort"} == {o["pod"]["qos"] for o in obs}
    pre = np.array([c["pre_activations"] for c in v["actor"]["cases"]])
    assert (np.abs(pre) < 4.9).mean() > 0.2, "the actor vectors sit at the bound: a wrong graph could pass them"
    assert {"full", "seed", "ceiling"} == {d["action_mode"] for d in v["actor"]["decode"]}
    decisions = v["decisions"]
    stale_candidates = [d for d in decisions if any(n["sample_time_s"] < d["now_s"] - 60 and n["name"] in d["candidates"]
                                                    for n in d["nodes"])]
    assert {True, False} == {d["fail_closed"] for d in stale_candidates}
    assert len({tuple(np.round(d["weights"], 2)) for d in decisions}) > 5, "the decisions hardly differ in action"


def test_fallback_fragmentation_vectors_cover_what_the_plugin_must_get_right():
    """The blend over the fresh candidates, with stale ones among them; nodes of a pool the typical pods
    name, of another and of none, with GPUs free and taken; pods with and without GPUs; the shipped
    blend's typical pods and drawn ones; shares whose blend moves the static order."""
    cases = vectors()["fallback_fragmentation"]
    blended = [c for c in cases if c["fallback_reason"] == "no_model"]
    assert len(blended) >= 20 and all(c["fragmentation"] == c["share"] > 0 for c in blended)
    nodes = [(c, n) for c in blended for n in c["nodes"] if n["name"] in c["candidates"]]
    assert any(n["sample_time_s"] < c["now_s"] - 60 for c, n in nodes)
    named = {n["pool"] in c["typical_pods"]["pools"] for c, n in nodes}
    assert named == {True, False} and {"", "other"} <= {n["pool"] for _, n in nodes}
    assert any(0 < n["gpus_requested"] < n["gpus"] for _, n in nodes)
    assert {0, 1, 2} <= {c["pod"]["gpu_count"] for c in blended}
    assert {"cpu", "gpu"} <= {p for c in blended for p in c["typical_pods"]["pools"]}
    assert len({s for c in blended for s in c["scores_0_100"]}) > 30, "the blended scores hardly differ"


def test_fragmentation_decision_vectors_are_the_shipped_blend_s_with_its_typical_pods():
    from td3sched.metrics.fragmentation import read_typical_pods, typical_pods_from_json
    from td3sched.rl.card import CARD_FILE
    from td3sched.engine.plugin_vectors import BLEND_MODEL

    cases = vectors()["fragmentation_decisions"]
    served = [c for c in cases if c["fallback_reason"] == ""]
    assert len(served) >= 12 and all(c["share"] > 0 and c["model"].startswith(f"models/{BLEND_MODEL}/") for c in served)
    card = read_typical_pods(VECTORS.parents[2] / "models" / BLEND_MODEL / CARD_FILE)
    sent = typical_pods_from_json(cases[0]["typical_pods"])
    assert sent[0] == card[0] and all((a.weight == b.weight).all() for a, b in zip(sent[1].pools, card[1].pools))
    assert {0, 1, 2} <= {c["pod"]["gpu_count"] for c in served}
