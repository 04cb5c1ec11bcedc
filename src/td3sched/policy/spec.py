"""Policy arguments from a spec's ``k=v:k=v`` part, into a policy's frozen ``Args`` dataclass.

Each field of the dataclass is one argument, annotated ``int`` or ``float``; the dataclass validates
ranges in ``__post_init__``. Bad input fails here with the policy, the key and the value named.
"""

from __future__ import annotations

import math
from dataclasses import fields

from td3sched.policy.static_weights import parse_args


def args_from_spec(args_cls, policy: str, spec: str):
    """``args_cls`` built from ``spec``; a ValueError names an unknown key or a malformed value."""
    kw = parse_args(spec)
    types = {f.name: f.type for f in fields(args_cls)}
    unknown = sorted(set(kw) - set(types))
    if unknown:
        raise ValueError(f"{policy}: unknown argument(s) {unknown}: expected some of {', '.join(types)}")
    values = {}
    for key, text in kw.items():
        whole = types[key] in (int, "int")
        try:
            values[key] = int(text) if whole else float(text)
        except ValueError:
            raise ValueError(f"{policy}: {key}={text!r}: expected {'a whole number' if whole else 'a number'}") \
                from None
    return args_cls(**values)


def require(policy: str, name: str, value, ok: bool, expected: str) -> None:
    """Raise ``ValueError('<policy> <name>=<value>: expected <expected>')`` unless ``ok``."""
    if not ok:
        raise ValueError(f"{policy} {name}={value!r}: expected {expected}")


def finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
