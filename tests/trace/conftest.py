"""Fixtures for the trace-layer tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from td3sched.trace.location import traces_dir


@pytest.fixture(scope="session")
def traces() -> Path:
    """The shared production-trace folder; skips the test when it is not available."""
    try:
        return traces_dir()
    except FileNotFoundError as exc:
        pytest.skip(f"real traces not available ({exc})")


@pytest.fixture
def write(tmp_path):
    """write(name, text) -> path of a file with that text in tmp_path."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return _write
