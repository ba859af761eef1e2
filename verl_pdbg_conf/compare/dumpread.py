"""Read an msprobe dump.json as a stream: the header keys, then the "data" records one at a time, each
flattened into tensor rows named and ordered as msprobe's compare names and orders them. A record is
parsed alone (json's C scanner on a sliding buffer), so memory holds one record, never the file.

msprobe 26.2 writes {"task", "level", "framework", "dump_data_dir", "data": {record: {...}}}; a record
is an API or module call ("Functional.linear.3.forward", "Module.blocks.3.fc.Linear.forward.0") with
input_args / input_kwargs / input / output / parameters, or a parameters_grad record. The naming and
order below follow msprobe.core.compare.utils.read_op / op_item_parse / reorder_index.

This module is the one boundary where the compare reads what msprobe and the runtime wrote: dump.json
(streamed), construct.json and stack.json (check_items), and the runtime's tokens.json (read_tokens). A file
that is not JSON of the expected shape raises DumpError; a value, row or record inside a readable file that
is not what msprobe writes is kept as unreadable (Row.bad says why), so that it is counted as not compared,
never as compared and equal."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Iterator

from verl_pdbg_conf.core.hf_config import num_experts

CHUNK = 1 << 20
_DEC = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")
# msprobe's IO_NAME_MAPPING, in its order: the record keys that hold tensors and the name part they give
_IO = (("input_args", ".input", "input"), ("input_kwargs", ".input", "input"), ("input", ".input", "input"),
       ("output", ".output", "output"), ("parameters", ".parameters", "parameters"))
_STATE_RANK = {"parameters": 1, "output": 2, "parameters_grad": 3}  # reorder_index: inputs, params, outputs, grads
STATS = ("Max", "Min", "Mean", "Norm")
MAX_DEPTH = 50
HEADER_TEXT = ("task", "level", "framework")  # header keys the compare reads: text (or null) in every msprobe dump
HEAD_RECORDS = 1024  # records DumpReader.head() reads ahead, at most, to find the first tensor


class DumpError(ValueError):
    """The file is not an msprobe dump.json (truncated, not JSON, no "data" mapping)."""


@dataclass(slots=True)
class Row:
    """One tensor (or scalar argument) of a record, as one row of msprobe's compare result."""
    name: str  # Functional.linear.3.forward.input.1
    key: str  # the pairing key (backward call numbers renumbered as msprobe does)
    record: str  # Functional.linear.3.forward
    state: str  # input | output | parameters | parameters_grad
    direction: str  # forward | backward | parameters_grad
    dtype: str
    shape: object  # a list for tensors, "[]" for scalars (msprobe's text)
    stats: tuple  # Max, Min, Mean, Norm (floats, ints, strings or None as dumped)
    data_name: str  # the tensor file of the tensor task, "-1" without one
    md5: str | None = None
    alike: int = 1  # ranks of a tensor-parallel group that held it alike (taken once: replicated or a shard)
    parts: int = 1  # rows whose statistics were put together into this one (concat.py)
    bad: str = ""  # why the row cannot be read ("" where it can): it is never judged, and counts as not compared
    # why the row is its ranks' own, not the model's tensor (a partial sum, a rank-local index; parallel/
    # merge.py): judged only against a row of the same kind, never against a whole tensor
    local: str = ""


class DumpReader:
    """for name, record in DumpReader(path).records(): ...; .header holds the top-level keys read so far
    (all of them before the first record in msprobe's files; the rest once records() is exhausted)."""

    def __init__(self, path: str, chunk: int = CHUNK):
        self.path = path
        self.chunk = chunk
        self.header: dict = {}
        self._fh = None
        self._buf = ""
        self._pos = 0
        self._eof = False
        self._stream = None  # the one pass over the file (records())
        self._held: list = []  # records head() read ahead
        self._failed: BaseException | None = None  # what head() met, raised by records()

    # -- buffer
    def _fill(self, at_least: int = 0) -> bool:
        if self._eof:
            return False
        data = self._fh.read(max(self.chunk, at_least))
        if not data:
            self._eof = True
            return False
        self._buf = self._buf[self._pos:] + data
        self._pos = 0
        return True

    def _peek(self) -> str:
        """Next non-blank character ("" at end of file), not consumed."""
        buf, pos = self._buf, self._pos
        if pos < len(buf) and buf[pos] not in " \t\n\r":
            return buf[pos]
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._fill():
                return ""

    def _expect(self, ch: str) -> None:
        got = self._peek()
        if got != ch:
            raise DumpError(f"is not valid JSON (expected {ch!r}, found {got or 'end of file'!r} near byte "
                            f"{self._fh.tell()}): truncated or overwritten")
        self._pos += 1

    def _value(self):
        """One JSON value at the cursor; reads more of the file (doubling) while it is cut off."""
        self._peek()
        while True:
            try:
                value, end = _DEC.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as e:
                if not self._fill(2 * (len(self._buf) - self._pos)):  # the cut-off record, doubled
                    raise DumpError(f"is not valid JSON ({e.msg}): truncated or overwritten") from None
                continue
            except RecursionError:
                raise DumpError("nests JSON deeper than Python's recursion limit: not an msprobe dump") from None
            except ValueError as e:  # not a JSONDecodeError: an integer of more digits than Python converts
                raise DumpError(f"holds a value JSON cannot give Python ({e}): not an msprobe dump") from None
            if end == len(self._buf) and not self._eof and not isinstance(value, (dict, list, str)):
                self._fill()  # a number or literal may go on in the next chunk
                continue
            self._pos = end
            return value

    # -- structure
    def records(self) -> Iterator[tuple[str, dict]]:
        """The records in file order, the file opened once: those head() read ahead come first, then the
        rest of the same stream (a failure head() met is raised here, in its place)."""
        if self._stream is None:
            self._stream = self._records()
        while self._held:
            yield self._held.pop(0)
        if self._failed is not None:
            raise self._failed
        yield from self._stream

    def head(self, limit: int = HEAD_RECORDS) -> dict:
        """The top-level keys before "data" and the dump's summary_mode (statistics or md5, as its first tensor
        says), reading ahead at most `limit` records and keeping them for records(); {} where the file cannot
        be read (records() raises why)."""
        if self._stream is None:
            self._stream = self._records()
        out = {"summary_mode": None}
        try:
            for name, rec in self._stream:
                self._held.append((name, rec))
                out["summary_mode"] = summary_mode(name, rec)
                if out["summary_mode"] or len(self._held) >= limit:
                    break
        except (OSError, DumpError, UnicodeDecodeError) as e:
            self._failed = e
            return {}
        return {**out, **self.header}

    def _records(self) -> Iterator[tuple[str, dict]]:
        with open(self.path, encoding="utf-8") as self._fh:
            if self._peek() != "{":
                raise DumpError("is not a JSON object: not an msprobe dump")
            self._pos += 1
            seen_data = False
            while self._peek() != "}":
                key = self._value()
                self._expect(":")
                if key == "data" and self._peek() == "{":
                    seen_data = True
                    self._pos += 1
                    while self._peek() != "}":
                        name = self._value()
                        self._expect(":")
                        rec = self._value()
                        yield name, rec
                        if self._peek() == ",":
                            self._pos += 1
                    self._pos += 1
                else:
                    value = self.header[key] = self._value()
                    if key in HEADER_TEXT and value is not None and type(value) is not str:
                        raise DumpError(f"has a {key} that is {show(value)}, not text: not an msprobe dump")
                if self._peek() == ",":
                    self._pos += 1
                elif self._peek() != "}":
                    raise DumpError(f"is not valid JSON (expected ',' or '}}' near byte {self._fh.tell()})")
            if not seen_data:
                raise DumpError('has no "data" mapping: not an msprobe dump')


def iter_items(path: str, chunk: int = CHUNK) -> Iterator[tuple]:
    """The (key, value) pairs of a file holding one JSON object (stack.json, construct.json), one at a
    time. Raises DumpError if it is not one."""
    reader = DumpReader(path, chunk)
    with open(path, encoding="utf-8") as reader._fh:
        if reader._peek() != "{":
            raise DumpError("is not a JSON object")
        reader._pos += 1
        while reader._peek() != "}":
            key = reader._value()
            reader._expect(":")
            yield key, reader._value()
            if reader._peek() == ",":
                reader._pos += 1
            elif reader._peek() != "}":
                raise DumpError(f"is not valid JSON (expected ',' or '}}' near byte {reader._fh.tell()})")


def _construct_entry(key, parent) -> str:
    """construct.json, as msprobe 26.2's data_collector writes it: each call's enclosing module call (text),
    null at the top; under Megatron an optimizer call's [its status or null, the micro step] and the
    micro step number itself."""
    if parent is None or type(parent) is str:
        return ""
    if key == "megatron_micro_step_number" and type(parent) is int:
        return ""
    if type(parent) is list and len(parent) == 2 and (parent[0] is None or type(parent[0]) is str) \
            and type(parent[1]) is int:
        return ""
    return f"{key}: its enclosing call is {show(parent)}, not a call name or null"


def _stack_entry(key, entry) -> str:
    """stack.json: per call stack, [[the calls made from it], [its frames]], all text (msprobe's other
    analyze_api_call_stack joins the frames into one text)."""
    if not (type(entry) is list and len(entry) == 2 and type(entry[0]) is list and type(entry[1]) in (list, str)):
        return f"entry {key} is {show(entry)}, not [[call names], [frames]]"
    for part, what in zip(entry, ("call name", "frame")):
        for x in (part if type(part) is list else ()):
            if type(x) is not str:
                return f"entry {key} holds a {what} that is {show(x)}, not text"
    return ""


ENTRY_CHECKS = {"construct.json": _construct_entry, "stack.json": _stack_entry}
_CHECKED: dict = {}  # (path, size, mtime) -> the verdict: each file is read once per process to be checked


def check_items(path: str, kind: str = "") -> str:
    """Why the construct.json or stack.json at path cannot be used, or "" where it can (or there is none).
    Checked whole, before any of it is used: a file broken half-way would otherwise have given the records
    before the break scopes and call sites, the rest none, and the two runs would seem to differ there."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    key = (path, kind, st.st_size, st.st_mtime_ns)
    if key in _CHECKED:
        return _CHECKED[key]
    check = ENTRY_CHECKS[kind or os.path.basename(path)]  # kind: construct.json or stack.json (the file's name)
    said = ""
    try:
        for k, v in iter_items(path):
            said = check(k, v)
            if said:
                break
    except DumpError as e:
        said = str(e)
    except UnicodeDecodeError:
        said = "is not UTF-8 text"
    except OSError as e:
        said = f"cannot be read ({e.strerror})"
    if len(_CHECKED) > 1024:
        _CHECKED.clear()
    _CHECKED[key] = said
    return said


def summary_mode(name: str, rec) -> str | None:
    """md5 or statistics, as the record's first tensor says (msprobe's md5_find); None where it holds none.
    A torch.Size or a process group (its shape text, not a list) is a value: msprobe writes no md5 for one."""
    for row in rows_of(name, rec):
        if type(row.shape) is list and row.dtype.startswith("torch.") and not row.bad:
            return "md5" if row.md5 is not None else "statistics"
    return None


# ----------------------------------------------------------------------------- records -> rows

def split_record(name: str) -> tuple[str, str, str]:
    """msprobe's split_data_name_components: (op_no_number, call_direction, direction), "" when the
    name is none of api.N.forward, Module.x.forward.N or *.parameters_grad[.N]."""
    parts = name.split(".")
    last = parts[-1]
    second = parts[-2] if len(parts) >= 2 else ""
    if "parameters_grad" in (last, second):
        return ".".join(parts[:-1]) if len(parts) > 1 else "", "parameters_grad", "parameters_grad"
    for direction in ("forward", "backward"):
        if direction in (last, second):
            return (".".join(parts[:-2]) if len(parts) > 2 else ""), f"{second}.{last}", direction
    return "", "", ""


def rows_of(name: str, rec, direction: str | None = None) -> list[Row]:
    """One record's rows in msprobe's order (inputs, parameters, outputs, parameter gradients). A record
    that is not a mapping is one unreadable row."""
    parts = name.split(".")
    out: list = []
    if parts[-1] == "parameters_grad" or (len(parts) >= 2 and parts[-2] == "parameters_grad"):
        _walk(rec, name, "parameters_grad", out, 0, True)
    elif isinstance(rec, dict):
        for key, suffix, state in _IO:
            if key in rec:
                _walk(rec[key], name + suffix, state, out, 0, False)
    else:
        out.append(_unread(name, "input", f"is {show(rec)}, not a record (a mapping of inputs and outputs)"))
    if any(r[0] for r in out):
        out.sort(key=lambda r: r[0])  # stable: msprobe's reorder_index
    if direction is None:
        direction = split_record(name)[2]
    return [Row(n, n, name, st, direction, dt, sh, stats, dn, md5, bad=bad)
            for _, n, st, dt, sh, stats, dn, md5, bad in out]


def show(value) -> str:
    """A value as a finding names it: its JSON kind, and the value itself where short."""
    if value is None:
        return "null"
    if isinstance(value, (list, dict)):
        return f"a {'list' if isinstance(value, list) else 'mapping'} of {len(value)}"
    kind = "the text" if isinstance(value, str) else "the boolean" if isinstance(value, bool) else "the number"
    said = json.dumps(value) if isinstance(value, str) else repr(value)
    return f"{kind} {said[:40]}{'...' if len(said) > 40 else ''}"


MAX_SAID = 4  # problems of one file a finding names; the rest counted


def said_of(said: list[str], sep: str = "; ") -> str:
    """The first MAX_SAID problems of one file, the rest counted: a finding's text stays bounded."""
    return sep.join(said[:MAX_SAID]) + (f"{sep}and {len(said) - MAX_SAID} more" if len(said) > MAX_SAID else "")


NONFINITE_WORDS = ("nan", "inf", "-inf", "+inf", "infinity", "-infinity")


def stat_problem(stat: str, value, dtype: str) -> str:
    """Why one statistic of a tensor is not what msprobe 26.2 writes, or "". msprobe writes a number (its
    json.dump spells NaN and the infinities as the literals NaN, Infinity, -Infinity, which read as floats),
    null where it computed none (an empty tensor, an integer's Mean and Norm, float64 or precision high), and
    a boolean for a bool tensor's Max and Min. A text is never one: "nan" in quotes was not written by msprobe."""
    t = type(value)
    if t is float or t is int or value is None or (t is bool and dtype == "torch.bool" and stat in ("Max", "Min")):
        return ""
    said = f"{stat} is {show(value)}, not a number"
    if t is str and value.strip().lower() in NONFINITE_WORDS:
        said += " (msprobe writes a non-finite statistic as the JSON literal NaN or Infinity, not as text)"
    return said


def tensor_problem(d: dict) -> str:
    """Why a tensor entry of a dump cannot be read (its dtype, shape, statistics, md5, data_name), or ""."""
    dtype, shape = d.get("dtype"), d.get("shape")
    if type(dtype) is not str:
        return f"dtype is {show(dtype)}, not text"
    if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
        return f"shape is {show(shape)}, not a list of sizes"
    for stat in STATS:
        said = stat_problem(stat, d.get(stat), dtype)
        if said:
            return said
    md5, data_name = d.get("md5"), d.get("data_name")
    if md5 is not None and type(md5) is not str:
        return f"md5 is {show(md5)}, not text"
    if data_name is not None and type(data_name) is not str:
        return f"data_name is {show(data_name)}, not a file name"
    return ""


def _unread(name: str, state: str, why: str) -> tuple:
    return (_STATE_RANK.get(state, 0), name, state, "", None, (None,) * 4, "-1", None, why)


def _walk(data, name: str, state: str, out: list, depth: int, grad: bool) -> None:
    if depth > MAX_DEPTH:
        raise DumpError(f"nests {name} deeper than {MAX_DEPTH}")
    if data is None:
        out.append((_STATE_RANK.get(state, 0), name, state, None, None, (None,) * 4, "-1", None, ""))
        return
    if isinstance(data, list):
        for i, d in enumerate(data):
            here = name if grad else f"{name}.{i}"
            if type(d) is dict and type(d.get("type")) is str and "class_type" not in d:
                out.append(_leaf(d, here, state))  # the common case, without a call per tensor
            else:
                _walk(d, here, state, out, depth + 1, grad)
    elif isinstance(data, dict):
        if data.get("class_type") == "torch.distributed.P2POp":
            t = data.get("tensor")
            data = t if isinstance(t, dict) else {}
            out.append(_leaf(data, name, state))
        elif isinstance(data.get("type"), str):
            out.append(_leaf(data, name, state))
        else:
            for k, d in data.items():
                _walk(d, f"{name}.{k}", state, out, depth + 1, grad)
    else:  # msprobe writes every argument as a mapping (a tensor, a value) or a list of them
        out.append(_unread(name, state, f"is {show(data)}, not a tensor, a value or a list of them"))


def _leaf(d: dict, name: str, state: str) -> tuple:
    """gen_op_item: a tensor's dtype, shape and statistics; a scalar's value as all four statistics."""
    data_name = d.get("data_name") or "-1"
    if type(data_name) is not str:
        return _unread(name, state, f"data_name is {show(data_name)}, not a file name")
    full = data_name.rsplit(".", 1)[0] if data_name != "-1" else name
    dtype = d.get("dtype")
    if dtype or d.get("type") == "torch.Tensor":  # a tensor (its dtype checked: one of null is unreadable)
        bad = tensor_problem(d)
        if bad:
            return _unread(full, state, bad)
        return (_STATE_RANK.get(state, 0), full, state, dtype, d.get("shape"),
                (d.get("Max"), d.get("Min"), d.get("Mean"), d.get("Norm")), data_name, d.get("md5"), "")
    else:
        typ = d.get("type")
        value = d.get("value")
        stats = (None,) * 4
        if typ in ("torch.Size", "slice"):
            dtype, shape = typ, str(value)
        elif typ == "ellipsis":
            dtype, shape, stats = typ, "[]", (value,) * 4
        elif typ == "torch.ProcessGroup":
            dtype, shape, stats = typ, "[]", (str(d.get("group_ranks")),) * 4
        elif name.rsplit(".", 1)[-1] in ("src", "dst", "group_src", "group_dst"):
            dtype, shape, stats = typ, "[]", (str(value),) * 4
        else:
            dtype, shape, stats = str(type(value)), "[]", (value,) * 4
    return (_STATE_RANK.get(state, 0), full, state, str(dtype), shape, stats, data_name, d.get("md5"), "")


class KeyCounter:
    """msprobe's update_backward_call: a backward record's call number becomes the count of backward
    calls of the same op seen so far in this dump (forward names keep theirs), so that the n-th backward
    of an op pairs with the other run's n-th whatever order autograd ran them in."""

    def __init__(self):
        self.backward: dict[str, int] = {}

    def record_prefix(self, record: str, split: tuple | None = None) -> tuple[str, str]:
        """record name -> (its name as it pairs, its direction)."""
        op, call_dir, direction = split or split_record(record)
        if direction != "backward" or not op:
            return record, direction
        n = self.backward.get(op, 0)
        self.backward[op] = n + 1
        head, _, tail = call_dir.rpartition(".")
        if head.isdigit():
            head = str(n)
        if tail.isdigit():
            tail = str(n)
        return f"{op}.{head}.{tail}", direction


# ----------------------------------------------------------------------------- tokens.json

def read_tokens(path: str) -> tuple[dict | None, list[str]]:
    """The runtime's token record (runtime/rollout.py writes it beside dump.json) as the compare reads it:
    (the record holding only the keys the compare reads, each of the runtime's shape, what was left out and
    why). A part that is not of that shape is left out, its place kept (a request's index in its step is its
    logits row; a trainer call's index is its forward's), so what it held is not compared. None where the
    file is no token record at all. Raises OSError (FileNotFoundError: there is none)."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except UnicodeDecodeError:
        return None, ["is not UTF-8 text"]
    except (ValueError, RecursionError) as e:  # not JSON; nested or a number beyond what Python reads
        return None, [f"is not valid JSON ({getattr(e, 'msg', e.__class__.__name__)}): truncated or overwritten"]
    if type(doc) is not dict:
        return None, [f"is {show(doc)}, not a token record (a mapping)"]
    said: list[str] = []
    out: dict = {}
    for key in ("dtype", "error", "engine"):
        if doc.get(key) is not None:
            if type(doc[key]) is str:
                out[key] = doc[key]
            else:
                said.append(f"{key} is {show(doc[key])}, not text")
    arch = doc.get("architectures")
    if arch is not None:
        if type(arch) is list and all(type(a) is str for a in arch):
            out["architectures"] = arch
        else:
            said.append(f"architectures is {show(arch)}, not a list of class names")
    hf = doc.get("hf_config")
    if hf is not None:  # the engine's model config, scalars only (routing.py reads top-k and scoring from it)
        if type(hf) is dict:
            out["hf_config"] = {k: v for k, v in hf.items() if type(v) in (str, int, float, bool)}
            odd = sorted(k for k, v in hf.items() if v is not None and k not in out["hf_config"])
            if odd:
                said.append(f"hf_config's {', '.join(odd[:5])} {'is' if len(odd) == 1 else 'are'} not a scalar")
        else:
            said.append(f"hf_config is {show(hf)}, not a mapping")
    if "requests" in doc:
        out["requests"] = _listed(doc["requests"], "requests", _request, said)
        hf = out.get("hf_config", {})
        experts, layers = num_experts(hf), hf.get("num_hidden_layers")
        for i, req in enumerate(out["requests"]):
            if req is not None and "routed_experts" in req:
                why = _routed(req["routed_experts"], len(req["positions"]), experts,
                              layers if type(layers) is int else None)
                if why:
                    said.append(f"requests[{i}] (request {req['request']}): routed_experts {why}: its routing is "
                                "read from the router logits")
                    out["requests"][i] = {k: v for k, v in req.items() if k != "routed_experts"}
    if "sampled" in doc:
        out["sampled"] = _sampled(doc["sampled"], said)
    if "calls" in doc:
        out["calls"] = _listed(doc["calls"], "calls", _call, said)
    return out, said


def _listed(value, what: str, check, said: list) -> list:
    """Each element checked; one that fails is None in its place."""
    if type(value) is not list:
        said.append(f"{what} is {show(value)}, not a list: none of it is compared")
        return []
    out = []
    for i, v in enumerate(value):
        why = check(v)
        if why:
            said.append(f"{what}[{i}]{why}: not compared")
        out.append(None if why else v)
    return out


def _ints(v, what: str, nonneg: bool = False) -> str:
    if type(v) is not list:
        return f"{what} is {show(v)}, not a list of integers"
    for j, x in enumerate(v):
        if type(x) is not int or (nonneg and x < 0):
            return f"{what}[{j}] is {show(x)}, not {'a position' if nonneg else 'an integer'}"
    return ""


def _number(x) -> bool:
    return type(x) is float or type(x) is int


def _grid(v, what: str, ok, kind: str) -> str:
    """[batch, seq] of cells that pass ok."""
    if type(v) is not list:
        return f"{what} is {show(v)}, not rows of {kind}"
    for b, row in enumerate(v):
        if type(row) is not list:
            return f"{what}[{b}] is {show(row)}, not a row of {kind}"
        for s, x in enumerate(row):
            if not ok(x):
                return f"{what}[{b}][{s}] is {show(x)}, not {kind}"
    return ""


def _request(req) -> str:
    """One request of an engine step: its id, its rows [start, end], and the positions and token ids of them."""
    if type(req) is not dict:
        return f" is {show(req)}, not a request (a mapping)"
    rid = req.get("request")
    if type(rid) is not str:
        return f".request is {show(rid)}, not a request id (text)"
    for key, nonneg in (("positions", True), ("token_ids", True)):
        why = _ints(req.get(key), key, nonneg)
        if why:
            return f" (request {rid}): {why}"
    if len(req["positions"]) != len(req["token_ids"]):
        return (f" (request {rid}): {len(req['positions'])} positions but {len(req['token_ids'])} token ids")
    rows = req.get("rows")
    if rows is not None and (_ints(rows, "rows", True) or len(rows) != 2):
        return f" (request {rid}): rows is {show(rows)}, not [first row, end]"
    return ""


def _routed(v, rows: int, experts: int | None, layers: int | None) -> str:
    """The engine's captured routing of a request's rows, as vLLM returns it (`routed_experts`, per token
    [layers, top_k] expert numbers by decoder layer; verl's batch holds it [batch, seq, layers, top_k]): one
    entry per position, every one of the same layers and top-k, expert numbers below the model's experts."""
    if type(v) is not list or len(v) != rows:
        return f"is {show(v)}, not one entry per position ({rows})"
    shape = None
    for j, row in enumerate(v):
        if type(row) is not list or not row or any(type(layer) is not list or not layer for layer in row):
            return f"[{j}] is {show(row)}, not [layers][top_k] expert numbers"
        if shape is None:
            shape = (len(row), len(row[0]))
        if len(row) != shape[0] or any(len(layer) != shape[1] for layer in row):
            return f"[{j}] is not [{shape[0]} layers][{shape[1]}], the shape of its first entry"
        for n, layer in enumerate(row):
            for x in layer:
                if type(x) is not int or x < 0 or (experts is not None and x >= experts):
                    return (f"[{j}][{n}] holds {show(x)}, not an expert number"
                            + (f" below the model's {experts}" if experts is not None else ""))
    if shape is not None and layers is not None and shape[0] != layers:
        return f"holds {shape[0]} layers, the model {layers}: routing records for some layers only"
    return ""


def _sampled(value, said: list) -> dict:
    """Per request the sampled token ids and their log-probs (the engine's, and its own logits')."""
    if type(value) is not dict:
        said.append(f"sampled is {show(value)}, not a mapping of requests: no sampled token is compared")
        return {}
    out = {}
    for rid, s in value.items():
        if type(s) is not dict:
            said.append(f"sampled[{json.dumps(rid)}] is {show(s)}, not a mapping: its sampled token is not compared")
            continue
        why = _ints(s.get("token_ids"), "token_ids", True)
        if why:
            said.append(f"sampled[{json.dumps(rid)}].{why}: its sampled token is not compared")
            continue
        entry = {"token_ids": s["token_ids"]}
        for key in ("logprob", "logprob_logits"):
            v = s.get(key)
            if v is None or _number(v):
                entry[key] = v
            else:
                entry[key] = None
                said.append(f"sampled[{json.dumps(rid)}].{key} is {show(v)}, not a number: not compared")
        out[rid] = entry
    return out


def _call(call) -> str:
    """One forward of the trainer: [batch, seq] token ids, mask and positions, per position the next token's
    log-prob."""
    if type(call) is not dict:
        return f" is {show(call)}, not a forward's record (a mapping)"
    why = _grid(call.get("input_ids"), "input_ids", lambda x: type(x) is int and x >= 0, "token ids")
    if why:
        return f".{why}"
    for key, ok, kind in (("attention_mask", lambda x: type(x) in (int, bool), "0 or 1"),
                          ("position_ids", lambda x: type(x) is int and x >= 0, "positions"),
                          ("next_logprobs", lambda x: x is None or _number(x), "log-probs")):
        if call.get(key) is not None:
            why = _grid(call[key], key, ok, kind)
            if why:
                return f".{why}"
    return ""
