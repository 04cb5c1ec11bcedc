"""Means and 95% confidence intervals over seeds (Student t), with no dependency beyond the stdlib.

``summarize(values)`` gives the mean, the sample standard deviation and the half-width of the 95%
interval ``t_{0.975, n-1} * s / sqrt(n)``. With one value the interval is undefined: ``half`` is
None (never a crash, never a made-up number). ``paired_difference`` does the same for per-seed
differences between two policies: the seeds share their workload, so pairing removes its noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

CONFIDENCE = 0.95


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on the CDF; |error| < 1e-10)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile p={p}: expected 0 < p < 1")
    if df <= 0:
        raise ValueError(f"degrees of freedom {df}: expected > 0")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Summary:
    """Mean of ``n`` values with the half-width of their 95% interval (None when n < 2)."""

    n: int
    mean: float | None
    std: float | None
    half: float | None

    @property
    def low(self) -> float | None:
        return None if self.half is None or self.mean is None else self.mean - self.half

    @property
    def high(self) -> float | None:
        return None if self.half is None or self.mean is None else self.mean + self.half

    @property
    def defined(self) -> bool:
        return self.half is not None

    def excludes_zero(self) -> bool | None:
        """Whether the interval lies entirely above or below 0 (None when it is undefined)."""
        if self.half is None or self.mean is None:
            return None
        return abs(self.mean) > self.half


def _numbers(values: Iterable) -> list[float]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        v = float(v)
        if math.isfinite(v):
            out.append(v)
    return out


def summarize(values: Iterable, confidence: float = CONFIDENCE) -> Summary:
    """Mean, sample std and CI half-width of the finite numbers in ``values`` (others are skipped)."""
    xs = _numbers(values)
    n = len(xs)
    if n == 0:
        return Summary(0, None, None, None)
    mean = math.fsum(xs) / n
    if n == 1:
        return Summary(1, mean, None, None)
    if max(xs) - min(xs) <= 1e-12 * max(abs(x) for x in xs):
        std = 0.0  # equal values: no rounding noise dressed up as spread
    else:
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * std / math.sqrt(n)
    return Summary(n, mean, std, half)


def paired_difference(base: Mapping[int, float], other: Mapping[int, float],
                      confidence: float = CONFIDENCE) -> Summary:
    """Summary of ``other[seed] - base[seed]`` over the seeds both have a number for."""
    diffs = []
    for seed in sorted(set(base) & set(other)):
        pair = _numbers([base[seed], other[seed]])
        if len(pair) == 2:
            diffs.append(pair[1] - pair[0])
    return summarize(diffs, confidence)
