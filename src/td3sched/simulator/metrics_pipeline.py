"""The metrics pipeline between the cluster and the scheduler: scrapes and a rate window.

Node usage is scraped every ``scrape_s``; what the scheduler sees is the mean of the scrapes inside
the last ``window_s`` (Prometheus ``rate(...[1m])`` over 30 s scrapes averages two samples), except
for gauge columns (``gauges``; the engine's memory column), which publish the last scrape as it is:
memory in use is a gauge (``node_memory_MemAvailable_bytes``), not a rate. Pods
placed since the last scrape are invisible until the next one: the lag that makes bursts pile up.

Usage statistics over a longer history (Prometheus ``avg_over_time`` / ``stddev_over_time``, which
Trimaran's load-watcher queries over 15 minutes) come from ``stats(window_s)``: a policy asks for
the history it needs with ``retain(window_s)`` when it is attached, before the first scrape.
"""

from __future__ import annotations

import math

import numpy as np


class MetricsPipeline:
    def __init__(self, nodes: int, columns: int, scrape_s: float, window_s: float, gauges: tuple[int, ...] = ()):
        self.gauges = list(gauges)
        """Columns published as the last scrape (gauges), not the window mean (rates)."""
        self.depth = max(1, int(math.floor(window_s / scrape_s)))
        self.history = np.zeros((self.depth, nodes, columns))
        self.filled = 0
        self.cursor = 0
        self.scrape_s = scrape_s
        self.scrapes = 0
        """Scrapes so far."""
        self.retained: np.ndarray | None = None
        """[depth, nodes, columns] ring of raw scrapes kept for ``stats`` (None until ``retain``)."""
        self.held = 0
        """Scrapes ``retained`` holds (the newest at ``(scrapes - 1) % depth``)."""
        self._version = 0
        self._stats_memo: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}

    def scrape(self, usage: np.ndarray) -> np.ndarray:
        """Record the ground truth now; return the published (observed) usage."""
        self.history[self.cursor] = usage
        self.cursor = (self.cursor + 1) % self.depth
        self.filled = min(self.filled + 1, self.depth)
        if self.retained is not None:
            self.retained[self.scrapes % len(self.retained)] = usage
            self.held = min(self.held + 1, len(self.retained))
        self.scrapes += 1
        self._version += 1
        # Until the window has filled, slots [0, filled) hold every scrape so far.
        out = self.history[: self.filled].mean(axis=0)
        if self.gauges:
            out[:, self.gauges] = usage[:, self.gauges]
        return out

    def forget(self, nodes: np.ndarray) -> None:
        """A removed node's history is dropped (its slot may come back as a new node)."""
        self.history[:, nodes] = 0.0
        if self.retained is not None:
            self.retained[:, nodes] = 0.0
            self._version += 1

    # --- statistics over a longer history (additive; scrape and forget behave as before) ----------
    def scrapes_in(self, window_s: float) -> int:
        """Scrapes a window of ``window_s`` holds: ``max(1, floor(window_s / scrape_s))``."""
        if not (math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"statistics window_s={window_s!r}: expected a positive number of seconds")
        return max(1, int(math.floor(window_s / self.scrape_s)))

    def retain(self, window_s: float) -> None:
        """Keep enough raw scrapes for ``stats(window_s)``. Scrapes already kept stay (oldest first)."""
        depth = self.scrapes_in(window_s)
        old = self.retained
        if old is not None and len(old) >= depth:
            return
        new = np.zeros((depth,) + self.history.shape[1:])
        if old is not None:
            ages = self.scrapes - self.held + np.arange(self.held)  # scrape numbers held, oldest first
            new[ages % depth] = old[ages % len(old)]
        self.retained = new
        self._stats_memo.clear()

    def stats(self, window_s: float) -> tuple[np.ndarray, np.ndarray]:
        """Mean and population standard deviation (Prometheus ``avg_over_time``,
        ``stddev_over_time``), each [nodes, columns], of the last ``scrapes_in(window_s)`` scrapes;
        of all scrapes held (those since the first ``retain``) until that many exist, zeros before
        the first. A removed node's history counts as zeros, as in ``scrape``. Computed once per
        scrape and window."""
        k = self.scrapes_in(window_s)
        if self.retained is None or len(self.retained) < k:
            raise ValueError(f"stats(window_s={window_s}) needs {k} scrapes of history: call "
                             f"retain({window_s}) before the run (retained: "
                             f"{0 if self.retained is None else len(self.retained)} scrapes)")
        memo = self._stats_memo.get(k)
        if memo is not None and memo[0] == self._version:
            return memo[1], memo[2]
        m = min(k, self.held)
        if m == 0:
            mean = np.zeros(self.history.shape[1:])
            std = np.zeros_like(mean)
        else:
            window = self.retained[(self.scrapes - 1 - np.arange(m)) % len(self.retained)]
            mean = window.mean(axis=0)
            std = window.std(axis=0)
        self._stats_memo[k] = (self._version, mean, std)
        return mean, std
