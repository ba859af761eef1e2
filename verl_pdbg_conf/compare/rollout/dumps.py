"""One side of a rollout comparison as read from disk: a rank directory's dump.json records (leaf modules in
execution order, each with its tensor files) and its token record (tokens.json, written by the runtime),
both read through compare/dumpread.py, the one boundary where dumps are read. Anything unreadable becomes
a finding and is not compared; nothing here raises on bad input."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from verl_pdbg_conf.compare.dumpread import DumpError, DumpReader, read_tokens, said_of, show, tensor_problem
from verl_pdbg_conf.core.findings import Finding, Severity

TOKENS = "tokens.json"  # the runtime's name for it (runtime/rollout.py); not imported: no runtime here


@dataclass
class Tensor:
    file: str | None  # the .pt file, or None where msprobe kept statistics only
    shape: tuple
    dtype: str


@dataclass
class ModuleCall:
    name: str  # msprobe's record name, Module.<path>.<Class>.forward.<n>
    path: str  # the module path
    cls: str
    call: int
    inputs: list[Tensor]
    outputs: list[Tensor]


@dataclass
class Dump:
    rank_dir: str
    task: str | None = None
    records: list[ModuleCall] = field(default_factory=list)  # forward records of leaf modules, in execution order
    every: list[ModuleCall] = field(default_factory=list)  # every module's, parents too, in execution order
    tokens: dict | None = None  # dumpread.read_tokens: only the keys the compare reads, each of its shape
    findings: list[Finding] = field(default_factory=list)
    unread: int = 0  # values of its files that could not be read: the pair is at best partial

    def by_path(self) -> dict[str, list[ModuleCall]]:
        out: dict[str, list[ModuleCall]] = {}
        for r in self.every:
            out.setdefault(r.path, []).append(r)
        return out


def _finding(rule: str, severity: Severity, message: str, file: str, hint: str = "") -> Finding:
    return Finding(rule=rule, severity=severity, message=message, file=file, line=1, column=1, hint=hint)


def _tensors(entry, data_dir: str, out: list[Tensor], bad: list[str]) -> None:
    """msprobe's nested argument entries, tensors in order (lists and tuples flattened). A tensor entry that
    cannot be read keeps its place with no file (its point is skipped, counted so); `bad` says why."""
    if isinstance(entry, (list, tuple)):
        for e in entry:
            _tensors(e, data_dir, out, bad)
    elif isinstance(entry, dict) and entry.get("type") == "torch.Tensor":
        why = tensor_problem(entry)
        if why:
            bad.append(why)
            out.append(Tensor(None, (), ""))
            return
        name = entry.get("data_name")
        out.append(Tensor(os.path.join(data_dir, name) if name else None, tuple(entry["shape"]), entry["dtype"]))
    elif isinstance(entry, dict) and "type" not in entry:
        for e in entry.values():
            _tensors(e, data_dir, out, bad)
    elif entry is not None and not isinstance(entry, dict):
        bad.append(f"holds {show(entry)} where msprobe writes a tensor, a value or a list of them")


def _split_name(name: str) -> tuple[str, str, int] | None:
    parts = name.split(".")
    if len(parts) < 5 or parts[0] != "Module" or parts[-2] != "forward" or not parts[-1].isdigit():
        return None
    return ".".join(parts[1:-3]), parts[-3], int(parts[-1])


def read(rank_dir: str) -> Dump:
    dump = Dump(rank_dir)
    dump.tokens = _read_tokens(rank_dir, dump)  # its own file: readable whatever dump.json is
    path = os.path.join(rank_dir, "dump.json")
    data_dir = os.path.join(rank_dir, "dump_tensor_data")
    records, bad = [], []
    reader = DumpReader(path)
    try:
        for name, rec in reader.records():  # streamed, one record at a time: the file is opened once
            split = _split_name(name)
            if split is None:
                continue
            ins: list[Tensor] = []
            outs: list[Tensor] = []
            why: list[str] = []
            if isinstance(rec, dict):
                _tensors(rec.get("input_args"), data_dir, ins, why)
                _tensors(rec.get("input_kwargs"), data_dir, ins, why)
                _tensors(rec.get("output"), data_dir, outs, why)
            else:
                why.append(f"is {show(rec)}, not a record (a mapping of inputs and outputs)")
            if why:
                bad.append(f"{name} {why[0]}" if why[0].startswith(("is ", "holds ")) else f"{name}: {why[0]}")
            records.append(ModuleCall(name, split[0], split[1], split[2], ins, outs))  # its place kept: calls count
    except FileNotFoundError:
        dump.findings.append(_finding("dump-missing", Severity.ERROR, f"{path}: no dump.json", rank_dir,
                                      "the step's collection did not finish; collect it again"))
        return dump
    except (DumpError, UnicodeDecodeError) as e:
        why = str(e) if isinstance(e, DumpError) else "is not UTF-8 text"
        dump.findings.append(_finding("dump-corrupt", Severity.ERROR, f"{path} {why}: nothing in it is compared",
                                      path, "collect the step again"))
        return dump
    except OSError as e:
        dump.findings.append(_finding("dump-missing", Severity.ERROR, f"{path}: cannot be read ({e.strerror})",
                                      path))
        return dump
    task = reader.header.get("task")
    dump.task = task if isinstance(task, str) else None
    if bad:
        dump.unread += len(bad)
        dump.findings.append(_finding("dump-value", Severity.WARNING, f"{path}: {_listing(bad, 'record')}", path,
                                      "not what msprobe writes (the file was edited or overwritten): those "
                                      "tensors are not compared"))
    parents = {p for r in records for p in _ancestors(r.path)}
    dump.records = [r for r in records if r.path not in parents]
    dump.every = records
    return dump


def _listing(said: list[str], what: str) -> str:
    """Several problems of one file as one finding's text."""
    return f"{len(said)} {what}{'s' * (len(said) != 1)} cannot be read: {said_of(said)}"


def _ancestors(path: str):
    parts = path.split(".")
    for i in range(1, len(parts)):
        yield ".".join(parts[:i])


def _read_tokens(rank_dir: str, dump: Dump) -> dict | None:
    path = os.path.join(rank_dir, TOKENS)
    try:
        doc, said = read_tokens(path)
    except FileNotFoundError:
        dump.findings.append(_finding("compare-tokens", Severity.ERROR, f"{rank_dir}: no token record ({TOKENS}): "
                                      "which request and position each row computed is unknown, so its tokens "
                                      "cannot be aligned", rank_dir, "collect with this package's runtime, which "
                                      "writes it beside dump.json (rollout_generate; actor_compute_log_prob with "
                                      "task tensor)"))
        return None
    except OSError as e:
        dump.findings.append(_finding("compare-tokens", Severity.ERROR, f"{path}: cannot be read ({e.strerror})",
                                      path))
        return None
    if doc is None:
        dump.findings.append(_finding("compare-tokens", Severity.ERROR, f"{path} {said[0]}: its tokens cannot be "
                                      "aligned", path, "collect the step again"))
        return None
    if said:
        dump.unread += len(said)
        dump.findings.append(_finding("compare-tokens", Severity.WARNING, f"{path}: {_listing(said, 'field')}", path,
                                      "not the shape this package's runtime writes (the file was edited or "
                                      "overwritten): what those fields held is not compared"))
    return doc


def load(t: Tensor):
    """The tensor behind an entry (torch imported here only: reading tensor dumps needs it)."""
    import torch

    return torch.load(t.file, map_location="cpu", weights_only=True)
