"""Hostile edits that mean something to the compare's pairing: msprobe's dump.json, stack.json and
construct.json changed as structures (records dropped, duplicated, renumbered, reordered, renamed; shapes
halved as a batch split does; statistics and dtypes wrong; stack groups and construct parents broken:
cycles, self-parents, deep chains, wrong types). Byte-level and generic JSON mutations are mutations.py's;
these are the ones only a reader of msprobe dumps cares about. Each generator yields (case name, bytes),
deterministic for a seed."""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Iterator

Case = tuple[str, bytes]
CALL = re.compile(r"^(?P<api>.+?)\.(?P<n>\d+)\.(?P<dir>forward|backward)$")
MODULE = re.compile(r"^(?P<head>Module\..+\.(?:forward|backward))\.(?P<n>\d+)$")
ODD_NAMES = ["", ".", "x", "Functional..forward", "Functional.linear.-1.forward", "Functional.linear.x.forward",
             "Functional.linear.99999999999999999999.forward", "Tensor.__add__.0.sideways",
             "Module.model.layers.99999999999999999999.mlp.Qwen2MLP.forward.0",
             "Module.model.layers.-1.mlp.X.forward.0",
             "Module.model.layers..mlp.X.forward.0", "Module.layers.3.forward.0", "Module..forward.0",
             "pdbg_cpu.swiglu.0.forward", "Distributed.all_reduce.0.forward", "NPU.npu_rms_norm.0.forward",
             "Functional.linear.0.forward.input.0", "Functional.linear.0.forward\n", "é.ü.0.forward",
             "Module.model.layers.3." + "a." * 2000 + "X.forward.0", "Functional." + "x" * 10000 + ".0.forward"]
ODD_STATS = [float("nan"), float("inf"), -float("inf"), "nan", "inf", None, 1e308, -1e308, -0.0, 0, True, "abc", [1],
             {}, 2**80, "N/A"]
ODD_DTYPES = ["torch.bfloat16", "torch.float16", "torch.int64", "torch.bool", "torch.weird", "", None, 5, ["x"]]
ODD_VALUES = [None, [], {}, "x", 5, 1.5, True, [None], [[[]]], {"type": "torch.Tensor"}]


def _dumps(doc) -> bytes:
    return json.dumps(doc, indent=1, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _renumber(name: str, n: int) -> str:
    m = CALL.match(name)
    if m:
        return f"{m['api']}.{n}.{m['dir']}"
    m = MODULE.match(name)
    return f"{m['head']}.{n}" if m else name + f".{n}"


def _tensors(value) -> Iterator[dict]:
    """Every tensor statistics dict inside a record."""
    if isinstance(value, dict):
        if "dtype" in value and ("Norm" in value or "Max" in value or "shape" in value):
            yield value
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, list):
        for v in value:
            yield from _tensors(v)


# ---------------------------------------------------------------- dump.json

def dump_mutations(doc: dict, stem: str, seed: int = 0, per_kind: int = 6) -> Iterator[Case]:
    """Structural edits of one dump.json document ({"task", "level", ..., "data": {record: {...}}})."""
    rng = random.Random(f"{seed}:{stem}")
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, dict) or not data:
        return
    names = list(data)

    def out(tag: str, new_data=None, **header) -> Case:
        d = {**doc, **header}
        if new_data is not None:
            d["data"] = new_data
        return f"{stem}.{tag}.json", _dumps(d)

    picks = sorted(rng.sample(range(len(names)), min(per_kind, len(names))))
    for i in picks:
        yield out(f"drop{i}", {k: v for k, v in data.items() if k != names[i]})
        yield out(f"dup{i}", {**data, _renumber(names[i], 10**6 + i): data[names[i]]})
        j = min(i + 1, len(names) - 1)
        order = names[:i] + [names[j], names[i]] + names[j + 1:] if j > i else names
        yield out(f"swap{i}", {k: data[k] for k in order})
        yield out(f"rename{i}", {(rng.choice(ODD_NAMES) if k == names[i] else k): v for k, v in data.items()})
        yield out(f"value{i}", {**data, names[i]: rng.choice(ODD_VALUES)})
        other = names[rng.randrange(len(names))]
        yield out(f"asother{i}", {(other if k == names[i] else k): v for k, v in data.items()})
    yield out("reversed", dict(reversed(list(data.items()))))
    yield out("empty", {})
    yield out("only_backward", {k: v for k, v in data.items() if "backward" in k} or {names[0]: None})
    # one API's call numbers all shifted by one: what one more op of that type before them does
    apis = sorted({m["api"] for k in names if (m := CALL.match(k))})
    for api in rng.sample(apis, min(per_kind, len(apis))):
        shifted = {}
        for k, v in data.items():
            m = CALL.match(k)
            shifted[_renumber(k, int(m["n"]) + 1) if m and m["api"] == api else k] = v
        yield out(f"shift_{api[:40]}", shifted)
    yield from _split_like(out, data)
    for n, odd in enumerate(ODD_STATS):
        d = copy.deepcopy(data)
        for t in list(_tensors(d))[n::len(ODD_STATS)]:
            t[rng.choice(("Max", "Min", "Mean", "Norm"))] = odd
        yield out(f"stat{n}", d)
    for n, odd in enumerate(ODD_DTYPES):
        d = copy.deepcopy(data)
        for t in list(_tensors(d))[n::3]:
            t["dtype"] = odd
        yield out(f"dtype{n}", d)
    for n, shape in enumerate(([], [0], [-1, 4], "2,8", None, [2**62, 2**62], [1.5], [[2]])):
        d = copy.deepcopy(data)
        for t in list(_tensors(d))[n::4]:
            t["shape"] = shape
        yield out(f"shape{n}", d)
    deep: object = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [1], "Norm": 1.0}
    for _ in range(200):
        deep = [deep]
    yield out("deep_args", {**data, names[0]: {"input_args": deep, "output": []}})
    yield out("wide_args", {**data, names[0]: {"input_args": [dict(next(_tensors(data), {}))] * 20000}})
    for key, values in (("task", ("tensor", "md5", "overflow_check", "", None, 5)),
                        ("level", ("L0", "L1", "L2", "mix", "x", None, [])),
                        ("framework", ("mindspore", None)), ("dump_data_dir", ("/nonexistent", 5)),
                        ("summary_mode", ("md5", "statistics", None))):
        for n, v in enumerate(values):
            yield out(f"{key}{n}", **{key: v})
    for n, v in enumerate((None, [], "x", 5, [data[names[0]]])):
        yield f"{stem}.data{n}.json", _dumps({**doc, "data": v})
    yield f"{stem}.no_data.json", _dumps({k: v for k, v in doc.items() if k != "data"})
    yield f"{stem}.dup_data_key.json", _dumps(doc)[:-2] + b', "data": {}\n}'


def _split_like(out, data: dict) -> Iterator[Case]:
    """Every record as two calls of half the batch (shapes' first dim halved, call numbers renumbered), and
    shapes halved without a second call: what a forward cut into micro-batches looks like."""
    split, counters = {}, {}
    for k, v in data.items():
        for part in range(2):
            m = CALL.match(k) or MODULE.match(k)
            key = m["api"] if m and "api" in m.groupdict() else (m["head"] if m else k)
            n = counters.get(key, 0)
            counters[key] = n + 1
            rec = copy.deepcopy(v)
            for t in _tensors(rec):
                if isinstance(t.get("shape"), list) and t["shape"] and isinstance(t["shape"][0], int):
                    t["shape"][0] = max(1, t["shape"][0] // 2)
            split[_renumber(k, n) if m else f"{k}.{part}"] = rec
    yield out("split2", split)
    halved = copy.deepcopy(data)
    for t in _tensors(halved):
        if isinstance(t.get("shape"), list) and t["shape"] and isinstance(t["shape"][0], int):
            t["shape"][0] = max(1, t["shape"][0] // 2)
    yield out("halved", halved)


# ---------------------------------------------------------------- stack.json

def stack_mutations(doc, stem: str, names: list[str], seed: int = 0, per_kind: int = 6) -> Iterator[Case]:
    """Edits of msprobe 26's stack.json ({"0": [[record names], [frames]], ...}); names: the dump's records."""
    rng = random.Random(f"{seed}:{stem}")
    if not isinstance(doc, dict) or not doc:
        return
    keys = list(doc)

    def out(tag: str, d) -> Case:
        return f"{stem}.{tag}.json", _dumps(d)

    for i in sorted(rng.sample(range(len(keys)), min(per_kind, len(keys)))):
        k = keys[i]
        yield out(f"drop{i}", {kk: v for kk, v in doc.items() if kk != k})
        for n, v in enumerate((None, "x", 5, {}, [], [[]], [[], []], [["x"], "frames"], [[5], [5]],
                               [doc[k][0] if isinstance(doc[k], list) and doc[k] else []],
                               [[names[0] if names else "x"] * 50, ["File x, line 1, in f, \n y"]])):
            yield out(f"entry{i}-{n}", {**doc, k: v})
        if isinstance(doc[k], list) and len(doc[k]) == 2 and isinstance(doc[k][1], list):
            frames = doc[k][1]
            for n, fr in enumerate(("", "File , line , in ,", "File a.py, line 99999999999999999999, in f, \n x",
                                    "File a.py, line -3, in forward, \n x", "no frame here", "File é.py, line 1, in ü",
                                    None, 5)):
                yield out(f"frame{i}-{n}", {**doc, k: [doc[k][0], [fr] + frames]})
            yield out(f"deepframes{i}", {**doc, k: [doc[k][0], frames * 2000]})
            yield out(f"reversedframes{i}", {**doc, k: [doc[k][0], frames[::-1]]})
    all_names = [n for v in doc.values() if isinstance(v, list) and v and isinstance(v[0], list) for n in v[0]]
    yield out("one_group", {"0": [all_names, ["File a.py, line 1, in forward, \n x"]]})
    yield out("every_name_twice", {**doc, "dup": [all_names, ["File b.py, line 2, in forward, \n y"]]})
    yield out("unknown_names", {**doc, "x": [["Functional.nothing.0.forward", *ODD_NAMES[:8]], ["File c.py"]]})
    legacy = {}
    for v in doc.values():  # the older per-record layout: {record: [frames]}
        if isinstance(v, list) and len(v) == 2 and isinstance(v[0], list):
            legacy.update({n: v[1] for n in v[0] if isinstance(n, str)})
    yield out("legacy_layout", legacy)
    yield out("legacy_strings", {n: "File a.py, line 1, in f" for n in list(legacy)[:50]})
    for n, v in enumerate(([], None, "x", 5, [list(doc.values())], {"0": None})):
        yield out(f"whole{n}", v)


# ---------------------------------------------------------------- construct.json

def construct_mutations(doc, stem: str, seed: int = 0, per_kind: int = 6) -> Iterator[Case]:
    """Edits of construct.json ({record: parent module record or null}): cycles, self-parents, parents
    that do not exist or are not strings, a chain thousands deep, records moved to another layer."""
    rng = random.Random(f"{seed}:{stem}")
    if not isinstance(doc, dict) or not doc:
        return
    keys = list(doc)
    parents = sorted({p for p in doc.values() if isinstance(p, str)})

    def out(tag: str, d) -> Case:
        return f"{stem}.{tag}.json", _dumps(d)

    for i in sorted(rng.sample(range(len(keys)), min(per_kind, len(keys)))):
        k = keys[i]
        yield out(f"self{i}", {**doc, k: k})
        p = doc[k]
        if isinstance(p, str):
            yield out(f"cycle{i}", {**doc, k: p, p: k})
        yield out(f"drop{i}", {kk: v for kk, v in doc.items() if kk != k})
        for n, v in enumerate(("Module.nowhere.X.forward.0", "", 5, [], {}, True,
                               ["Module.model.Qwen2Model.forward.0"],
                               "Module.model.layers.99999999999999999999.mlp.Qwen2MLP.forward.0")):
            yield out(f"parent{i}-{n}", {**doc, k: v})
        if parents:
            yield out(f"moved{i}", {**doc, k: rng.choice(parents)})
    yield out("all_null", {k: None for k in keys})
    yield out("all_self", {k: k for k in keys})
    ring = {k: keys[(i + 1) % len(keys)] for i, k in enumerate(keys)}
    yield out("one_ring", ring)
    chain = {f"Module.m{i}.X.forward.0": f"Module.m{i + 1}.X.forward.0" for i in range(5000)}
    yield out("deep_chain", {**doc, **chain, keys[0]: "Module.m0.X.forward.0"})
    yield out("shuffled_parents", dict(zip(keys, rng.sample(list(doc.values()), len(keys)))))
    for n, v in enumerate(([], None, "x", 5, [keys], {"": None})):
        yield out(f"whole{n}", v)
