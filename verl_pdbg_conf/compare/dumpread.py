"""Read an msprobe dump.json as a stream: the header keys, then the "data" records one at a time, each
flattened into tensor rows named and ordered as msprobe's compare names and orders them. A record is
parsed alone (json's C scanner on a sliding buffer), so memory holds one record, never the file.

msprobe 26.2 writes {"task", "level", "framework", "dump_data_dir", "data": {record: {...}}}; a record
is an API or module call ("Functional.linear.3.forward", "Module.blocks.3.fc.Linear.forward.0") with
input_args / input_kwargs / input / output / parameters, or a parameters_grad record. The naming and
order below follow msprobe.core.compare.utils.read_op / op_item_parse / reorder_index."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterator

CHUNK = 1 << 20
_DEC = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")
# msprobe's IO_NAME_MAPPING, in its order: the record keys that hold tensors and the name part they give
_IO = (("input_args", ".input", "input"), ("input_kwargs", ".input", "input"), ("input", ".input", "input"),
       ("output", ".output", "output"), ("parameters", ".parameters", "parameters"))
_STATE_RANK = {"parameters": 1, "output": 2, "parameters_grad": 3}  # reorder_index: inputs, params, outputs, grads
STATS = ("Max", "Min", "Mean", "Norm")
MAX_DEPTH = 50


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
                    self.header[key] = self._value()
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


def read_header(path: str) -> dict:
    """The top-level keys before "data" and whether the first tensor carries statistics or md5
    (summary_mode), reading only the first record."""
    reader = DumpReader(path, chunk=1 << 16)
    head = {"summary_mode": None, "records": 0}
    for name, rec in reader.records():
        head["records"] += 1
        for row in rows_of(name, rec):
            if row.dtype and row.dtype.startswith("torch."):
                head["summary_mode"] = "md5" if row.md5 is not None else "statistics"  # as msprobe's md5_find
                break
        if head["summary_mode"]:
            break
    head.update(reader.header)
    return head


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
    """One record's rows in msprobe's order (inputs, parameters, outputs, parameter gradients)."""
    parts = name.split(".")
    out: list = []
    if parts[-1] == "parameters_grad" or (len(parts) >= 2 and parts[-2] == "parameters_grad"):
        _walk(rec, name, "parameters_grad", out, 0, True)
    elif isinstance(rec, dict):
        for key, suffix, state in _IO:
            if key in rec:
                _walk(rec[key], name + suffix, state, out, 0, False)
    if any(r[0] for r in out):
        out.sort(key=lambda r: r[0])  # stable: msprobe's reorder_index
    if direction is None:
        direction = split_record(name)[2]
    return [Row(n, n, name, st, direction, *rest) for _, n, st, *rest in out]


def _walk(data, name: str, state: str, out: list, depth: int, grad: bool) -> None:
    if depth > MAX_DEPTH:
        raise DumpError(f"nests {name} deeper than {MAX_DEPTH}")
    if data is None:
        out.append((_STATE_RANK.get(state, 0), name, state, None, None, (None,) * 4, "-1", None))
        return
    if not data:
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


def _leaf(d: dict, name: str, state: str) -> tuple:
    """gen_op_item: a tensor's dtype, shape and statistics; a scalar's value as all four statistics."""
    data_name = d.get("data_name") or "-1"
    full = data_name.rsplit(".", 1)[0] if data_name != "-1" else name
    dtype = d.get("dtype")
    if dtype:
        return (_STATE_RANK.get(state, 0), full, state, dtype if type(dtype) is str else str(dtype), d.get("shape"),
                (d.get("Max"), d.get("Min"), d.get("Mean"), d.get("Norm")), data_name, d.get("md5"))
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
    return (_STATE_RANK.get(state, 0), full, state, str(dtype), shape, stats, data_name, d.get("md5"))


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
