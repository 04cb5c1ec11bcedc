"""A workload: a time-ordered stream of pods, held as columns (one NumPy array per field).

Units are in the field names. Requests and limits follow Kubernetes: a limit of ``inf`` means none.
QoS classes follow Kubernetes' definitions: Guaranteed (limits equal requests), Burstable (some
request below its limit), BestEffort (no CPU or memory request or limit at all).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

GUARANTEED, BURSTABLE, BEST_EFFORT = 0, 1, 2
QOS_NAMES = ("Guaranteed", "Burstable", "BestEffort")

#: Hard-fit scalar resources, in this order, in every [.., 4] request or capacity array.
SCALAR_RESOURCES = ("cpu_milli", "mem_mib", "disk_gib", "rdma_pct")


class PodNames:
    """Pod names as (prefix, number) pairs: pod i is named ``prefixes[prefix[i]]`` followed by
    ``number[i]`` in decimal, or by nothing when ``number[i]`` is -1. A generated stream of millions of
    pods (``batch-0`` ... ``batch-9742904``) costs 12 bytes a pod instead of a fixed-width string
    column (108 bytes a pod at 27 characters), and sorting or merging streams moves those 12 bytes.
    Read like a string array: ``names[i]`` is a ``str``; an index array, mask or slice gives the
    names it selects; ``names == "batch-7"`` a boolean mask; ``tolist()`` and ``np.asarray`` the
    strings themselves."""

    __slots__ = ("prefixes", "prefix", "number")

    def __init__(self, prefixes: tuple[str, ...], prefix: np.ndarray, number: np.ndarray):
        self.prefixes = tuple(str(p) for p in prefixes)
        self.prefix = np.asarray(prefix, dtype=np.int32)
        self.number = np.asarray(number, dtype=np.int64)
        if self.prefix.shape != self.number.shape or self.prefix.ndim != 1:
            raise ValueError(f"PodNames: prefix {self.prefix.shape} and number {self.number.shape} must be one "
                             "array each, of the same length")
        if len(self.prefix) and (self.prefix.min() < 0 or self.prefix.max() >= len(self.prefixes)):
            raise ValueError(f"PodNames: a prefix index outside [0, {len(self.prefixes)})")

    @classmethod
    def numbered(cls, prefix: str, n: int) -> "PodNames":
        """``prefix0``, ``prefix1``, ... ``prefix{n-1}``."""
        return cls((prefix,), np.zeros(n, dtype=np.int32), np.arange(n, dtype=np.int64))

    @classmethod
    def of(cls, names) -> "PodNames":
        """The names given as strings (any array-like of str), each kept whole."""
        if isinstance(names, PodNames):
            return names
        strings = np.asarray(names, dtype=str)
        if strings.ndim != 1:
            raise ValueError(f"pod names: expected one name per pod, got an array of shape {strings.shape}")
        unique, index = np.unique(strings, return_inverse=True)
        return cls(tuple(unique.tolist()), index.reshape(-1), np.full(len(strings), -1, dtype=np.int64))

    @staticmethod
    def concatenate(parts: list["PodNames"]) -> "PodNames":
        prefixes = tuple(dict.fromkeys(p for part in parts for p in part.prefixes))
        where = {p: i for i, p in enumerate(prefixes)}
        index = [np.array([where[p] for p in part.prefixes] or [0], dtype=np.int32)[part.prefix] for part in parts]
        return PodNames(prefixes, np.concatenate(index) if parts else np.zeros(0, np.int32),
                        np.concatenate([part.number for part in parts]) if parts else np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.prefix)

    def _name(self, i: int) -> str:
        number = int(self.number[i])
        return self.prefixes[self.prefix[i]] + ("" if number < 0 else str(number))

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            return self._name(int(key))
        return PodNames(self.prefixes, self.prefix[key], self.number[key])

    def __iter__(self):
        return (self._name(i) for i in range(len(self)))

    def tolist(self) -> list[str]:
        return list(self)

    def __array__(self, dtype=None, copy=None):
        return np.array(self.tolist(), dtype=dtype if dtype is not None else str)

    def __eq__(self, other):
        """A boolean mask of the pods named ``other`` (a str)."""
        if not isinstance(other, str):
            return NotImplemented
        mask = np.zeros(len(self), dtype=bool)
        for k, p in enumerate(self.prefixes):
            if not other.startswith(p):
                continue
            rest = other[len(p):]
            if not rest:
                mask |= (self.prefix == k) & (self.number < 0)
            elif rest.isdigit() and rest.isascii() and str(int(rest)) == rest:
                mask |= (self.prefix == k) & (self.number == int(rest))
        return mask

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else ~eq

    __hash__ = None

    def __repr__(self) -> str:
        head = ", ".join(repr(self._name(i)) for i in range(min(3, len(self))))
        return f"PodNames([{head}{', ...' if len(self) > 3 else ''}], {len(self)} pods)"


@dataclass(frozen=True)
class Workload:
    """Pods in arrival order. Every array has one entry per pod."""

    name: PodNames
    """Pod names (``PodNames``; given as an array of str, they are kept as such)."""
    arrival_s: np.ndarray
    """Arrival time in seconds from the scenario start (0 = alive when the scenario starts)."""
    duration_s: np.ndarray
    """Run time once placed, seconds; ``inf`` = runs past the end of the scenario."""
    request: np.ndarray
    """[P, 4] requests of SCALAR_RESOURCES: CPU milli, memory MiB, disk GiB, RDMA % of one NIC."""
    cpu_limit_milli: np.ndarray
    """CPU limit (``inf`` = none): usage above it is throttled."""
    mem_limit_mib: np.ndarray
    """Memory limit (``inf`` = none): usage above it kills the container."""
    gpu_count: np.ndarray
    """GPUs requested (int). A share of one GPU has gpu_count 1 and gpu_milli < 1000."""
    gpu_milli: np.ndarray
    """Milli-GPU needed on each requested GPU (1000 = a whole GPU; 0 when gpu_count is 0)."""
    qos: np.ndarray
    """GUARANTEED, BURSTABLE or BEST_EFFORT (int8)."""
    latency_sensitive: np.ndarray
    """Serving pods whose latency is tracked (bool)."""
    app: np.ndarray
    """Index into ``app_names`` (int32)."""
    app_names: tuple[str, ...]
    max_per_node: np.ndarray
    """Anti-affinity cap: at most this many pods of the app on one node; -1 = no cap (int32)."""
    pool: np.ndarray
    """Index into ``pool_names`` that the pod must run in (node selector); -1 = any pool."""
    pool_names: tuple[str, ...]
    size_cpu_milli: np.ndarray
    """CPU the pod uses at its usage profile's peak, before the global usage scale."""
    size_mem_mib: np.ndarray
    """Memory the pod uses at its usage profile's peak, before the memory level."""
    size_disk_mbps: np.ndarray
    """Disk bandwidth (MB/s) at the profile's peak."""
    size_net_mbps: np.ndarray
    """Network bandwidth (Mbit/s) at the profile's peak."""
    profile: np.ndarray
    """Row of the usage profiles this pod follows (int32)."""

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if not isinstance(self.name, PodNames):
            object.__setattr__(self, "name", PodNames.of(self.name))
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (np.ndarray, PodNames)) and len(value) != n:
                raise ValueError(f"workload field {f.name!r} has {len(value)} entries, expected {n}")
        if n and np.any(np.diff(self.arrival_s) < 0):
            raise ValueError("workload arrivals must be sorted by arrival_s")
        if np.any(self.request < 0):
            bad = int(np.argwhere(self.request < 0)[0, 0])
            raise ValueError(f"pod {self.name[bad]!r} has a negative request {self.request[bad].tolist()}")

    def __len__(self) -> int:
        return len(self.arrival_s)

    def select(self, mask: np.ndarray) -> "Workload":
        """The pods where ``mask`` holds, same order."""
        kw = {}
        for f in fields(self):
            value = getattr(self, f.name)
            kw[f.name] = value[mask] if isinstance(value, (np.ndarray, PodNames)) else value
        return Workload(**kw)

    @staticmethod
    def concat(parts: list["Workload"]) -> "Workload":
        """Merge workloads into one stream sorted by arrival (stable), remapping apps and pools."""
        apps = tuple(dict.fromkeys(a for w in parts for a in w.app_names))
        pools = tuple(dict.fromkeys(p for w in parts for p in w.pool_names))
        kw: dict[str, object] = {"app_names": apps, "pool_names": pools}
        kw["name"] = PodNames.concatenate([w.name for w in parts])
        for f in fields(Workload):
            if f.name in ("app_names", "pool_names", "name"):
                continue
            cols = []
            for w in parts:
                col = getattr(w, f.name)
                if f.name == "app":
                    col = np.array([apps.index(a) for a in w.app_names], dtype=np.int32)[col] if len(col) else col
                elif f.name == "pool":
                    lut = np.array([pools.index(p) for p in w.pool_names] + [-1], dtype=np.int16)
                    col = lut[col]
                cols.append(col)
            kw[f.name] = np.concatenate(cols)
        order = np.argsort(kw["arrival_s"], kind="stable")
        for k, v in kw.items():
            if isinstance(v, (np.ndarray, PodNames)):
                kw[k] = v[order]
        return Workload(**kw)  # type: ignore[arg-type]


def unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of a 2-D numeric array, sorted, and each row's index into them: what
    ``np.unique(rows, axis=0, return_inverse=True)`` gives, by a lexsort of the columns (many
    times faster on millions of pods than np.unique's row-as-bytes sort)."""
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(f"unique_rows: expected a 2-D array, got shape {rows.shape}")
    if len(rows) == 0:
        return rows.copy(), np.zeros(0, dtype=np.int64)
    order = np.lexsort(rows.T[::-1])
    ordered = rows[order]
    new = np.ones(len(rows), dtype=bool)
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    ids = np.cumsum(new) - 1
    inverse = np.empty(len(rows), dtype=np.int64)
    inverse[order] = ids
    return ordered[new], inverse
