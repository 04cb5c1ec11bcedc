"""The metrics pipeline between the cluster and the scheduler: scrapes and a rate window.

Node usage is scraped every ``scrape_s``; what the scheduler sees is the mean of the scrapes inside
the last ``window_s`` (Prometheus ``rate(...[1m])`` over 30 s scrapes averages two samples). Pods
placed since the last scrape are invisible until the next one: the lag that makes bursts pile up.
"""

from __future__ import annotations

import math

import numpy as np


class MetricsPipeline:
    def __init__(self, nodes: int, columns: int, scrape_s: float, window_s: float):
        self.depth = max(1, int(math.floor(window_s / scrape_s)))
        self.history = np.zeros((self.depth, nodes, columns))
        self.filled = 0
        self.cursor = 0

    def scrape(self, usage: np.ndarray) -> np.ndarray:
        """Record the ground truth now; return the published (observed) usage."""
        self.history[self.cursor] = usage
        self.cursor = (self.cursor + 1) % self.depth
        self.filled = min(self.filled + 1, self.depth)
        # Until the window has filled, slots [0, filled) hold every scrape so far.
        return self.history[: self.filled].mean(axis=0)

    def forget(self, nodes: np.ndarray) -> None:
        """A removed node's history is dropped (its slot may come back as a new node)."""
        self.history[:, nodes] = 0.0
