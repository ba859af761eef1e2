"""One side of a rollout comparison as read from disk: a rank directory's dump.json records (module calls,
compare/records.Record, leaf modules in execution order, each with its tensor rows) and its token record
(tokens.json, written by the runtime), both read through compare/dumpread.py, the one boundary where dumps
are read. Anything unreadable becomes a finding and is not compared; nothing here raises on bad input."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from verl_pdbg_conf.compare.dumpread import DumpError, read_tokens, said_of
from verl_pdbg_conf.compare.records import Reader, Record
from verl_pdbg_conf.compare.verdict import finding
from verl_pdbg_conf.core.findings import Finding, Severity

TOKENS = "tokens.json"  # the runtime's name for it (runtime/rollout.py); not imported: no runtime here


@dataclass
class Dump:
    rank_dir: str
    task: str | None = None
    records: list[Record] = field(default_factory=list)  # forward calls of leaf modules, in execution order
    every: list[Record] = field(default_factory=list)  # every module's, parents too, in execution order
    tokens: dict | None = None  # dumpread.read_tokens: only the keys the compare reads, each of its shape
    findings: list[Finding] = field(default_factory=list)
    unread: int = 0  # values of its files that could not be read: the pair is at best partial

    def by_module(self) -> dict[str, list[Record]]:
        """Module path -> its forward calls, in order."""
        out: dict[str, list[Record]] = {}
        for r in self.every:
            out.setdefault(r.module, []).append(r)
        return out


def read(rank_dir: str) -> Dump:
    dump = Dump(rank_dir)
    dump.tokens = _read_tokens(rank_dir, dump)  # its own file: readable whatever dump.json is
    path = os.path.join(rank_dir, "dump.json")
    records, bad = [], []
    reader = Reader(path)  # streamed, one record at a time: the file is opened once
    try:
        for rec in reader:
            if rec.direction != "forward" or not rec.module:
                continue  # a module's forward call only (Module.<path>.<Class>.forward.<n>), not the root's
            if rec.unread:
                bad.append(f"{rec.name}: {'; '.join(rec.unread)}")
            records.append(rec)  # its place kept: calls count
    except FileNotFoundError:
        dump.findings.append(finding("dump-missing", Severity.ERROR, f"{path}: no dump.json", rank_dir,
                                     "the step's collection did not finish; collect it again"))
        return dump
    except (DumpError, UnicodeDecodeError) as e:
        why = str(e) if isinstance(e, DumpError) else "is not UTF-8 text"
        dump.findings.append(finding("dump-corrupt", Severity.ERROR, f"{path} {why}: nothing in it is compared",
                                     path, "collect the step again"))
        return dump
    except OSError as e:
        dump.findings.append(finding("dump-missing", Severity.ERROR, f"{path}: cannot be read ({e.strerror})",
                                     path))
        return dump
    task = reader.reader.header.get("task")
    dump.task = task if isinstance(task, str) else None
    if bad:
        dump.unread += len(bad)
        dump.findings.append(finding("dump-value", Severity.WARNING, f"{path}: {_listing(bad, 'record')}", path,
                                     "not what msprobe writes (the file was edited or overwritten): those "
                                     "tensors are not compared"))
    parents = {p for r in records for p in _ancestors(r.module)}
    dump.records = [r for r in records if r.module not in parents]
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
        dump.findings.append(finding("compare-tokens", Severity.ERROR, f"{rank_dir}: no token record ({TOKENS}): "
                                     "which request and position each row computed is unknown, so its tokens "
                                     "cannot be aligned", rank_dir, "collect with this package's runtime, which "
                                     "writes it beside dump.json (rollout_generate; actor_compute_log_prob with "
                                     "task tensor)"))
        return None
    except OSError as e:
        dump.findings.append(finding("compare-tokens", Severity.ERROR, f"{path}: cannot be read ({e.strerror})",
                                     path))
        return None
    if doc is None:
        dump.findings.append(finding("compare-tokens", Severity.ERROR, f"{path} {said[0]}: its tokens cannot be "
                                     "aligned", path, "collect the step again"))
        return None
    if said:
        dump.unread += len(said)
        dump.findings.append(finding("compare-tokens", Severity.WARNING, f"{path}: {_listing(said, 'field')}", path,
                                     "not the shape this package's runtime writes (the file was edited or "
                                     "overwritten): what those fields held is not compared"))
    return doc


def load(file: str):
    """The tensor in a tensor file (torch imported here only: reading tensor dumps needs it)."""
    import torch

    return torch.load(file, map_location="cpu", weights_only=True)
