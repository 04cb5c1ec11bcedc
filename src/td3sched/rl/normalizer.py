"""Running mean and variance of observations (Chan et al.'s parallel update, as Stable-Baselines3's
RunningMeanStd), saved with the model so a deployed policy normalises exactly as in training.

    normalise(x) = clip((x - mean) / std, -clip, clip),   std = max(sqrt(var + eps), min_std)

``min_std`` (per value, optional) is a floor under the running standard deviation for a value that is
almost always the same, such as the OOM-kill count (``rl.observation.STD_FLOORS``): without it the
rare non-zero value is divided by a tiny std and clipped, so one kill and a hundred read alike.
A normaliser saved without a floor (the shipped models) normalises exactly as before.
"""

from __future__ import annotations

import numpy as np


class ObservationNormalizer:
    def __init__(self, size: int, clip: float = 10.0, eps: float = 1e-8, min_std=None):
        self.mean = np.zeros(size)
        self.var = np.ones(size)
        self.count = 0.0
        self.clip = clip
        self.eps = eps
        self.min_std = None if min_std is None else np.asarray(min_std, dtype=np.float64)
        if self.min_std is not None and (self.min_std.shape != (size,) or not np.all(np.isfinite(self.min_std))
                                         or np.any(self.min_std < 0)):
            raise ValueError(f"observation normaliser min_std: {self.min_std.tolist()}: expected {size} finite "
                             "non-negative numbers")

    def update(self, x: np.ndarray) -> None:
        """Fold in one observation [size] or a batch [n, size]."""
        batch = np.atleast_2d(np.asarray(x, dtype=np.float64))
        n = batch.shape[0]
        b_mean, b_var = batch.mean(axis=0), batch.var(axis=0)
        total = self.count + n
        delta = b_mean - self.mean
        m2 = self.var * self.count + b_var * n + delta**2 * self.count * n / total
        self.mean = self.mean + delta * n / total
        self.var = m2 / total
        self.count = total

    def std(self) -> np.ndarray:
        """The divisor: sqrt(var + eps), floored at ``min_std`` when there is one."""
        std = np.sqrt(self.var + self.eps)
        return std if self.min_std is None else np.maximum(std, self.min_std)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        z = (np.asarray(x, dtype=np.float64) - self.mean) / self.std()
        return np.clip(z, -self.clip, self.clip).astype(np.float32)

    def to_json(self) -> dict:
        """Floats are written with repr, so a JSON round trip is exact."""
        out = {"count": self.count, "mean": self.mean.tolist(), "var": self.var.tolist(),
               "clip": self.clip, "eps": self.eps}
        if self.min_std is not None:
            out["min_std"] = self.min_std.tolist()
        return out

    @classmethod
    def from_json(cls, d: dict, size: int) -> "ObservationNormalizer":
        """A ValueError names a missing key or a length other than ``size``."""
        missing = {"count", "mean", "var", "clip", "eps"} - set(d)
        if missing:
            raise ValueError(f"observation normaliser: missing {sorted(missing)}")
        min_std = d.get("min_std")
        if min_std is not None and np.asarray(min_std).shape != (size,):
            raise ValueError(f"observation normaliser min_std: {len(min_std) if isinstance(min_std, list) else 'no'} "
                             f"values, expected {size}")
        out = cls(size, float(d["clip"]), float(d["eps"]), min_std)
        for key in ("mean", "var"):
            value = np.asarray(d[key], dtype=np.float64)
            if value.shape != (size,) or not np.all(np.isfinite(value)):
                raise ValueError(f"observation normaliser {key}: {value.shape[0] if value.ndim else 'no'} values, "
                                 f"expected {size} finite numbers")
            setattr(out, key, value)
        if np.any(out.var < 0):
            raise ValueError("observation normaliser var: expected non-negative variances")
        out.count = float(d["count"])
        return out
