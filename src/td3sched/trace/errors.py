"""Errors and skip accounting shared by the trace loaders.

A loader either fails loudly on the first malformed row (:class:`TraceError`, which names the file,
the 1-based file line, the column, the offending value and what was expected) or, when called with
``lenient=True``, drops malformed rows and counts them by reason in a :class:`SkipReport`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["TraceError", "SkipReport"]


class TraceError(ValueError):
    """A malformed trace file.

    Attributes:
        path: the file (a ``Path``; the message shows only its name).
        line: 1-based line in the file (the header is line 1, so the first data row of a file with
            a header is line 2; in a headerless file the first row is line 1). ``None`` if unknown.
        column: the column as named in the file (``None`` for row-level problems such as a wrong
            number of fields).
        value: the offending value as text (for a missing column: the columns that were found).
        expected: what the value should have been, in words ("a non-negative number").
    """

    def __init__(
        self,
        path: str | Path | None,
        line: int | None,
        column: str | None,
        value: Any,
        expected: str,
        *,
        got: str | None = None,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.line = line
        self.column = column
        self.value = value
        self.expected = expected
        self._got = got if got is not None else repr(value)
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path.name if self.path is not None else "<trace>"
        if self.line is not None:
            where += f" line {self.line}"
        if self.column is not None:
            where += f", column {self.column!r}"
        return f"{where}: got {self._got}, expected {self.expected}"

    def __reduce__(self):  # keep the attributes when pickled (multiprocessing, pytest-xdist)
        return (_rebuild, (self.path, self.line, self.column, self.value, self.expected, self._got))


def _rebuild(path, line, column, value, expected, got) -> TraceError:
    return TraceError(path, line, column, value, expected, got=got)


@dataclass
class SkipReport:
    """What a lenient load dropped, and why.

    Attributes:
        path: the file (or folder) that was read.
        skipped: reason -> number of rows (or items, see ``unit``) dropped for that reason; a row is
            counted once, under the first check it failed.
        total_rows: rows (items) read before anything was dropped.
        unit: what was counted ("rows" for tables, "VMs" for the Bitbrains profiles).
    """

    path: Path | None
    skipped: dict[str, int] = field(default_factory=dict)
    total_rows: int = 0
    unit: str = "rows"

    @property
    def count(self) -> int:
        """Total number of rows (items) dropped."""
        return sum(self.skipped.values())

    def add(self, reason: str, n: int = 1) -> None:
        """Count ``n`` more rows dropped for ``reason`` (no-op for n == 0)."""
        if n:
            self.skipped[reason] = self.skipped.get(reason, 0) + int(n)

    def summary(self) -> str:
        """One line, e.g. "skipped 3 of 8152 rows of X: 2 non-numeric cpu_milli, 1 deletion ..."."""
        name = self.path.name if self.path is not None else "<trace>"
        text = f"skipped {self.count} of {self.total_rows} {self.unit} of {name}"
        if self.skipped:
            reasons = sorted(self.skipped.items(), key=lambda kv: (-kv[1], kv[0]))
            text += ": " + ", ".join(f"{n} {reason}" for reason, n in reasons)
        return text

    def __str__(self) -> str:
        return self.summary()
