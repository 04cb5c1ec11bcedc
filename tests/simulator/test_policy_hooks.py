"""The engine honours a policy's hooks: the GPUs it names for a pod, and the releases it is told of."""

from __future__ import annotations

import numpy as np

from tests.simulator.worlds import P, node, pool, simulate, world
from td3sched.policy.k8s_default import K8sDefault


class LastGpu(K8sDefault):
    """Puts every GPU share on the highest-indexed GPU that fits (Bind's own choice is best fit,
    lowest index on ties), and counts releases."""

    name = "last-gpu"

    def __init__(self) -> None:
        super().__init__()
        self.released_pods: list[int] = []

    def choose_gpus(self, pod, node, cluster):
        free = cluster.gpu_capacity[node] - cluster.gpu_used[node]
        return np.flatnonzero(free >= pod.gpu_milli)[-1:]

    def released(self, pod, node, cluster, reason="departure"):
        self.released_pods.append((pod.index, reason))


def test_the_engine_binds_a_pod_on_the_gpus_its_policy_names_and_tells_it_of_releases():
    pods = [P("a", t=0, dur=50, cpu=100, gpus=1, gpu_milli=500), P("b", t=1, cpu=100, gpus=1, gpu_milli=500)]
    policy = LastGpu()
    run = simulate(world([pool("g", node(cpu=8000, gpus=4), 1)], pods), policy, end_s=100)
    sim = run.sim
    assert sim.gpus[1].tolist() == [3]                      # "b" runs on GPU 3, not Bind's GPU 0
    assert sim.cluster.gpu_used[0].tolist() == [0, 0, 0, 500]
    assert policy.released_pods == [(0, "departure")]       # "a" left at 50 s, at its end


def test_a_policy_without_hooks_gets_binds_own_gpu_choice():
    pods = [P("a", t=0, cpu=100, gpus=1, gpu_milli=500)]
    run = simulate(world([pool("g", node(cpu=8000, gpus=4), 1)], pods), K8sDefault(), end_s=10)
    assert run.sim.gpus[0].tolist() == [0]
