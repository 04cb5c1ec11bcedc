"""The fallback's fragmentation share: with ``fallback: {fragmentation, typical_pods}`` the engine's
static score is blended with FGD's, measured with the typical pods of a file (a model card holding them,
or their own form), as the static blend ``static-weights:...:frag=s`` scores; without the nodes'
allocation it is the static score alone; a share without typical pods, or a file that cannot be read,
is refused at start, naming the key and the file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from td3sched.engine.config import load_config
from td3sched.engine.decision import DecisionEngine, FragmentationMeasure, ModelSlot, PodSpec
from td3sched.engine.serve import fallback_fragmentation
from td3sched.engine.state import Allocation, NodeSnapshot, ShadowState, Staleness
from td3sched.metrics.fragmentation import (PoolTypicalPods, TypicalPods, read_typical_pods,
                                            typical_pods_to_json)
from td3sched.policy.fgd import fragmentation_decrease
from td3sched.policy.features import utilisation
from td3sched.policy.static_weights import blend_fragmentation, product_score

from tests.engine.conftest import REPO, Clock, snapshot

TYPICAL = PoolTypicalPods((
    TypicalPods(np.array([[2000.0, 4096, 0, 0], [8000, 16384, 0, 0]]), np.array([0, 0]), np.array([0, 0]),
                np.array([0.7, 0.3])),
    TypicalPods(np.array([[4000.0, 8192, 0, 0], [8000, 8192, 0, 0]]), np.array([1, 2]), np.array([1000, 1000]),
                np.array([0.6, 0.4])),
))
WEIGHTS, TAU, SHARE = np.array([1.0, 0.0, 0.0, 0.0]), 0.4, 0.25


def _nodes(allocation: bool = True) -> NodeSnapshot:
    snap = snapshot(6, cpu_util=[0.2, 0.3, 0.25, 0.35, 0.3, 0.2])
    if not allocation:
        return snap
    free = np.array([[14000, 60000, 500, 100], [3000, 9000, 500, 100], [9000, 20000, 500, 100],
                     [4500, 8192, 500, 100], [12000, 30000, 500, 100], [6000, 20000, 500, 100]], dtype=float)
    gpu_free = np.array([[0, 0], [0, 0], [1000, 1000], [1000, 0], [1000, 1000], [1000, 0]])
    return NodeSnapshot(snap.names, snap.allocatable, snap.capacity_usage, snap.observed, snap.scraped_at_s,
                        taken_at_s=snap.taken_at_s,
                        allocation=Allocation(free, gpu_free, ("cpu", "cpu", "gpu", "gpu", "gpu", "spot")))


def _engine(snap: NodeSnapshot, share: float = SHARE) -> DecisionEngine:
    state = ShadowState(Clock(), Staleness())
    state.publish(snap)
    return DecisionEngine(state, ModelSlot(None), WEIGHTS, TAU, fallback_fragmentation=share,
                          fallback_measure=FragmentationMeasure(("cpu", "gpu"), TYPICAL))


@pytest.mark.parametrize("pod", [PodSpec("a", cpu_milli=4000, mem_mib=8192),
                                 PodSpec("b", cpu_milli=4000, mem_mib=8192, gpu_count=1, gpu_milli=1000)])
def test_the_fallback_blends_the_static_score_with_fgd_s_by_its_share(pod):
    snap = _nodes()
    d = _engine(snap).decide(pod, list(snap.names))
    assert d.fallback_reason == "no_model" and d.fragmentation == SHARE
    request, nodes, a = pod.request(0.0), np.arange(6), snap.allocation
    static = product_score(utilisation(request, nodes, snap, None), None, WEIGHTS, TAU)
    typical = PoolTypicalPods(TYPICAL.pools + (TypicalPods.empty(),))  # "spot": a pool the file does not name
    pool = np.array([0, 0, 1, 1, 1, 2])
    decrease = fragmentation_decrease(typical, request, a.free, a.gpu_free, pool,
                                      typical.node_fragmentation(a.free, a.gpu_free, pool))
    assert np.ptp(decrease) > 0
    np.testing.assert_array_equal(d.scores, blend_fragmentation(static, decrease, SHARE))
    assert not np.array_equal(d.scores, static)


def test_without_the_allocation_the_fallback_is_the_static_score_alone():
    snap = _nodes(allocation=False)
    pod = PodSpec("a", cpu_milli=4000, mem_mib=8192)
    d = _engine(snap).decide(pod, list(snap.names))
    assert d.fallback_reason == "no_model" and d.fragmentation == 0.0
    np.testing.assert_array_equal(
        d.scores, product_score(utilisation(pod.request(0.0), np.arange(6), snap, None), None, WEIGHTS, TAU))


def test_a_share_of_zero_leaves_the_static_score_as_it_was():
    snap = _nodes()
    pod = PodSpec("a", cpu_milli=4000, mem_mib=8192)
    with_measure = _engine(snap, share=0.0).decide(pod, list(snap.names))
    plain = DecisionEngine(_engine(snap).state, ModelSlot(None), WEIGHTS, TAU).decide(pod, list(snap.names))
    np.testing.assert_array_equal(with_measure.scores, plain.scores)


def test_a_share_without_typical_pods_is_refused():
    with pytest.raises(ValueError, match="fallback fragmentation share 0.25: expected the typical pods"):
        DecisionEngine(ShadowState(Clock(), Staleness()), ModelSlot(None), WEIGHTS, TAU, fallback_fragmentation=0.25)
    with pytest.raises(ValueError, match="frag"):
        DecisionEngine(ShadowState(Clock(), Staleness()), ModelSlot(None), WEIGHTS, TAU, fallback_fragmentation=1.5,
                       fallback_measure=FragmentationMeasure(("cpu", "gpu"), TYPICAL))


def _config(tmp_path, fallback: str):
    path = tmp_path / "engine.yaml"
    path.write_text(f"fallback: {fallback}\n", encoding="utf-8")
    return load_config(path)


def test_the_config_reads_a_shipped_blend_s_card_relative_to_the_config_file(tmp_path):
    card = REPO / "models" / "static-blend-dlrm-small" / "model.json"
    (tmp_path / "models").symlink_to(REPO / "models")
    config = _config(tmp_path, "{weights: [1, 0, 0, 0], tau: 0.4, fragmentation: 0.25, "
                               "typical_pods: models/static-blend-dlrm-small/model.json}")
    assert config.fallback.typical_pods == tmp_path / "models" / "static-blend-dlrm-small" / "model.json"
    share, measure = fallback_fragmentation(config)
    names, typical = read_typical_pods(card)
    assert share == 0.25 and measure.card[0] == names
    for mine, theirs in zip(measure.card[1].pools, typical.pools):
        np.testing.assert_array_equal(mine.request, theirs.request)
        np.testing.assert_array_equal(mine.weight, theirs.weight)
    # the same typical pods in their own form read the same
    own = tmp_path / "typical.json"
    own.write_text(json.dumps(typical_pods_to_json(typical, names)), encoding="utf-8")
    again = read_typical_pods(own)
    assert again[0] == names and all(np.array_equal(a.gpu_milli, b.gpu_milli)
                                     for a, b in zip(again[1].pools, typical.pools))


def test_the_config_refuses_a_share_without_typical_pods_and_a_file_it_cannot_read(tmp_path):
    with pytest.raises(ValueError, match=r"fallback: .*fragmentation=0.25 needs typical_pods"):
        _config(tmp_path, "{weights: [1, 0, 0, 0], fragmentation: 0.25}")
    with pytest.raises(ValueError, match=r"fallback.fragmentation: .*less than or equal to 1"):
        _config(tmp_path, "{weights: [1, 0, 0, 0], fragmentation: 2, typical_pods: t.json}")
    config = _config(tmp_path, "{weights: [1, 0, 0, 0], fragmentation: 0.25, typical_pods: missing.json}")
    with pytest.raises(ValueError, match=r"fallback.typical_pods: typical pods .*missing.json: no such file"):
        fallback_fragmentation(config)
    (tmp_path / "bad.json").write_text('{"pools": ["a"], "sets": []}', encoding="utf-8")
    config = _config(tmp_path, "{weights: [1, 0, 0, 0], fragmentation: 0.25, typical_pods: bad.json}")
    with pytest.raises(ValueError, match=r"bad.json: typical_pods: pools \['a'\] with 0 sets"):
        fallback_fragmentation(config)
    (tmp_path / "text.json").write_text("not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"text.json: not readable JSON"):
        read_typical_pods(tmp_path / "text.json")
