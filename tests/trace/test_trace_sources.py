"""``td3sched traces`` and the traces' location: every file td3sched reads is checked by its
published sha256, each dataset says where it comes from and how to get it, and without
``$TD3SCHED_TRACES`` the folder is a documented per-user default, never a path beside the source."""

from __future__ import annotations

import gzip
import os

from typer.testing import CliRunner

from td3sched.cli import app
from td3sched.trace.location import ENV_VAR, traces_dir
from td3sched.trace.sources import DATASETS, check_traces, expected_files

runner = CliRunner()


def test_every_expected_file_belongs_to_a_described_dataset():
    folders = {d.folder for d in DATASETS}
    files = expected_files()
    assert len(files) > 500 and {name.split("/", 1)[0] for name in files} == folders
    for d in DATASETS:
        assert d.source and d.licence and d.how_to_get and d.used_by


def test_the_shared_traces_check(traces):
    assert all(c.status == "ok" for c in check_traces(traces)), [
        (c.dataset.folder, c.missing[:2], c.differs[:2]) for c in check_traces(traces) if c.status != "ok"]
    result = runner.invoke(app, ["traces", "--no-progress"], env={ENV_VAR: str(traces)})
    assert result.exit_code == 0, result.output
    assert "500/500" in result.output and "missing" not in result.output


def test_a_missing_an_edited_and_a_recompressed_file(traces, tmp_path):
    """A copy of the traces with one file gone, one byte changed in another, and a Bitbrains file
    gzip-compressed again by hand (another gzip header, the same content): that one still checks."""
    names = sorted(expected_files())
    gone, edited = "alibaba-gpu-v2025/disaggregated_DLRM_trace.csv", "alibaba-gpu-v2023/openb_pod_list_default.csv"
    regz = next(n for n in names if n.endswith(".csv.gz"))
    for name in names:
        dst = tmp_path / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if name == gone:
            continue
        if name == edited:
            data = bytearray((traces / name).read_bytes())
            data[-2] ^= 1
            dst.write_bytes(bytes(data))
        elif name == regz:
            dst.write_bytes(gzip.compress(gzip.decompress((traces / name).read_bytes()), mtime=12345))
            assert dst.read_bytes() != (traces / name).read_bytes()
        else:
            os.symlink(traces / name, dst)
    status = {c.dataset.folder: c for c in check_traces(tmp_path)}
    assert status["alibaba-gpu-v2025"].status == "missing" and status["alibaba-gpu-v2023"].differs == [edited]
    assert status["bitbrains-rnd"].status == "ok"
    result = runner.invoke(app, ["traces", "--no-progress"], env={ENV_VAR: str(tmp_path)})
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert f"differs: {edited}" in text and "to get it: copy disaggregated_DLRM_trace.csv" in text


def test_without_traces_every_dataset_says_where_it_comes_from(tmp_path):
    result = runner.invoke(app, ["traces", "--no-progress"], env={ENV_VAR: str(tmp_path / "none")})
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    for d in DATASETS:
        assert f"{d.folder}/: {d.title}" in text and d.licence in text
    assert "github.com/alibaba/clusterdata" in text


def test_the_default_folder_is_per_user_and_named_when_missing(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert traces_dir(must_exist=False) == tmp_path / "td3sched" / "traces"
    try:
        traces_dir()
    except FileNotFoundError as exc:
        assert ENV_VAR in str(exc) and "td3sched traces" in str(exc) and str(tmp_path) in str(exc)
    else:
        raise AssertionError("a missing default folder must fail")
    (tmp_path / "td3sched" / "traces").mkdir(parents=True)
    assert traces_dir() == tmp_path / "td3sched" / "traces"
