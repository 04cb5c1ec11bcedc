"""Output files: checked before a run starts, written whole or not at all.

A command that runs for minutes checks its output paths first (``check_file``, ``check_folder``), so
an unwritable ``--out`` fails at once instead of after the run. Files are written to a temporary file
beside the target and renamed over it (``write_text_atomic``, ``write_json_atomic``,
``atomic_stream``): a reader never sees half a file, and a failed run leaves no partial one. The
permissions are what ``open`` would give, the process umask applied to 0666 (``mkstemp`` alone
makes 0600).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def check_folder(path: Path, option: str, named: Path | None = None) -> None:
    """Check files can be created in the folder ``path``, or in the folders that would be made for it,
    without leaving anything behind; ValueError names ``option`` (e.g. "--out"), the path given
    (``named``, default ``path``) and the reason otherwise."""
    path = Path(path)
    named = path if named is None else named
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        why = "exists and is not a folder" if existing == named else f"cannot write there ({existing} is not a folder)"
        raise ValueError(f"{option} {named}: {why}")
    if existing != path:  # the folder is still to be made: its nearest existing parent must take it
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ValueError(f"{option} {named}: cannot write there ({existing} is not writable)")
        return
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"{option} {named}: cannot write there ({_reason(exc)})") from None


def check_file(path: Path, option: str) -> None:
    """Check the file ``path`` can be written (in its folder, or in the folders that would be made
    for it); ValueError names ``option`` and the reason otherwise."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{option} {path}: is a folder; expected a file name")
    check_folder(path.parent, option, named=path)


def _temporary(path: Path) -> tuple[int, str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_umask())
    return fd, tmp


@contextmanager
def atomic_stream(path: Path) -> Iterator[TextIO]:
    """A text stream whose content replaces ``path`` when the block ends without an exception; on an
    exception the temporary file is removed and ``path`` is left as it was."""
    path = Path(path)
    fd, tmp = _temporary(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it."""
    with atomic_stream(path) as f:
        f.write(text)


def write_json_atomic(path: Path, obj) -> None:
    """Write ``obj`` as indented JSON (sorted keys) to ``path`` through a temporary file."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")
