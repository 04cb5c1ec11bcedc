"""The version of the code that runs: the package version, and the commit in a checkout."""

from __future__ import annotations

import hashlib
import subprocess
from functools import lru_cache
from pathlib import Path

from td3sched import __version__


@lru_cache(maxsize=1)
def code_version() -> str:
    """The package version and, when this package's source is a git checkout's tracked file, the
    commit: ``0.1.0+<12-hex commit>``. Local changes to the package's tracked files (code, scenarios,
    shipped models) add ``.dirty.<8 hex>``, a digest of their diff, so two different sets of
    uncommitted changes are two versions; changes outside the package (docs, results) do not count.
    An installed package inside some other repository (a virtualenv in a project folder) reports
    the version alone."""
    return version_of(Path(__file__).resolve().parent)


def version_of(package: Path, marker: str = Path(__file__).name) -> str:
    """``code_version`` of the package folder ``package``, a checkout's folder holding ``marker``."""
    git = lambda *args: subprocess.run(["git", "-C", str(package), *args], capture_output=True,  # noqa: E731
                                       text=True, timeout=30, check=True).stdout.strip()
    try:
        git("ls-files", "--error-unmatch", marker)  # raises outside a checkout of this code
        commit = git("rev-parse", "--short=12", "HEAD")
        if not git("status", "--porcelain", "--untracked-files=no", "--", "."):
            return f"{__version__}+{commit}"
        diff = git("diff", "--no-ext-diff", "--binary", "HEAD", "--", ".")
        return f"{__version__}+{commit}.dirty.{hashlib.sha256(diff.encode()).hexdigest()[:8]}"
    except (OSError, subprocess.SubprocessError):
        return __version__


def is_clean(version: str) -> bool:
    """Whether ``version`` is code without local changes (a commit, or an installed release)."""
    return version not in ("", "unknown") and ".dirty" not in version
