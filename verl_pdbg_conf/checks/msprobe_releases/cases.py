"""The case matrix run on every msprobe release. No torch, no msprobe; built by extract.py
(which runs each case on a real release and records what it did) and by the tests, not by
the validator, which reads each case's key from the release's facts and matches a config
with shapes.py.

A case is one config.json that differs from msprobe's defaults in one key (or in one
combination the schema ties together), built from the shipped JSON Schema: every enum value,
wrong types, one-number strings in rank/step lists, booleans as strings, missing paths,
boundaries."""

from __future__ import annotations

import json
import os
import re

from verl_pdbg_conf.checks.msprobe_releases.shapes import (  # noqa: F401 - the names extract.py and tests use
    DEFAULTS, EXISTING_DIR, ID_KEYS, MISSING, PATH_KEYS, SECTIONS, UNKNOWN, _resolve, case_pairs, pairs, props,
    schema, shape)

# ---------------------------------------------------------------- the matrix

def _enum_values(spec: dict) -> list:
    enum = list(spec.get("enum", []))
    strs = [e for e in enum if isinstance(e, str)]
    return enum + ([strs[0].lower() if strs[0] != strs[0].lower() else strs[0].upper()] if strs else []) + [1]


def _id_values(key: str) -> list:
    vals = [[], None, [0], ["0"], ["0-1"], ["1-0"], [True], [0.0], ["a"], [-1], "0"]
    if key.endswith("step"):
        vals += [[1], [0, 1]]
    return vals


def _bool_values() -> list:
    return [True, False, "true", "no", 1, None]


def _section_values(key: str, spec: dict) -> list:
    if key == "scope":
        return [[], ["Functional.linear.0.forward", "Functional.relu.0.forward"],
                ["Module.0.Linear.forward.0", "Module.2.Linear.forward.0"], ["Functional.linear.0.forward"],
                "Functional.linear.0.forward"]
    if key == "list":
        return [[], ["Functional.linear"], ["name-regex(linear)"], "Functional.linear"]
    if key == "data_mode":
        return [["input"], ["all", "input"], [], "all"]
    if key in ("bench_path", "error_data_path"):
        return [MISSING, EXISTING_DIR, None, ""]
    if key == "diff_nums":
        return [-1, 0, 2, "1"]
    if key == "slice":
        return [[], [{"dim": 0, "size": 4, "begin": 0, "end": 2}], "x"]
    if key == "request_id":
        return [None, "req-1", 1]
    if "enum" in spec:
        return _enum_values(spec)
    t = spec.get("type")
    if t == "array" or t == ["array", "null"]:
        return [[], ["Functional.linear"], "Functional.linear"]
    return [None, 1, "x"]


def vocabularies() -> list[dict]:
    """Every shipped release's vocabulary (extract_vocab.py), for the matrix over their union."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    for n in sorted(os.listdir(here)):
        if n.endswith(".vocab.json"):
            with open(os.path.join(here, n), encoding="utf-8") as f:
                out.append(json.load(f))
    return out


def union_vocabulary(vocabs: list[dict]) -> tuple[dict[str, set], dict[str, list[str]], set[str]]:
    """({part: {key}}, {"part.key": [the tests of its checks]}, {task}) over the releases."""
    keys: dict[str, set] = {}
    tests: dict[str, list[str]] = {}
    tasks: set[str] = set()
    for v in vocabs:
        tasks |= set(v["tasks"])
        for part, spec in v["parts"].items():
            keys.setdefault(part, set()).update(spec["keys"])
        for c in v["checks"]:
            for k in c["keys"]:
                tests.setdefault(f"{c['part']}.{k}" if c["part"] else k, []).append(c["test"])
    return keys, tests, tasks


def _checked_values(key: str, tests: list[str]) -> list:
    """Values that exercise every kind of check a release runs on `key`: each allowed value and
    one outside them, the types the checks test and one other, numbers around the bounds."""
    import ast

    vals: list = []
    for t in tests:
        for m in re.finditer(rf"_k_{key} not in (\[[^\]]*\])", t):
            try:
                vals += [x for x in ast.literal_eval(m.group(1)) if isinstance(x, (str, int))] + ["bogus", 1]
            except (ValueError, SyntaxError):
                pass
        for m in re.finditer(rf"isinstance\(_k_{key}, (\w+)\)", t):
            vals += {"bool": [True, False, "true"], "list": [[], ["Functional.linear"], "Functional.linear"],
                     "str": ["x", 1], "int": [1, "1"], "dict": [{}, "x"]}.get(m.group(1), [])
        if re.search(rf"is_int\(_k_{key}\)|_k_{key} *[<>]=?|[<>]=? *_k_{key}", t):
            vals += [-1, 0, 2, "1"]
    out, seen = [], set()
    for v in vals:
        j = json.dumps(v)
        if j not in seen:
            seen.add(j)
            out.append(v)
    return out or ["bogus"]


def set_paths(config, prefix: str = "") -> set[str]:
    """The key paths a config sets ("task", "tensor.file_format", "load.step")."""
    out = set()
    if isinstance(config, dict):
        for k, v in config.items():
            out.add(prefix + k)
            if not prefix and isinstance(v, dict):
                out |= set_paths(v, k + ".")
    return out


def vocabulary_cases(existing: list[dict]) -> list[dict]:
    """Cases for every key some release reads that no case of the schema's matrix sets (legacy
    keys, the 8.x task sections, the sections of tasks that cannot run here): each checked key
    with the values its checks tell apart, each key no release checks with one value; and every
    task some release has, alone."""
    keys, tests, tasks = union_vocabulary(vocabularies())
    have = set().union(*(set_paths(c["config"]) for c in existing))
    ids = {c["id"] for c in existing}
    out = [_case(f"task={json.dumps(t)}", "task", {"task": t}) for t in sorted(tasks)
           if f"task={json.dumps(t)}" not in ids and t != "statistics"]
    load = {"path": EXISTING_DIR, "modules": ["Module.0.Linear.forward.0"], "dump_after_load": True}
    for part in sorted(keys):
        for k in sorted(keys[part]):
            path = f"{part}.{k}" if part else k
            if path in have or (part and part != "load" and part not in tasks):
                continue
            base = {} if part in ("", "statistics", "load") else {"task": part}
            for v in _checked_values(k, tests.get(path, [])):
                sec = dict(load, **{k: v}) if part == "load" else {k: v}
                cfg = dict(base, **{k: v}) if not part else dict(base, **{part: sec})
                out.append(_case(f"{path}={json.dumps(v)}", path, cfg))
    return out


def _case(cid: str, key: str, config: dict) -> dict:
    return {"id": cid, "key": key, "config": config}


def matrix() -> list[dict]:
    """Every case, in a fixed order. `key` is the schema path the case is about ("" for the
    defaults), the place a finding points at."""
    sch = schema()
    out = [_case("defaults", "", {})]
    top = {k: _resolve(v, sch) for k, v in sch["properties"].items()}
    for k, spec in top.items():
        if k in SECTIONS or k == "$schema":
            continue
        if spec.get("x-legacy"):
            vals = [True, False] if k in ("enable_dataloader", "is_deterministic", "online_run_ut") else \
                [{"x": 1}] if k in ("overflow_check", "free_benchmark", "run_ut", "grad_probe", "exception_dump") \
                else ["pytorch"] if k == "framework" else ["x"]
        elif k in ("rank", "step"):
            vals = _id_values(k)
        elif k == "dump_path":
            vals = [MISSING, None]
        elif k == "load":
            continue
        elif "enum" in spec:
            vals = _enum_values(spec)
        elif spec.get("type") == "boolean" or spec.get("type") == ["boolean", "null"]:
            vals = _bool_values()
        else:
            vals = [[], None, "npu", [1]]
        for v in vals:
            out.append(_case(f"{k}={json.dumps(v)}", k, {k: v}))
    out.append(_case("unknown key", UNKNOWN, {"not_a_key": 1}))
    out.append(_case("scope at the top level", UNKNOWN, {"scope": ["Functional.linear.0.forward",
                                                                   "Functional.relu.0.forward"]}))
    # load mode
    mod = ["Module.0.Linear.forward.0"]
    for cid, load in (("empty", {}), ("missing path", {"path": MISSING, "modules": mod}),
                      ("load only", {"path": EXISTING_DIR, "modules": mod}),
                      ("dump after load", {"path": EXISTING_DIR, "modules": mod, "dump_after_load": True}),
                      ("backward module", {"path": EXISTING_DIR, "modules": ["Module.0.Linear.backward.0"],
                                           "dump_after_load": True})):
        key = "load.path" if cid == "missing path" else "load.modules" if cid == "backward module" else "load"
        out.append(_case(f"load {cid}", key, {"load": load}))
    # task x level
    tasks = [t for t in top["task"]["enum"] if t]
    levels = [lv for lv in top["level"]["enum"] if lv]
    for t in tasks:
        if t in ("statistics", "nan_check", "acc_check"):
            continue  # statistics is the default task (the level cases), the other two raise on CPU
        for lv in levels:
            if lv == "L1":
                continue  # the default level: the task cases
            out.append(_case(f"task={t} level={lv}", "task", {"task": t, "level": lv}))
    # every key of every task's section, with that task
    for t in SECTIONS:
        sec = _resolve(top[t], sch)
        keys = sec.get("properties", {})
        if t in ("structure", "diff_check"):
            keys = {k: v for k, v in keys.items() if k in ("summary_mode", "data_mode")}
        elif t in ("nan_check", "acc_check"):
            keys = {}  # those tasks raise on CPU whatever the section holds
        base = {} if t == "statistics" else {"task": t}
        for v in ({}, [], None):
            out.append(_case(f"{t}={json.dumps(v)}", t, dict(base, **{t: v})))
        for sk, sspec in keys.items():
            for v in _section_values(sk, _resolve(sspec, sch)):
                out.append(_case(f"{t}.{sk}={json.dumps(v)}", f"{t}.{sk}", dict(base, **{t: {sk: v}})))
    # settings in another task's section
    out.append(_case("tensor settings with task statistics", "tensor",
                     {"task": "statistics", "tensor": {"list": ["Functional.linear"]}}))
    # the schema's cross-field rules
    lin = ["Functional.linear.0.forward"]
    for cid, key, cfg in (
            ("async tensor with list", "async_dump", {"async_dump": True, "task": "tensor",
                                                      "tensor": {"list": ["Functional.linear"]}}),
            ("async tensor without list", "async_dump", {"async_dump": True, "task": "tensor"}),
            ("async statistics md5", "statistics.summary_mode", {"async_dump": True,
                                                                 "statistics": {"summary_mode": "md5"}}),
            ("async statistics xor", "statistics.summary_mode", {"async_dump": True,
                                                                 "statistics": {"summary_mode": "xor"}}),
            ("L2 tensor one api", "level", {"level": "L2", "task": "tensor", "tensor": {"list": lin}}),
            ("L2 tensor two apis", "level", {"level": "L2", "task": "tensor",
                                             "tensor": {"list": lin + ["Functional.relu.0.forward"]}}),
            ("L0 scope api names", "statistics.scope", {"level": "L0", "statistics": {
                "scope": ["Functional.linear.0.forward", "Functional.relu.0.forward"]}}),
            ("L0 scope module names", "statistics.scope", {"level": "L0", "statistics": {
                "scope": ["Module.0.Linear.forward.0", "Module.2.Linear.forward.0"]}}),
            ("mix scope module names", "statistics.scope", {"level": "mix", "statistics": {
                "scope": ["Module.0.Linear.forward.0", "Module.2.Linear.forward.0"]}}),
            ("L0 risk_level", "risk_level", {"level": "L0", "risk_level": "CORE"}),
            ("risk_level with list", "risk_level", {"risk_level": "CORE", "statistics": {"list": ["Functional.linear"]}}),
            ("structure slice", "structure.slice", {"task": "structure", "level": "mix",
                                                    "structure": {"slice": [{"dim": 0, "size": 4, "begin": 0,
                                                                             "end": 2}]}}),
            ("L0 tensor", "level", {"level": "L0", "task": "tensor"}),
            ("mix tensor", "level", {"level": "mix", "task": "tensor"}),
    ):
        out.append(_case(cid, key, cfg))
    out += vocabulary_cases(out)
    ids = [c["id"] for c in out]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return out
