"""Siblings: the running pods of a pod's own workload on each node, and the score term that keeps them apart.

The replicas of one service follow one load (on the dlrm scenarios each app's replicas follow the same
Bitbrains VM, docs/simulator.md), so two of them on one node peak together. Between the peaks the node
looks as cool as any other, and a score that reads only a node's usage cannot tell it holds a sibling.
The **sibling spread** (``static-weights``' ``spread``) lowers a node's score by how many of the pod's
siblings it already runs:

    score'_n = (score_n + spread / (s_n + 1)) / (1 + spread)        s_n: siblings on node n

for ``score_n`` in [0, 1], so ``score'`` stays in [0, 1] (a front door's 0-100 scale) and orders the nodes
as ``score_n - spread x s_n / (s_n + 1)`` does: with a spread above 1, a node with no sibling outranks every
node with one. A spread of 0 returns the score itself. On dlrm-small a spread of 3 on the product's blend
gave 3.8% lower cost than the blend on the test days (docs/results/sibling-term), chosen on the training days.

What a sibling is: the pods of the same workload, which a scheduler knows from the pod's controller (its
owner reference: a ReplicaSet, StatefulSet, Job...); the simulator's workloads give each pod an app.
kube-scheduler's default topology spreading keeps a service's pods apart by the same knowledge, by counts
over nodes and zones rather than in the node's score.

``Siblings`` counts them from bindings and releases: a few entries per workload (the nodes its pods
run on), so a cluster of thousands of nodes and workloads costs what its running pods cost.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np

MAX_SPREAD = 100.0
"""The largest sibling spread accepted: already at 10 a sibling costs a node nearly all of its score."""


def validate_spread(spread) -> float:
    """A sibling spread in [0, ``MAX_SPREAD``] as a float, or a ValueError naming it."""
    try:
        value = float(spread)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(spread, bool) or not (math.isfinite(value) and 0 <= value <= MAX_SPREAD):
        raise ValueError(f"spread={spread!r}: expected a sibling spread in [0, {MAX_SPREAD:g}] (0: no sibling term)")
    return value


def spread_siblings(scores: np.ndarray, siblings: np.ndarray, spread: float) -> np.ndarray:
    """``(scores + spread / (siblings + 1)) / (1 + spread)``: scores in [0, 1] of one pod's candidates,
    lowered on the nodes that run its siblings (``siblings`` [k], counts). A spread of 0 returns ``scores``."""
    if spread == 0:
        return scores
    return (np.asarray(scores, dtype=np.float64) + spread / (np.asarray(siblings, dtype=np.float64) + 1.0)) / (
        1.0 + spread)


class Siblings:
    """How many running pods of each workload every node holds: ``add`` at a binding, ``remove`` at a
    release. Workloads and nodes are any hashable keys (the simulator's app index and node index; the
    engine's owner and node name); a pod whose workload is None is nobody's sibling."""

    def __init__(self):
        self._on: dict[Hashable, dict[Hashable, int]] = {}

    def add(self, workload, node) -> None:
        if workload is None:
            return
        nodes = self._on.setdefault(workload, {})
        nodes[node] = nodes.get(node, 0) + 1

    def remove(self, workload, node) -> None:
        """One pod of ``workload`` left ``node``; a ValueError if none was counted there (a release
        without its binding: the caller's bookkeeping is wrong)."""
        if workload is None:
            return
        nodes = self._on.get(workload)
        count = nodes.get(node, 0) if nodes else 0
        if count <= 0:
            raise ValueError(f"siblings: no pod of workload {workload!r} counted on node {node!r} to remove")
        if count == 1:
            del nodes[node]
            if not nodes:
                del self._on[workload]
        else:
            nodes[node] = count - 1

    def nodes_of(self, workload) -> dict:
        """{node: running pods of ``workload`` there} (empty when none run; do not modify)."""
        return self._on.get(workload, {}) if workload is not None else {}

    def counts(self, workload, nodes: np.ndarray) -> np.ndarray:
        """[k] running pods of ``workload`` on each of ``nodes`` (integer node keys, as the simulator's)."""
        nodes = np.asarray(nodes)
        on = self.nodes_of(workload)
        out = np.zeros(len(nodes), dtype=np.float64)
        if not on or not len(nodes):
            return out
        keys = np.fromiter(on.keys(), dtype=np.int64, count=len(on))
        values = np.fromiter(on.values(), dtype=np.float64, count=len(on))
        order = np.argsort(keys)
        keys, values = keys[order], values[order]
        at = np.minimum(np.searchsorted(keys, nodes), len(keys) - 1)
        hit = keys[at] == nodes
        out[hit] = values[at[hit]]
        return out

    def __len__(self) -> int:
        """The running pods counted."""
        return sum(sum(nodes.values()) for nodes in self._on.values())


__all__ = ["MAX_SPREAD", "Siblings", "spread_siblings", "validate_spread"]
