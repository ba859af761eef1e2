"""The differences the engine computes, as msprobe's compare computes them: relative errors of two
statistics (statistics task, msprobe.core.compare.acc_compare.CalcStatsDiff) and the tensor metrics of
two arrays (tensor task, msprobe.core.compare.algorithm.builtin_algorithm), as fractions. Plus what
msprobe does not judge: which statistics are non-finite, and the dtypes compared exactly."""

from __future__ import annotations

import math

INF = math.inf
# Relative rounding step (machine epsilon, 2**-mantissa bits) of the float formats a dump holds: what a
# bf16-against-fp32 comparison can be expected to differ by, per node, before anything is wrong.
EPS = {"torch.float64": 2.0 ** -52, "torch.float32": 2.0 ** -23, "torch.float16": 2.0 ** -10,
       "torch.bfloat16": 2.0 ** -7}
FLOAT_DTYPES = frozenset(EPS)
# msprobe's DTYPE_MATCH_GROUPS: dtypes it still pairs when they differ between the runs
_MATCH_GROUPS = (frozenset({"float16", "float32", "float64", "bfloat16"}), FLOAT_DTYPES)
STAT_INDEX = {"MaxRelativeErr": 0, "MinRelativeErr": 1, "MeanRelativeErr": 2, "NormRelativeErr": 3}


def exact_dtype(dtype: str) -> bool:
    """Integer and bool tensors: token ids, masks, positions. A norm says nothing of them (msprobe's is
    0 for an int tensor): any difference of a statistic or a value is a difference."""
    return bool(dtype) and dtype.startswith("torch.") and dtype not in FLOAT_DTYPES and not dtype.startswith("torch.complex")


def dtypes_pair(a: str, b: str) -> bool:
    """msprobe pairs two rows of the same name only if their dtypes are equal or both floats."""
    return a == b or any(a in g and b in g for g in _MATCH_GROUPS)


def _num(v) -> bool:
    return type(v) in (float, int)


def rel_err(t, g) -> float | None:
    """One statistic's relative error |t - g| / |g| as msprobe writes it (percent there, a fraction
    here): equal as text -> 0; g == 0 -> inf; NaN involved -> nan; an infinity -> +-inf; not numbers -> None."""
    if t == g and type(t) is type(g) and (g != 0 or str(t) == str(g)):
        return 0.0
    if not (_num(t) and _num(g)):
        if str(t) == str(g):
            return 0.0
        return None
    if t != t or g != g:
        return 0.0 if (t != t and g != g) else math.nan
    if abs(t) == INF or abs(g) == INF:
        if abs(t) == INF:
            return INF if t > 0 else -INF
        return -INF if g > 0 else INF
    if g == 0:
        return INF
    return abs((t - g) / g)


def norm_rel(t, g) -> float | None:
    """The tensor task's NormRelativeErr, from its two l2norms (msprobe prints no such column there)."""
    if not (_num(t) and _num(g)):
        return None
    if g == 0:
        return 0.0 if t == 0 else INF
    return abs(t - g) / abs(g)


FINITE = ("", "", "", "")


def nonfinite(stats) -> tuple:
    """Per statistic: "nan", "inf", "-inf" or "" (finite or not a number)."""
    for v in stats:
        if type(v) is float and (v != v or v == INF or v == -INF):
            break
    else:
        return FINITE
    out = []
    for v in stats:
        if type(v) is float and (v != v or abs(v) == INF):
            out.append("nan" if v != v else ("inf" if v > 0 else "-inf"))
        else:
            out.append("")
    return tuple(out)


def kind_of(classes: tuple) -> str:
    """nan before inf: a NaN among the statistics makes the tensor "NaN"."""
    if "nan" in classes:
        return "nan"
    if "inf" in classes or "-inf" in classes:
        return "inf"
    return ""


# ----------------------------------------------------------------------------- tensor task

TENSOR_METRICS = ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "OneThousandthErrRatio",
                  "FiveThousandthsErrRatio")


def load_array(path: str):
    """A tensor file of msprobe's tensor task as float64-ready numpy (bf16 through float32, squeezed,
    as msprobe's read_pt_data); .npy without torch."""
    import numpy as np

    if path.endswith(".npy"):
        return np.squeeze(np.load(path, allow_pickle=False))
    import torch

    t = torch.load(path, map_location="cpu", weights_only=True).detach()
    if t.dtype in (torch.bfloat16,) or "float8" in str(t.dtype):
        t = t.to(torch.float32)
    return np.squeeze(t.numpy())


def tensor_metric(name: str, n, b) -> float | None:
    """msprobe's value for `name` on two arrays; None where it writes N/A or unsupported; nan where the
    NaN/Inf positions differ."""
    import numpy as np

    if n.size == 0 or b.size == 0 or n.shape != b.shape:
        return None
    n_inf, b_inf, n_nan, b_nan = np.isinf(n), np.isinf(b), np.isnan(n), np.isnan(b)
    if n_inf.any() or b_inf.any() or n_nan.any() or b_nan.any():
        if not (np.array_equal(n_inf, b_inf) and np.array_equal(n_nan, b_nan)):
            return math.nan
        n, b = n.copy(), b.copy()
        n[n_inf | n_nan] = 0
        b[b_inf | b_nan] = 0
    if name == "MaxRelativeErr":
        return float(np.max(np.abs(_relative(n, b))))
    nf, bf = (n.reshape(-1).astype(float), b.reshape(-1).astype(float)) if n.shape else (n, b)
    if name == "MaxAbsErr":
        return round(float(np.max(np.abs(nf - bf))), 12)
    if n.ndim == 0:
        return None  # msprobe: 0-d tensors have no cosine, distance or error ratio
    if name == "EucDist":
        return float(np.linalg.norm(nf - bf, ord=2))
    if name == "Cosine":
        if n.size == 1:
            return None
        eps = np.finfo(float).eps
        an, bn = np.linalg.norm(nf), np.linalg.norm(bf)
        if an <= eps and bn <= eps:
            return 1.0
        if an <= eps or bn <= eps:
            return math.nan
        cos = round(float(np.dot(nf, bf) / (an * bn)), 12)
        return round(cos, 6) if cos > 0.9999 else cos
    threshold = 0.001 if name == "OneThousandthErrRatio" else 0.005
    rel = _relative(n, b)
    return round(float(np.sum(rel < threshold) / rel.size), 12)


def _relative(n, b):
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        n = n if n.dtype.kind == "f" else n.astype(float)
        b = b if b.dtype.kind == "f" else b.astype(float)
        rt = np.result_type(n, b, np.float32)
        n, b = n.astype(rt), b.astype(rt)
        zero = b == 0
        eps = np.finfo(rt).eps
        n[zero] += eps
        b[zero] += eps
        return np.abs(np.divide(n - b, b))


def numel(shape) -> int | None:
    """Element count of a dumped shape (a list of ints), None for anything else."""
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        return None
    return math.prod(shape)
