"""Every field the compare reads, given a value of each JSON type it cannot hold (issue: "values of every JSON
type in every field"). A tensor entry's type, dtype, shape (and its sizes) and statistics in dump.json; the
token record's dtype, architectures, requests, sampled tokens and trainer calls in tokens.json. A case from
here spoils a value the compare reads, so the compare may answer partial, corrupt or diverged, but `same`
after it is a false same: what the value held was counted as compared and equal.

A replacement is hostile only where msprobe or the runtime could never have written it: a value of another
JSON type (int and float are one, numbers), except the few a field may hold (a statistic or a log-prob may be
null, a mask may be a bool). Each generator yields (case name, bytes), deterministic, at most `limit`."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from mutations import set_at

Case = tuple[str, bytes]
JSON_TYPES = (("text", "x"), ("integer", 7), ("number", 2.5), ("bool", True), ("null", None),
              ("list", [["x"]]), ("mapping", {"k": 1}))
TENSOR_FIELDS = ("type", "dtype", "shape", "Max", "Min", "Mean", "Norm")
STATS = ("Max", "Min", "Mean", "Norm")
# what a field may hold besides its own type: msprobe writes null for a statistic it did not compute, a bool
# for a bool tensor's Max and Min; the runtime writes null for a log-prob the engine did not return and for
# rows it did not record, and a mask as 0/1 or a bool
MAY_HOLD = {**{s: ("null",) for s in STATS}, "logprob": ("null",), "logprob_logits": ("null",), "rows": ("null",),
            "next_logprobs": ("null",), "attention_mask": ("bool",)}


def group(value) -> str:
    if value is None:
        return "null"
    if type(value) is bool:
        return "bool"
    if type(value) in (int, float):
        return "number"
    return {str: "text", list: "list", dict: "mapping"}.get(type(value), "other")


def hostile(field: str, original) -> list[tuple[str, object]]:
    """The JSON types `field` (holding `original`) can never hold, one value each; a list of text is hostile
    where a list of sizes, ids or positions belongs too."""
    own, ok = group(original), MAY_HOLD.get(field, ())
    return [(name, value) for name, value in JSON_TYPES
            if group(value) not in ok and (group(value) != own or own == "list")]


def _dumps(doc) -> bytes:
    return json.dumps(doc, indent=1).encode()


def _cases(doc, paths: list[tuple], stem: str, limit: int, seed: int) -> Iterator[Case]:
    cases = [(path, name, value) for path in paths
             for name, value in hostile(next(p for p in reversed(path) if isinstance(p, str)), _get(doc, path))]
    if limit and len(cases) > limit:  # spread over the file: every field and type gets its turn across seeds
        cases = sorted(random.Random(f"{seed}:{stem}").sample(cases, limit), key=cases.index)
    for path, name, value in cases:
        yield f"{stem}.field[{'.'.join(map(str, path))}]={name}", _dumps(set_at(doc, path, value))


def _get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def _entries(value, path: tuple) -> Iterator[tuple[tuple, dict]]:
    """Each tensor entry inside a record's arguments, with its path."""
    if isinstance(value, dict):
        if value.get("type") == "torch.Tensor":
            yield path, value
            return
        for k, v in value.items():
            yield from _entries(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _entries(v, path + (i,))


ARGS = ("input_args", "input_kwargs", "output")


def dump_paths(doc: dict, args_only: bool = False) -> list[tuple]:
    """Every read field of every tensor entry, and each size of its shape; `args_only`: of module calls'
    arguments and outputs only (what the rollout compare reads: it takes no parameter, no gradient)."""
    out = []
    for name, rec in (doc.get("data") or {}).items():
        if not isinstance(rec, dict) or (args_only and not (name.startswith("Module.") and ".forward." in name)):
            continue
        for part, value in rec.items():
            if args_only and part not in ARGS:
                continue
            for path, entry in _entries(value, ("data", name, part)):
                out += [path + (f,) for f in TENSOR_FIELDS if f in entry]
                if isinstance(entry.get("shape"), list):
                    out += [path + ("shape", i) for i in range(len(entry["shape"]))]
    return out


def dump_fields(doc: dict, stem: str, seed: int = 0, limit: int = 0, args_only: bool = False) -> Iterator[Case]:
    yield from _cases(doc, dump_paths(doc, args_only), stem, limit, seed)


TOKEN_FIELDS = {"requests": ("request", "positions", "token_ids", "rows"),
                "calls": ("input_ids", "attention_mask", "position_ids", "next_logprobs")}


def _leaves(value, path: tuple) -> Iterator[tuple]:
    """The path itself and, inside a list, each element's (rows of a grid too)."""
    yield path
    if isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))


def token_paths(doc: dict) -> list[tuple]:
    """The fields of tokens.json the compare reads (dumpread.read_tokens keeps these and no other)."""
    out = [(k,) for k in ("dtype",) if k in doc]
    if isinstance(doc.get("architectures"), list):
        out += list(_leaves(doc["architectures"], ("architectures",)))
    for key, fields in TOKEN_FIELDS.items():
        for i, item in enumerate(doc.get(key) or []):
            for f in fields:
                if isinstance(item, dict) and f in item:
                    out += list(_leaves(item[f], (key, i, f)))
    for rid, s in (doc.get("sampled") or {}).items():
        for f in ("token_ids", "logprob", "logprob_logits"):
            if isinstance(s, dict) and f in s:
                out += list(_leaves(s[f], ("sampled", rid, f)))
    return out


def token_fields(doc: dict, stem: str, seed: int = 0, limit: int = 0) -> Iterator[Case]:
    yield from _cases(doc, token_paths(doc), stem, limit, seed)
