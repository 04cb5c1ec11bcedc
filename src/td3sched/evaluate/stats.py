"""Means and 95% confidence intervals over seeds, from ``scipy.stats``.

``summarize(values)`` gives the mean, the sample standard deviation and the 95% interval of the
mean, by one of two methods:

- ``t`` (the default): Student's t, ``mean ± t_{0.975, n-1} * s / sqrt(n)`` (``scipy.stats.t``),
  symmetric; ``half`` is its half-width. For metrics that can take either sign (the episode reward)
  and for paired differences.
- ``bootstrap``, for a metric that cannot be negative (``lower_bound=0``: latency, pending time,
  violations, OOM kills, fractions): the percentile bootstrap of the mean
  (``scipy.stats.bootstrap``, 9,999 resamples, a fixed generator so a report is reproducible). Such
  metrics are skewed across seeds (one bad seed), and a t interval then reaches below zero, which
  no value can; a percentile interval stays within the values' range. It is asymmetric: ``half`` is
  None, ``low`` and ``high`` carry it. With few seeds it is narrower than the t interval (it cannot
  see beyond the values drawn).

With one value there is no interval: ``low``, ``high`` and ``half`` are None (never a crash, never a
made-up number). ``paired_difference`` summarises per-seed differences between two policies (the
seeds share their workload, so pairing removes its noise) with the t interval.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np
from scipy import stats as sps

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 0


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile p={p}: expected 0 < p < 1")
    if df <= 0:
        raise ValueError(f"degrees of freedom {df}: expected > 0")
    return float(sps.t.ppf(p, df))


@dataclass(frozen=True)
class Summary:
    """Mean of ``n`` values with its 95% interval [low, high] (None when n < 2); ``half`` is the
    half-width of a symmetric (t) interval, None for a bootstrap one."""

    n: int
    mean: float | None
    std: float | None
    half: float | None
    low: float | None = None
    high: float | None = None
    method: str = "t"

    @property
    def defined(self) -> bool:
        return self.low is not None

    def excludes_zero(self) -> bool | None:
        """Whether the interval lies entirely above or below 0 (None when it is undefined)."""
        if self.low is None or self.high is None:
            return None
        return self.low > 0 or self.high < 0


def _numbers(values: Iterable) -> list[float]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        v = float(v)
        if math.isfinite(v):
            out.append(v)
    return out


def _bootstrap(xs: list[float], confidence: float) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few distinct values: scipy warns the distribution is degenerate
        res = sps.bootstrap((np.asarray(xs),), np.mean, confidence_level=confidence, method="percentile",
                            n_resamples=BOOTSTRAP_RESAMPLES, vectorized=True,
                            rng=np.random.default_rng(BOOTSTRAP_SEED))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return max(low, min(xs)), min(high, max(xs))  # the percentile of resample means, inside the values' range


def summarize(values: Iterable, confidence: float = CONFIDENCE, lower_bound: float | None = None) -> Summary:
    """Mean, sample std and interval of the finite numbers in ``values`` (others are skipped). With
    ``lower_bound`` (the metric's smallest possible value, 0 for counts, times and fractions) the
    interval is the percentile bootstrap's, never below any value; otherwise Student's t."""
    xs = _numbers(values)
    n = len(xs)
    if n == 0:
        return Summary(0, None, None, None)
    mean = math.fsum(xs) / n
    if n == 1:
        return Summary(1, mean, None, None)
    if max(xs) - min(xs) <= 1e-12 * max(abs(x) for x in xs):
        return Summary(n, mean, 0.0, 0.0, mean, mean)  # equal values: no rounding noise dressed up as spread
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    if lower_bound is not None:
        low, high = _bootstrap(xs, confidence)
        return Summary(n, mean, std, None, max(low, lower_bound), high, "bootstrap")
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * std / math.sqrt(n)
    return Summary(n, mean, std, half, mean - half, mean + half)


def paired_difference(base: Mapping[int, float], other: Mapping[int, float],
                      confidence: float = CONFIDENCE) -> Summary:
    """Summary (t interval) of ``other[seed] - base[seed]`` over the seeds both have a number for."""
    diffs = []
    for seed in sorted(set(base) & set(other)):
        pair = _numbers([base[seed], other[seed]])
        if len(pair) == 2:
            diffs.append(pair[1] - pair[0])
    return summarize(diffs, confidence)


def dominators(points: Mapping[str, Sequence[float]]) -> dict[str, list[str]]:
    """For each named point (every coordinate lower is better), the names of the points that dominate it:
    no worse in every coordinate and better in at least one. A point with none is on the Pareto front.
    Names keep ``points``' order."""
    items = [(name, tuple(float(x) for x in xs)) for name, xs in points.items()]
    return {name: [other for other, ys in items
                   if other != name and all(y <= x for x, y in zip(xs, ys)) and any(y < x for x, y in zip(xs, ys))]
            for name, xs in items}
