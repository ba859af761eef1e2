"""Where the per-pair jobs run on this machine: a pool of worker processes (the default; `ray_runner`
spreads them over a Ray cluster instead). A job is any picklable `fn(job) -> dict` (msprobe's compare
today, the engine tomorrow); a runner yields (index, outcome) as jobs finish, in any order."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
from typing import Callable, Iterator, Sequence

# Each worker holds torch and msprobe (a few hundred MB) and msprobe's tensor compare starts its own pool.
MAX_DEFAULT_JOBS = 4
DIED = "the compare worker process died"


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, MAX_DEFAULT_JOBS))


def worker_pool(jobs: int | None = None) -> cf.ProcessPoolExecutor:
    """Worker processes for the per-pair jobs. spawn, not fork: the caller may have torch loaded."""
    return cf.ProcessPoolExecutor(max_workers=jobs or default_jobs(),
                                  mp_context=multiprocessing.get_context("spawn"))


def run_local(fn: Callable[[object], dict], jobs: Sequence, workers: int | None = None,
              shared: cf.Executor | None = None) -> Iterator[tuple[int, dict]]:
    """Every job in a process pool (`shared`, from worker_pool(), or one of `workers` processes made
    here). A worker that dies (killed, out of memory) breaks the pool: the jobs it took down are run
    again, each alone in a new pool; a second death is that job's outcome {"error": DIED}."""
    todo = list(enumerate(jobs))
    if not todo:
        return
    pool = shared or worker_pool(max(1, min(workers or default_jobs(), len(todo))))
    lost = yield from _pool(fn, todo, pool, last_try=False, own=shared is None)
    for item in lost:
        yield from _pool(fn, [item], worker_pool(1), last_try=True, own=True)


def _pool(fn, todo: list[tuple[int, object]], pool: cf.Executor, last_try: bool, own: bool):
    lost = []
    try:
        try:
            futures = {pool.submit(fn, job): (i, job) for i, job in todo}
        except cf.process.BrokenProcessPool:
            return list(todo)  # a shared pool broken earlier
        for fut in cf.as_completed(futures):
            i, job = futures[fut]
            try:
                outcome = fut.result()
            except cf.process.BrokenProcessPool:
                if not last_try:
                    lost.append((i, job))
                    continue
                outcome = {"result": None, "error": DIED, "log": None}
            yield i, outcome
    finally:
        if own:
            pool.shutdown(wait=True, cancel_futures=True)
    return lost
