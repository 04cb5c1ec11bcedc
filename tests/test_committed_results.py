"""Committed results (docs/results/): each report comes from one clean code version and says which.

A report states its code version (``report.md``'s Setup table, ``summary.md``'s "Code version"
line, a study README's table); more than one version, or a ``.dirty`` one (uncommitted changes: no
commit reproduces it), breaks the rule. The reports that predate the rule are listed in LEGACY with
what is wrong with them: rerunning one clears it from the list, and this test then asks for that.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from td3sched.version import is_clean

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
VERSION = re.compile(r"`(\d+\.\d+\.\d+(?:\+[0-9a-f]{12}(?:\.dirty(?:\.[0-9a-f]{8})?)?)?)`")
STATED = re.compile(r"code version", re.IGNORECASE)

LEGACY = {  # report -> what breaks the rule; docs/results/README.md says the same
    "dlrm-test/report.md": "4 code versions, each .dirty",
    "overestimation/README.md": "a .dirty version",
}


def _reports() -> list[Path]:
    if not RESULTS.is_dir():
        return []
    return sorted(p for p in RESULTS.rglob("*.md")
                  if p.name in ("report.md", "summary.md") or (p.name == "README.md" and p.parent != RESULTS))


def stated_versions(text: str) -> list[str]:
    """The versions a report states on its code-version lines."""
    return [v for line in text.splitlines() if STATED.search(line) for v in VERSION.findall(line)]


def _breaks(path: Path) -> str | None:
    versions = stated_versions(path.read_text(encoding="utf-8"))
    if not versions:
        # evaluate's summary.md sits beside its report.md, which states the version; reproduce's
        # summary.md is the report itself
        alone = path.name == "summary.md" and not (path.parent / "report.md").exists()
        return "states no code version" if path.name == "report.md" or alone else None
    if len(set(versions)) > 1:
        return f"{len(set(versions))} code versions: {', '.join(sorted(set(versions)))}"
    return None if is_clean(versions[0]) else f"a .dirty version: {versions[0]}"


@pytest.mark.skipif(not _reports(), reason="no docs/results in this tree (an installed package)")
def test_every_committed_report_comes_from_one_clean_code_version():
    broken = {p.relative_to(RESULTS).as_posix(): why for p in _reports() if (why := _breaks(p))}
    new = {name: why for name, why in broken.items() if name not in LEGACY}
    assert not new, f"reports that mix code versions or ran on uncommitted code: {new}"
    fixed = sorted(set(LEGACY) - set(broken))
    assert not fixed, f"{fixed} now follow the rule: take them out of LEGACY and docs/results/README.md"
    readme = (RESULTS / "README.md").read_text(encoding="utf-8")
    assert all(f"`{name.split('/')[0]}`" in readme for name in LEGACY)


def test_the_check_reads_every_kind_of_report():
    assert stated_versions("| code version | `0.1.0+0123456789ab` |") == ["0.1.0+0123456789ab"]
    assert stated_versions("Code version: `0.1.0+0123456789ab.dirty.0a1b2c3d`  ") == ["0.1.0+0123456789ab.dirty.0a1b2c3d"]
    assert stated_versions("| code version | `0.1.0+0123456789ab.dirty`, `0.1.0+ba9876543210` |") == \
        ["0.1.0+0123456789ab.dirty", "0.1.0+ba9876543210"]
    assert stated_versions("| policies | `0.1.0+0123456789ab` |") == []
