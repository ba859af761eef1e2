"""The value shapes that match a user's config.json against the case matrix (cases.py). No
torch, no msprobe, no matrix: the validator imports this module alone.

A config is matched by its *pairs*: (path, shape) for every leaf, where the shape is the
class of value that decides msprobe's behaviour ("=L1", "true", "list[int:0,numstr]",
"path:missing", ...), not the value itself. A case applies to a config when all the case's
pairs are among the config's."""

from __future__ import annotations

import os
import re

MISSING, EXISTING_DIR = "<missing-path>", "<existing-dir>"  # placeholders extract.py fills in
SECTIONS = ("statistics", "tensor", "structure", "diff_check", "nan_check", "acc_check")
PATH_KEYS = {"dump_path", "load.path", "tensor.bench_path", "acc_check.error_data_path"}
ID_KEYS = {"rank", "step", "load.rank", "load.step"}
UNKNOWN = "?"
DEFAULTS = {"task": "=statistics", "level": "=L1"}  # what msprobe assumes when the key is absent
_NUMSTR = re.compile(r"^\s*\+?[0-9]+\s*$")
_RANGE = re.compile(r"^\s*\+?([0-9]+)\s*-\s*\+?([0-9]+)\s*$")
API_NAME = re.compile(r"^(Distributed|Functional|Torch|Tensor|Mint|MintFunctional|Primitive|Aten|VF|NPU|Jit)"
                      r"\..*\.\d+\.(forward|backward)$")
MODULE_NAME = re.compile(r"^(Cell|Module)\..*\.(forward|backward)\.\d+$")
ID_MAX = 1_000_000


def schema() -> dict:
    """The shipped msprobe config.json schema (read once per process, shared with the checks)."""
    from verl_pdbg_conf.core.schema import load_schema

    return load_schema("msprobe-config")


def _resolve(node: dict, sch: dict) -> dict:
    while isinstance(node, dict) and "$ref" in node:
        node = sch["$defs"][node["$ref"].split("/")[-1]]
    return node


def _props(sch: dict) -> dict[str, dict]:
    """Every schema path ("task", "tensor.bench_path", "load.step") -> its resolved schema."""
    out = {}
    for k, v in sch["properties"].items():
        v = _resolve(v, sch)
        out[k] = v
        if k in SECTIONS or k == "load":
            for sk, sv in v.get("properties", {}).items():
                out[f"{k}.{sk}"] = _resolve(sv, sch)
    return out


_PROPS: dict | None = None


def props() -> dict[str, dict]:
    global _PROPS
    if _PROPS is None:
        _PROPS = _props(schema())
    return _PROPS


# ---------------------------------------------------------------- shapes

def _int_shape(v: int, ids: bool) -> str:
    if v < 0:
        return "int:neg"
    if v > ID_MAX:
        return "int:big"
    if ids:
        return "int:0" if v == 0 else "int:pos"
    return "int:0" if v == 0 else "int:1" if v == 1 else "int:pos"


def _str_shape(path: str, v: str, spec: dict) -> str:
    enum = spec.get("enum") or spec.get("items", {}).get("enum")
    if enum is not None:
        return f"={v}" if v in enum else "str:other"
    if path in PATH_KEYS:
        if v == "":
            return "str:empty"
        if v in (MISSING, EXISTING_DIR):  # a case's placeholder: what extract.py puts there
            return "path:missing" if v == MISSING else "path:dir"
        return "path:dir" if os.path.isdir(v) else "path:file" if os.path.exists(v) else "path:missing"
    if path.split(".")[-1] in ID_KEYS or path in ID_KEYS:
        if _NUMSTR.match(v):
            return "numstr:0" if int(v) == 0 else "numstr:pos"
        m = _RANGE.match(v)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if hi > ID_MAX:
                return "range:big"
            return "range:back" if lo > hi else "range:0" if lo == 0 else "range:pos"
        return "str:other"
    if path.endswith(".scope"):
        return "api" if API_NAME.match(v) else "module" if MODULE_NAME.match(v) else "str:name"
    if path.endswith(".list"):
        return "regex" if v.startswith("name-regex(") else "str"
    if path == "load.modules":
        return "bwd" if ".backward." in v else "fwd" if ".forward." in v else "str"
    return "str:empty" if v == "" else "str"


def shape(path: str, v, spec: dict | None = None) -> str:
    """The class of value `v` at schema path `path` that decides what msprobe does with it."""
    if spec is None:
        spec = props().get(path, {})
    ids = path in ID_KEYS
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return _int_shape(v, ids)
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return _str_shape(path, v, spec)
    if isinstance(v, list):
        if not v:
            return "list:empty"
        item_path = path if (ids or path.endswith((".scope", ".list", ".data_mode", "load.modules"))) else path + "[]"
        items = sorted({shape(item_path, x, spec) for x in v})
        n = f"{len(v)}:" if path.endswith(".scope") else ""  # scope is a two-entry window
        return f"list[{n}{','.join(items)}]"
    if isinstance(v, dict):
        return "dict:empty" if not v else "dict"
    return type(v).__name__


_KNOWN: dict[int, tuple] = {}


def _known(extra: dict | None) -> tuple[dict, set]:
    """(the paths the schema and `extra` know, the sections among them), once per `extra`."""
    if not extra:
        return props(), set(SECTIONS) | {"load"}
    hit = _KNOWN.get(id(extra))
    if hit is None or hit[0] is not extra:
        hit = _KNOWN[id(extra)] = (extra, {**extra, **props()},
                                   set(SECTIONS) | {"load"} | {p.split(".")[0] for p in extra if "." in p})
    return hit[1], hit[2]


def pairs(config, extra: dict | None = None) -> frozenset:
    """(path, shape) of every leaf of a config.json, plus msprobe's defaults for task and level.
    Keys neither the schema nor `extra` (one release's vocabulary: {path: {"enum": [...]}}) know
    are one path, "?" (or "<section>.?")."""
    if not isinstance(config, dict):
        return frozenset({("", shape("", config))})
    known, sections = _known(extra)
    out = set()
    for k, v in config.items():
        top = k if k in known or k in sections else UNKNOWN
        if top in sections:
            if isinstance(v, dict) and v:
                for sk, sv in v.items():
                    p = f"{top}.{sk}"
                    out.add((p if p in known else f"{top}.{UNKNOWN}", shape(p, sv, known.get(p, {}))))
                continue
        out.add((top, shape(top, v, known.get(top, {}))))
    for k, s in DEFAULTS.items():
        if k not in config or config[k] is None:
            out.discard((k, "null"))
            out.add((k, s))
    if ("level", "=L2") in out:  # the kernel dump wants exactly one API in list: count them there
        for p, _ in list(out):
            if p.endswith(".list") and isinstance(config.get(p.split(".")[0]), dict):
                items = config[p.split(".")[0]].get("list")
                if isinstance(items, list):
                    out.add((p + "#", "1" if len(items) == 1 else "n"))
    return frozenset(out)


def case_pairs(config, extra: dict | None = None) -> frozenset:
    """A case's pairs: what it sets, with task's default only where it sets a statistics key (its
    context); a case that leaves level alone holds at every level."""
    out = set(pairs(config, extra))
    if isinstance(config, dict):
        if "level" not in config:
            out.discard(("level", DEFAULTS["level"]))
        if "task" not in config and not any(p.startswith("statistics.") or p == "statistics" for p, _ in out):
            out.discard(("task", DEFAULTS["task"]))
    return frozenset(out)
