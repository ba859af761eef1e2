"""Records no comparison can judge, left out of a run comparison: the user's `--ignore PATTERN` and a
documented default for records known to hold uninitialised memory (docs/compare-ignores.md has the
evidence: two identical runs differ there and nowhere else).

A pattern is fnmatch-style (shell wildcards: `*` any run of characters, `?` one, `[...]` a set),
matched case-sensitively against the whole msprobe record name as it appears in dump.json and in
msprobe's CSV "NPU Name" column, e.g. `Tensor.narrow.12.forward.output.0`. Not a regex: record names
are full of dots."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Iterable

# (pattern, why). Preliminary: being narrowed from two identical 2-rank FSDP2 runs.
DEFAULT_IGNORES: tuple[tuple[str, str], ...] = (
    ("Tensor.narrow.*.forward.*",
     "FSDP2 all-gather: the slice of the all-gather output buffer (torch.empty) read before the "
     "collective fills it; its statistics are whatever memory held"),
)


def _pattern(p) -> str:
    return p[0] if isinstance(p, tuple) else p


def match_ignore(name: str, patterns: Iterable) -> str | None:
    """The first pattern (a string, or a (pattern, why) pair as in DEFAULT_IGNORES) that matches the
    whole record name, or None."""
    for p in patterns:
        pat = _pattern(p)
        if fnmatchcase(name, pat):
            return pat
    return None
