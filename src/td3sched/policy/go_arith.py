"""Go's float rounding, as the scheduler plugins compute their scores.

``math.Round`` rounds half away from zero; NumPy's ``round`` rounds half to even, so 2.5 would
become 2 instead of Go's 3. Every score ported from Go rounds with ``go_round``.
"""

from __future__ import annotations

import numpy as np


def go_round(x):
    """Go's ``math.Round``: the nearest integer, halves away from zero (as float64)."""
    x = np.asarray(x, dtype=np.float64)
    whole = np.trunc(x)
    return whole + np.where(np.abs(x - whole) >= 0.5, np.sign(x), 0.0)  # x - trunc(x) is exact
