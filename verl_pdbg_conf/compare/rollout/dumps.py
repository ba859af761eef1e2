"""One side of a rollout comparison as read from disk: a rank directory's dump.json records (leaf modules in
execution order, each with its tensor files) and its token record (tokens.json, written by the runtime).
Anything unreadable becomes a finding; nothing here raises on bad input."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from verl_pdbg_conf.core.findings import Finding, Severity

TOKENS = "tokens.json"  # the runtime's name for it (runtime/rollout.py); not imported: no runtime here


@dataclass
class Tensor:
    file: str | None  # the .pt file, or None where msprobe kept statistics only
    shape: tuple
    dtype: str


@dataclass
class Record:
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
    records: list[Record] = field(default_factory=list)  # forward records of leaf modules, in execution order
    every: list[Record] = field(default_factory=list)  # every module's, parents too, in execution order
    tokens: dict | None = None
    findings: list[Finding] = field(default_factory=list)

    def by_path(self) -> dict[str, list[Record]]:
        out: dict[str, list[Record]] = {}
        for r in self.every:
            out.setdefault(r.path, []).append(r)
        return out


def _finding(rule: str, severity: Severity, message: str, file: str, hint: str = "") -> Finding:
    return Finding(rule=rule, severity=severity, message=message, file=file, line=1, column=1, hint=hint)


def _tensors(entry, data_dir: str, out: list[Tensor]) -> None:
    """msprobe's nested argument entries, tensors in order (lists and tuples flattened)."""
    if isinstance(entry, (list, tuple)):
        for e in entry:
            _tensors(e, data_dir, out)
    elif isinstance(entry, dict) and entry.get("type") == "torch.Tensor":
        name = entry.get("data_name")
        out.append(Tensor(os.path.join(data_dir, name) if isinstance(name, str) else None,
                          tuple(entry.get("shape") or ()), str(entry.get("dtype", ""))))
    elif isinstance(entry, dict) and "type" not in entry:
        for e in entry.values():
            _tensors(e, data_dir, out)


def _split_name(name: str) -> tuple[str, str, int] | None:
    parts = name.split(".")
    if len(parts) < 5 or parts[0] != "Module" or parts[-2] != "forward" or not parts[-1].isdigit():
        return None
    return ".".join(parts[1:-3]), parts[-3], int(parts[-1])


def read(rank_dir: str) -> Dump:
    dump = Dump(rank_dir)
    dump.tokens = _read_tokens(rank_dir, dump.findings)  # its own file: readable whatever dump.json is
    path = os.path.join(rank_dir, "dump.json")
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        dump.findings.append(_finding("compare-missing", Severity.ERROR, f"{path}: no dump.json", rank_dir,
                                      "the step's collection did not finish; collect it again"))
        return dump
    except (OSError, ValueError, UnicodeDecodeError) as e:
        dump.findings.append(_finding("compare-missing", Severity.ERROR, f"{path}: not readable JSON "
                                      f"(truncated?): {e}", path, "collect the step again"))
        return dump
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
        dump.findings.append(_finding("compare-missing", Severity.ERROR, f"{path}: no 'data' object", path))
        return dump
    dump.task = doc.get("task")
    data_dir = os.path.join(rank_dir, "dump_tensor_data")
    records = []
    for name, rec in doc["data"].items():
        split = _split_name(name)
        if split is None or not isinstance(rec, dict):
            continue
        ins: list[Tensor] = []
        _tensors(rec.get("input_args"), data_dir, ins)
        _tensors(rec.get("input_kwargs"), data_dir, ins)
        outs: list[Tensor] = []
        _tensors(rec.get("output"), data_dir, outs)
        records.append(Record(name, split[0], split[1], split[2], ins, outs))
    parents = {p for r in records for p in _ancestors(r.path)}
    dump.records = [r for r in records if r.path not in parents]
    dump.every = records
    return dump


def _ancestors(path: str):
    parts = path.split(".")
    for i in range(1, len(parts)):
        yield ".".join(parts[:i])


def _read_tokens(rank_dir: str, findings: list[Finding]) -> dict | None:
    path = os.path.join(rank_dir, TOKENS)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        findings.append(_finding("compare-tokens", Severity.ERROR, f"{rank_dir}: no token record ({TOKENS}): "
                                 "which request and position each row computed is unknown, so its tokens "
                                 "cannot be aligned", rank_dir, "collect with this package's runtime, which "
                                 "writes it beside dump.json (rollout_generate; actor_compute_log_prob with "
                                 "task tensor)"))
        return None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        findings.append(_finding("compare-tokens", Severity.ERROR, f"{path}: not readable ({e})", path))
        return None
    if not isinstance(doc, dict):
        findings.append(_finding("compare-tokens", Severity.ERROR, f"{path}: not a token record", path))
        return None
    return doc


def load(t: Tensor):
    """The tensor behind an entry (torch imported here only: reading tensor dumps needs it)."""
    import torch

    return torch.load(t.file, map_location="cpu", weights_only=True)
