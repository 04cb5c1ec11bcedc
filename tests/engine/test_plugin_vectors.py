"""The Go plugin's test vectors (scheduler/testdata/vectors.json) are what the Python rules give today:
change a rule, and this test fails until the vectors are rewritten (`td3sched plugin-vectors`) and the Go
tests (`cd scheduler && go test ./...`) are run against them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from td3sched.engine.plugin_vectors import render, static_score, vectors

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "scheduler" / "testdata" / "vectors.json"


def test_committed_vectors_are_current():
    assert VECTORS.read_text(encoding="utf-8") == render(), (
        f"{VECTORS.relative_to(REPO)} is out of date: run `td3sched plugin-vectors` and the Go tests")


def test_vectors_cover_the_rules_edges():
    v = vectors()
    scores = v["static_score"]
    assert {0, 100} & {s["score_0_100"] for s in scores}, "no vector reaches either end of the score range"
    assert any(not s["fresh"] for s in scores) and any(s["pod_cpu_milli"] == 0 for s in scores)
    assert any(u > 1 for s in scores if s["fresh"] for u in s["utilisation"]), "no over-full node"
    assert {True, False} == {s["ok"] for s in v["safety"]}
    assert len({s["score_0_100"] for s in scores}) > 20


def test_static_score_is_the_engines_for_one_node():
    """The vector's score is the decision engine's weighted closeness (a hand-checked case):
    u = ([4000 + 500 + 100] / 16000, [8192 + 0 + 200] / 65536, 0.25, 0.1), tau 0: score = mean(1 - u)."""
    u, score, score_100 = static_score(100, 0, [4000, 8192, 0.25, 1000], [16000, 65536, 1, 10000], [500, 0],
                                       [0.25] * 4, 0.0, True)
    expected_u = np.array([4600 / 16000, 8392 / 65536, 0.25, 0.1])
    np.testing.assert_allclose(u, expected_u)
    assert abs(score - float(np.mean(1 - expected_u))) < 1e-12
    assert score_100 == int(np.rint(100 * score))
    assert static_score(100, 0, [0] * 4, [1] * 4, [0, 0], [0.25] * 4, 0.0, False)[1:] == (0.5, 50)


def test_vectors_file_is_json_with_the_schema():
    data = json.loads(VECTORS.read_text(encoding="utf-8"))
    assert data["schema"] == 1 and set(data) >= {"static_score", "safety", "pods", "prometheus_queries"}
