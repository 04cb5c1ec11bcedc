"""The production traces td3sched reads: where each comes from, its licence, how to get it, and a
check of every file against the sha256 shipped with the package (``SHA256SUMS`` beside this module,
as published; ``CONTENT-SHA256SUMS``: the decompressed content of the gzip-compressed files, so a
file compressed by hand, whose gzip header differs, still checks). ``td3sched traces`` prints it.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUMS_FILE = HERE / "SHA256SUMS"
CONTENT_SUMS_FILE = HERE / "CONTENT-SHA256SUMS"
CLUSTERDATA = "https://github.com/alibaba/clusterdata/tree/7a6c496e4f4b"


@dataclass(frozen=True)
class Dataset:
    folder: str
    """Folder under the traces folder."""
    title: str
    used_by: str
    source: str
    """Where the files were copied from, byte for byte unless said otherwise."""
    licence: str
    how_to_get: str


DATASETS = (
    Dataset("alibaba-gpu-v2025", "Alibaba DLRM serving cluster (NSDI'25)", "scenario dlrm",
            f"{CLUSTERDATA}/cluster-trace-gpu-v2025 (alibaba/clusterdata @ 7a6c496e4f4b)",
            "published for research or study purposes (alibaba/clusterdata README)",
            "copy disaggregated_DLRM_trace.csv from the source folder into alibaba-gpu-v2025/"),
    Dataset("alibaba-gpu-v2023", "Alibaba openb GPU cluster (FGD, USENIX ATC'23)",
            "scenario openb, td3sched reproduce fgd",
            f"{CLUSTERDATA}/cluster-trace-gpu-v2023/csv (alibaba/clusterdata @ 7a6c496e4f4b)",
            "published for research or study purposes (alibaba/clusterdata README)",
            "copy openb_pod_list_default.csv, openb_node_list_all_node.csv and openb_node_list_gpu_node.csv "
            "from the source folder into alibaba-gpu-v2023/"),
    Dataset("bitbrains-rnd", "Bitbrains Rnd per-VM usage, GWA-T-12 (Shen, van Beek, Iosup, CCGrid 2015)",
            "usage profiles of scenarios dlrm and openb",
            "https://github.com/JessieRayeBauer/Time-Series-Forecasting- @ 0901a0da, rnd/2013-7/ "
            "(the GWA-T-12 Bitbrains Rnd trace, month 2013-7)",
            "acknowledge Bitbrains IT Services Inc.",
            "copy rnd/2013-7/*.csv into bitbrains-rnd/2013-7/ and gzip each file (N.csv.gz)"),
    Dataset("datacenter-aggregates", "Alibaba 2018 whole-cluster load, 300 s bins (Zenodo 10.5281/zenodo.14564847)",
            "scenario openb (daily load shape)",
            "https://github.com/alejandrofdez-us/DataCenter-Traces-Datasets @ 003bb8e7",
            "CC BY 4.0",
            "copy machine_usage_days_1_to_8_grouped_300_seconds.csv from the source into datacenter-aggregates/"),
    Dataset("alibaba-v2018-sample", "Alibaba cluster-trace-v2018, partial (16 machines, 8 days)",
            "trace loaders and their tests only",
            "https://github.com/gohsyi/cluster_optimization @ d147f574, data/",
            "published for research or study purposes (alibaba/clusterdata README)",
            "copy machine_usage.csv and machine_meta.csv from the source folder into alibaba-v2018-sample/"),
)


def _sums(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, name = line.split(None, 1)
            out[name.strip()] = digest
    return out


def expected_files() -> dict[str, str]:
    """Relative path -> sha256 of every trace file td3sched reads."""
    return _sums(SUMS_FILE)


@dataclass
class DatasetCheck:
    dataset: Dataset
    ok: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.differs:
            return "differs"
        if self.missing:
            return "incomplete" if self.ok else "missing"
        return "ok"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_file(path: Path, expected: str, content_expected: str | None) -> bool:
    """True when ``path`` is the published file (or, compressed by hand, holds its content)."""
    data = path.read_bytes()
    if _sha256(data) == expected:
        return True
    if content_expected is not None:
        try:
            return _sha256(gzip.decompress(data)) == content_expected
        except (OSError, EOFError):
            return False
    return False


def check_traces(folder: Path, on_file=None) -> list[DatasetCheck]:
    """Every expected file under ``folder``, by dataset: present and matching, missing, or differing.
    ``on_file(relative_path)`` is called after each file (for a progress bar)."""
    content = _sums(CONTENT_SUMS_FILE)
    checks = {d.folder: DatasetCheck(d) for d in DATASETS}
    for name, digest in sorted(expected_files().items()):
        check = checks[name.split("/", 1)[0]]
        path = folder / name
        if not path.is_file():
            check.missing.append(name)
        elif check_file(path, digest, content.get(name.removesuffix(".gz")) if name.endswith(".gz") else None):
            check.ok.append(name)
        else:
            check.differs.append(name)
        if on_file:
            on_file(name)
    return list(checks.values())
