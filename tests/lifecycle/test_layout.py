"""The lifecycle sits above what it uses: no module outside ``lifecycle/`` imports it, except the command
line (the top floor)."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "td3sched"


def test_nothing_below_the_lifecycle_imports_it():
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "lifecycle" or rel.as_posix() == "cli.py":
            continue
        if re.search(r"^\s*(from|import)\s+td3sched\.lifecycle", path.read_text(encoding="utf-8"), re.M):
            offenders.append(rel.as_posix())
    assert not offenders, offenders
