"""``run_all`` with a ``keep`` folder: each result is written the moment its job finishes and read back
instead of running the job again, in the parent as in a pool's workers; a job's key names the function
and the job."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from td3sched.processes import kept_path, optional_pool, run_all


def record(job):
    """A job's result, and a line in the job's log file for each time it ran."""
    log, value = job
    with open(log, "a") as f:
        f.write(f"{value}\n")
    return {"value": value, "square": value * value, "pid": os.getpid()}


def other(job):
    return record(job)


@pytest.mark.parametrize("workers", [1, 2])
def test_kept_results_are_read_back_and_only_missing_jobs_run(tmp_path, workers):
    log = tmp_path / "ran.txt"
    jobs = [(log, v) for v in (3, 1, 2)]
    keep = tmp_path / "kept"
    seen = []
    with optional_pool(workers) as pool:
        first = run_all(record, jobs, pool, done=lambda i, r: seen.append(i), keep=keep)
    assert [r["value"] for r in first] == [3, 1, 2] and sorted(seen) == [0, 1, 2]
    assert sorted(p.name for p in keep.iterdir()) == sorted(kept_path(keep, record, j).name for j in jobs)
    assert json.loads(kept_path(keep, record, jobs[1]).read_text()) == first[1]
    kept_path(keep, record, jobs[2]).unlink()  # as if interrupted before the last job finished
    with optional_pool(workers) as pool:
        again = run_all(record, jobs, pool, keep=keep)
    assert again == first[:2] + [again[2]] and again[2]["value"] == 2
    assert sorted(int(x) for x in log.read_text().split()) == [1, 2, 2, 3]  # only job 2 ran again
    # another function of the same job is another result
    assert run_all(other, jobs[:1], keep=keep)[0]["value"] == 3
    assert sorted(int(x) for x in log.read_text().split()) == [1, 2, 2, 3, 3]
    # without keep, every job runs
    run_all(record, jobs)
    assert len(log.read_text().split()) == 8


def test_a_job_with_a_path_is_keyed_as_its_text(tmp_path):
    assert kept_path(tmp_path, record, (Path("a/b"), 1)) == kept_path(tmp_path, record, ("a/b", 1))
    assert kept_path(tmp_path, record, ("a/b", 1)) != kept_path(tmp_path, record, ("a/b", 2))
