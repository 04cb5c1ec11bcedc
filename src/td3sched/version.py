"""The version of the code that runs: the package version, and the commit in a checkout."""

from __future__ import annotations

import subprocess
from functools import lru_cache
from pathlib import Path

from td3sched import __version__


@lru_cache(maxsize=1)
def code_version() -> str:
    """The package version and, when this package's source is a git checkout's tracked file, the
    commit (``.dirty`` with local changes). An installed package inside some other repository (a
    virtualenv in a project folder) reports the version alone."""
    package = Path(__file__).resolve().parent
    git = lambda *args: subprocess.run(["git", "-C", str(package), *args], capture_output=True,  # noqa: E731
                                       text=True, timeout=5, check=True).stdout.strip()
    try:
        git("ls-files", "--error-unmatch", Path(__file__).name)  # raises outside a checkout of this code
        commit = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return f"{__version__}+{commit}{'.dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        return __version__
