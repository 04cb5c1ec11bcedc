"""Workload columns, merging, Poisson streams and the workload files of the tiny scenario."""

from __future__ import annotations

import dataclasses
import gzip
import math
import shutil
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from td3sched.scenario import SCENARIO_DIR
from td3sched.trace.errors import TraceError
from td3sched.workload.files import COLUMNS, load_workload, save_workload
from td3sched.workload.pods import PodNames, Workload
from td3sched.workload.stream import poisson_stream

from tests.simulator.worlds import INF, P, profiles_from, workload

TINY = SCENARIO_DIR / "tiny"


# --- Workload validation ---------------------------------------------------------------------------

def _three():
    return workload([P("a", t=0, cpu=100), P("b", t=5, cpu=200, app="db"), P("c", t=9, mem=64, pool="cpu")])


def test_valid_workload_and_select():
    w = _three()
    assert len(w) == 3
    sub = w.select(np.array([True, False, True]))
    assert sub.name.tolist() == ["a", "c"] and sub.app_names == w.app_names and sub.request[1, 1] == 64


def test_unsorted_arrivals_are_refused():
    w = _three()
    with pytest.raises(ValueError, match="arrival_s"):
        dataclasses.replace(w, arrival_s=np.array([0.0, 9.0, 5.0]))


def test_negative_request_is_refused_naming_the_pod():
    w = _three()
    request = w.request.copy()
    request[1, 0] = -1.0
    with pytest.raises(ValueError, match=r"'b'.*negative request"):
        dataclasses.replace(w, request=request)


@pytest.mark.parametrize("field", ["duration_s", "request", "cpu_limit_milli", "gpu_count", "qos", "app", "pool",
                                   "size_net_mbps", "profile", "name"])
def test_mismatched_lengths_are_refused_naming_the_field(field):
    w = _three()
    value = getattr(w, field)[:2]
    with pytest.raises(ValueError, match=rf"'{field}' has 2 entries, expected 3"):
        dataclasses.replace(w, **{field: value})


def test_concat_remaps_apps_and_pools_and_sorts_by_arrival():
    one = workload([P("a0", t=0, app="web", pool="cpu"), P("a1", t=20, app="db"), P("a2", t=40, app="web")],
                   pool_names=("cpu",))
    two = workload([P("b0", t=10, app="db", pool="gpu"), P("b1", t=20, app="ml", pool="cpu"),
                    P("b2", t=30, app="ml")], pool_names=("gpu", "cpu"))
    assert one.app_names == ("web", "db") and two.app_names == ("db", "ml")
    assert two.pool_names == ("gpu", "cpu")
    both = Workload.concat([one, two])
    assert both.app_names == ("web", "db", "ml")
    assert both.pool_names == ("cpu", "gpu")
    # stable by arrival: a1 and b1 both arrive at 20, a1 (first part) first
    assert both.name.tolist() == ["a0", "b0", "a1", "b1", "b2", "a2"]
    apps = [both.app_names[i] for i in both.app]
    assert apps == ["web", "db", "db", "ml", "ml", "web"]
    pools = [both.pool_names[i] if i >= 0 else None for i in both.pool]
    assert pools == ["cpu", "gpu", None, "cpu", None, None]
    np.testing.assert_array_equal(both.arrival_s, [0, 10, 20, 20, 30, 40])


def test_pod_names_read_as_the_strings_they_stand_for():
    stream = PodNames.numbered("batch-", 12)
    given = PodNames.of(["web-1", "batch-3", "db"])
    both = PodNames.concatenate([stream, given])
    strings = [f"batch-{i}" for i in range(12)] + ["web-1", "batch-3", "db"]
    assert both.tolist() == strings and len(both) == 15 and both[12] == "web-1" and isinstance(both[0], str)
    assert np.asarray(both).tolist() == strings and np.asarray(both).dtype.kind == "U"
    # a name is found whichever way it was made, and only where it is whole
    np.testing.assert_array_equal(np.flatnonzero(both == "batch-3"), [3, 13])
    for absent in ("batch-", "batch-03", "batch-12", "batch-3x", "web-", "d"):
        assert not (both == absent).any(), absent
    order = np.array([14, 0, 13, 7])
    assert both[order].tolist() == [strings[i] for i in order]
    assert both[np.arange(15) % 2 == 0].tolist() == strings[::2] and both[3:5].tolist() == strings[3:5]
    assert (both != "db").sum() == 14


def test_generated_names_survive_a_merge_and_a_selection():
    one = dataclasses.replace(workload([P("x", t=0), P("x", t=20), P("x", t=40)]), name=PodNames.numbered("a", 3))
    two = dataclasses.replace(workload([P("y", t=10), P("y", t=30)]), name=PodNames.numbered("b", 2))
    both = Workload.concat([one, two])
    assert both.name.tolist() == ["a0", "b0", "a1", "b1", "a2"]
    assert both.select(both.arrival_s >= 20).name.tolist() == ["a1", "b1", "a2"]
    with pytest.raises(ValueError, match="'name' has 2 entries, expected 3"):
        dataclasses.replace(one, name=PodNames.numbered("a", 2))


# --- Poisson streams -------------------------------------------------------------------------------

LIFE = np.array([100.0, 300.0, 600.0])


def test_poisson_stream_mean_count_and_sorted_arrivals():
    rate, duration = 2.0, 50_000.0
    rows, t, life = poisson_stream(np.random.default_rng(1), rate, duration, LIFE, prefill=False)
    mean = rate * duration                  # 100,000 arrivals expected, sd sqrt(100,000) = 316
    assert abs(len(t) - mean) < 5 * math.sqrt(mean)
    assert np.all(np.diff(t) >= 0) and t.min() >= 0 and t.max() < duration
    np.testing.assert_array_equal(life, LIFE[rows])
    # rows uniform: each ~ 1/3
    share = np.bincount(rows, minlength=3) / len(rows)
    assert np.all(np.abs(share - 1 / 3) < 5 * math.sqrt(1 / 3 * 2 / 3 / len(rows)))


def test_poisson_stream_with_modulation_keeps_the_mean_rate():
    rate, duration = 1.0, 60_000.0          # 100 periods of the two-slot 600 s modulation
    mod = np.array([0.5, 1.5])
    _, t, _ = poisson_stream(np.random.default_rng(2), rate, duration, LIFE, modulation=mod,
                             modulation_step_s=300.0, prefill=False)
    assert abs(len(t) - rate * duration) < 5 * math.sqrt(rate * duration)
    # thinning: the busy slot gets 1.5 / (0.5 + 1.5) = 3/4 of the arrivals
    busy = ((t // 300).astype(int) % 2 == 1).mean()
    assert abs(busy - 0.75) < 5 * math.sqrt(0.75 * 0.25 / len(t))


def test_poisson_stream_prefill_is_length_biased_with_residual_lifetimes():
    rate, duration = 2.0, 1000.0
    n0_total, rows0_all, seeds = 0, [], range(20)
    for seed in seeds:
        rows, t, life = poisson_stream(np.random.default_rng(seed), rate, duration, LIFE, prefill=True)
        pre = t == 0.0
        n0_total += pre.sum()
        rows0_all.append(rows[pre])
        # residuals are shorter than the lifetimes they were drawn from
        assert np.all(life[pre] < LIFE[rows[pre]]) and np.all(life[pre] >= 0)
        np.testing.assert_array_equal(life[~pre], LIFE[rows[~pre]])
    # Poisson(rate x E[lifetime]) alive at t = 0: 2 x 1000/3 = 666.7 per run
    expected = rate * LIFE.mean() * len(seeds)
    assert abs(n0_total - expected) < 5 * math.sqrt(expected)
    rows0 = np.concatenate(rows0_all)
    # drawn in proportion to lifetime: 100/1000, 300/1000, 600/1000
    share = np.bincount(rows0, minlength=3) / len(rows0)
    p = LIFE / LIFE.sum()
    assert np.all(np.abs(share - p) < 5 * np.sqrt(p * (1 - p) / len(rows0)))


def test_poisson_stream_residuals_are_uniform():
    rows, t, life = poisson_stream(np.random.default_rng(5), 5.0, 10.0, LIFE, prefill=True)
    pre = t == 0.0
    frac = life[pre] / LIFE[rows[pre]]
    n = pre.sum()                           # ~ 5 x 333 = 1667
    assert abs(frac.mean() - 0.5) < 5 * math.sqrt(1 / 12 / n)


@pytest.mark.parametrize("kwargs,match", [
    (dict(rate_per_s=-1.0), "rate"),
    (dict(rate_per_s=float("nan")), "rate"),
    (dict(lifetime_s=np.array([])), "empty"),
    (dict(modulation=np.array([0.5, 0.5])), "mean 1"),
    (dict(modulation=np.array([-1.0, 3.0])), "non-negative"),
])
def test_poisson_stream_refuses_bad_arguments(kwargs, match):
    args = dict(rate_per_s=1.0, duration_s=10.0, lifetime_s=LIFE)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        poisson_stream(np.random.default_rng(0), **args)


# --- workload files --------------------------------------------------------------------------------

def _copy_tiny(tmp_path: Path, edit) -> Path:
    """A copy of the tiny files with ``edit(lines)`` applied to pods.csv.gz's text lines."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    shutil.copy(TINY / "profiles.npz", folder / "profiles.npz")
    with gzip.open(TINY / "pods.csv.gz", "rt") as f:
        lines = f.read().splitlines()
    edit(lines)
    with gzip.open(folder / "pods.csv.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    return folder


def _set_cell(column: str, row: int, value: str):
    """Edit data row ``row`` (1-based; file line row + 1)."""
    def edit(lines):
        header = lines[0].split(",")
        cells = lines[row].split(",")
        cells[header.index(column)] = value
        lines[row] = ",".join(cells)
    return edit


def test_tiny_files_load():
    w, prof = load_workload(TINY)
    assert len(w) > 0 and np.all(np.diff(w.arrival_s) >= 0)
    assert w.profile.max() < prof.count and prof.shape.shape[0] == 4


@pytest.mark.parametrize("column,value,expected", [
    ("request_mem_mib", "abc", "a non-negative number"),
    ("request_cpu_milli", "", "a non-negative number"),
    ("gpu_count", "two", "a non-negative integer"),
    ("request_cpu_milli", "-5", "a non-negative number"),
    ("duration_s", "-inf", "a non-negative number or empty"),
    ("qos", "7", "an integer in [0, 2]"),
    ("gpu_count", "1.5", "a non-negative integer"),
    ("gpu_milli", "1001", "an integer in [0, 1000]"),
    ("max_per_node", "-2", "an integer >= -1"),
    ("name", "", "a non-empty value"),
])
def test_bad_cell_names_file_line_column_value_and_expectation(tmp_path, column, value, expected):
    folder = _copy_tiny(tmp_path, _set_cell(column, 5, value))
    with pytest.raises(TraceError) as exc:
        load_workload(folder)
    e = exc.value
    assert (e.path.name, e.line, e.column) == ("pods.csv.gz", 6, column)   # header is line 1
    assert str(e) == f"pods.csv.gz line 6, column '{column}': got {value!r}, expected {expected}"


def test_na_spelling_is_a_missing_cell(tmp_path):
    # "nan" counts as an empty cell (trace/table.py), and arrival_s may not be empty
    folder = _copy_tiny(tmp_path, _set_cell("arrival_s", 5, "nan"))
    with pytest.raises(TraceError, match=r"pods.csv.gz line 6, column 'arrival_s'"):
        load_workload(folder)


def test_profile_row_out_of_range_names_file_line_and_column(tmp_path):
    folder = _copy_tiny(tmp_path, _set_cell("profile", 7, "99999"))
    with pytest.raises(TraceError, match=r"pods.csv.gz line 8, column 'profile'.*\[0, \d+\)"):
        load_workload(folder)


def test_profile_row_out_of_range_shows_the_cell_text(tmp_path):
    folder = _copy_tiny(tmp_path, _set_cell("profile", 7, "99999"))
    with pytest.raises(TraceError) as exc:
        load_workload(folder)
    assert "got '99999'" in str(exc.value)


def test_missing_column_is_named(tmp_path):
    def drop_profile(lines):
        for i, line in enumerate(lines):
            lines[i] = line.rsplit(",", 1)[0]
    assert COLUMNS[-1] == "profile"
    folder = _copy_tiny(tmp_path, drop_profile)
    with pytest.raises(TraceError, match=r"pods.csv.gz line 1, column 'profile'"):
        load_workload(folder)


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="pods.csv.gz"):
        load_workload(tmp_path)
    folder = _copy_tiny(tmp_path, lambda lines: None)
    (folder / "profiles.npz").write_bytes(b"not an npz")
    with pytest.raises(ValueError, match="profiles.npz"):
        load_workload(folder)


def test_row_with_an_extra_field_names_the_file_and_line(tmp_path):
    def extra(lines):
        lines[5] += ",9"
    folder = _copy_tiny(tmp_path, extra)
    with pytest.raises(TraceError, match=r"^pods.csv.gz line 6: got 22 fields, expected 21"):
        load_workload(folder)


def test_unsorted_file_is_refused(tmp_path):
    folder = _copy_tiny(tmp_path, _set_cell("arrival_s", 1, "99999"))
    with pytest.raises(ValueError, match="sorted by arrival_s"):
        load_workload(folder)


def test_save_and_load_round_trip_keeps_infinities_and_pools(tmp_path):
    w = workload([P("a", t=0, dur=INF, cpu=100, mem=64, cpu_limit=INF, mem_limit=128, pool="gpu", app="x",
                    cap=2, gpus=1, gpu_milli=500, ls=True, size_cpu=50, size_mem=32, profile=1),
                  P("b", t=5.5, dur=30, app="y")], pool_names=("gpu",))
    prof = profiles_from(np.ones((4, 2, 3)))
    save_workload(tmp_path / "w", w, prof, "header")
    back, prof_back = load_workload(tmp_path / "w")
    assert back.name.tolist() == ["a", "b"]
    np.testing.assert_array_equal(back.duration_s, [INF, 30])
    np.testing.assert_array_equal(back.cpu_limit_milli, [INF, INF])
    np.testing.assert_array_equal(back.mem_limit_mib, [128, INF])
    np.testing.assert_array_equal(back.request, w.request)
    assert [back.pool_names[i] if i >= 0 else None for i in back.pool] == ["gpu", None]
    assert [back.app_names[i] for i in back.app] == ["x", "y"]
    for field in ("arrival_s", "gpu_count", "gpu_milli", "qos", "latency_sensitive", "max_per_node",
                  "size_cpu_milli", "size_mem_mib", "profile"):
        np.testing.assert_array_equal(getattr(back, field), getattr(w, field), err_msg=field)
    assert prof_back.shape.shape == (4, 2, 3) and prof_back.source_ids == prof.source_ids


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.sampled_from([0.5, 1.0, 2.0])), min_size=0, max_size=40))
def test_unique_rows_is_numpy_unique_over_rows(rows):
    from td3sched.workload.pods import unique_rows

    a = np.array(rows, dtype=float).reshape(-1, 3)
    got, inverse = unique_rows(a)
    want, want_inverse = np.unique(a, axis=0, return_inverse=True)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(inverse, want_inverse.reshape(-1))
