"""Locating inside a tensor (tensor task): where in the first divergence's tensor the error sits, from the
two saved tensor files: the share of elements whose relative error passes the threshold, and the rows
(the first dimension: batch rows, or token positions of a flattened batch) and, for 3-d and deeper
tensors, the (row, position) pairs holding most of it."""

from __future__ import annotations

MOST = 8  # rows / positions listed


def spread(judge, t, g, threshold: float) -> dict | None:
    both = judge.arrays_of(t, g) if t is not None and g is not None else None
    if both is None:
        return None
    import numpy as np

    a, b = (np.asarray(x, dtype=np.float64) for x in both)
    if a.shape != b.shape or a.size == 0:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = max(float(np.max(np.abs(b))), 1e-30)
        err = np.abs(a - b) / np.maximum(np.abs(b), 1e-6 * scale)
    err = np.nan_to_num(err, nan=np.inf)
    beyond = err > threshold
    out = {"elements": int(a.size), "beyond": int(beyond.sum()), "share": round(float(beyond.mean()), 6),
           "max_relative": float(err.max())}
    if a.ndim >= 1:
        rows = beyond.reshape(a.shape[0], -1).sum(axis=1)
        order = np.argsort(-rows, kind="stable")
        out["rows"] = [{"row": int(i), "beyond": int(rows[i]), "of": int(a.size // a.shape[0])}
                       for i in order[:MOST] if rows[i] > 0]
        out["rows_with_error"] = int((rows > 0).sum())
        out["dim0"] = int(a.shape[0])
    if a.ndim >= 3:
        pos = beyond.reshape(a.shape[0], a.shape[1], -1).sum(axis=2)
        flat = np.argsort(-pos, axis=None, kind="stable")[:MOST]
        out["positions"] = [{"row": int(i // a.shape[1]), "position": int(i % a.shape[1]),
                             "beyond": int(pos.flat[i])} for i in flat if pos.flat[i] > 0]
    return out


def describe(s: dict) -> str:
    said = f"{s['beyond']} of {s['elements']} elements ({100 * s['share']:.3g}%) beyond the threshold"
    if s.get("positions"):
        said += "; most at " + ", ".join(f"[{p['row']}, {p['position']}]" for p in s["positions"][:4])
    elif s.get("rows"):
        said += f"; in {s['rows_with_error']} of {s['dim0']} rows, most in row(s) " + \
            ", ".join(str(r["row"]) for r in s["rows"][:4])
    return said
