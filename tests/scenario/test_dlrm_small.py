"""dlrm-small: a seeded share of dlrm's DLRM instances on node pools scaled by the same share loads
its pools as dlrm does (the scenario's promise, docs/lifecycle.md's rehearsal runs on it)."""

from __future__ import annotations

import numpy as np
import pytest

from td3sched.scenario import load_scenario
from td3sched.scenario.build import build_workload


@pytest.fixture(scope="module")
def workloads(traces):
    out = {}
    for name in ("dlrm", "dlrm-small"):
        scenario = load_scenario(name, ["batch.enabled=false"])
        pools = scenario.pools(1)
        workload, _ = build_workload(scenario, pools, seed=1)
        out[name] = (scenario, pools, workload)
    return out


def _peak_requested_share(scenario, pools, workload, pool_name: str, column: str) -> float:
    """The highest share of the pool's capacity requested by the pods alive at any hour."""
    pool = next(p for p in pools if p.name == pool_name)
    index = workload.pool_names.index(pool_name)
    mine = workload.pool == index
    start, end = workload.arrival_s[mine], workload.arrival_s[mine] + workload.duration_s[mine]
    size = workload.request[mine, 0] if column == "cpu" else workload.gpu_count[mine].astype(float)
    capacity = pool.count * (pool.shapes[0].cpu_milli if column == "cpu" else pool.shapes[0].gpus)
    hours = np.arange(0, scenario.days * 24) * 3600.0
    alive = (start[None, :] <= hours[:, None]) & (end[None, :] > hours[:, None])
    return float((alive * size[None, :]).sum(axis=1).max() / capacity)


def test_dlrm_small_keeps_a_twentieth_of_the_instances_and_loads_its_pools_as_dlrm(workloads):
    _, _, full = workloads["dlrm"]
    small_scenario, small_pools, small = workloads["dlrm-small"]
    share = len(small) / len(full)
    assert 0.045 < share < 0.055, share
    assert set(small.name.tolist()) <= set(full.name.tolist())
    for pool, column in (("cpu", "cpu"), ("gpu", "gpu")):
        big = _peak_requested_share(*workloads["dlrm"], pool, column)
        mini = _peak_requested_share(small_scenario, small_pools, small, pool, column)
        assert abs(mini / big - 1) < 0.1, (pool, mini, big)


def test_a_sample_is_drawn_per_seed(traces):
    scenario = load_scenario("dlrm-small", ["batch.enabled=false"])
    pools = scenario.pools(1)
    one, _ = build_workload(scenario, pools, seed=1)
    two, _ = build_workload(scenario, pools, seed=2)
    assert len(one) != len(two) or not np.array_equal(one.request, two.request)


def test_a_sample_outside_0_1_is_refused():
    from td3sched.scenario.schema import ScenarioError

    with pytest.raises((ScenarioError, ValueError), match="sample"):
        load_scenario("dlrm-small", ["workload.sample=0"])
    with pytest.raises((ScenarioError, ValueError), match="sample"):
        load_scenario("dlrm-small", ["workload.sample=1.5"])
