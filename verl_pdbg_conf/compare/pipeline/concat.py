"""The statistics of a concatenation, exactly, from its parts': Max and Min of the parts, Mean weighted by
element counts, Norm as the root of the summed squares. One rule for every place that puts parts together
(a batch split's calls, a fused projection's parts, tensor-parallel shards)."""

from __future__ import annotations

import math
from dataclasses import replace


def _num(v) -> bool:
    return type(v) in (float, int) and v == v


def _size(shape) -> int | None:
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        return None
    return math.prod(shape)


def concat_stats(rows: list, sizes: list[int]) -> tuple:
    mx, mn, mean, norm = zip(*(r.stats for r in rows))
    total = sum(sizes)
    if all(type(v) is bool for v in mx + mn):  # a boolean tensor: msprobe writes its Max and Min only
        return any(mx), all(mn), None, None
    return (max(mx) if all(map(_num, mx)) else None, min(mn) if all(map(_num, mn)) else None,
            sum(m * n for m, n in zip(mean, sizes)) / total if all(map(_num, mean)) and total else None,
            math.sqrt(sum(x * x for x in norm)) if all(map(_num, norm)) else None)


def axis_of(row) -> int:
    """Where parts of a tensor join: a weight (or its gradient) along its output dimension, an activation
    along its last."""
    return 0 if row.state in ("parameters", "parameters_grad") else -1


def concat_rows(rows: list, axis: int = -1):
    """One row for the concatenation of `rows` along `axis` (the first row's name), or None where their
    shapes or dtypes do not concatenate there."""
    first = rows[0]
    shapes = [r.shape for r in rows]
    sizes = [_size(s) for s in shapes]
    if None in sizes or any(r.dtype != first.dtype for r in rows) or \
            any(len(s) != len(shapes[0]) or not s for s in shapes):
        return None
    ax = axis % len(shapes[0])
    if any(s[:ax] + s[ax + 1:] != shapes[0][:ax] + shapes[0][ax + 1:] for s in shapes):
        return None
    shape = list(shapes[0])
    shape[ax] = sum(s[ax] for s in shapes)
    return replace(first, shape=shape, stats=concat_stats(rows, sizes), data_name="-1", md5=None,
                   parts=sum(r.parts for r in rows))


def same_rows(rows: list) -> bool:
    """Every row the same tensor by its statistics (a replicated or all-reduced one)."""
    first = rows[0]
    return all(r.shape == first.shape and r.stats == first.stats and r.dtype == first.dtype for r in rows[1:])
