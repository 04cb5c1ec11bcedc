"""The assign cache: a correction of observed usage for pods placed since the metrics last saw them.

Observed usage lags: a pod bound after the last scrape is invisible until the next one, so every
live-metrics scorer would pile a burst of pods onto the node that looked idlest. Trimaran
(scheduler-plugins pkg/trimaran: PodAssignEventHandler) and Koordinator (loadaware's
podAssignCache) both keep the pods bound recently with an estimate of their usage, and add that
estimate to the node's observed usage. This is that one piece, shared by every policy that uses it.

    corrected_usage_n = observed_n + sum of estimates of pods bound to n at or after ``since_s``

Entries older than ``horizon_s`` are dropped. The sums since one time are kept and updated as pods are
added (a simulator asks for them at every decision, with the same ``since_s`` until the next scrape):
the same additions in the same order as summing them anew, so the same values to the bit.
"""

from __future__ import annotations

import numpy as np


class AssignCache:
    def __init__(self, nodes: int, columns: int = 2, horizon_s: float = 300.0, capacity: int = 4096):
        if horizon_s <= 0:
            raise ValueError(f"assign cache horizon_s={horizon_s!r}: expected a positive number of seconds")
        self.nodes = nodes
        self.horizon_s = horizon_s
        self.node = np.zeros(capacity, dtype=np.int64)
        self.time = np.full(capacity, -np.inf)
        self.estimate = np.zeros((capacity, columns))
        self.size = 0
        self._since = np.nan
        """The ``since_s`` of ``_sums`` (NaN: none kept)."""
        self._sums = np.zeros((nodes, columns))

    def add(self, node: int, t: float, estimate) -> None:
        """Record a pod bound to ``node`` at ``t`` with its usage estimate (one value per column)."""
        cut = t - self.horizon_s
        if self.size and (self.time[0] < cut or self.time[self.size - 1] < cut):
            held = self.time[: self.size]
            if np.any((held < cut) & (held >= self._since)):
                self._since = np.nan  # a pod the kept sums count is dropped: summed anew when next asked
        if self.size and self.time[self.size - 1] < t - self.horizon_s:
            self.size = 0  # everything held is older than the horizon
        elif self.size and self.time[0] < t - self.horizon_s:
            keep = self.time[: self.size] >= t - self.horizon_s
            n = int(keep.sum())
            self.node[:n], self.time[:n], self.estimate[:n] = (
                self.node[: self.size][keep], self.time[: self.size][keep], self.estimate[: self.size][keep])
            self.size = n
        if self.size == len(self.time):
            self._grow()
        self.node[self.size] = node
        self.time[self.size] = t
        self.estimate[self.size] = estimate
        if t >= self._since:
            self._sums[node] += self.estimate[self.size]
        self.size += 1

    def _grow(self) -> None:
        cap = 2 * len(self.time)
        for name in ("node", "time", "estimate"):
            old = getattr(self, name)
            new = np.zeros((cap,) + old.shape[1:], dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def usage_since(self, since_s: float) -> np.ndarray:
        """[nodes, columns] summed estimates of pods bound at or after ``since_s``: read-only, and
        valid until the next ``add`` (copy it to keep it)."""
        if not since_s == self._since:
            self._sums[:] = 0.0
            if self.size:
                recent = self.time[: self.size] >= since_s
                if recent.any():
                    np.add.at(self._sums, self.node[: self.size][recent], self.estimate[: self.size][recent])
            self._since = since_s
        out = self._sums.view()
        out.flags.writeable = False
        return out

    def usage_since_each(self, since_s: np.ndarray) -> np.ndarray:
        """[nodes, columns] summed estimates of pods bound to each node n at or after ``since_s[n]``
        (the decision engine: every node's metrics have their own scrape time)."""
        out = np.zeros((self.nodes, self.estimate.shape[1]))
        if self.size:
            node = self.node[: self.size]
            recent = self.time[: self.size] >= since_s[node]
            if recent.any():
                np.add.at(out, node[recent], self.estimate[: self.size][recent])
        return out

    def entries(self) -> list[tuple[int, float, np.ndarray]]:
        """(node, time, estimate) of every entry held, oldest first."""
        return [(int(self.node[i]), float(self.time[i]), self.estimate[i].copy()) for i in range(self.size)]
