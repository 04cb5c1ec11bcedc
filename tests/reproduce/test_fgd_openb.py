"""The FGD openb protocol: the paper's fragmentation measure by hand, the target workload, the
workload tuning, the artifact's discrete curves, and the driver's tie rule."""

from __future__ import annotations

import numpy as np
import pytest

from td3sched.metrics.gpu_fragmentation import GpuTypicalPods, gpu_fragmentation
from td3sched.reproduce.fgd_openb import OpenbWorld, Trace, curves, run_experiment, tune_pods
from tests.simulator.worlds import node, pool


def _typical(pool_models=("T4",), share_spec=""):
    # X: CPU only (2000m), p = 0.2; S: a 500-milli share (1000m), p = 0.5; W: 2 whole GPUs (4000m), p = 0.3.
    return GpuTypicalPods(np.array([2000, 1000, 4000]), np.array([0, 500, 1000]), np.array([0, 1, 2]),
                          ("", share_spec, ""), np.array([0.2, 0.5, 0.3]), pool_models)


def _free(cpu, mem=1e6):
    return np.array([[c, mem, 0.0, 0.0] for c in cpu])


def test_fragmentation_by_hand():
    gpu_free = np.array([[1000, 1000, 300, 0], [1000, 1000, 1000, 1000], [400, 200, 0, 0]])
    free = _free([8000, 3000, 8000], mem=0.0)       # no memory left anywhere: the measure ignores memory
    # n0: idle 2300. X: all idle, 0.2 x 2300 = 460. S fits: its too-small GPUs (< 500) hold 300 + 0:
    #     0.5 x 300 = 150. W fits (2 idle GPUs): too small (< 1000): 300: 0.3 x 300 = 90.     F = 700
    # n1: idle 4000. X: 800. S fits, nothing too small: 0. W needs 4000m > 3000m: all idle: 1200. F = 2000
    # n2: idle 600. S: no GPU with 500 free, W: no idle GPU: all idle for every shape.          F = 600
    f = _typical().node_fragmentation(free, gpu_free, np.zeros(3, dtype=int))
    assert f.tolist() == pytest.approx([700, 2000, 600])
    amount, ratio = gpu_fragmentation(free, gpu_free, np.zeros(3, dtype=int), _typical())
    assert amount == pytest.approx(3300) and ratio == pytest.approx(3300 / 6900)


def test_a_shape_counts_all_idle_gpu_on_a_model_it_does_not_accept():
    # S accepts V100M16 only; n0 is a T4 node: S counts all 2300 idle (1150) instead of 150. F = 460 + 1150 + 90.
    typical = _typical(("T4", "V100M16"), share_spec="V100M16")
    gpu_free = np.array([[1000, 1000, 300, 0]] * 2)
    f = typical.node_fragmentation(_free([8000, 8000]), gpu_free, np.array([0, 1]))
    assert f.tolist() == pytest.approx([1700, 700])


def test_target_workload_covers_the_share_by_pod_count_larger_shape_first_on_ties():
    # a x5, b x3, c x1 (100m), d x1 (200m): 80% coverage takes a, b (8 of 10 pods): weights 5/8, 3/8.
    cpu = [1000] * 5 + [2000] * 3 + [100, 200]
    gpu_milli = [500] * 5 + [0] * 3 + [1000, 1000]
    gpu_count = [1] * 5 + [0] * 3 + [1, 1]
    spec = [""] * 10
    t = GpuTypicalPods.from_pods(cpu, gpu_milli, gpu_count, spec, ("T4",), coverage=0.8)
    assert t.cpu_milli.tolist() == [1000, 2000] and t.weight.tolist() == pytest.approx([5 / 8, 3 / 8])
    # 85% needs 8.5 pods: one more, c and d tie at one pod each and the larger (d, 200m) comes first.
    t = GpuTypicalPods.from_pods(cpu, gpu_milli, gpu_count, spec, ("T4",), coverage=0.85)
    assert t.cpu_milli.tolist() == [1000, 2000, 200] and t.weight.tolist() == pytest.approx([5 / 9, 3 / 9, 1 / 9])


def test_tuning_shuffles_then_appends_copies_up_to_the_ratio_deterministically():
    rng = np.random.default_rng(0)
    gpu_count = rng.choice([0, 1, 1, 2, 4], size=50)
    gpu_milli = np.where(gpu_count == 1, rng.choice([300, 500, 1000], size=50), np.where(gpu_count > 0, 1000, 0))
    cluster = 100_000
    order = tune_pods(gpu_count, gpu_milli, cluster, 1.3, seed=42)
    assert np.array_equal(order, tune_pods(gpu_count, gpu_milli, cluster, 1.3, seed=42))
    assert not np.array_equal(order, tune_pods(gpu_count, gpu_milli, cluster, 1.3, seed=43))
    assert sorted(order[:50].tolist()) == list(range(50)) and not np.array_equal(order[:50], np.arange(50))
    total = int((gpu_count[order] * gpu_milli[order]).sum())
    target = 1.3 * cluster
    # It stopped because the next draw's milli per GPU would pass the target; the last copy added
    # may pass it by its extra GPUs (the artifact's test adds milli per GPU, the total all GPUs).
    assert target - gpu_milli.max() < total <= target + ((gpu_count - 1).clip(0) * gpu_milli).max()
    assert len(order) > 50


def test_tuning_stops_on_the_per_gpu_milli_as_the_artifact_does():
    # One pod of 2 whole GPUs (2000 milli), cluster 1000 milli. Ratio 2.5: 2000 + 1000 > 2500, no copy.
    assert tune_pods(np.array([2]), np.array([1000]), 1000, 2.5, seed=1).tolist() == [0]
    # Ratio 3: 2000 + 1000 <= 3000, one copy (total 4000, past the target); then 4000 + 1000 > 3000.
    assert tune_pods(np.array([2]), np.array([1000]), 1000, 3.0, seed=1).tolist() == [0, 0]
    with pytest.raises(ValueError, match="above 1.0 x 1000"):
        tune_pods(np.array([2]), np.array([1000]), 1000, 1.0, seed=1)


def test_curves_follow_the_artifacts_buckets():
    # 100 GPUs. Arrivals at 50, 99.6, 100.4 and 130% of them; allocated 50, 90, 92, 95%.
    trace = Trace(arrived_milli=np.array([50_000, 99_600, 100_400, 130_000.0]),
                  allocated_milli=np.array([50_000, 90_000, 92_000, 95_000.0]),
                  frag_milli=np.array([1000, 5000, 7000, 4000.0]),
                  idle_milli=np.array([50_000, 10_000, 8000, 5000.0]), failed=0, nodes_used=0, wall_s=0.0)
    c = curves(trace, 100_000).set_index("arrived_pct")
    # 100%: both arrivals rounding to 100 -> allocated mean 91 -> 9 unallocated; fragmentation mean
    # 6000 milli = 6% of 100 GPUs; ratio mean(50%, 87.5%) = 68.75%. 99%: no arrival, neighbours 98-100.
    assert c.loc[100].tolist() == pytest.approx([9.0, 6.0, 68.75])
    assert c.loc[99].tolist() == pytest.approx([9.0, 6.0, 68.75])
    assert c.loc[50, "unallocated_pct"] == pytest.approx(50.0)
    assert np.isnan(c.loc[0, "unallocated_pct"])


def _world():
    # 4 nodes of 64 cores and 2 GPUs; 12 CPU-only pods of 1000m and one pod of a whole GPU.
    nodes = pool("T4", node(64_000, 262_144, gpus=2), 4)
    typical = GpuTypicalPods(np.array([1000]), np.array([500]), np.array([1]), ("",), np.array([1.0]), ("T4",))
    gpu_count = np.array([0] * 12 + [1])
    return OpenbWorld((nodes,), np.full(13, 1000.0), np.full(13, 1024.0), gpu_count, gpu_count * 1000, typical)


def test_ties_go_to_a_fixed_node_order_except_for_random():
    # Tuned to 1000 milli-GPU, what the one GPU pod asks: the draws add CPU-only copies (they add no
    # GPU) until they draw the GPU pod. gpu-clustering scores every node alike for these pods (0 for
    # CPU-only pods; 25 + 18 for the GPU pod on any node without GPU pods), so the fixed node order
    # puts every pod on one node; random draws a node per pod.
    world = _world()
    packed = run_experiment(world, "GpuClustering", seed=7, tune_ratio=0.125)
    spread = run_experiment(world, "Random", seed=7, tune_ratio=0.125)
    assert 13 <= len(packed.arrived_milli) <= 64 and len(spread.arrived_milli) == len(packed.arrived_milli)
    assert packed.failed == spread.failed == 0 and packed.allocated_milli[-1] == 1000
    assert packed.nodes_used == 1
    assert spread.nodes_used > 1
