"""Poisson arrival streams of pods drawn from a table of (shape, lifetime) samples."""

from __future__ import annotations

import numpy as np


def poisson_stream(rng: np.random.Generator, rate_per_s: float, duration_s: float, lifetime_s: np.ndarray,
                   modulation: np.ndarray | None = None, modulation_step_s: float = 300.0,
                   prefill: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw a stream over ``[0, duration_s)``.

    Returns (source row, arrival_s, duration_s) sorted by arrival. Arrivals are Poisson with mean
    rate ``rate_per_s``, modulated by a periodic daily shape (mean 1; thinning) when given; each
    arrival copies a source row chosen uniformly. With ``prefill``, the cluster starts in the
    stream's steady state: Poisson(rate x E[lifetime]) pods alive at t = 0, rows drawn in proportion
    to their lifetime (length-biased), each with a uniform residual of its lifetime.
    """
    if not (np.isfinite(rate_per_s) and rate_per_s >= 0):
        raise ValueError(f"arrival rate {rate_per_s!r}: expected a non-negative finite number")
    n_rows = len(lifetime_s)
    if n_rows == 0:
        raise ValueError("cannot draw a stream from an empty table of pods")
    peak = 1.0
    if modulation is not None:
        modulation = np.asarray(modulation, dtype=float)
        if np.any(modulation < 0) or not np.isclose(modulation.mean(), 1.0, atol=1e-6):
            raise ValueError("modulation must be non-negative with mean 1")
        peak = float(modulation.max())
    n = rng.poisson(rate_per_s * peak * duration_s)
    t = np.sort(rng.uniform(0.0, duration_s, size=n))
    if modulation is not None:
        slot = (t // modulation_step_s).astype(np.int64) % len(modulation)
        t = t[rng.uniform(0.0, peak, size=n) < modulation[slot]]
    rows = rng.integers(n_rows, size=len(t))
    life = lifetime_s[rows]
    if prefill:
        mean_life = float(lifetime_s.mean())
        n0 = rng.poisson(rate_per_s * mean_life)
        rows0 = rng.choice(n_rows, size=n0, p=lifetime_s / lifetime_s.sum())
        life0 = lifetime_s[rows0] * rng.uniform(0.0, 1.0, size=n0)
        rows = np.concatenate([rows0, rows])
        t = np.concatenate([np.zeros(n0), t])
        life = np.concatenate([life0, life])
    return rows, t, life
