"""What the ranks' first records say of how they divide a model (kinds.py asks): each rank's first PROBE
records as (name, rows), read once per dump."""

from __future__ import annotations

import os
from functools import lru_cache

from verl_pdbg_conf.compare.dumpread import DumpError, DumpReader, rows_of, split_record
from verl_pdbg_conf.compare.metrics import FLOAT_DTYPES
from verl_pdbg_conf.compare.nodes import module_path
from verl_pdbg_conf.compare.pipeline.concat import same_rows

PROBE = 400  # records read from each rank


def head(path: str) -> tuple:
    """The first PROBE records of a dump as (name, rows); () where it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return _head(path, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=64)
def _head(path: str, _mtime: int, _size: int) -> tuple:
    out = []
    try:
        for name, rec in DumpReader(path).records():
            out.append((name, rows_of(name, rec, split_record(name)[2])))
            if len(out) >= PROBE:
                break
    except (OSError, DumpError, UnicodeDecodeError):
        return ()
    return tuple(out)


def is_module(name: str) -> bool:
    return name.startswith(("Module.", "Cell."))


def first_input(head: tuple):
    """The inputs of the first module call (the token embedding's ids): its API calls may already hold a
    rank's own shard bounds (a vocabulary shard's start)."""
    for name, rows in head:
        if is_module(name):
            return repr([(r.shape, r.stats, r.dtype) for r in rows if r.state == "input"])
    return None


def calls_input(head: tuple):
    """The inputs of every call in the head, for dumps of API calls only (L1: no module record), where the first
    call's may read alike on ranks with their own rows (msprobe keeps only max/min of a mask)."""
    ins = [(r.shape, r.stats, r.dtype) for _name, rows in head for r in rows
           if r.state == "input" and isinstance(r.shape, list)]
    return repr(ins) if ins else None


def same_calls(heads: list) -> int:
    """How many leading records the ranks share by name (0 where their first records differ)."""
    n = min(len(h) for h in heads)
    for i in range(n):
        if any(h[i][0] != heads[0][i][0] for h in heads):
            return i
    return n


def sharded(heads: list) -> bool:
    """Some module record holds a tensor in parts across these ranks (the same call, stats that differ)."""
    n = min(len(h) for h in heads)
    for i in range(n):
        names = {h[i][0] for h in heads}
        if len(names) != 1:
            return False
        name = heads[0][i][0]
        if not is_module(name):
            continue
        for j in range(len(heads[0][i][1])):
            rows = [h[i][1][j] for h in heads if j < len(h[i][1])]
            if len(rows) == len(heads) and not same_rows(rows):
                return True
    return False


def activation(row) -> bool:
    """A float tensor of two or more dimensions: what a layer computes, not a count."""
    return row.dtype in FLOAT_DTYPES and isinstance(row.shape, list) and len(row.shape) >= 2


def reduced_alike(heads: list) -> bool:
    """A forward all-reduce of activations whose inputs differ between these ranks and whose outputs agree:
    the partial results of a row-parallel layer summed. Data-parallel ranks reduce gradients after a backward,
    and counts in the forward (verl's FSDP actor sums its tokens over the ranks to scale the loss: an integer
    scalar), which say nothing of a tensor-parallel layer."""
    n = min(len(h) for h in heads)
    for i in range(n):
        name = heads[0][i][0]
        if any(h[i][0] != name for h in heads):
            return False
        if name.startswith("Distributed.all_reduce.") and name.endswith(".forward"):
            ins = [[r for r in h[i][1] if r.state == "input" and activation(r)] for h in heads]
            outs = [[r for r in h[i][1] if r.state == "output" and activation(r)] for h in heads]
            if ins[0] and outs[0] and not all(same_rows(list(x)) for x in zip(*ins)) and \
                    all(same_rows(list(x)) for x in zip(*outs)):
                return True
    return False


def parameters_alike(heads: list, outside=lambda path: True) -> bool | None:
    """The module records the ranks share hold the same parameters (where `outside(path)`): True, False,
    or None where no parameter was read."""
    seen = False
    for i in range(same_calls(heads)):
        name = heads[0][i][0]
        if not is_module(name) or not outside(module_path(name) or ""):
            continue
        params = [[(r.shape, r.stats) for r in h[i][1] if r.state == "parameters"] for h in heads]
        if params[0]:
            seen = True
            if any(p != params[0] for p in params):
                return False
    return seen or None


def module_paths(head: tuple) -> list:
    """A rank's first module records as (module path, rows)."""
    return [(module_path(name) or "", rows) for name, rows in head if is_module(name)]
