"""Running mean and variance of observations (Chan et al.'s parallel update, as Stable-Baselines3's
RunningMeanStd), saved with the model so a deployed policy normalises exactly as in training.

    normalise(x) = clip((x - mean) / sqrt(var + eps), -clip, clip)
"""

from __future__ import annotations

import numpy as np


class ObservationNormalizer:
    def __init__(self, size: int, clip: float = 10.0, eps: float = 1e-8):
        self.mean = np.zeros(size)
        self.var = np.ones(size)
        self.count = 0.0
        self.clip = clip
        self.eps = eps

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

    def normalize(self, x: np.ndarray) -> np.ndarray:
        z = (np.asarray(x, dtype=np.float64) - self.mean) / np.sqrt(self.var + self.eps)
        return np.clip(z, -self.clip, self.clip).astype(np.float32)

    def to_json(self) -> dict:
        """Floats are written with repr, so a JSON round trip is exact."""
        return {"count": self.count, "mean": self.mean.tolist(), "var": self.var.tolist(),
                "clip": self.clip, "eps": self.eps}

    @classmethod
    def from_json(cls, d: dict, size: int) -> "ObservationNormalizer":
        """A ValueError names a missing key or a length other than ``size``."""
        missing = {"count", "mean", "var", "clip", "eps"} - set(d)
        if missing:
            raise ValueError(f"observation normaliser: missing {sorted(missing)}")
        out = cls(size, float(d["clip"]), float(d["eps"]))
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
