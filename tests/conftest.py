"""Fixtures shared by every test folder."""

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
