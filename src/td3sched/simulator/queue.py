"""kube-scheduler's scheduling queue: an active queue, a backoff queue and the unschedulable pods.

Source: kubernetes ``pkg/scheduler/backend/queue/scheduling_queue.go`` (``PriorityQueue``) and the
scheduler's default configuration (``pkg/scheduler/apis/config/v1/defaults.go``):

- a new pod enters the **active queue** and gets a scheduling cycle; the simulator's scheduler is
  instantaneous, so the active queue is drained at the instant pods enter it, oldest first
  (``PrioritySort``: equal priorities, then the queue timestamp, refreshed on every re-queue);
- a pod that no node passes goes to the **unschedulable pods** with the plugins that rejected it
  (here: the *reasons* below) and ``attempts + 1``;
- a **cluster event** moves the unschedulable pods it could help (the plugins' queueing hints) to
  the active queue, or to the **backoff queue** while their backoff runs:
  backoff = ``podInitialBackoffSeconds`` (1 s) x 2^(attempts - 1), at most ``podMaxBackoffSeconds``
  (10 s) (``calculateBackoffDuration``); the backoff queue releases a pod when its backoff ends
  (kube-scheduler's ``flushBackoffQCompleted`` checks every second; here exactly at expiry);
- a pod in the unschedulable set longer than ``podMaxInUnschedulablePodsDuration`` (5 min) is moved
  whatever happened (``flushUnschedulablePodsLeftover``, every 30 s).

Reasons and the events that move a pod (queueing hints):

| reason | rejected by | moved by |
|---|---|---|
| ``RESOURCES`` | NodeResourcesFit, the GPU rule, anti-affinity, readiness | a pod deleted from a node the pod now fits; a node becoming ready that the pod fits |
| ``USAGE`` | the safety filter or the memory-pressure taint | a metrics scrape after which a node it fits passes them (per fit class, as many pods as those nodes hold) |
| ``POLICY`` | a policy's own filter (with ``USAGE``) | every metrics scrape (what the policy reads changed) |
| ``SHAPE`` | fits no node template of any pool it may use, even empty | only a node becoming ready that it fits (a larger shape), or the 5-minute flush |

NodeResourcesFit's own hint queues on *any* deletion of a scheduled pod. The hint here is stricter:
the freed node is the only node that changed, so it can take only the pods that fit what it has;
the engine walks the waiting pods in the order the active queue would try them and moves those
that still fit the node after the ones before them took their share. The others would fail at
once and stay where they are, until another event or the 5-minute flush: in an overloaded cluster
attempts stay near the number of freed slots instead of one per waiting pod per backoff period
(docs/simulator.md, Scheduling queue).

The queue holds pod indices; the simulator owns everything else about a pod.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np
from pydantic.dataclasses import dataclass

from td3sched.quantities import SETTINGS, Interval, Seconds

RESOURCES, USAGE, SHAPE, POLICY = 1, 2, 4, 8
"""Reasons a scheduling cycle found no node (bits of ``SchedulingQueue.reasons``)."""
OUT, ACTIVE, BACKOFF, UNSCHEDULABLE = 0, 1, 2, 3
"""Where a pod is (``SchedulingQueue.where``); OUT = not in the queue (future, running or done)."""


@dataclass(frozen=True, config=SETTINGS)
class QueueConfig:
    """kube-scheduler's queue settings (KubeSchedulerConfiguration), at their defaults."""

    pod_initial_backoff_s: Interval = 1.0
    """podInitialBackoffSeconds (default 1)."""
    pod_max_backoff_s: Interval = 10.0
    """podMaxBackoffSeconds (default 10)."""
    max_in_unschedulable_s: Seconds = 300.0
    """podMaxInUnschedulablePodsDuration (default 5 min)."""
    unschedulable_flush_s: Interval = 30.0
    """How often leftover unschedulable pods are checked (flushUnschedulablePodsLeftover, 30 s)."""

    def __post_init__(self) -> None:
        if self.pod_max_backoff_s < self.pod_initial_backoff_s:
            raise ValueError(f"queue setting pod_max_backoff_s={self.pod_max_backoff_s} must be at least "
                             f"pod_initial_backoff_s={self.pod_initial_backoff_s}")


class SchedulingQueue:
    """Pods waiting for a node: active, backing off, or unschedulable until an event helps them.

    ``fit_class`` groups pods by what the RESOURCES hint reads (requests, GPUs, pool): the hint is
    evaluated once per class, never per pod.
    """

    def __init__(self, n_pods: int, config: QueueConfig, fit_class: np.ndarray):
        if len(fit_class) != n_pods:
            raise ValueError(f"fit_class has {len(fit_class)} entries for {n_pods} pods")
        self.cfg = config
        self.fit_class = fit_class
        self.where = np.zeros(n_pods, dtype=np.int8)
        self.attempts = np.zeros(n_pods, dtype=np.int64)
        self.reasons = np.zeros(n_pods, dtype=np.int8)
        self.backoff_until = np.zeros(n_pods)
        self.stamp = np.zeros(n_pods)
        """Queue timestamp: when the pod last entered the queue (the active queue's order)."""
        self.unschedulable_since = np.zeros(n_pods)
        self.entered = np.zeros(n_pods, dtype=np.int64)
        """When a pod last became unschedulable, as a count of failures: queue-timestamp order with
        ties in the order the cycles ran."""
        self._failures = 0
        self._seq = np.zeros(n_pods, dtype=np.int64)
        """Bumped whenever a pod changes place, so stale heap / deque entries are skipped."""
        self.active: list[tuple[float, int, int]] = []
        self.backoff: list[tuple[float, int, int]] = []
        self._leftover: deque[tuple[float, int, int]] = deque()
        self.by_class: dict[int, dict[int, None]] = {}
        """Unschedulable RESOURCES pods by fit class, in the order they became unschedulable (so in
        queue-timestamp order: time only moves forward)."""
        self.usage_held: set[int] = set()
        """Unschedulable pods that some node rejected only by usage (moved by a scrape)."""
        self.shape_held: set[int] = set()
        self.pending: set[int] = set()
        """Every pod in the queue, wherever it is."""
        self.next_flush_s = math.inf

    # --- entering the queue ----------------------------------------------------------------------
    def add(self, pod: int, t: float) -> None:
        """A new (or recreated) pod: active queue, no attempts yet."""
        self._leave(pod)
        self.attempts[pod] = 0
        self.backoff_until[pod] = t
        self.stamp[pod] = t
        self._to_active(pod)
        self.pending.add(pod)

    def failed(self, pod: int, t: float, reasons: int) -> None:
        """A scheduling cycle at ``t`` found no node: count the attempt, start its backoff and park
        the pod in the unschedulable set with the reasons that rejected it."""
        self.failed_many((pod,), t, (reasons,))

    def failed_many(self, pods, t: float, reasons) -> None:
        """``failed`` for several pods whose cycles at ``t`` ran in this order (distinct pods)."""
        until = t + self.cfg.max_in_unschedulable_s
        for pod, r in zip(pods, reasons):
            pod, r = int(pod), int(r)
            if r == 0:
                raise ValueError(f"pod {pod} failed with no reason: expected RESOURCES, USAGE or SHAPE bits")
            self._leave(pod)
            self.pending.add(pod)
            attempts = int(self.attempts[pod]) + 1
            self.attempts[pod] = attempts
            self.backoff_until[pod] = t + self.backoff_s(attempts)
            self.stamp[pod] = t
            self.reasons[pod] = r
            self.where[pod] = UNSCHEDULABLE
            self.unschedulable_since[pod] = t
            self._failures += 1
            self.entered[pod] = self._failures
            if r & SHAPE:
                self.shape_held.add(pod)
            else:
                if r & RESOURCES:
                    self.by_class.setdefault(int(self.fit_class[pod]), {})[pod] = None
                if r & USAGE:
                    self.usage_held.add(pod)
            seq = int(self._seq[pod]) + 1
            self._seq[pod] = seq
            self._leftover.append((until, pod, seq))
        if math.isinf(self.next_flush_s):
            self.next_flush_s = t + self.cfg.unschedulable_flush_s

    def backoff_s(self, attempts: int) -> float:
        """initial x 2^(attempts - 1), capped at the maximum (calculateBackoffDuration)."""
        doublings = min(max(attempts - 1, 0), 62)  # past the cap long before; keeps 2**n finite
        return min(self.cfg.pod_initial_backoff_s * 2.0 ** doublings, self.cfg.pod_max_backoff_s)

    def bound(self, pod: int) -> None:
        """The pod was placed (or deleted): it leaves the queue."""
        self._leave(pod)
        self.pending.discard(pod)

    # --- cluster events (queueing hints) ----------------------------------------------------------
    def classes_waiting_for_resources(self) -> np.ndarray:
        """Fit classes with unschedulable RESOURCES pods."""
        return np.fromiter(self.by_class.keys(), dtype=np.int64, count=len(self.by_class))

    def move_classes(self, classes, t: float) -> None:
        """Every unschedulable pod of ``classes`` moves (an event that could help them all)."""
        for k in classes:
            for pod in list(self.by_class.get(int(k), ())):
                self._move(pod, t)

    def waiting_in(self, classes, t: float, limits=None) -> np.ndarray:
        """The unschedulable pods of ``classes``, in the order the active queue would try them if
        moved at ``t``: backoff over first, then the order they became unschedulable (the queue
        timestamp's order, ties in the order their cycles ran). With ``limits``, only the first ``limits[i]`` pods of ``classes[i]``
        (a node that can take at most that many): the walk stops there, so its cost follows the
        limit, not the number of pods waiting."""
        pods: list[int] = []
        for i, k in enumerate(classes):
            members = self.by_class.get(int(k))
            if not members:
                continue
            if limits is None:
                pods.extend(members)
                continue
            limit = int(limits[i])
            if len(members) > 4 * limit + 16:  # a long class: one vectorised pass over it
                arr = np.fromiter(members, dtype=np.int64, count=len(members))
                over = self.backoff_until[arr] <= t
                ready = arr[over][:limit]
                pods.extend(ready.tolist())
                pods.extend(arr[~over][:limit - len(ready)].tolist())
                continue
            ready, later = [], []
            for pod in members:  # queue-timestamp order; a backoff still running puts a pod behind
                if self.backoff_until[pod] <= t:
                    ready.append(pod)
                    if len(ready) == limit:
                        break
                elif len(later) < limit:
                    later.append(pod)
                elif self.stamp[pod] + self.cfg.pod_initial_backoff_s > t:
                    break  # this pod and every later one are still backing off: later is full
            pods.extend(ready)
            pods.extend(later[:limit - len(ready)])
        out = np.array(pods, dtype=np.int64)
        if len(out) == 0:
            return out
        return out[np.lexsort((self.entered[out], self.backoff_until[out] > t))]

    def move(self, pods, t: float) -> None:
        """These unschedulable pods move (to the active queue, or the backoff queue while backing off)."""
        for pod in pods:
            if self.where[pod] == UNSCHEDULABLE:
                self._move(int(pod), t)

    def move_shape_held(self, pods, t: float) -> None:
        for pod in pods:
            if pod in self.shape_held:
                self._move(pod, t)

    def move_usage_held(self, t: float, pods=None) -> None:
        """Node metrics changed (a scrape): pods held back by usage (all, or ``pods`` of them) are
        tried again."""
        for pod in list(self.usage_held) if pods is None else pods:
            if pod in self.usage_held:
                self._move(pod, t)

    def flush_leftover(self, t: float) -> None:
        """Pods unschedulable for longer than the maximum are moved whatever happened."""
        while self._leftover and self._leftover[0][0] <= t:
            _, pod, seq = self._leftover.popleft()
            if self._seq[pod] == seq and self.where[pod] == UNSCHEDULABLE:
                self._move(pod, t)
        self.next_flush_s = t + self.cfg.unschedulable_flush_s if self._leftover else math.inf

    def release_backoff(self, t: float) -> None:
        """Pods whose backoff has ended move from the backoff queue to the active queue."""
        while self.backoff and self.backoff[0][0] <= t:
            _, pod, seq = heapq.heappop(self.backoff)
            if self._seq[pod] == seq and self.where[pod] == BACKOFF:
                self._to_active(pod)

    def next_event_s(self) -> float:
        """When the queue next moves pods by itself (a backoff ending, a leftover flush)."""
        nxt = self.next_flush_s
        while self.backoff and (self.where[self.backoff[0][1]] != BACKOFF or self._seq[self.backoff[0][1]] != self.backoff[0][2]):
            heapq.heappop(self.backoff)
        if self.backoff:
            nxt = min(nxt, self.backoff[0][0])
        return nxt

    def pop_active(self) -> int | None:
        """The next pod to schedule, oldest queue timestamp first; None when the active queue is empty."""
        while self.active:
            _, pod, seq = heapq.heappop(self.active)
            if self.where[pod] == ACTIVE and self._seq[pod] == seq:
                self.where[pod] = OUT  # in flight: back in the queue only through failed() or add()
                return pod
        return None

    # --- internals -----------------------------------------------------------------------------------
    def _move(self, pod: int, t: float) -> None:
        self._leave(pod)
        if self.backoff_until[pod] > t:
            self.where[pod] = BACKOFF
            self._seq[pod] += 1
            heapq.heappush(self.backoff, (float(self.backoff_until[pod]), pod, int(self._seq[pod])))
        else:
            self._to_active(pod)

    def _to_active(self, pod: int) -> None:
        self.where[pod] = ACTIVE
        self._seq[pod] += 1
        heapq.heappush(self.active, (float(self.stamp[pod]), pod, int(self._seq[pod])))

    def _leave(self, pod: int) -> None:
        """Take a pod out of whichever sub-queue holds it (heap entries are dropped lazily)."""
        if self.where[pod] == UNSCHEDULABLE:
            r = self.reasons[pod]
            if r & SHAPE:
                self.shape_held.discard(pod)
            else:
                if r & RESOURCES:
                    members = self.by_class.get(int(self.fit_class[pod]))
                    if members is not None:
                        members.pop(pod, None)
                        if not members:
                            del self.by_class[int(self.fit_class[pod])]
                if r & USAGE:
                    self.usage_held.discard(pod)
        self.where[pod] = OUT
