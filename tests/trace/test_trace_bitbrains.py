"""Bitbrains loader tests. Synthetic files follow the GWA-T-12 Bitbrains format (acknowledgement:
Bitbrains IT Services Inc.; Shen, van Beek, Iosup, CCGrid 2015)."""

import gzip
import logging
import os

import numpy as np
import pytest

from td3sched.trace import TraceError, VmProfiles, load_profiles, load_vm
from td3sched.trace import bitbrains
from td3sched.trace.bitbrains import BITBRAINS_DIR, default_cache_dir

HEADER = [
    "Timestamp [ms]", "CPU cores", "CPU capacity provisioned [MHZ]", "CPU usage [MHZ]", "CPU usage [%]",
    "Memory capacity provisioned [KB]", "Memory usage [KB]", "Disk read throughput [KB/s]",
    "Disk write throughput [KB/s]", "Network received throughput [KB/s]", "Network transmitted throughput [KB/s]",
]
T0 = 1_372_629_804  # first timestamp of the real month; the grid starts at T0 floored to 300 s
START = T0 // 300 * 300


def write_vm(folder, name, rows):
    """rows: (t, cores, cpu_pct, mem_prov, mem_used, disk_r, disk_w, net_rx, net_tx)."""
    lines = [";\t".join(HEADER)]
    for t, cores, cpu, prov, used, dr, dw, rx, tx in rows:
        cells = [t, cores, 2600.0 * cores, cpu * 26.0 * cores, cpu, prov, used, dr, dw, rx, tx]
        lines.append(";\t".join(str(c) for c in cells))
    path = folder / f"{name}.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


@pytest.fixture
def vm_folder(tmp_path):
    folder = tmp_path / "vms"
    folder.mkdir()
    n = 20  # grid: 20 slots of 300 s
    # VM 1: every slot but 5 and 6 (gaps), a duplicate sample in slot 2, cpu above 100 in slot 9.
    rows1 = [(T0 + 300 * i, 2, 150.0 if i == 9 else 10.0 + i, 1000.0, 1500.0 if i == 9 else 250.0, 1.0, 2.0, 3.0, 4.0)
             for i in range(n) if i not in (5, 6)]
    rows1.append((T0 + 300 * 2 + 10, 2, 30.0, 1000.0, 750.0, 1.0, 2.0, 3.0, 4.0))
    write_vm(folder, "1", rows1)
    # VM 2: 0 cores throughout -> dropped.
    write_vm(folder, "2", [(T0 + 300 * i, 0, 0.0, 0.0, 0.0, 0, 0, 0, 0) for i in range(n)])
    # VM 3: starts at slot 8 (covers 60%), one interleaved 0-core record; ends one second after VM 1.
    rows3 = [(T0 + 300 * i, 4, 50.0, 2000.0, 1000.0, 0.0, 0.0, 0.0, 0.0) for i in range(8, n)]
    rows3.append((T0 + 300 * 12 + 5, 0, 0.0, 0.0, 0.0, 0, 0, 0, 0))
    rows3.append((T0 + 300 * (n - 1) + 1, 4, 50.0, 2000.0, 1000.0, 0.0, 0.0, 0.0, 0.0))
    write_vm(folder, "3", rows3)
    # VM 10: only 5 slots (25%) -> dropped for coverage.
    write_vm(folder, "10", [(T0 + 300 * i, 1, 5.0, 100.0, 10.0, 0, 0, 0, 0) for i in range(5)])
    return folder


def test_load_vm_synthetic(vm_folder):
    f = load_vm(vm_folder / "1.csv.gz").frame
    assert list(f.columns) == ["t_s", "cores", "cpu_pct", "mem_prov_kb", "mem_used_kb", "disk_kbps", "net_kbps"]
    assert f["t_s"].is_monotonic_increasing and f["t_s"].dtype == np.int64
    assert (f["disk_kbps"] == 3.0).all() and (f["net_kbps"] == 7.0).all()


def test_load_vm_malformed(tmp_path):
    rows = [(T0, 2, 1.0, 10.0, 5.0, 0, 0, 0, 0), (T0 + 300, 2, -1.0, 10.0, 5.0, 0, 0, 0, 0)]
    path = write_vm(tmp_path, "7", rows)
    with pytest.raises(TraceError) as exc:
        load_vm(path)
    assert str(exc.value) == "7.csv.gz line 3, column 'CPU usage [%]': got '-1', expected a non-negative number"
    assert load_vm(path, lenient=True).skipped.skipped == {"negative CPU usage [%]": 1}


def test_profiles_grid(vm_folder, tmp_path):
    p = load_profiles(vm_folder, cache_dir=tmp_path / "cache")
    assert isinstance(p, VmProfiles)
    assert p.vm_ids == ("1", "3")
    assert p.start_s == START and p.step_s == 300
    n_slots = (T0 + 300 * 19 + 1 - START) // 300 + 1
    for name in ("cpu_pct", "mem_frac", "disk_kbps", "net_kbps"):
        a = getattr(p, name)
        assert a.shape == (2, n_slots) and a.dtype == np.float32 and not a.flags.writeable
    cpu = p.cpu_pct[0]
    assert cpu[0] == 10.0 and cpu[1] == 11.0
    assert cpu[2] == pytest.approx((12.0 + 30.0) / 2)  # two samples in one slot are averaged
    assert cpu[5] == cpu[6] == cpu[4] == 14.0  # gap forward-filled
    assert cpu[9] == 100.0  # clipped
    assert p.mem_frac[0, 0] == 0.25 and p.mem_frac[0, 2] == pytest.approx(0.5) and p.mem_frac[0, 9] == 1.0
    assert (p.cpu_pct[1, :8] == 50.0).all()  # leading gap back-filled
    assert (p.disk_kbps[0] == 3.0).all() and (p.net_kbps[0] == 7.0).all()
    assert list(p.cores) == [2.0, 4.0] and list(p.mem_prov_kb) == [1000.0, 2000.0]
    assert p.times_s[0] == START and p.n_vms == 2 and p.n_slots == n_slots
    assert p.skipped.skipped == {"with 0 cores": 1, "covering < 50% of the grid": 1}
    assert p.skipped.summary() == "skipped 2 of 4 VMs of vms: 1 covering < 50% of the grid, 1 with 0 cores"


def test_profiles_cache_round_trip(vm_folder, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = load_profiles(vm_folder, cache_dir=cache)
    files = list(cache.iterdir())
    assert len(files) == 1 and files[0].suffix == ".npz"

    def no_parsing(*args, **kwargs):
        raise AssertionError("should have been served from the cache")

    monkeypatch.setattr(bitbrains, "_build", no_parsing)
    second = load_profiles(vm_folder, cache_dir=cache)
    assert second.vm_ids == first.vm_ids and second.start_s == first.start_s
    for name in ("cpu_pct", "mem_frac", "disk_kbps", "net_kbps", "cores", "mem_prov_kb"):
        np.testing.assert_array_equal(getattr(second, name), getattr(first, name))
    assert second.skipped.skipped == first.skipped.skipped and second.skipped.total_rows == 4
    with pytest.raises(AssertionError):  # another step is another key
        load_profiles(vm_folder, cache_dir=cache, step_s=600)


def test_profiles_cache_invalidated_by_changed_file(vm_folder, tmp_path):
    cache = tmp_path / "cache"
    load_profiles(vm_folder, cache_dir=cache)
    os.utime(vm_folder / "3.csv.gz", ns=(1, 1))
    load_profiles(vm_folder, cache_dir=cache)
    assert len(list(cache.iterdir())) == 2


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong shape"])
def test_corrupt_cache_is_rebuilt(vm_folder, tmp_path, caplog, damage):
    cache = tmp_path / "cache"
    good = load_profiles(vm_folder, cache_dir=cache)
    (target,) = cache.iterdir()
    if damage == "garbage":
        target.write_bytes(b"not a zip file at all")
    elif damage == "truncated":
        target.write_bytes(target.read_bytes()[:200])
    else:
        with np.load(target) as z:
            arrays = dict(z)
        arrays["cpu_pct"] = arrays["cpu_pct"][:, :3]
        with open(target, "wb") as fh:
            np.savez(fh, **arrays)
    with caplog.at_level(logging.WARNING, logger="td3sched.trace.bitbrains"):
        again = load_profiles(vm_folder, cache_dir=cache)
    assert "rebuilding" in caplog.text
    np.testing.assert_array_equal(again.cpu_pct, good.cpu_pct)
    with np.load(target) as z:  # the cache file was rewritten, and is whole again
        assert z["cpu_pct"].shape == good.cpu_pct.shape
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp")]


def test_load_vm_real(traces):
    t = load_vm(traces / BITBRAINS_DIR / "1.csv.gz")
    f = t.frame
    assert len(f) > 8_000 and t.skipped.count == 0
    assert f["t_s"].is_monotonic_increasing
    assert 1_372_600_000 < f["t_s"].iloc[0] < 1_372_700_000  # UNIX seconds (2013-06-30), not ms
    assert (f["cores"] > 0).all() and (f["disk_kbps"] >= 0).all()


def test_profiles_real_from_cache(traces):
    """The full 500-VM month, but only when the default cache is already warm (a cold build takes
    several seconds; run ``td3sched.trace.load_profiles()`` once to enable this test)."""
    folder = traces / BITBRAINS_DIR
    key = bitbrains._cache_key(bitbrains._vm_files(folder), 300)
    if not (default_cache_dir() / f"bitbrains-profiles-{key[:24]}.npz").exists():
        pytest.skip("Bitbrains profile cache is cold; run td3sched.trace.load_profiles() once to enable")
    p = load_profiles()
    assert p.skipped.total_rows == 500
    assert p.skipped.skipped["with 0 cores"] == 13
    assert p.cpu_pct.shape == (p.n_vms, p.n_slots) and p.n_slots == 8640
    assert p.cpu_pct.min() >= 0 and p.cpu_pct.max() <= 100
