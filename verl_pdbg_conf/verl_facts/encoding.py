"""The typed JSON encoding of verl's config values in facts files: `decode(encode(x))` is x,
types included (bool, int and float stay distinct; non-string keys and inf/nan survive)."""

from __future__ import annotations

import math

# Tags of the typed JSON encoding: a mapping with keys that are not all strings, a float JSON
# cannot write. Everything else is JSON as is.
MAP_TAG, FLOAT_TAG = "\u0000map", "\u0000float"


def encode(x):
    """Typed data -> JSON-able data; `decode(encode(x))` is x, types included."""
    if isinstance(x, dict):
        if all(isinstance(k, str) for k in x) and MAP_TAG not in x and FLOAT_TAG not in x:
            return {k: encode(v) for k, v in x.items()}
        return {MAP_TAG: [[encode(k), encode(v)] for k, v in x.items()]}
    if isinstance(x, list):
        return [encode(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return {FLOAT_TAG: repr(x)}
    if x is None or isinstance(x, (str, bool, int, float)):
        return x
    raise TypeError(f"cannot store a {type(x).__name__} ({x!r}) as release facts")


def decode(x):
    if isinstance(x, dict):
        if MAP_TAG in x and len(x) == 1:
            return {decode(k): decode(v) for k, v in x[MAP_TAG]}
        if FLOAT_TAG in x and len(x) == 1:
            return float(x[FLOAT_TAG])
        return {k: decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [decode(v) for v in x]
    return x


def same_typed(a, b) -> bool:
    """Equality that tells 1, 1.0 and True apart (and nan from nan: equal)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_typed(k, k2) and same_typed(a[k], b[k2]) for k, k2 in zip(a, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same_typed(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b
