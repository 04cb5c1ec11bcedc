"""The value types of every setting: a number with its range, a whole number, a flag.

The config dataclasses (``simulator.config``, ``simulator.queue.QueueConfig``, ``reward.RewardConfig``,
...) are pydantic dataclasses whose fields are typed with these, so one declaration gives the
default (the field's value), the range (here), the unit (the field's name: ``_s``, ``_ms``,
``_milli``, ``_mib``) and the description (the field's docstring). Constructing a config, loading a
scenario and every ``--set`` go through the same check; a bad value raises a ``ValueError``
(pydantic's ``ValidationError``) whose message says what is allowed.
"""

from __future__ import annotations

import math
import numbers
from typing import Annotated, Any

from pydantic import ConfigDict, PlainValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

SETTINGS = ConfigDict(extra="forbid", use_attribute_docstrings=True)
"""Config of every settings class: unknown keys are refused; a field's docstring is its description."""


class Allowed(str):
    """What a type allows, in words (kept in the field's metadata: ``td3sched scenarios --show`` prints it)."""


def allowed(metadata) -> str:
    """The ``Allowed`` text among a field's metadata, or ""."""
    return next((m for m in metadata if isinstance(m, Allowed)), "")


def _fmt(x: float) -> str:
    return f"{x:g}"


def _range_text(noun: str, lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    if lo is not None and hi is not None:
        return f"{noun} in {'(' if lo_open else '['}{_fmt(lo)}, {_fmt(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{noun} {'>' if lo_open else '>='} {_fmt(lo)}"
    if hi is not None:
        return f"{noun} {'<' if hi_open else '<='} {_fmt(hi)}"
    return noun


def _bounds_schema(kind: str, lo, hi, lo_open, hi_open) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": kind}
    if lo is not None:
        schema["exclusiveMinimum" if lo_open else "minimum"] = lo
    if hi is not None:
        schema["exclusiveMaximum" if hi_open else "maximum"] = hi
    return schema


def number(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False):
    """A finite real number (an int is taken as a float; true/false, text, inf and nan are refused) in the range
    given: ``number(0, lo_open=True)`` is a number > 0, ``number(0, 1, hi_open=True)`` one in [0, 1)."""
    expected = _range_text("a number", lo, hi, lo_open, hi_open)

    def check(value: Any) -> float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        if ok and lo is not None:
            ok = value > lo if lo_open else value >= lo
        if ok and hi is not None:
            ok = value < hi if hi_open else value <= hi
        if not ok:
            raise PydanticCustomError("setting", "expected {expected}", {"expected": expected})
        return float(value)

    return Annotated[float, PlainValidator(check), WithJsonSchema(_bounds_schema("number", lo, hi, lo_open, hi_open)),
                     Allowed(expected)]


def whole(lo: int | None = None, hi: int | None = None):
    """A whole number (an int, or a float with no fraction such as 20.0) in [lo, hi]."""
    expected = _range_text("a whole number", lo, hi, False, False)

    def check(value: Any) -> int:
        ok = (isinstance(value, numbers.Integral) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.isfinite(value) and value.is_integer())
        if ok:
            value = int(value)
            ok = (lo is None or value >= lo) and (hi is None or value <= hi)
        if not ok:
            raise PydanticCustomError("setting", "expected {expected}", {"expected": expected})
        return value

    return Annotated[int, PlainValidator(check), WithJsonSchema(_bounds_schema("integer", lo, hi, False, False)),
                     Allowed(expected)]


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise PydanticCustomError("setting", "expected {expected}", {"expected": "true or false"})
    return value


Flag = Annotated[bool, PlainValidator(_flag), WithJsonSchema({"type": "boolean"}), Allowed("true or false")]
"""true or false (YAML's spellings; never 0, 1 or text)."""
Seconds = number(0, lo_open=True)
"""A positive duration in seconds."""
Interval = number(1)
"""A period in seconds, at least 1 (each one is an event of the simulation; kube-scheduler's and
cluster-autoscaler's periods are whole seconds)."""
SecondsOrZero = number(0)
"""A duration in seconds, 0 allowed."""
Hours = number(0, lo_open=True)
"""A positive duration in hours."""
HoursOrZero = number(0)
"""A duration in hours, 0 allowed."""
Weight = number(0)
"""A non-negative weight."""
Share = number(0, 1, lo_open=True)
"""A share in (0, 1]."""
Positive = number(0, lo_open=True)
"""A positive number."""
Count = whole(1)
"""A whole number >= 1."""
CountOrZero = whole(0)
"""A whole number >= 0."""
