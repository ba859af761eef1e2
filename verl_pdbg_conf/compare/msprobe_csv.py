"""One cell of msprobe's compare result (compare_result_*.csv) as a number: what the tests and benches
read to check the engine against msprobe (the verdict is the engine's; --msprobe-csv only keeps the file).

msprobe 26.2 writes statistics-task columns (Max/Min/Mean/NormRelativeErr as percent strings) or
tensor-task columns (Cosine, EucDist, MaxAbsErr, MaxRelativeErr as fractions, both sides' l2norm).
All values here are fractions (msprobe's "1.0%" is 0.01)."""

from __future__ import annotations

_NA = {"", "N/A", "NAN", "NONE", "UNSUPPORTED", "NAN%"}


def parse_value(text) -> float | None:
    """msprobe cell -> fraction: "1.5%" -> 0.015, "0" -> 0.0, " inf" -> inf, N/A -> None."""
    s = str(text).strip()
    if s.upper() in _NA:
        return None
    pct = s.endswith("%")
    try:
        v = float(s[:-1] if pct else s)
    except ValueError:
        return None
    return v / 100 if pct else v
