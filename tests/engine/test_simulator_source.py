"""The engine in the simulator's loop: at every decision of a tiny window, the engine fed by the
simulator source (and by ReportBinding for each placement) computes the same observation and the
same scores as the simulator's own td3 policy, because both run the same code."""

from __future__ import annotations

import numpy as np

from td3sched.engine.decision import DecisionEngine, ModelSlot, PodSpec
from td3sched.engine.service import EngineService
from td3sched.engine.simulator_source import SimulatorSource
from td3sched.engine.state import ShadowState, Staleness
from td3sched.policy import make_policy
from td3sched.rl.policy import TD3Policy
from td3sched.scenario import load_scenario
from td3sched.simulator.engine import Simulation

from tests.engine.conftest import MODEL


class TwinCheck(TD3Policy):
    """The td3 policy, asking the engine the same question at every decision."""

    def __init__(self, model):
        super().__init__(model)
        self.decisions = 0

    def attach(self, context):
        super().attach(context)
        self.now = 0.0
        self.state = ShadowState(lambda: self.now, Staleness(max_age_s=1e9))
        self.source = SimulatorSource(context.cluster, self.state, lambda: self.now, context.oom_kills)
        self.service = EngineService(DecisionEngine(self.state, ModelSlot(self.model)))

    def score(self, pod, nodes, cluster):
        scores = super().score(pod, nodes, cluster)
        self.now = pod.time_s
        self.source.refresh()
        spec = PodSpec("p", *pod.request.tolist(), gpu_count=pod.gpu_count, gpu_milli=pod.gpu_milli, qos=pod.qos,
                       cpu_limit_milli=pod.cpu_limit_milli, mem_limit_mib=pod.mem_limit_mib)
        _, d = self.service.score_nodes(spec, cluster.names[nodes].tolist())
        assert not d.fallback and not d.stale.any()
        np.testing.assert_array_equal(d.scores, scores)
        np.testing.assert_array_equal(d.weights, self.weights)
        self.decisions += 1
        return scores

    def bound(self, pod, node, cluster):
        super().bound(pod, node, cluster)
        self.service.report_binding(PodSpec("p", *pod.request.tolist()), str(cluster.names[node]), "")


def test_engine_fed_by_the_simulator_scores_as_the_td3_policy():
    scenario = load_scenario("tiny")
    world = scenario.build(1)
    start, _ = scenario.span("test")
    twin = TwinCheck(make_policy(f"td3:{MODEL}").model)
    record = Simulation(world, twin, 1, start, start + 2 * 3600).run()
    plain = Simulation(world, make_policy(f"td3:{MODEL}"), 1, start, start + 2 * 3600).run()
    assert twin.decisions > 20
    assert record["metrics"] == plain["metrics"]
