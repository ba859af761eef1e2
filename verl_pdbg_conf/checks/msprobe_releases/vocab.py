"""One msprobe release's config.json vocabulary (`msprobe-<version>.vocab.json`, read off its
source by extract_vocab.py), asked two things by the verdict: does this release read the key
at a path, and does one of its own construction checks fire on the value there.

A check is evaluated on the user's value as that release's code would run it: Python's own
operators on the JSON values, the builtins isinstance/len/all/any, and the release's
one-expression helpers (is_int). Anything else (a path on the machine that will run, a call
into the rest of msprobe) is undecidable here and gives no verdict."""

from __future__ import annotations

import functools
import json
import operator
import re

from verl_pdbg_conf.checks.msprobe_releases.release_files import load_part

_UNSET = object()
_TYPES = {"str": str, "int": int, "float": float, "bool": bool, "list": list, "dict": dict, "tuple": tuple}
_NAMED = re.compile(r"\b_k_(\w+)")


class Undecidable(Exception):
    pass


class Raises(Exception):
    """The check's own code raises on this value (a TypeError in `len(5)` is a raise at construction too)."""


def active_task(config: dict) -> str:
    task = config.get("task")
    return task if isinstance(task, str) and task else "statistics"


def part_of(vocab: dict, config: dict, path: str) -> tuple[str, str] | None:
    """(part, key) that `path` ("task", "tensor.file_format", "load.path") is read as, or None
    when the release does not read it: a section is read only for the active task."""
    parts = vocab["parts"]
    head, _, rest = path.partition(".")
    if not rest:
        if head in parts[""]["keys"] or (head == active_task(config) and head in vocab["tasks"]):
            return "", head
        return None
    if head in vocab["tasks"]:
        if head != active_task(config) or rest.split(".")[0] not in parts.get(head, {}).get("keys", {}):
            return None
        return head, rest.split(".")[0]
    if head in parts and head in parts[""]["keys"] and rest.split(".")[0] in parts[head]["keys"]:
        return head, rest.split(".")[0]
    return None


def reads(vocab: dict, config: dict, path: str) -> bool:
    return path in ("", "?") or part_of(vocab, config, path) is not None


def enums(vocab: dict) -> dict[str, list]:
    """{path: allowed values} of the release's `x not in [...]` checks (for value shapes)."""
    return vocab.get("enums", {})


# ---------------------------------------------------------------- evaluating a check

_CMP = {"Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt,
        "GtE": operator.ge, "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b,
        "Is": operator.is_, "IsNot": operator.is_not}


class _Eval:
    def __init__(self, names: dict, helpers: dict):
        self.names, self.helpers = names, helpers

    def __call__(self, node):
        kind = type(node).__name__
        fn = getattr(self, "e_" + kind, None)
        if fn is None:
            raise Undecidable(kind)
        try:
            return fn(node)
        except (TypeError, AttributeError, KeyError, IndexError, ValueError) as e:
            raise Raises(str(e)) from e

    def e_Constant(self, n):
        return n.value

    def e_List(self, n):
        return [self(e) for e in n.elts]

    e_Tuple = e_List

    def e_Name(self, n):
        if n.id in self.names:
            return self.names[n.id]
        if n.id in _TYPES:
            return _TYPES[n.id]
        raise Undecidable(n.id)

    def e_BoolOp(self, n):
        is_and = type(n.op).__name__ == "And"
        v = None
        for e in n.values:
            v = self(e)
            if bool(v) != is_and:
                return v
        return v

    def e_UnaryOp(self, n):
        v = self(n.operand)
        op = type(n.op).__name__
        if op == "Not":
            return not v
        if op == "USub":
            return -v
        raise Undecidable(op)

    def e_BinOp(self, n):
        ops = {"Add": operator.add, "Sub": operator.sub, "BitXor": operator.xor, "Mult": operator.mul}
        op = ops.get(type(n.op).__name__)
        if op is None:
            raise Undecidable(type(n.op).__name__)
        return op(self(n.left), self(n.right))

    def e_Compare(self, n):
        left = self(n.left)
        for op, right in zip(n.ops, n.comparators):
            r = self(right)
            if not _CMP[type(op).__name__](left, r):
                return False
            left = r
        return True

    def e_Call(self, n):
        if n.keywords or type(n.func).__name__ != "Name":
            raise Undecidable("call")
        args = [self(a) for a in n.args]
        name = n.func.id
        if name == "isinstance":
            t = args[1] if isinstance(args[1], tuple) else (args[1],)
            if not all(isinstance(x, type) for x in t):
                raise Undecidable("isinstance")
            return isinstance(args[0], t)
        if name in ("len", "all", "any"):
            return {"len": len, "all": all, "any": any}[name](args[0])
        if name in self.helpers:
            h = self.helpers[name]
            return _Eval(dict(zip(h["params"], args)), self.helpers)(_parsed(h["expr"]))
        raise Undecidable(name)


@functools.lru_cache(maxsize=None)
def _parsed(src: str):
    # compile's AST flag (ast.PyCF_ONLY_AST) without importing `ast`, 2 ms of start-up
    return compile(src, "<check>", "eval", 0x400).body


def _truth(src: str, names: dict, helpers: dict):
    return bool(_Eval(names, helpers)(_parsed(src)))


def _fires(check: dict, values: dict, helpers: dict) -> bool:
    """True when the release raises on these values; raises Undecidable when that cannot be told here."""
    names = {f"_k_{k}": v for k, v in values.items()}
    if not check.get("decidable", True):
        raise Undecidable("derived")

    def holds(names: dict) -> bool:
        return all(_truth(w, names, helpers) for w in check["when"]) and _truth(check["test"], names, helpers)

    try:
        if not check.get("each"):
            return holds(names)
        outer = [w for w in check["when"] if "_item" not in w]
        if not all(_truth(w, names, helpers) for w in outer):
            return False
        return any(holds(dict(names, _item=x)) for x in values.get(check["each"]))
    except Raises:
        return True
    except TypeError:  # iterating a value that is not a list: msprobe's loop raises the same
        return True


def _values(vocab: dict, part: str, section: dict, keys) -> dict:
    out = {}
    known = vocab["parts"].get(part, {}).get("keys", {})
    for k in keys:
        if k in section:
            out[k] = section[k]
        elif k in known and "default_source" not in known[k]:
            out[k] = known[k].get("default")
        else:
            raise Undecidable(k)
    return out


def checks_on(vocab: dict, config: dict, path: str) -> list[dict]:
    """The release's construction checks that name the key at `path`."""
    where = part_of(vocab, config, path)
    if where is None:
        return []
    return [c for c in vocab["checks"] if c["part"] == where[0] and where[1] in c["keys"]]


def failing_check(vocab: dict, config: dict, path: str) -> tuple[dict | None, bool]:
    """(the first of the release's checks on `path` that fires on this config, every check on it
    decidable). The checks are the part's checks that name the key."""
    where = part_of(vocab, config, path)
    if where is None:
        return None, True
    part, key = where
    section = config if part == "" else config.get(part)
    if not isinstance(section, dict):
        return None, False
    decided = True
    for c in checks_on(vocab, config, path):
        named = set(c["keys"]) | {n for src in [c["test"], *c["when"]] for n in _NAMED.findall(src)}
        try:
            if _fires(c, _values(vocab, part, section, sorted(named)), vocab.get("helpers", {})):
                return c, decided
        except Undecidable:
            decided = False
    return None, decided


def load_file(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def vocabulary(version: str) -> dict | None:
    """One release's config.json vocabulary (`msprobe-<version>.vocab.json`, see extract_vocab.py):
    the keys each part is read with and the checks run on them; None when none ships."""
    try:
        return load_part(version, "vocab")
    except (KeyError, OSError):
        return None


@functools.lru_cache(maxsize=None)
def value_specs(version: str) -> dict:
    """{path: spec} of every key this release reads, {"enum": [...]} where it checks the value
    against a list: the paths and value shapes (shapes.py) of keys the newest schema does not know."""
    v = vocabulary(version)
    if not v:
        return {}
    out: dict = {f"{part}.{k}" if part else k: {} for part, spec in v["parts"].items() for k in spec["keys"]}
    out.update({p: {"enum": e} for p, e in enums(v).items()})
    return out
