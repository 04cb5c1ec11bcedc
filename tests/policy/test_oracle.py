"""oracle (hindsight bound) against scores worked out by hand, in hand-built worlds.

    H      = min(remaining run time, horizon_s = 3600 s)
    peak_r = max of the pod's usage_r over the profile slots of [t, t + H)   (memory capped at its limit)
    u_r    = (true usage_r now + peak_r) / (allocatable_r + overhead_r),  r in CPU, memory
    score  = 100 x (1 - max(u_cpu, u_mem)), minus 10^6 when memory would exceed capacity
Nodes are 4000m / 8192 MiB with no overhead; usage_scale = mem_level = 1; profiles on a 300 s grid.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from td3sched.evaluate import run_grid, write_reports
from td3sched.evaluate.grid import GridError, prepare
from td3sched.policy import POLICIES, REFERENCE_POLICIES, make_policy
from td3sched.policy.base import PolicyContext
from td3sched.policy.k8s_default import K8sDefault
from td3sched.policy.koord_load_aware import KoordLoadAware
from td3sched.policy.oracle import Oracle, OracleArgs
from td3sched.run import run_simulation
from td3sched.simulator.cluster import Cluster
from td3sched.simulator.engine import Simulation

from tests.simulator.worlds import P, constant_profiles, node, pool, profiles_from, simulate, world

POOLS = [pool("a", node(), 1), pool("b", node(), 1)]


class Recording(Oracle):
    """The oracle, keeping what it saw when it scored ``probe`` (and koord-loadaware's scores then)."""

    def __init__(self, probe: int, args: OracleArgs = OracleArgs()):
        super().__init__(args)
        self.probe, self.seen = probe, None

    def score(self, pod, nodes, cluster):
        scores = super().score(pod, nodes, cluster)
        if pod.index == self.probe:
            koord = KoordLoadAware()
            koord.attach(self.context)
            self.seen = dict(nodes=nodes.tolist(), observed=cluster.observed[nodes, :2].copy(),
                             usage=cluster.usage[nodes, :2].copy(), scores=scores.copy(),
                             koord=koord.score(pod, nodes, cluster))
        return scores


def test_picks_the_truly_less_loaded_of_two_nodes_that_look_alike():
    # big and small request the same; big uses (3000m, 6000Mi), small (500m, 1000Mi). The probe comes
    # at t=10, before the first scrape that sees them (t=30): both nodes' observed usage is 0.
    pods = [P("big", 0, cpu=1000, mem=1000, size_cpu=3000, size_mem=6000, pool="a"),
            P("small", 0, cpu=1000, mem=1000, size_cpu=500, size_mem=1000, pool="b"),
            P("probe", 10, cpu=500, mem=500, size_cpu=1000, size_mem=1000)]
    policy = Recording(probe=2)
    run = simulate(world(POOLS, pods, constant_profiles()), policy, end_s=60)
    seen = policy.seen
    assert seen["nodes"] == [0, 1]
    np.testing.assert_array_equal(seen["observed"], [[0, 0], [0, 0]])
    np.testing.assert_array_equal(seen["usage"], [[3000, 6000], [500, 1000]])
    assert seen["koord"][0] == seen["koord"][1]         # an observed-usage policy cannot tell them apart
    # a: u = max((3000 + 1000) / 4000, (6000 + 1000) / 8192) = 1.0              -> 0
    # b: u = max((500 + 1000) / 4000 = 0.375, (1000 + 1000) / 8192 = 0.244)     -> 62.5
    np.testing.assert_allclose(seen["scores"], [0.0, 62.5])
    assert run.node_of("probe") == "b-0000"


def _spiky_world():
    # hog (pool a): tiny request, uses 6000Mi all along. filler (pool b): big request, uses nothing.
    # spiky arrives at t=60 using 400Mi (0.1 x 4000) and peaks at 4000Mi from t=600 (slot 2).
    shape = np.zeros((4, 2, 4))
    shape[1, 0] = 1.0
    shape[1, 1] = [0.1, 0.1, 1.0, 1.0]
    pods = [P("hog", 0, cpu=100, mem=100, size_mem=6000, pool="a", profile=0),
            P("filler", 0, cpu=2000, mem=4000, pool="b"),
            P("spiky", 60, cpu=500, mem=500, size_mem=4000, dur=3600, profile=1),
            P("capped", 7200, cpu=500, mem=500, mem_limit=3000, size_mem=4000, dur=3600, profile=1)]
    return world(POOLS, pods, profiles_from(shape))


def test_a_future_memory_peak_keeps_the_pod_off_a_node_it_would_overflow():
    w = _spiky_world()
    oracle = Recording(probe=2)
    by_oracle = simulate(w, oracle, end_s=1200)
    # a: 6000 + 4000 = 10000Mi > 8192: lowest; b: u = max(500 / 4000, 4000 / 8192) -> 100 x (1 - 0.48828)
    np.testing.assert_allclose(oracle.seen["scores"], [100 * (1 - 10000 / 8192) - 1e6, 100 * (1 - 4000 / 8192)])
    assert by_oracle.node_of("spiky") == "b-0000"
    assert by_oracle.metrics["oom_kills"] == 0
    # k8s-default sees requests only: a (600m / 600Mi requested) beats b (2500m / 4500Mi); at t=600
    # node a holds 10000Mi of 8192 and the kernel kills the hog (most above its request) again and again
    by_default = simulate(w, K8sDefault(), end_s=1200)
    first = next(e for e in by_default.of("placement") if e["pod"] == "spiky")
    assert first["node"] == "a-0000" and by_default.node_of("spiky") == "a-0000"
    assert by_default.metrics["oom_kills"] >= 1


def _peak(spec: str, pod: int, t: float) -> list[float]:
    policy = make_policy(spec)
    sim = Simulation(_spiky_world(), policy, 1, 0.0, 7200.0)
    return policy.peak(sim.pod_request(pod, t)).tolist()


def test_the_look_ahead_window_and_the_memory_limit():
    spiky, capped = 2, 3
    assert _peak("oracle", spiky, 60.0) == [0.0, 4000.0]     # H = 3600 s: slots 0..12, wrapped
    assert _peak("oracle:horizon_s=540", spiky, 60.0) == pytest.approx([0.0, 400.0])  # [60, 600): slots 0, 1
    assert _peak("oracle:horizon_s=541", spiky, 60.0) == [0.0, 4000.0]  # [60, 601): reaches slot 2
    assert _peak("oracle", capped, 60.0) == [0.0, 3000.0]    # held at its 3000Mi limit


def test_future_usage_is_what_the_simulator_applies():
    w = _spiky_world()
    sim = Simulation(w, Oracle(), 1, 0.0, 1200.0)
    h = sim.policy.context.hindsight
    ahead = h.future_usage(2, 0.0, 1200.0)
    assert ahead.shape == (4, 4)
    np.testing.assert_array_equal(ahead, [sim._usage_of(2, t) for t in (0.0, 300.0, 600.0, 900.0)])
    assert h.remaining_s(2) == 3600 and math.isinf(h.remaining_s(0))


def test_registered_by_name_but_not_in_all(tmp_path):
    assert isinstance(make_policy("oracle"), Oracle) and "oracle" in REFERENCE_POLICIES
    assert "oracle" not in POLICIES
    assert make_policy("oracle:horizon_s=600").args == OracleArgs(horizon_s=600.0)
    with pytest.raises(ValueError, match="horizon_s=0.0: expected a positive number"):
        make_policy("oracle:horizon_s=0")
    with pytest.raises(ValueError, match="ground truth"):
        Oracle().attach(PolicyContext(Cluster(POOLS), 30.0, 60.0, None, None))
    assert "oracle" not in prepare("tiny", "test", ["all"], 1, tmp_path / "g", workers=1).policies
    assert prepare("tiny", "test", ["oracle", "k8s-default"], 1, tmp_path / "g", workers=1).policies == (
        "oracle", "k8s-default")
    with pytest.raises(GridError, match="except the hindsight bounds oracle"):
        prepare("tiny", "test", ["orakel"], 1, tmp_path / "g", workers=1)


def test_runs_the_tiny_scenario():
    record = run_simulation("tiny", "oracle", 1, "test")
    metrics = record["metrics"]
    assert record["policy"] == "oracle" and metrics["decisions"] > 0
    numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
    assert numbers and all(math.isfinite(v) for v in numbers.values()), numbers


def test_an_evaluation_never_calls_the_oracle_its_best_policy(tmp_path):
    spec = prepare("tiny", "test", ["k8s-default,oracle,random"], 1, tmp_path / "g", workers=1)
    report = write_reports(run_grid(spec, progress=False)).report_md.read_text()
    assert "oracle" in report
    assert "Heatmap 'best' policy: `random`" in report
