"""Bitbrains "Rnd" per-VM resource usage, July 2013 (Grid Workloads Archive GWA-T-12).

Attribution: acknowledge Bitbrains IT Services Inc., who provided the traces through the Grid
Workloads Archive (GWA-T-12 Bitbrains), described in S. Shen, V. van Beek, A. Iosup, "Statistical
Characterization of Business-Critical Workloads Hosted in Cloud Datacenters", IEEE/ACM CCGrid 2015.
The copy used here comes from JessieRayeBauer/Time-Series-Forecasting- (commit 0901a0da, ``rnd/2013-7/``),
gzip-compressed. Any excerpt the project ships must carry this attribution.

``bitbrains-rnd/2013-7/`` holds 500 files ``N.csv.gz`` (3.89 M rows), one per VM, separator ``;``
followed by a tab, a header in every file, 5-minute samples from 2013-06-30 to 2013-07-30. Columns:
Timestamp [ms] (which actually holds UNIX seconds), CPU cores, CPU capacity provisioned [MHZ], CPU
usage [MHZ], CPU usage [%], Memory capacity provisioned [KB], Memory usage [KB], Disk read / write
throughput [KB/s], Network received / transmitted throughput [KB/s].

Quirks handled by :func:`load_profiles`: rows reporting 0 cores (with 0 MHz and 0 KB provisioned) are
records of a VM that is not running; 13 VMs report 0 cores most of the time, and a few files interleave
such records with the real ones at other timestamps (up to 23,007 rows in a file). CPU usage [%]
exceeds 100 in ~1.3 % of samples and memory usage exceeds the provisioned memory in a few hundred.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import SkipReport
from .location import traces_dir
from .table import Column, TraceTable, finish, read_table

__all__ = [
    "BITBRAINS_DIR",
    "VmTrace",
    "VmProfiles",
    "load_vm",
    "load_profiles",
    "default_cache_dir",
]

log = logging.getLogger(__name__)

BITBRAINS_DIR = "bitbrains-rnd/2013-7"
MIN_COVERAGE = 0.5
_CACHE_VERSION = 1  # bump whenever the profile computation changes

_VM_COLUMNS = [
    Column("Timestamp [ms]", "int", nonnegative=True),
    Column("CPU cores", "int", nonnegative=True),
    Column("CPU usage [%]", "float", nonnegative=True),
    Column("Memory capacity provisioned [KB]", "float", nonnegative=True),
    Column("Memory usage [KB]", "float", nonnegative=True),
    Column("Disk read throughput [KB/s]", "float", nonnegative=True),
    Column("Disk write throughput [KB/s]", "float", nonnegative=True),
    Column("Network received throughput [KB/s]", "float", nonnegative=True),
    Column("Network transmitted throughput [KB/s]", "float", nonnegative=True),
]

_ARRAYS = ("cpu_pct", "mem_frac", "disk_kbps", "net_kbps")


@dataclass(frozen=True, eq=False)
class VmTrace(TraceTable):
    """One Bitbrains VM, sorted by time (stable). ``frame`` columns:
    t_s (int64 UNIX seconds), cores (int64; 0 = VM not running), cpu_pct (float64, CPU usage [%] as
    recorded, may exceed 100), mem_prov_kb, mem_used_kb (float64 KB), disk_kbps (read + write, KB/s),
    net_kbps (received + transmitted, KB/s)."""


@dataclass(frozen=True, eq=False)
class VmProfiles:
    """Bitbrains VM usage on a common regular time grid.

    Slot ``j`` covers ``[start_s + j*step_s, start_s + (j+1)*step_s)``. All arrays are read-only
    float32; the [V, T] ones have one row per kept VM (in ``vm_ids`` order) and one column per slot.

    Attributes:
        vm_ids: file stems of the kept VMs ("1", "2", ...), in numeric order.
        start_s: UNIX seconds of the grid start (the earliest timestamp of all files, floored to
            ``step_s``).
        step_s: slot length in seconds.
        cpu_pct: [V, T] CPU usage in %, clipped to 0..100.
        mem_frac: [V, T] memory used / provisioned, clipped to 0..1.
        disk_kbps: [V, T] disk read + write throughput, KB/s.
        net_kbps: [V, T] network received + transmitted throughput, KB/s.
        cores: [V] median core count of the VM's running samples.
        mem_prov_kb: [V] median provisioned memory (KB) of the VM's running samples.
        skipped: the VMs dropped (unit "VMs"): "with 0 cores" (the median sample reports 0 cores) or
            "covering < 50% of the grid".
        folder: the folder that was read.
    """

    vm_ids: tuple[str, ...]
    start_s: int
    step_s: int
    cpu_pct: np.ndarray
    mem_frac: np.ndarray
    disk_kbps: np.ndarray
    net_kbps: np.ndarray
    cores: np.ndarray
    mem_prov_kb: np.ndarray
    skipped: SkipReport
    folder: Path

    @property
    def n_vms(self) -> int:
        return len(self.vm_ids)

    @property
    def n_slots(self) -> int:
        return int(self.cpu_pct.shape[1])

    @property
    def times_s(self) -> np.ndarray:
        """UNIX seconds of the start of every slot (int64, length T)."""
        return self.start_s + self.step_s * np.arange(self.n_slots, dtype=np.int64)


def load_vm(path: str | Path, *, lenient: bool = False) -> VmTrace:
    """Load and validate one Bitbrains ``N.csv.gz`` (all values must be non-negative numbers)."""
    path = Path(path)
    frame, report = read_table(path, _VM_COLUMNS, sep=";", lenient=lenient)
    out = frame[["Timestamp [ms]", "CPU cores", "CPU usage [%]", "Memory capacity provisioned [KB]",
                 "Memory usage [KB]"]].copy()
    out.columns = ["t_s", "cores", "cpu_pct", "mem_prov_kb", "mem_used_kb"]
    out["disk_kbps"] = frame["Disk read throughput [KB/s]"] + frame["Disk write throughput [KB/s]"]
    out["net_kbps"] = frame["Network received throughput [KB/s]"] + frame["Network transmitted throughput [KB/s]"]
    out = out.sort_values("t_s", kind="stable")
    return VmTrace(frame=finish(out), skipped=report, path=path)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/td3sched``, else ``~/.cache/td3sched``."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "td3sched"


def _vm_files(folder: Path) -> list[Path]:
    def order(p: Path):
        stem = p.name[: -len(".csv.gz")]
        return (0, int(stem), "") if stem.isdigit() else (1, 0, stem)

    files = sorted(folder.glob("*.csv.gz"), key=order)
    if not files:
        raise FileNotFoundError(f"no *.csv.gz files in {folder}")
    return files


def _cache_key(files: list[Path], step_s: int) -> str:
    h = hashlib.sha256()
    h.update(f"bitbrains-profiles v{_CACHE_VERSION} step={step_s}\n".encode())
    for f in files:
        st = f.stat()
        h.update(f"{f.name}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _fill(a: np.ndarray) -> np.ndarray:
    """Forward-fill then back-fill NaNs along axis 1 (vectorised); all-NaN rows become 0."""
    v, t = a.shape
    idx = np.where(~np.isnan(a), np.arange(t), 0)
    np.maximum.accumulate(idx, axis=1, out=idx)
    a = a[np.arange(v)[:, None], idx]
    rev = a[:, ::-1]
    idx = np.where(~np.isnan(rev), np.arange(t), 0)
    np.maximum.accumulate(idx, axis=1, out=idx)
    a = rev[np.arange(v)[:, None], idx][:, ::-1]
    return np.nan_to_num(a, nan=0.0)


def _progress(enabled: bool | None):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    if enabled is None:
        enabled = sys.stderr.isatty()
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn(), console=console, disable=not enabled, transient=True)


def _build(folder: Path, files: list[Path], step_s: int, progress: bool | None) -> VmProfiles:
    vms = []
    with _progress(progress) as bar:
        task = bar.add_task(f"parsing {folder.name}", total=len(files))
        for f in files:
            fr = load_vm(f).frame
            vms.append((f.name[: -len(".csv.gz")], {c: fr[c].to_numpy() for c in fr.columns}))
            bar.advance(task)

    report = SkipReport(path=folder, total_rows=len(files), unit="VMs")
    t_all = [d["t_s"] for _, d in vms if len(d["t_s"])]
    if not t_all:
        raise ValueError(f"no samples in {folder}")
    t_min = min(int(t.min()) for t in t_all)
    t_max = max(int(t.max()) for t in t_all)
    start = t_min // step_s * step_s
    n_slots = (t_max - start) // step_s + 1

    # Drop VMs that are mostly not running; keep only the running samples of the others.
    cand = []
    for vm_id, d in vms:
        if len(d["cores"]) == 0 or np.median(d["cores"]) == 0:
            report.add("with 0 cores")
            continue
        on = d["cores"] > 0
        cand.append((vm_id, {k: v[on] for k, v in d.items()}))

    n = len(cand)
    vm_of = np.concatenate([np.full(len(d["t_s"]), i, np.int64) for i, (_, d) in enumerate(cand)]) if n else np.zeros(0, np.int64)
    col = {k: np.concatenate([d[k] for _, d in cand]) if n else np.zeros(0) for k in
           ("t_s", "cpu_pct", "mem_prov_kb", "mem_used_kb", "disk_kbps", "net_kbps")}
    slot = (col["t_s"] - start) // step_s
    flat = vm_of * n_slots + slot
    counts = np.bincount(flat, minlength=n * n_slots).reshape(n, n_slots)
    coverage = (counts > 0).mean(axis=1) if n else np.zeros(0)
    keep = coverage >= MIN_COVERAGE
    report.add("covering < 50% of the grid", int((~keep).sum()))

    # Re-index the rows of kept VMs to 0..V-1 and average the samples of each slot.
    new_id = np.cumsum(keep) - 1
    rows = keep[vm_of]
    v_kept = int(keep.sum())
    flat = new_id[vm_of[rows]] * n_slots + slot[rows]
    size = v_kept * n_slots

    def slot_mean(x: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        w = np.ones(len(x)) if valid is None else valid.astype(np.float64)
        x = np.where(w > 0, x, 0.0)
        num = np.bincount(flat, weights=x * w, minlength=size)
        den = np.bincount(flat, weights=w, minlength=size)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (num / den).reshape(v_kept, n_slots)

    prov = col["mem_prov_kb"][rows]
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = col["mem_used_kb"][rows] / prov
    arrays = {
        "cpu_pct": np.clip(_fill(slot_mean(col["cpu_pct"][rows])), 0.0, 100.0),
        "mem_frac": np.clip(_fill(slot_mean(frac, prov > 0)), 0.0, 1.0),
        "disk_kbps": _fill(slot_mean(col["disk_kbps"][rows])),
        "net_kbps": _fill(slot_mean(col["net_kbps"][rows])),
    }
    kept = [d for (_, d), k in zip(cand, keep) if k]
    cores = np.array([np.median(d["cores"]) for d in kept], dtype=np.float32)
    mem_prov = np.array([np.median(d["mem_prov_kb"]) for d in kept], dtype=np.float32)
    return VmProfiles(
        vm_ids=tuple(vm_id for (vm_id, _), k in zip(cand, keep) if k),
        start_s=int(start),
        step_s=int(step_s),
        **{k: _readonly(v.astype(np.float32)) for k, v in arrays.items()},
        cores=_readonly(cores),
        mem_prov_kb=_readonly(mem_prov),
        skipped=report,
        folder=folder,
    )


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _save(p: VmProfiles, target: Path, key: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-" + target.stem, suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(
                fh,
                key=np.array(key),
                vm_ids=np.array(p.vm_ids, dtype=np.str_),
                start_s=np.int64(p.start_s),
                step_s=np.int64(p.step_s),
                skipped=np.array(json.dumps({"total": p.skipped.total_rows, "skipped": p.skipped.skipped})),
                cores=p.cores,
                mem_prov_kb=p.mem_prov_kb,
                **{k: getattr(p, k) for k in _ARRAYS},
            )
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load(target: Path, key: str, folder: Path, step_s: int) -> VmProfiles:
    """Read a cache file; raises on anything unexpected (the caller then rebuilds)."""
    with open(target, "rb") as fh, np.load(fh, allow_pickle=False) as z:
        if str(z["key"]) != key or int(z["step_s"]) != step_s:
            raise ValueError("cache key mismatch")
        arrays = {k: np.asarray(z[k]) for k in _ARRAYS}
        vm_ids = tuple(str(v) for v in z["vm_ids"])
        meta = json.loads(str(z["skipped"]))
        cores, mem_prov = np.asarray(z["cores"]), np.asarray(z["mem_prov_kb"])
        start_s = int(z["start_s"])
    shapes = {a.shape for a in arrays.values()}
    if len(shapes) != 1:
        raise ValueError(f"inconsistent shapes {shapes}")
    (shape,) = shapes
    if len(shape) != 2 or shape[0] != len(vm_ids) or cores.shape != (shape[0],) or mem_prov.shape != (shape[0],):
        raise ValueError("shape does not match vm_ids")
    if any(a.dtype != np.float32 for a in arrays.values()) or not all(np.isfinite(a).all() for a in arrays.values()):
        raise ValueError("bad array dtype or values")
    report = SkipReport(path=folder, skipped={str(k): int(v) for k, v in meta["skipped"].items()},
                        total_rows=int(meta["total"]), unit="VMs")
    return VmProfiles(vm_ids=vm_ids, start_s=start_s, step_s=step_s,
                      **{k: _readonly(v) for k, v in arrays.items()},
                      cores=_readonly(cores), mem_prov_kb=_readonly(mem_prov), skipped=report, folder=folder)


def load_profiles(
    folder: str | Path | None = None,
    *,
    cache_dir: str | Path | None = None,
    step_s: int = 300,
    progress: bool | None = None,
) -> VmProfiles:
    """Per-VM usage of every Bitbrains VM on a common ``step_s`` grid covering the whole month.

    Every file is validated by :func:`load_vm` (strict). The grid runs from the earliest timestamp of
    all files (floored to ``step_s``) to the latest. Samples reporting 0 cores (VM not running) are
    ignored; every other sample goes to slot ``floor((t - start_s) / step_s)``, samples sharing a slot
    are averaged, and empty slots are forward-filled, then back-filled. A VM is dropped when its
    median sample reports 0 cores, or when its running samples fill less than 50% of the slots; the
    counts are in ``.skipped``. cpu_pct is clipped to 0..100 and mem_frac (used / provisioned, over
    samples with memory provisioned) to 0..1.

    The result is cached in ``cache_dir`` (default :func:`default_cache_dir`) as an .npz keyed by a
    hash of the file names, sizes and mtimes and ``step_s``; the file is written atomically, and an
    unreadable or inconsistent cache file is rebuilt. A cache directory that cannot be written only
    costs the caching. ``progress`` shows a rich progress bar on stderr while parsing (default: when
    stderr is a terminal).
    """
    if step_s <= 0 or int(step_s) != step_s:
        raise ValueError(f"step_s must be a positive integer, got {step_s!r}")
    step_s = int(step_s)
    folder = Path(folder) if folder is not None else traces_dir() / BITBRAINS_DIR
    files = _vm_files(folder)
    key = _cache_key(files, step_s)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache / f"bitbrains-profiles-{key[:24]}.npz"
    if target.exists():
        try:
            return _load(target, key, folder, step_s)
        except Exception as exc:  # any damage: rebuild rather than trust it
            log.warning("rebuilding unreadable profile cache %s (%s: %s)", target, type(exc).__name__, exc)
    profiles = _build(folder, files, step_s, progress)
    try:
        _save(profiles, target, key)
    except OSError as exc:
        log.warning("could not write profile cache %s: %s", target, exc)
    return profiles
