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
  stays narrow rather than hide a model's own calls.

A comparison uses Ignorer (one per pair: it reads each side's stack.json once, and only when a
RECORD@CALLER pattern's RECORD part matches); match_ignore is the same test for one record."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Iterable

from verl_pdbg_conf.compare.nodes import FRAME, stack_entries

# (pattern, why). Found by diffing every record of two identical 2-rank FSDP2 runs of verl's real
# workers (bench/real_workers.py --nproc 2): the only records that differ are these, and only in their
# tensor statistics (input 0, the whole all-gather output buffer, and output 0, this rank's slice).
FSDP2_ALL_GATHER_BUFFER = ("Tensor.narrow.*.forward*"
                           "@*/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:* in all_gather_copy_in*")
# Found the same way on two identical runs of megatron-core 0.16.1's GPTModel (tests/make_megatron_dumps.py,
# TP 1 and TP 2; and verl's own Megatron worker): they differ in this input only, NaN in one run and not the other.
MEGATRON_BADDBMM_BUFFER = ("Torch.baddbmm.*.forward.input.0"
                           "@*/megatron/core/transformer/dot_product_attention.py:* in forward")
# Found the same way on two identical runs of a transformers 5 Qwen3-MoE (its fused experts, grouped_mm):
# `inv_perm = torch.empty_like(perm); inv_perm[perm] = ...` records the fresh buffer as __setitem__'s input 0.
TRANSFORMERS_MOE_INV_PERM = ("Tensor.__setitem__.*.forward.input.0"
                             "@*/transformers/integrations/moe.py:* in grouped_mm_experts_forward")
DEFAULT_IGNORES: tuple[tuple[str, str], ...] = (
    (FSDP2_ALL_GATHER_BUFFER,
     "FSDP2's all-gather copy-in slices its output buffer, fresh from torch.empty, before the collective "
     "fills it: msprobe's statistics of that slice and of the buffer are whatever the memory held, "
     "different every run"),
    (MEGATRON_BADDBMM_BUFFER,
     "Megatron's local attention computes q.k with torch.baddbmm(buffer, q, k, beta=0) on a scratch buffer "
     "from its global memory buffer (torch.empty): beta=0 ignores it, msprobe's statistics of it are whatever "
     "the memory held (NaN in one run, not in the next)"),
    (TRANSFORMERS_MOE_INV_PERM,
     "transformers' fused experts (grouped_mm) invert their token permutation into a buffer fresh from "
     "torch.empty_like before filling it: msprobe records that buffer as __setitem__'s input, whatever the "
     "memory held"),
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


def innermost_frames(stack) -> dict[str, str]:
    """msprobe's stack.json (parsed) -> {call name: its innermost frame as `path:LINE in func`}.
    Unlike the report's location (the first frame outside torch), this is the frame itself, torch's
    included: FSDP2's copy-in is inside torch."""
    out: dict[str, str] = {}
    for names, frames in stack_entries(stack):
        m = FRAME.search(str(frames[0])) if frames else None
        if not m:
            continue
        where = f"{m.group('file').replace(chr(92), '/')}:{m.group('line')} in {m.group('func')}"
        for n in names:
            out.setdefault(str(n), where)
    return out


class Ignorer:
    """The patterns in force for one pair, with each side's callers read from its stack.json only when
    a RECORD@CALLER pattern's RECORD part matches a record (once per side, then kept):
    `Ignorer(patterns, target_dump, golden_dump).match(name, call)`; `counts` per pattern."""

    def __init__(self, patterns: Iterable, *dumps: str | None):
        self.patterns = tuple(_pattern(p) for p in patterns)
        self._parsed = [parse(p) for p in self.patterns]
        self._dumps = dumps
        self._frames: list[dict[str, str]] | None = None
        self.counts: dict[str, int] = {p: 0 for p in self.patterns}

    def _callers(self, call: str) -> list[str | None]:
        if self._frames is None:
            import os

            from verl_pdbg_conf.compare.dumpread import check_items, iter_items

            # stack.json read as a stream, keeping only the calls a RECORD@CALLER pattern can match:
            # memory stays bounded by those, not by the dump (the engine's bound)
            # (a RECORD part naming a row, Tensor.narrow.*.forward.output.0, is cut to its call's name)
            records = [r for ig in self._parsed if ig.caller is not None
                       for r in (ig.record, re.sub(r"\.(forward|backward)\b.*", r".\1", ig.record))]
            self._frames = []
            for d in self._dumps:
                kept: dict = {}
                stack = os.path.join(os.path.dirname(d), "stack.json")
                try:
                    for key, entry in iter_items(stack) if not check_items(stack) else ():
                        names = entry[0] if isinstance(entry, list) and entry and isinstance(entry[0], list) else ()
                        if any(fnmatchcase(str(n), r) for n in names for r in records):
                            kept[key] = entry
                except (OSError, ValueError, UnicodeDecodeError):  # DumpError is a ValueError
                    pass
                self._frames.append(innermost_frames(kept))
        return [f.get(call) for f in self._frames] or [None]

    def match(self, name: str, call: str = "") -> str | None:
        """The pattern leaving this record out (counted), or None. `call`: the record's call name in
        stack.json (Tensor.narrow.3.forward for Tensor.narrow.3.forward.output.0); the call is looked
        up on each side (a rank's or step's own stack.json), and either side's caller may match."""
        for ig in self._parsed:
            if not fnmatchcase(name, ig.record):
                continue
            if ig.caller is None or any(c is not None and fnmatchcase(c, ig.caller) for c in self._callers(call)):
                self.counts[ig.pattern] += 1
                return ig.pattern
        return None
