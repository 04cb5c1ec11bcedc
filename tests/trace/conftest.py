"""Fixtures for the trace-layer tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def write(tmp_path):
    """write(name, text) -> path of a file with that text in tmp_path."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return _write
