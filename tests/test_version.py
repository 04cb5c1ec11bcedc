"""The code version: a commit, and a digest of the package's local changes when there are some."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from td3sched import __version__
from td3sched.version import is_clean, version_of

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_local_changes_to_the_package_are_a_version_of_their_own(tmp_path):
    repo = tmp_path / "repo"
    package = repo / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "version.py").write_text("x = 1\n")
    (package / "model.py").write_text("a = 1\n")
    (repo / "README.md").write_text("docs\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "first")
    commit = _git(repo, "rev-parse", "--short=12", "HEAD")

    clean = version_of(package, "version.py")
    assert clean == f"{__version__}+{commit}" and is_clean(clean)
    (repo / "README.md").write_text("docs, edited\n")  # outside the package: still the commit's code
    assert version_of(package, "version.py") == clean
    (package / "model.py").write_text("a = 2\n")
    first = version_of(package, "version.py")
    assert re.fullmatch(rf"{re.escape(__version__)}\+{commit}\.dirty\.[0-9a-f]{{8}}", first) and not is_clean(first)
    assert version_of(package, "version.py") == first  # the same changes, the same version
    (package / "model.py").write_text("a = 3\n")
    second = version_of(package, "version.py")
    assert second.startswith(f"{__version__}+{commit}.dirty.") and second != first
    (package / "model.py").write_text("a = 1\n")  # changes undone
    assert version_of(package, "version.py") == clean


def test_outside_a_checkout_the_version_is_the_package_version(tmp_path):
    (tmp_path / "version.py").write_text("x = 1\n")
    assert version_of(tmp_path, "version.py") == __version__
    assert is_clean(__version__) and not is_clean("unknown")
