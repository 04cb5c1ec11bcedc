"""The simulator as a source of scheduling history: any policy, its decisions recorded.

``HistoryRecorder`` wraps a policy and is what the simulator consults: Filter, Score, Bind and
Release go to the wrapped policy unchanged (the run's placements are the wrapped policy's, bit for
bit), and each scored decision becomes a row of the history schema (``lifecycle.history``):

- the candidates are the nodes the policy scored (after the simulator's Filter and the policy's own), at
  most the writer's ``candidates`` of them kept (``lifecycle.history``, "Candidates kept"), chosen when
  the pod is bound: a row waiting for its pod to leave holds those alone;
- their features ``u`` are the product's score features (``policy.features.utilisation``: observed
  usage, corrected by an assign cache kept here exactly as ``static-weights`` keeps its own, plus the
  pod), whatever the policy; for a ``static-weights`` or ``td3`` policy they are the values it scored;
- the observation is ``rl.observation.observe`` of the same features (what a TD3 actor would see);
- ``score`` is the wrapped policy's own score of each candidate; ``weights`` and ``tau`` are recorded
  for the policies of the product's score (static-weights, best-static, td3), ``action`` and
  ``model_version`` for td3;
- ``wait_s``: the pod's time in the scheduling queue until this decision (the simulation's
  ``queued_at``, which its pending-time metric reads too);
- ``outcome_left_s`` and ``outcome`` are filled when the pod leaves the node (the time, and its
  departure or the eviction's reason), and with them what happened to it there, read from the
  simulation's per-pod counters: ``outcome_kills`` its container's kills (``kills_on_node``),
  ``outcome_overload_h`` the hours its node was over the objective's overload threshold
  (``overload_ticks_on_node``), ``outcome_slo_h`` the hours it spent above its latency SLO
  (``slo_ticks_on_node``) and ``outcome_node_slo_h`` the hours the latency-sensitive pods on its node, it
  included, spent above theirs while it was there (``colocated_slo_ticks``), ticks of ``tick_s`` each.
  For a pod still on its node when the run ends (``close`` given the simulation), ``outcome_left_s`` and
  ``outcome`` stay null and the four counts are
  those so far, as the engine's log gives a running pod's kills; null with no simulation watched;
- ``reward`` and ``elapsed_s``: the decision's reward as TD3 learns it (``reward.py``: the cluster's
  cost from this decision to the next, its events included, over the maximum node count; with any
  held-back cycle in between, as the env's steps count them) and the seconds to the next decision
  (or to the span's end), read from the simulation's reward tracker (``reward.StepRewardTracker``,
  installed by ``watch``). Null in the warm-up, whose cost the run does not count. The warm-up's
  decisions are recorded unless ``warmup`` is False (a rehearsal's history: each period's warm-up is
  days a period before it served, in another world, and a cluster logs each day once).

A row is written once its pod has left its node and its reward is known, or at ``close``.

A pod the policy held back (its own Filter left no node) is no decision here: no node was chosen.
"""

from __future__ import annotations

import math
import weakref
from pathlib import Path

import numpy as np

from td3sched.lifecycle.history import (DEFAULT_CANDIDATES, CandidateArrays, HistoryWriter, check_candidates,
                                        sample_row)
from td3sched.policy.assign_cache import AssignCache
from td3sched.policy.base import Policy, PodRequest
from td3sched.policy.features import requested_utilisation, utilisation
from td3sched.policy.static_weights import StaticWeights
from td3sched.reward import StepRewardTracker
from td3sched.rl.observation import OomWindow, observe
from td3sched.simulator.cluster import Cluster


def _limit(v: float) -> float | None:
    return None if math.isinf(v) else float(v)


class HistoryRecorder(Policy):
    """``inner`` as the simulator sees it, with every decision written to ``writer``.

    ``pod_names`` and ``workloads`` name the world's pods (by index); ``scenario``, ``seed`` and
    ``spec`` label the rows."""

    def __init__(self, inner: Policy, writer: HistoryWriter, pod_names, workloads, scenario: str, seed: int,
                 spec: str, warmup: bool = True):
        self.inner = inner
        self.warmup = warmup
        self.name = inner.name
        self.writer = writer
        self.pod_names, self.workloads = pod_names, workloads
        self.scenario, self.seed, self.spec = scenario, int(seed), spec
        self.cache: AssignCache | None = None
        self.oom_window = OomWindow()
        self._open: dict | None = None
        self._rows: dict[int, dict] = {}
        """Rows not written yet, by decision number: written once the pod has left and the reward is known."""
        self._left: set[int] = set()
        self._rewarded: set[int] = set()
        self._on_node: dict[int, int] = {}
        """Pod index -> the decision that bound it, while it is on its node."""
        self._decisions = 0
        self._sim = None
        self._tracker: StepRewardTracker | None = None
        self._end_s = math.nan
        self._last: tuple[dict, StepRewardTracker | None, int] | None = None
        """The latest row, the tracker and its settled count when it was bound (None in the warm-up): its
        reward is what that tracker settles after that."""

    def watch(self, sim) -> None:
        """Read each decision's reward from ``sim`` (held weakly: the recorder outlives the run)."""
        sim.reward = StepRewardTracker(sim.reward.cfg, sim.reward.max_nodes)
        self._sim = weakref.ref(sim)
        self._tracker = sim.reward
        self._end_s = float(sim.end_s)

    def _claim(self, t: float) -> None:
        """Give the latest row its reward, settled since it was bound (it is the decision's when the
        tracker is the one that was open then, and settled it)."""
        if self._last is None:
            return
        row, tracker, count = self._last
        self._last = None
        sim = self._sim() if self._sim is not None else None
        now = sim.reward if sim is not None else self._tracker
        self._tracker = now
        r = now.take() if isinstance(now, StepRewardTracker) else 0.0
        if now is tracker and tracker.count > count:
            row["reward"], row["elapsed_s"] = float(r), float(t) - row["time_s"]
        self._done(self._rewarded, self._seq(row))

    @staticmethod
    def _seq(row: dict) -> int:
        return int(row["decision_id"].rsplit("-", 1)[1])

    def _done(self, part: set, seq: int) -> None:
        """Mark one of a row's two awaited parts done; write the row when both are."""
        part.add(seq)
        if seq in self._left and seq in self._rewarded:
            self._left.discard(seq)
            self._rewarded.discard(seq)
            self.writer.append(self._rows.pop(seq))

    @property
    def fingerprint(self) -> str:
        return self.inner.fingerprint

    def attach(self, context) -> None:
        super().attach(context)
        self.inner.attach(context)
        self.cache = AssignCache(context.cluster.size, horizon_s=context.window_s + context.scrape_s)
        self.oom_window = OomWindow()

    def filter(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray | None:
        return self.inner.filter(pod, nodes, cluster)

    def score(self, pod: PodRequest, nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
        self._claim(pod.time_s)  # this cycle settled the decision before it
        u = utilisation(pod, nodes, cluster, self.cache.usage_since(cluster.last_scrape_s))
        oom = self.context.oom_kills() if self.context.oom_kills is not None else 0
        obs = observe(pod, nodes, cluster, u, self.oom_window.kills(pod.time_s, oom))
        scores = np.asarray(self.inner.score(pod, nodes, cluster), dtype=np.float64)
        self._open = {"pod": pod, "nodes": nodes.copy(), "u": u, "r": requested_utilisation(pod, nodes, cluster),
                      "obs": obs, "scores": scores}
        return scores

    def _row(self, pod: PodRequest, node: int, cluster: Cluster) -> dict:
        d = self._open
        inner = self.inner
        weights = tau = action = version = None
        if isinstance(inner, StaticWeights):
            weights, tau = [float(x) for x in inner.weights], float(inner.tau)
        model = getattr(inner, "model", None)
        if model is not None:  # td3: the deterministic actor, recomputed (same input, same action)
            action = [float(x) for x in model.act(d["obs"])]
            version = getattr(model, "version", None) or model.content_sha256[:12]
        where = np.flatnonzero(d["nodes"] == node)
        candidates = CandidateArrays(cluster.names[d["nodes"]], np.array(d["u"], dtype=np.float64),
                                     np.array(d["scores"], dtype=np.float64), np.array(d["r"], dtype=np.float64))
        i = pod.index
        self._decisions += 1
        row = {
            "source": "simulator", "decision_id": f"{self.scenario}-{self.seed}-{self._decisions - 1}",
            "time_s": float(pod.time_s), "scenario": self.scenario, "seed": self.seed, "policy": self.spec,
            "pod_name": str(self.pod_names[i]), "pod_namespace": None, "workload": str(self.workloads[i]),
            "qos": int(pod.qos), "cpu_milli": float(pod.request[0]), "mem_mib": float(pod.request[1]),
            "disk_gib": float(pod.request[2]), "rdma_pct": float(pod.request[3]),
            "gpu_count": int(pod.gpu_count), "gpu_milli": int(pod.gpu_milli),
            "cpu_limit_milli": _limit(pod.cpu_limit_milli), "mem_limit_mib": _limit(pod.mem_limit_mib),
            "observation": [float(x) for x in d["obs"]], "candidates": candidates,
            "chosen_node": str(cluster.names[node]), "chosen_index": int(where[0]) if len(where) else None,
            "model_version": version, "action": action, "weights": weights, "tau": tau, "wait_s": None,
            "outcome_left_s": None, "outcome": None, "outcome_kills": None, "outcome_overload_h": None,
            "outcome_slo_h": None, "outcome_node_slo_h": None, "reward": None, "elapsed_s": None,
        }
        # kept as the file will keep it, now: a row waits for its pod to leave, all candidates with it
        return sample_row(row, self.writer.candidates, self.writer.seed)

    def bound(self, pod: PodRequest, node: int, cluster: Cluster) -> None:
        sim = self._sim() if self._sim is not None else None
        recorded = self.warmup or sim is None or sim.measuring
        if self._open is not None and self._open["pod"] is pod and recorded:
            row = self._row(pod, node, cluster)
            seq = self._seq(row)
            self._rows[seq] = row
            before = self._on_node.pop(pod.index, None)
            if before is not None:  # bound again without a release seen: the earlier row's outcome is unknown
                self._done(self._left, before)
            self._on_node[pod.index] = seq
            if sim is not None:  # a warm-up decision's cost is not the run's: its reward stays null
                queued = float(sim.queued_at[pod.index])
                row["wait_s"] = float(pod.time_s) - queued if math.isfinite(queued) else None
                self._last = (row, sim.reward if sim.measuring else None, sim.reward.count)
            else:
                self._done(self._rewarded, seq)  # no simulation watched: no reward to wait for
        self._open = None
        self.cache.add(node, pod.time_s, pod.nonzero_cpu_mem)
        self.inner.bound(pod, node, cluster)

    def released(self, pod: PodRequest, node: int, cluster: Cluster, reason: str = "departure") -> None:
        seq = self._on_node.pop(pod.index, None)
        if seq is not None:
            row = self._rows[seq]
            row["outcome_left_s"], row["outcome"] = float(pod.time_s), reason
            sim = self._sim() if self._sim is not None else None
            if sim is not None:
                self._outcome_counts(row, sim, pod.index, node)
            self._done(self._left, seq)
        self.inner.released(pod, node, cluster, reason)

    @staticmethod
    def _outcome_counts(row: dict, sim, pod: int, node: int) -> None:
        """What happened to ``pod`` on ``node``, from the simulation's per-pod counters (see the module's
        docstring)."""
        tick_h = sim.cfg.tick_s / 3600.0
        row["outcome_kills"] = int(sim.kills_on_node[pod])
        row["outcome_overload_h"] = int(sim.overload_ticks_on_node[pod]) * tick_h
        row["outcome_slo_h"] = int(sim.slo_ticks_on_node[pod]) * tick_h
        row["outcome_node_slo_h"] = sim.colocated_slo_ticks(pod, node) * tick_h

    def choose_gpus(self, pod: PodRequest, node: int, cluster: Cluster) -> np.ndarray | None:
        return self.inner.choose_gpus(pod, node, cluster)

    def close(self, sim=None) -> int:
        """Give the last decision its reward (the run settled it at the span's end), write every row
        left and close the file; the decisions recorded. ``sim``: the finished simulation, whose
        counters give the pods still on their nodes their outcome so far (the recorder holds it only
        weakly, so a caller that wants them keeps it until here)."""
        if sim is not None:
            for pod, seq in self._on_node.items():
                self._outcome_counts(self._rows[seq], sim, pod, int(sim.node[pod]))
        self._claim(self._end_s)
        for seq in sorted(self._rows):
            self.writer.append(self._rows[seq])
        self._rows.clear()
        self.writer.close()
        return self._decisions


def history_file_name(scenario: str, span: str, seed: int, label: str) -> str:
    """``<scenario>-<span>-seed<seed>-<policy>.parquet``, the scenario (``scenario_slug``: a scenario file
    by its folder and stem) and the policy label made safe for a file name."""
    from td3sched.scenario import scenario_slug

    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)[:80]
    return f"{scenario_slug(scenario)}-{span}-seed{seed}-{safe}.parquet"


def record_simulation(scenario: str, policy: str, seed: int, span: str, out_dir, overrides: list[str] | None = None,
                      progress: bool = False, candidates: int | None = None, warmup: bool = True,
                      **run_kwargs) -> tuple[dict, Path, int]:
    """Run ``policy`` on a scenario span, its decisions recorded into a new file of the history folder
    ``out_dir``, each with at most ``candidates`` of its candidates (0: all; None: ``DEFAULT_CANDIDATES``):
    (the run's record, the file, decisions recorded). ``warmup`` False: the warm-up's decisions are not
    recorded (``HistoryRecorder``). The file appears whole when the run succeeded, and not at all
    otherwise."""
    from td3sched.run import run_simulation

    candidates = check_candidates(DEFAULT_CANDIDATES if candidates is None else candidates)
    out_dir = Path(out_dir)
    state: dict = {}

    def watch(sim) -> None:
        state["sim"] = sim  # until close: the pods still on their nodes get their outcome so far
        state["recorder"].watch(sim)

    def wrap(inner, world, spec):
        path = out_dir / history_file_name(scenario, span, seed, spec)
        w = world.workload
        workloads = np.asarray(w.app_names, dtype=object)[w.app]
        writer = HistoryWriter(path, candidates=candidates, seed=seed)
        state["recorder"] = HistoryRecorder(inner, writer, w.name, workloads, scenario, seed, spec, warmup)
        state["path"] = path
        return state["recorder"]

    try:
        record = run_simulation(scenario, policy, seed, span, overrides or [], progress=progress, wrap_policy=wrap,
                                on_simulation=watch, **run_kwargs)
    except BaseException:
        if "recorder" in state:
            state["recorder"].writer.abort()
        raise
    decisions = state["recorder"].close(state.pop("sim", None))
    return record, state["path"], decisions
