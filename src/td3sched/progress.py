"""Progress of long work where a progress bar shows nothing.

A rich progress bar draws only on a terminal. Into a log file or a pipe (a run started in the background,
CI) it prints nothing until the end, so an hour of training or evaluation looks hung. ``ProgressLines``
prints a plain line instead: at the first update, then at most every ``EVERY_S`` seconds, and at the last.
"""

from __future__ import annotations

import math
import time
from typing import Callable

EVERY_S = 60.0
"""Seconds between two progress lines (the first and the last are always printed)."""


class ProgressLines:
    """``update(done)`` prints ``"{what}: {done}/{total} {unit} (p%), {elapsed} s elapsed, about {left} s
    left[, {detail}]"`` through ``say``, throttled to one line every ``EVERY_S`` seconds (read when a line
    is due). ``done`` counts the units finished; ``start`` of them were already done
    when timing began (a resumed run), so the rate, and the time left, is this run's."""

    def __init__(self, say: Callable[[str], None], what: str, total: int, unit: str = "steps", start: int = 0):
        self.say, self.what, self.total, self.unit, self.start = say, what, total, unit, start
        self.started = time.monotonic()
        self.last = -math.inf

    def update(self, done: int, detail: str = "") -> bool:
        """Print the line if one is due (or ``done`` reached ``total``); whether it printed."""
        now = time.monotonic()
        if now - self.last < EVERY_S and done < self.total:
            return False
        self.last = now
        elapsed = now - self.started
        line = f"{self.what}: {done:,}/{self.total:,} {self.unit} ({done / max(self.total, 1):.0%}), {elapsed:,.0f} s elapsed"
        rate = (done - self.start) / elapsed if elapsed > 0 else 0.0
        if 0 < rate and done < self.total:
            line += f", about {(self.total - done) / rate:,.0f} s left"
        self.say(line + (f", {detail}" if detail else ""))
        return True
