"""Usage profiles: how a pod's real usage moves over time.

No public trace has per-pod requests and per-pod usage together, so every pod follows the usage
series of one Bitbrains VM (GWA-T-12 Rnd, Shen, van Beek, Iosup, CCGrid 2015; acknowledge
Bitbrains IT Services Inc.). Each VM series is turned into a *shape*: the series divided by its
own 99th percentile (floored at a trace-resolution value, so an all-zero series stays zero), clipped to [0, SHAPE_MAX[kind]]. A pod's
usage is then ``shape x size``: the VM gives the *pattern*, the pod's size and the global usage
scale give the *level* (see ``workload.pods.Workload.size_*``), and the simulator applies
the global usage scale and the pod's limits.

Shapes are on the trace's 5-minute grid and wrap around at the end of the month; every pod reads
the same wall-clock slot, so the daily and weekly rhythm of the trace is shared across pods.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SHAPE_MAX = {"cpu": 1.5, "mem": 1.25, "disk": 1.5, "net": 1.5}
"""Upper clip of a shape: a VM may run above its own 99th percentile in the last 1% of samples, up to
1.5x (memory 1.25x: with the memory level of 0.85 a Guaranteed pod then peaks at 1.06x its limit)."""
PEAK_QUANTILE = 0.99
#: Floors of the normaliser, in the series' units: CPU %, memory fraction, disk KB/s, network KB/s.
PEAK_FLOOR = {"cpu": 0.5, "mem": 0.01, "disk": 1.0, "net": 1.0}
KINDS = ("cpu", "mem", "disk", "net")


@dataclass(frozen=True)
class UsageProfiles:
    """Normalised usage shapes of V series over T slots of ``step_s`` seconds."""

    step_s: float
    shape: np.ndarray
    """float32 [4, V, T]: CPU, memory, disk, network shapes (KINDS order), each in [0, SHAPE_MAX[kind]]."""
    source_ids: tuple[str, ...]
    """Which trace series each row came from (Bitbrains VM file names)."""

    @property
    def count(self) -> int:
        return self.shape.shape[1]

    @property
    def slots(self) -> int:
        return self.shape.shape[2]

    def slot(self, t_s: float) -> int:
        """The grid slot read at time ``t_s`` (wrapping around)."""
        return int(t_s // self.step_s) % self.slots

    def mean_shape(self) -> np.ndarray:
        """Time-averaged shape per kind and series, [4, V]."""
        return self.shape.mean(axis=2)

    @classmethod
    def from_series(cls, step_s: float, series: dict[str, np.ndarray], source_ids) -> "UsageProfiles":
        """Normalise raw [V, T] series (keys of KINDS) into shapes."""
        rows = []
        for kind in KINDS:
            x = np.nan_to_num(np.asarray(series[kind], dtype=np.float64), nan=0.0)
            x = np.maximum(x, 0.0)
            peak = np.maximum(np.quantile(x, PEAK_QUANTILE, axis=1), PEAK_FLOOR[kind])
            rows.append(np.clip(x / peak[:, None], 0.0, SHAPE_MAX[kind]).astype(np.float32))
        return cls(step_s=float(step_s), shape=np.stack(rows), source_ids=tuple(source_ids))

    @classmethod
    def from_bitbrains(cls, folder=None) -> "UsageProfiles":
        """Shapes of every usable VM of the Bitbrains Rnd month (cached after the first read)."""
        from td3sched.trace.bitbrains import load_profiles

        vm = load_profiles(folder)
        series = {"cpu": vm.cpu_pct, "mem": vm.mem_frac, "disk": vm.disk_kbps, "net": vm.net_kbps}
        return cls.from_series(vm.step_s, series, vm.vm_ids)

    def subset(self, rows: np.ndarray, slots: slice | None = None) -> "UsageProfiles":
        shape = self.shape[:, rows]
        if slots is not None:
            shape = shape[:, :, slots]
        return UsageProfiles(self.step_s, np.ascontiguousarray(shape), tuple(self.source_ids[i] for i in rows))

    def save(self, path: Path) -> None:
        np.savez_compressed(path, step_s=self.step_s, shape=self.shape.astype(np.float16),
                            source_ids=np.array(self.source_ids))

    @classmethod
    def load(cls, path: Path) -> "UsageProfiles":
        try:
            with np.load(path, allow_pickle=False) as z:
                shape = z["shape"].astype(np.float32)
                step_s = float(z["step_s"])
                ids = tuple(str(s) for s in z["source_ids"])
        except FileNotFoundError:
            raise FileNotFoundError(f"usage profile file {path} is missing") from None
        except (OSError, EOFError, KeyError, ValueError, TypeError, zipfile.BadZipFile) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise ValueError(f"usage profile file {path}: expected a NumPy .npz archive holding step_s, shape and "
                             f"source_ids; it is unreadable ({reason})") from None
        if shape.ndim != 3 or shape.shape[0] != len(KINDS) or shape.shape[1] != len(ids):
            raise ValueError(f"usage profile file {path}: shape {shape.shape}, expected [4, {len(ids)}, T]")
        if not np.all(np.isfinite(shape)):
            raise ValueError(f"usage profile file {path} holds non-finite values")
        return cls(step_s, shape, ids)
