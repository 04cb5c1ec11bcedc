"""The FGD paper's openb experiment (Weng et al., USENIX ATC'23, Fig. 9a and Fig. 7), rebuilt with
this project's Filter, GPU assignment, policies and fragmentation measure.

Protocol, as the paper's artifact runs it (hkust-adsl/kubernetes-scheduler-simulator:
``experiments/run_scripts/generate_run_scripts.py``, ``scripts/generate_config_and_run.py``,
``pkg/simulator/simulator.go``, ``pkg/simulator/core.go``, ``experiments/analysis/merge_*_discrete.py``):

- nodes: ``openb_node_list_gpu_node.csv`` (1,213 nodes, 6,212 GPUs); pods:
  ``openb_pod_list_default.csv`` (8,152), requests = limits = the trace's CPU, memory and GPUs;
- workload tuning (``TunePodsByNodeTotalResource``): with the seed, the pods in name order are
  shuffled; then copies of pods drawn uniformly from the originals are appended while the GPU
  request stays within ``tune_ratio`` (1.3) x the cluster's GPUs. As in the artifact, the test
  that stops the draws adds the drawn pod's milli-GPU *per GPU*, the total adds all its GPUs;
- pods arrive one after another and never leave; a pod that fits nowhere fails and is dropped;
- Filter: CPU, memory and GPUs (``simulator.filter.fits_one``); score: the policy's; the highest
  score wins. Ties go to the first node of a random node order drawn once per seed: the artifact
  renames every node with a random "%04d-" prefix (``syncClusterResourceList``) and its patched
  kube-scheduler ``selectHost`` (vendor/k8s.io/kubernetes/pkg/scheduler/core/generic_scheduler.go)
  keeps the lexicographically smallest name among the best. So ties are not broken afresh on each
  decision: the same nodes win every tie, which packs pods whenever a policy's scores tie;
- GPUs of the chosen node (the artifact's ``-gpusel``): a shared GPU by best fit
  (``simulator.filter.choose_gpus``) for DotProd, GpuClustering, GpuPacking and BestFit, at random
  among the fitting GPUs for Random, where fragmentation grows least for FGD; whole GPUs are the
  lowest-indexed idle ones;
- after each arrival: arrived GPU demand (milli-GPU of every pod so far, failed ones included),
  allocated milli-GPU and the paper's fragmentation (``metrics.gpu_fragmentation``; target workload:
  the shapes covering 95% of the original 8,152 pods);
- curves: each arrival falls in the bucket round(arrived / cluster GPUs, in %) (0..130); a bucket's
  value is the mean over its arrivals (the neighbouring buckets' when it has none). Unallocated
  GPU % = 100 - allocated %.

The seeds (42-51) cannot reproduce the artifact's draws: Go's math/rand and NumPy's generators
differ, so the comparison is between distributions over seeds, not run by run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from td3sched.metrics.gpu_fragmentation import COVERAGE, GpuTypicalPods
from td3sched.policy import make_policy
from td3sched.policy.base import PodRequest, PolicyContext
from td3sched.simulator.cluster import GPU_MILLI, Cluster, NodeShape, Pool
from td3sched.simulator.filter import choose_gpus, fits_one
from td3sched.trace.openb import OPENB_GPU_NODES_FILE, load_openb_nodes, load_openb_pods
from td3sched.trace.location import traces_dir
from td3sched.workload.pods import GUARANTEED

TUNE_RATIO = 1.3
SEEDS = tuple(range(42, 52))
ARRIVED_PCT = np.arange(0, 131)
"""Curve points: arrived GPU demand, % of the cluster's GPUs."""

@dataclass(frozen=True)
class Setup:
    """How the artifact runs one of its policies."""

    spec: str
    """Our policy spec."""
    random_gpu: bool = False
    """A shared GPU is one of the node's fitting GPUs at random (``-gpusel random``); otherwise the
    policy's choice (``Policy.choose_gpus``) or else best fit (``-gpusel best``)."""
    uniform_ties: bool = False
    """Ties broken uniformly at random on each decision instead of by the fixed node order: the
    artifact's Random draws one feasible node per pod (``random_score.go``, PreScore) and gives it
    the only non-zero score, so node order never decides."""


POLICIES: dict[str, Setup] = {
    "Random": Setup("random", random_gpu=True, uniform_ties=True),
    "DotProd": Setup("dotprod"),
    "GpuClustering": Setup("gpu-clustering"),
    "GpuPacking": Setup("gpu-packing"),
    "BestFit": Setup("best-fit"),
    "FGD": Setup("fgd:sigmoid_scale=1000:share_gpu=1"),
}
"""The paper's policy names and how each runs here."""

EXPECTED_FILE = Path(__file__).with_name("fgd_atc23_openb.csv.gz")
"""The artifact's expected results for ``openb_pod_list_default`` (``experiments/analysis/
expected_results/analysis_{allo,frag,frag_ratio}_discrete.csv``), one row per policy, seed and
arrived %; see ATTRIBUTION.md beside it."""

METRICS = ("unallocated_pct", "frag_amount_pct", "frag_ratio_pct")

# Infrastructure columns the openb lists do not have; no pod requests them.
_NO_LIMIT = 1.0


@dataclass(frozen=True)
class OpenbWorld:
    """The fixed inputs of every experiment: node list, pod list, target workload."""

    pools: tuple[Pool, ...]
    """One pool per GPU model (the pool stands for the model in the fragmentation measure)."""
    cpu_milli: np.ndarray
    mem_mib: np.ndarray
    gpu_count: np.ndarray
    gpu_milli: np.ndarray
    """Pods sorted by name (the artifact's order before shuffling)."""
    typical: GpuTypicalPods

    @property
    def total_gpu_milli(self) -> int:
        return GPU_MILLI * sum(s.gpus for p in self.pools for s in p.shapes)

    def cluster(self) -> Cluster:
        return Cluster(list(self.pools))


def load_world(coverage: float = COVERAGE) -> OpenbWorld:
    """The GPU node list and the default pod list from the shared traces (``trace.location``)."""
    nodes = load_openb_nodes(traces_dir() / OPENB_GPU_NODES_FILE).frame
    pods = load_openb_pods().frame.sort_values("name", kind="stable")
    if (nodes["gpu"] <= 0).any() or nodes["model"].isna().any():
        raise ValueError(f"{OPENB_GPU_NODES_FILE}: expected GPU nodes only (gpu > 0 and a model on every row)")
    pools = []
    for model, rows in nodes.groupby("model", sort=True):
        shapes = tuple(NodeShape(cpu_milli=float(r.cpu_milli), mem_mib=float(r.mem_mib), gpus=int(r.gpu),
                                 disk_gib=_NO_LIMIT, rdma_pct=_NO_LIMIT, disk_mbps=_NO_LIMIT, net_mbps=_NO_LIMIT)
                       for r in rows.itertuples())
        pools.append(Pool(str(model), shapes, len(shapes)))
    spec = pods["gpu_spec"].fillna("").astype(str).to_numpy()
    gpu_count = pods["num_gpu"].to_numpy(dtype=np.int64)
    gpu_milli = np.where(gpu_count > 0, pods["gpu_milli"].to_numpy(dtype=np.int64), 0)
    if (spec != "").any():
        raise ValueError("openb_pod_list_default: pods with a GPU model constraint (gpu_spec) are not modelled "
                         "by this reproduction (the cluster's Filter has no GPU models)")
    typical = GpuTypicalPods.from_pods(pods["cpu_milli"], gpu_milli, gpu_count, spec,
                                       tuple(p.name for p in pools), coverage)
    return OpenbWorld(tuple(pools), pods["cpu_milli"].to_numpy(dtype=float), pods["mem_mib"].to_numpy(dtype=float),
                      gpu_count, gpu_milli, typical)


def tune_pods(gpu_count: np.ndarray, gpu_milli: np.ndarray, cluster_gpu_milli: int, ratio: float,
              seed: int) -> np.ndarray:
    """Arrival order as indices into the pods: all of them shuffled, then copies drawn uniformly
    while the GPU request stays within ``ratio`` x ``cluster_gpu_milli`` (the stop test adds the
    drawn pod's milli-GPU per GPU, the running total all its GPUs, as the artifact's tuneUpPods does).
    The artifact's tuneDownPods (a trace above the target) is not needed for openb and not done."""
    if not ratio > 0:
        raise ValueError(f"workload tuning ratio={ratio!r}: expected a positive multiple of the cluster's GPUs")
    n = len(gpu_count)
    if n == 0:
        raise ValueError("workload tuning: no pods")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    total = int((gpu_count * gpu_milli).sum())
    target = ratio * cluster_gpu_milli
    if not (gpu_count * gpu_milli > 0).any():
        raise ValueError("workload tuning: no pod requests a GPU, so copies would never reach the target")
    if total > target:
        raise ValueError(f"workload tuning: the pods request {total} milli-GPU, above {ratio} x {cluster_gpu_milli}: "
                         "expected a trace below the target (tuning down is not implemented)")
    extra = []
    while True:
        i = int(rng.integers(n))
        if total + gpu_milli[i] > target:
            break
        total += int(gpu_count[i] * gpu_milli[i])
        extra.append(i)
    return np.concatenate([order, np.array(extra, dtype=np.int64)])


@dataclass(frozen=True)
class Trace:
    """What one experiment records after each arrival."""

    arrived_milli: np.ndarray
    allocated_milli: np.ndarray
    frag_milli: np.ndarray
    idle_milli: np.ndarray
    failed: int
    nodes_used: int
    """Nodes holding at least one pod at the end."""
    wall_s: float


def run_experiment(world: OpenbWorld, policy: str, seed: int, tune_ratio: float = TUNE_RATIO,
                   on_progress: Callable[[int, int], None] | None = None, spec: str | None = None) -> Trace:
    """One (policy, seed) experiment; ``policy`` is a key of ``POLICIES`` (the paper's names);
    ``spec`` replaces its policy spec (a variant, e.g. ``fgd`` without the artifact's options)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}: expected one of {', '.join(POLICIES)}")
    setup = POLICIES[policy] if spec is None else replace(POLICIES[policy], spec=spec)
    t0 = time.perf_counter()
    order = tune_pods(world.gpu_count, world.gpu_milli, world.total_gpu_milli, tune_ratio, seed)
    rng = np.random.default_rng([seed, 1])
    c = world.cluster()
    rank = rng.permutation(c.size)
    """Tie-break order: among the best-scored nodes the one of lowest rank wins."""
    scorer = make_policy(setup.spec)
    scorer.attach(PolicyContext(c, scrape_s=0.0, window_s=0.0, typical=world.typical, pipeline=None))
    node_frag = world.typical.node_fragmentation(c.free, c.gpu_free(), c.pool_of)
    frag = float(node_frag.sum())
    arrived = allocated = failed = 0
    out = np.zeros((4, len(order)))
    for step, p in enumerate(order):
        count, milli = int(world.gpu_count[p]), int(world.gpu_milli[p])
        request = np.array([world.cpu_milli[p], world.mem_mib[p], 0.0, 0.0])
        arrived += count * milli
        gpu_free = c.gpu_free()
        nodes = np.flatnonzero(fits_one(c.free, gpu_free, request, count, milli))
        if len(nodes) == 0:
            failed += 1
        else:
            req = PodRequest(int(p), request, count, milli, GUARANTEED, request[0], request[1], float(step))
            scores = np.asarray(scorer.score(req, nodes, c), dtype=float)
            best = np.flatnonzero(scores == scores.max())
            if setup.uniform_ties:
                node = int(nodes[best[rng.integers(len(best))]])
            else:
                node = int(nodes[best[np.argmin(rank[nodes[best]])]])
            if count:
                gpus = None
                if setup.random_gpu and count == 1 and milli < GPU_MILLI:
                    gpus = rng.choice(np.flatnonzero(gpu_free[node] >= milli), size=1)
                if gpus is None:
                    gpus = scorer.choose_gpus(req, node, c)
                if gpus is None:
                    gpus = choose_gpus(gpu_free[node], count, milli)
                c.gpu_used[node, gpus] += milli
            c.requested[node] += request
            c.free[node] -= request
            c.pod_count[node] += 1
            allocated += count * milli
            scorer.bound(req, node, c)
            row = slice(node, node + 1)
            new = world.typical.node_fragmentation(c.free[row], c.gpu_capacity[row] - c.gpu_used[row], c.pool_of[row])
            frag += float(new[0] - node_frag[node])
            node_frag[node] = new[0]
        out[:, step] = arrived, allocated, frag, world.total_gpu_milli - allocated
        if on_progress and (step + 1) % 500 == 0:
            on_progress(step + 1, len(order))
    if on_progress:
        on_progress(len(order), len(order))
    return Trace(out[0], out[1], out[2], out[3], failed, int((c.pod_count > 0).sum()), time.perf_counter() - t0)


def curves(trace: Trace, total_gpu_milli: int) -> pd.DataFrame:
    """The artifact's discrete curves (``merge_alloc_discrete.py``, ``merge_frag_discrete.py``,
    ``merge_frag_ratio_discrete.py``): per arrived % in 0..130, the mean over the arrivals in that
    bucket (rounded to 2 decimals per arrival for allocation, as there), NaN where no arrival is
    within one point."""
    gpus = total_gpu_milli / GPU_MILLI
    bucket = np.round(trace.arrived_milli / gpus / 10)
    alloc = np.round(trace.allocated_milli / gpus / 10, 2)
    ratio = 100 * trace.frag_milli / np.where(trace.idle_milli > 0, trace.idle_milli, np.nan)
    rows = []
    for x in ARRIVED_PCT:
        sel = bucket == x
        if not sel.any():
            sel = (bucket >= x - 1) & (bucket <= x + 1)
        if not sel.any():
            rows.append((x, np.nan, np.nan, np.nan))
            continue
        rows.append((x, 100 - round(float(alloc[sel].mean()), 2),
                     round(100 * float(trace.frag_milli[sel].mean()) / GPU_MILLI / gpus, 2),
                     float(np.nanmean(ratio[sel]))))
    return pd.DataFrame(rows, columns=["arrived_pct", *METRICS])


def expected_curves() -> pd.DataFrame:
    """The artifact's per-seed curves: columns policy, seed, arrived_pct and ``METRICS``."""
    return pd.read_csv(EXPECTED_FILE)
