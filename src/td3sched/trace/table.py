"""The one validated CSV reader behind every trace loader.

:func:`read_table` reads a delimited file with pandas, checks every requested column with vectorised
masks (never a Python loop over rows) and either raises :class:`~td3sched.trace.errors.TraceError`
for the first bad row (strict, the default) or drops bad rows and counts them by reason in a
:class:`~td3sched.trace.errors.SkipReport` (``lenient=True``). :func:`check_rows` applies the same
strict/lenient rule to a cross-column condition computed by a loader (e.g. deletion before creation).

The returned frame is indexed by 1-based file line (index name ``"line"``) so that later checks can
name the line of a bad row; loaders reset the index before handing the frame out.

Parsing: string columns are read as text; numeric columns go through pandas' C number parser, and any
numeric column that the parser could not read as numbers falls back to
``pd.to_numeric(errors="coerce")`` on its text, which locates the non-numeric cells. (Reading every
column as text first gives the same result but is about four times slower on the Bitbrains files.)
Empty cells and pandas' usual NA spellings ("NaN", "NA", "null", ...) count as missing. Line numbers
assume no quoted field spans several lines (true of every trace here).
"""

from __future__ import annotations

import re
import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from .errors import SkipReport, TraceError

__all__ = ["Column", "TraceTable", "read_table", "check_rows", "finish"]

Kind = Literal["float", "int", "str"]

_COMPRESSED = {".gz", ".bz2", ".zip", ".xz", ".zst", ".tar"}
_SKIPPED_LINE = re.compile(r"Skipping line (\d+): expected (\d+) fields, saw (\d+)")
_BAD_LINE = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


@dataclass(frozen=True)
class Column:
    """A column to read and how to check it.

    Attributes:
        name: the column's name in the file (for headerless files: in ``names``).
        kind: "float" (float64), "int" (int64, or nullable "Int64" when ``nullable``) or "str".
        nonnegative: values must be >= 0.
        nullable: empty cells are allowed (NaN / <NA> in the frame).
        lower, upper: inclusive bounds on numeric values.
        choices: for "str" columns, the allowed values.
    """

    name: str
    kind: Kind = "float"
    nonnegative: bool = False
    nullable: bool = False
    lower: float | None = None
    upper: float | None = None
    choices: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("float", "int", "str"):
            raise ValueError(f"Column {self.name!r}: kind must be float, int or str, not {self.kind!r}")
        if self.choices is not None:
            object.__setattr__(self, "choices", frozenset(self.choices))

    @property
    def expected(self) -> str:
        """What a valid cell looks like, in words (used in error messages)."""
        if self.kind == "str":
            if self.choices is not None:
                text = "one of " + ", ".join(repr(c) for c in sorted(self.choices))
            else:
                text = "a non-empty value"
        else:
            noun = "integer" if self.kind == "int" else "number"
            lo = self.lower
            if self.nonnegative:
                lo = 0 if lo is None else max(lo, 0)
            hi = self.upper
            if lo is not None and hi is not None:
                text = f"a{'n' if noun == 'integer' else ''} {noun} in [{_num(lo)}, {_num(hi)}]"
            elif hi is not None:
                text = f"a{'n' if noun == 'integer' else ''} {noun} <= {_num(hi)}"
            elif lo == 0 and self.nonnegative:
                text = f"a non-negative {noun}"
            elif lo is not None:
                text = f"a{'n' if noun == 'integer' else ''} {noun} >= {_num(lo)}"
            else:
                text = f"a{'n' if noun == 'integer' else ''} {noun}"
        return text + (" or empty" if self.nullable else "")


@dataclass(frozen=True, eq=False)
class TraceTable:
    """A loaded trace table: the validated ``frame``, what was ``skipped``, and the file ``path``."""

    frame: pd.DataFrame
    skipped: SkipReport
    path: Path

    def __len__(self) -> int:
        return len(self.frame)


def _num(x: float) -> str:
    """A number as text: integers without a trailing .0."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _cell_text(value: object) -> str:
    """A cell as it would read in the file (best effort for cells parsed as numbers)."""
    if value is None or value is pd.NA:
        return ""
    if isinstance(value, (float, np.floating)):
        if np.isnan(value):
            return ""
        return _num(value) if np.isfinite(value) else str(value)
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return str(value)


def _read(
    path: Path, sep: str, header: bool, names: Sequence[str] | None, str_columns: set[str], lenient: bool
) -> tuple[pd.DataFrame, list[int]]:
    """pandas.read_csv with our settings; returns the frame and the lines dropped as malformed."""
    bad_lines: list[int] = []
    try:
        kwargs: dict = dict(
            sep=sep,
            skipinitialspace=True,
            skip_blank_lines=False,
            low_memory=False,
            on_bad_lines="warn" if lenient else "error",
        )
        if header:
            kwargs["header"] = 0
            if str_columns:
                # dtype keys must match the raw header (which may carry whitespace): peek at it.
                raw = pd.read_csv(path, sep=sep, skipinitialspace=True, nrows=0).columns
                kwargs["dtype"] = {c: str for c in raw if str(c).strip() in str_columns}
        else:
            kwargs.update(header=None, names=list(names or ()), index_col=False)
            kwargs["dtype"] = {c: str for c in str_columns}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", pd.errors.ParserWarning)
            frame = pd.read_csv(path, **kwargs)
    except pd.errors.EmptyDataError:
        raise TraceError(path, 1, None, "", "a header line" if header else "at least one row",
                         got="an empty file") from None
    except UnicodeDecodeError as exc:
        raise TraceError(path, None, None, "", "a UTF-8 text file",
                         got=f"bytes that are not text ({exc.reason} at byte {exc.start})") from None
    except FileNotFoundError:
        raise
    except (EOFError, zlib.error, OSError) as exc:  # a truncated or corrupt compressed file, a read error
        what = "a complete, uncorrupted compressed file" if path.suffix in _COMPRESSED else "a readable file"
        reason = str(exc) or type(exc).__name__
        raise TraceError(path, None, None, "", what, got=f"{type(exc).__name__}: {reason}") from None
    except pd.errors.ParserError as exc:
        m = _BAD_LINE.search(str(exc))
        if m is None:
            raise TraceError(path, None, None, str(exc), "a well-formed delimited file",
                             got=f"a parser error ({exc})") from exc
        want, line, saw = (int(g) for g in m.groups())
        raise TraceError(path, line, None, saw, f"{want} fields", got=f"{saw} fields") from None
    for w in caught:
        if issubclass(w.category, pd.errors.ParserWarning):
            bad_lines += [int(m.group(1)) for m in _SKIPPED_LINE.finditer(str(w.message))]
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return frame, sorted(bad_lines)


def read_table(
    path: str | Path,
    columns: Sequence[Column],
    *,
    sep: str = ",",
    header: bool = True,
    names: Sequence[str] | None = None,
    lenient: bool = False,
) -> tuple[pd.DataFrame, SkipReport]:
    """Read ``path`` and validate ``columns``.

    Args:
        path: the file (``.gz`` and other compressions are handled by pandas).
        columns: the columns to return, in this order, with their checks. Other columns of the file
            are ignored. Header names are compared after stripping surrounding whitespace.
        sep: field separator (leading whitespace after it is skipped).
        header: whether line 1 is a header; if not, ``names`` names every field of a row.
        names: field names for a headerless file.
        lenient: drop bad rows and count them in the report instead of raising.

    Returns:
        ``(frame, report)``: the frame holds exactly ``columns`` (float64, int64 / Int64, or str),
        indexed by 1-based file line (index name "line").

    Raises:
        TraceError: a file that is not text, is truncated or has no data row, or a missing column
            (line 1), in any mode; in strict mode, the first bad row in file
            order (a wrong number of fields, a blank line, or a cell failing its column's check).
    """
    path = Path(path)
    if not header and not names:
        raise ValueError("read_table: a headerless file needs names")
    str_columns = {c.name for c in columns if c.kind == "str"}
    frame, bad_lines = _read(path, sep, header, names, str_columns, lenient)
    frame.columns = [str(c).strip() for c in frame.columns]

    found = list(frame.columns)
    for col in columns:
        if col.name not in frame.columns:
            raise TraceError(path, 1, col.name, found, f"a column named {col.name!r}",
                             got="columns " + ", ".join(repr(c) for c in found))
    if len(frame) == 0 and not bad_lines:
        raise TraceError(path, 2 if header else 1, None, "", "at least one data row",
                         got="no rows" + (" (only the header)" if header else ""))

    # 1-based file line of every row; lines pandas dropped (lenient, wrong field count) are skipped.
    first = 2 if header else 1
    n = len(frame)
    lines = np.arange(first, first + n + len(bad_lines), dtype=np.int64)
    if bad_lines:
        kept = lines[~np.isin(lines, bad_lines)]
        lines = kept if len(kept) == n else lines[:n]
    else:
        lines = lines[:n]

    # Trailing blank lines are harmless: drop them silently. Blank lines elsewhere are errors.
    blank = frame.isna().all(axis=1).to_numpy() if frame.shape[1] else np.zeros(n, bool)
    if n and blank[-1]:
        keep_to = n - int(np.argmin(blank[::-1])) if not blank.all() else 0
        frame, lines, blank = frame.iloc[:keep_to], lines[:keep_to], blank[:keep_to]
        n = keep_to

    report = SkipReport(path=path, total_rows=n + len(bad_lines))
    report.add("wrong number of fields", len(bad_lines))

    # One row of masks per check, in column order; a row fails at its first true mask.
    checks: list[tuple[str, Column | None, np.ndarray]] = [("blank line", None, blank)]
    values: dict[str, pd.Series] = {}
    for col in columns:
        raw = frame[col.name]
        if col.kind == "str":
            text = raw.astype("str")
            missing = (raw.isna() | (text.str.strip() == "")).to_numpy(dtype=bool, na_value=True)
            text = text.str.strip().where(~missing)
            if not col.nullable:
                checks.append((f"missing {col.name}", col, missing))
            if col.choices is not None:
                checks.append((f"unexpected {col.name}", col, ~missing & ~text.isin(col.choices).to_numpy()))
            values[col.name] = text
            continue
        missing = raw.isna().to_numpy()
        if pd.api.types.is_numeric_dtype(raw.dtype) and not pd.api.types.is_bool_dtype(raw.dtype):
            num = raw.to_numpy(dtype=np.float64, na_value=np.nan)
        else:
            num = pd.to_numeric(raw.astype("str"), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            missing = missing | (raw.astype("str").str.strip() == "").to_numpy(dtype=bool, na_value=False)
        finite = np.isfinite(num)
        checks.append((f"non-numeric {col.name}", col, ~missing & ~finite))
        if not col.nullable:
            checks.append((f"missing {col.name}", col, missing))
        with np.errstate(invalid="ignore"):
            if col.kind == "int":
                checks.append((f"non-integer {col.name}", col, finite & (num != np.round(num))))
            if col.nonnegative:
                checks.append((f"negative {col.name}", col, finite & (num < 0)))
            if col.lower is not None or col.upper is not None:
                lo = -np.inf if col.lower is None else col.lower
                hi = np.inf if col.upper is None else col.upper
                checks.append((f"{col.name} out of range", col, finite & ((num < lo) | (num > hi))))
        values[col.name] = pd.Series(num)

    fails = np.vstack([mask for _, _, mask in checks]) if n else np.zeros((len(checks), 0), bool)
    bad = fails.any(axis=0)
    if bad.any():
        first_check = fails.argmax(axis=0)  # index of the first failing check, per row
        if not lenient:
            row = int(np.flatnonzero(bad)[0])
            reason, col, _ = checks[first_check[row]]
            if col is None:
                raise TraceError(path, int(lines[row]), None, "", f"a row of {frame.shape[1]} fields",
                                 got="a blank line")
            value = _cell_text(frame[col.name].iloc[row])
            raise TraceError(path, int(lines[row]), col.name, value, col.expected)
        counts = np.bincount(first_check[bad], minlength=len(checks))
        for (reason, _, _), k in zip(checks, counts):
            report.add(reason, int(k))

    keep = ~bad
    index = pd.Index(lines[keep], name="line")
    out = {}
    for col in columns:
        v = values[col.name].to_numpy()[keep]
        if col.kind == "str":
            out[col.name] = pd.Series(v, index=index, dtype="str")
        elif col.kind == "int":
            v = v.round()
            out[col.name] = pd.Series(v, index=index).astype("Int64") if col.nullable else v.astype(np.int64)
        else:
            out[col.name] = v
    result = pd.DataFrame(out, index=index)
    return result, report


def check_rows(
    frame: pd.DataFrame,
    bad: pd.Series | np.ndarray,
    report: SkipReport,
    *,
    column: str,
    expected: str,
    reason: str,
    lenient: bool,
) -> pd.DataFrame:
    """Apply a cross-column check to a frame from :func:`read_table`.

    ``bad`` is a boolean mask aligned with ``frame`` (comparisons with NaN are False, so "when both are
    present" comes for free). Strict: raise TraceError naming the first bad row's line, ``column``, its
    value and ``expected``. Lenient: drop the bad rows and count them under ``reason``.
    """
    mask = np.asarray(bad, dtype=bool)
    if not mask.any():
        return frame
    if not lenient:
        row = int(np.flatnonzero(mask)[0])
        line = frame.index[row]
        raise TraceError(report.path, int(line) if line is not None else None, column,
                         _cell_text(frame[column].iloc[row]), expected)
    report.add(reason, int(mask.sum()))
    return frame[~mask]


def finish(frame: pd.DataFrame, rename: dict[str, str] | None = None) -> pd.DataFrame:
    """Rename to canonical names and drop the line index (a fresh RangeIndex)."""
    out = frame.rename(columns=rename or {})
    return out.reset_index(drop=True)
