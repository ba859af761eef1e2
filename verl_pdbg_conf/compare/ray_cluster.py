"""The per-pair jobs spread over an existing Ray cluster (`verl-pdbg-compare --ray [ADDRESS]`). Ray is
imported here only, and this module only when --ray is given.

Where a pair runs: each alive node with a CPU (and, with --ray-resource NAME, the custom resource NAME:
for a cluster whose operator marks the nodes that mount the dumps, `ray start --resources '{"NAME": 1}'`)
first runs a probe task pinned to it (node affinity, not soft) that says which of the dump files it can
read. A pair then goes only to a node that reads both its files, pinned there the same way. Each node is
fed one pair per CPU at a time, so a faster node takes more pairs, and results come back as they finish.
A pair whose worker or node dies is tried once more, on another node that reads it if there is one; a
second failure is reported for that pair alone.

The job function travels by reference, as Ray sends any module function: verl-pdbg-conf must be
installed on every node. A job writes nothing the driver has to find: its outcome comes back as data
and the driver writes every output file."""

from __future__ import annotations

import os
from collections import deque
from typing import Callable, Iterator, Sequence

from verl_pdbg_conf.compare.verdict import failure

PROBE_TIMEOUT = 120.0  # seconds for every node to answer the probe (a worker may have to start first)
TRIES = 2


class ClusterError(RuntimeError):
    """No usable Ray cluster: cannot connect, or no node to run on."""


def readable(paths: list[str]) -> list[bool]:
    """On one node: which of these it can read (a pair's dump.json files, or the rollout compare's stage
    directories)."""
    return [(os.path.isfile(p) or os.path.isdir(p)) and os.access(p, os.R_OK) for p in paths]


def run_ray(fn: Callable[[object], dict], jobs: Sequence, reads: Callable[[object], Sequence[str]],
            address: str = "auto", resource: str | None = None, notes: list | None = None
            ) -> Iterator[tuple[int, object, str, str]]:
    """Yield (index, outcome, node id, error) for each job as it finishes: outcome is fn's result, or
    None with the error when the job could not run (no node reads its files; its worker died twice).
    `notes` collects what the driver should tell (nodes left out). Connects to the cluster at `address`
    (or uses the one this process has joined)."""
    import ray

    own = not ray.is_initialized()
    if own:
        try:
            ray.init(address=address, log_to_driver=False, logging_level="WARNING")
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ClusterError(f"cannot connect to the Ray cluster at {address!r}: {e}") from e
    try:
        yield from _schedule(ray, fn, list(jobs), reads, resource, notes if notes is not None else [])
    finally:
        if own:
            ray.shutdown()


def _alive(ray, resource: str | None) -> dict[str, int]:
    """node id -> CPUs, for alive nodes with at least one CPU (and the resource, if given)."""
    out = {}
    for n in ray.nodes():
        res = n.get("Resources") or {}
        if n.get("Alive") and res.get("CPU", 0) >= 1 and (resource is None or res.get(resource, 0) > 0):
            out[n["NodeID"]] = int(res["CPU"])
    return out


def _pin(node: str):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node, soft=False)


def _probe(ray, nodes: list[str], paths: list[str], notes: list) -> dict[str, set[str]]:
    task = ray.remote(readable)
    refs = {task.options(num_cpus=0, max_retries=0, scheduling_strategy=_pin(n)).remote(paths): n for n in nodes}
    ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=PROBE_TIMEOUT)
    seen = {}
    for ref in ready:
        try:
            seen[refs[ref]] = {p for p, ok in zip(paths, ray.get(ref)) if ok}
        except ray.exceptions.RayError as e:
            notes.append(f"Ray node {refs[ref]} left out: its probe failed ({type(e).__name__})")
    for ref in late:
        ray.cancel(ref, force=True)
        notes.append(f"Ray node {refs[ref]} left out: no answer to the probe in {PROBE_TIMEOUT:g} s")
    for n, files in seen.items():
        if not files:
            notes.append(f"Ray node {n} reads none of the dumps: left out")
    return seen


def _schedule(ray, fn, jobs: list, reads, resource: str | None, notes: list):
    slots = _alive(ray, resource)
    if not slots:
        what = f" with the resource {resource!r}" if resource else ""
        raise ClusterError(f"the Ray cluster has no alive node with a CPU{what}")
    paths = sorted({p for j in jobs for p in reads(j)})
    seen = _probe(ray, list(slots), paths, notes)
    cand: dict[int, frozenset] = {}
    queues: dict[frozenset, deque] = {}  # pairs that the same nodes can read, in run order
    for i, job in enumerate(jobs):
        need = set(reads(job))
        nodes = frozenset(n for n, files in seen.items() if need <= files)
        if not nodes:
            yield i, None, "", _no_node(job, reads, "no node of the Ray cluster can read")
            continue
        cand[i] = nodes
        queues.setdefault(nodes, deque()).append(i)
    free = {n: c for n, c in slots.items() if n in seen}
    task = ray.remote(fn)
    inflight: dict = {}
    tries: dict[int, int] = {}
    while queues or inflight:
        for n in list(free):
            while free[n] > 0:
                i = _next(queues, n)
                if i is None:
                    break
                # max_retries=0: a pair whose worker dies is retried here, on another node if one reads it
                ref = task.options(num_cpus=1, max_retries=0, scheduling_strategy=_pin(n)).remote(jobs[i])
                inflight[ref] = (i, n)
                free[n] -= 1
                tries[i] = tries.get(i, 0) + 1
        if not inflight:  # pairs left whose every reader is gone
            for q in queues.values():
                for i in q:
                    yield i, None, "", _no_node(jobs[i], reads, "no live node of the Ray cluster left that can read")
            return
        (ref,), _ = ray.wait(list(inflight), num_returns=1)
        i, n = inflight.pop(ref)
        if n in free:
            free[n] += 1
        try:
            outcome = ray.get(ref)
        except ray.exceptions.RayTaskError as e:  # the job raised: it would raise again anywhere
            yield i, None, n, f"{failure(getattr(e, 'cause', None) or e)} (on Ray node {n})"
            continue
        except ray.exceptions.RayError as e:
            live = set(_alive(ray, resource))
            for gone in set(free) - live:
                del free[gone]
            others = (cand[i] & live) - {n}
            if tries[i] < TRIES and (others or n in live):
                cand[i] = frozenset(others or {n})
                queues.setdefault(cand[i], deque()).appendleft(i)
                continue
            yield i, None, n, f"the compare worker died on Ray node {n} ({type(e).__name__}), {tries[i]} tries"
            continue
        yield i, outcome, n, ""


def _next(queues: dict[frozenset, deque], node: str) -> int | None:
    """The earliest pending pair this node can read."""
    best = None
    for nodes, q in list(queues.items()):
        if not q:
            del queues[nodes]
        elif node in nodes and (best is None or q[0] < queues[best][0]):
            best = nodes
    return queues[best].popleft() if best is not None else None


def _no_node(job, reads, why: str) -> str:
    return f"{why} {' and '.join(reads(job))}"
