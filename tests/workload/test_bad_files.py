"""Bad workload files fail loudly, early and by name: a trace with no rows, bytes that are not text,
a truncated gzip and a garbage profiles.npz each exit 2 with one line naming the file and the fault."""

from __future__ import annotations

import gzip
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from td3sched.cli import app
from td3sched.scenario.schema import SCENARIO_DIR
from td3sched.trace.errors import TraceError
from td3sched.trace.table import Column, read_table

runner = CliRunner()
TINY = SCENARIO_DIR / "tiny"


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def tiny_copy(tmp_path):
    folder = tmp_path / "w"
    shutil.copytree(TINY, folder)
    return folder


def _simulate(folder):
    result = runner.invoke(app, ["simulate", "--no-progress", "--span", "test", "--set", f"workload.path={folder}"])
    return result, _flat(result.output)


def _header_only(folder):
    with gzip.open(TINY / "pods.csv.gz", "rt") as f:
        header = f.readline()
    with gzip.open(folder / "pods.csv.gz", "wt") as f:
        f.write(header)


def _random_bytes(folder):
    (folder / "pods.csv.gz").write_bytes(np.random.default_rng(1).bytes(4000))


def _truncated(folder):
    (folder / "pods.csv.gz").write_bytes((TINY / "pods.csv.gz").read_bytes()[:20000])


def _not_text(folder):
    with gzip.open(folder / "pods.csv.gz", "wb") as f:
        f.write(np.random.default_rng(2).bytes(4000))


def _garbage_npz(folder):
    (folder / "profiles.npz").write_bytes(np.random.default_rng(3).bytes(3000))


def _truncated_npz(folder):
    (folder / "profiles.npz").write_bytes((TINY / "profiles.npz").read_bytes()[:3000])


def _wrong_npz(folder):
    np.savez(folder / "profiles.npz", step_s=np.array([1.0, 2.0]), shape=np.array(["a"]), source_ids=np.array([1]))


@pytest.mark.parametrize("spoil, file, fault", [
    (_header_only, "pods.csv.gz", "got no rows (only the header), expected at least one data row"),
    (_random_bytes, "pods.csv.gz", "Not a gzipped file"),
    (_truncated, "pods.csv.gz", "EOFError"),
    (_not_text, "pods.csv.gz", "expected a UTF-8 text file"),
    (_garbage_npz, "profiles.npz", "expected a NumPy .npz archive"),
    (_truncated_npz, "profiles.npz", "expected a NumPy .npz archive"),
    (_wrong_npz, "profiles.npz", "expected a NumPy .npz archive"),
])
def test_bad_workload_file_exits_2_naming_the_file(spoil, file, fault, tiny_copy):
    spoil(tiny_copy)
    result, text = _simulate(tiny_copy)
    assert result.exit_code == 2, result.output
    assert text.startswith("error: ") and file in text and fault in text, text
    assert "Aborted" not in text and "Traceback" not in result.output


def test_a_csv_with_only_its_header_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n")
    with pytest.raises(TraceError, match=r"t.csv line 2: got no rows"):
        read_table(path, [Column("a"), Column("b")])
    with pytest.raises(TraceError, match=r"no rows"):
        read_table(path, [Column("a"), Column("b")], lenient=True)


def test_a_plain_csv_of_random_bytes_names_the_file(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xff\xfe\x91" + np.random.default_rng(4).bytes(200))
    with pytest.raises(TraceError, match=r"^t.csv: got bytes that are not text"):
        read_table(path, [Column("a")])
