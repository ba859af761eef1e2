"""Records no comparison can judge, left out of a run comparison: the user's `--ignore PATTERN` and a
documented default for records known to hold uninitialised memory (docs/compare-ignores.md has the
evidence: two identical 2-rank FSDP2 runs differ there and nowhere else).

A pattern is `RECORD` or `RECORD@CALLER`, both fnmatch-style (shell wildcards: `*` any run of
characters, dots and slashes included, `?` one, `[...]` a set; case-sensitive; not a regex: record
names are full of dots).
- RECORD is matched against the whole msprobe record name: the CSV's "NPU Name" column
  (`Tensor.narrow.12.forward.output.0`) or a dump.json call name (`Tensor.narrow.12.forward`).
- CALLER, when given, must also match the frame that made the call: the innermost frame of the call
  in stack.json, written `path/to/file.py:LINE in func` with forward slashes. A record whose caller
  is not known (no stack.json, L0 module records) does not match a pattern with a CALLER: the default
  stays narrow rather than hide a model's own calls."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Iterable

# (pattern, why). Found by diffing every record of two identical 2-rank FSDP2 runs of verl's real
# workers (bench/real_workers.py --nproc 2): the only records that differ are these, and only in their
# tensor statistics (input 0, the whole all-gather output buffer, and output 0, this rank's slice).
FSDP2_ALL_GATHER_BUFFER = ("Tensor.narrow.*.forward*"
                           "@*/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:* in all_gather_copy_in*")
DEFAULT_IGNORES: tuple[tuple[str, str], ...] = (
    (FSDP2_ALL_GATHER_BUFFER,
     "FSDP2's all-gather copy-in slices its output buffer, fresh from torch.empty, before the collective "
     "fills it: msprobe's statistics of that slice and of the buffer are whatever the memory held, "
     "different every run"),
)


@dataclass(frozen=True)
class Ignore:
    pattern: str  # as given
    record: str
    caller: str | None


def parse(pattern: str) -> Ignore:
    record, sep, caller = pattern.partition("@")
    return Ignore(pattern, record, caller if sep else None)


def _pattern(p) -> str:
    return p[0] if isinstance(p, tuple) else p


def match_ignore(name: str, patterns: Iterable, caller: str | None = None) -> str | None:
    """The first pattern (a string, or a (pattern, why) pair as in DEFAULT_IGNORES) that matches the
    record `name` (and, for a RECORD@CALLER pattern, `caller`, the call's innermost frame as
    innermost_frames() gives it), or None."""
    for p in patterns:
        ig = parse(_pattern(p))
        if not fnmatchcase(name, ig.record):
            continue
        if ig.caller is None or (caller is not None and fnmatchcase(caller, ig.caller)):
            return ig.pattern
    return None


_FRAME = re.compile(r"File (?P<file>.+?), line (?P<line>\d+), in (?P<func>[^,\s]+)")


def innermost_frames(stack) -> dict[str, str]:
    """msprobe's stack.json (parsed) -> {call name: its innermost frame as `path:LINE in func`}.
    Unlike the report's location (the first frame outside torch), this is the frame itself, torch's
    included: FSDP2's copy-in is inside torch."""
    out: dict[str, str] = {}
    if not isinstance(stack, dict):
        return out
    for entry in stack.values():
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list)):
            continue
        names, frames = entry
        m = _FRAME.search(str(frames[0])) if isinstance(frames, list) and frames else None
        if not m:
            continue
        where = f"{m.group('file').replace(chr(92), '/')}:{m.group('line')} in {m.group('func')}"
        for n in names:
            out.setdefault(str(n), where)
    return out
