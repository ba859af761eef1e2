"""What the runtime profiler costs, as ratios measured in one run.

1. A decorated stage on a step that is not profiled, against the undecorated call
   (target: a few microseconds per call at most).
2. A profiled stage through PrecisionDebuggerProfiler, against the same stage under msprobe used
   directly (service dump_path, start, stop, reset_status; target: within 5%). Medians of
   interleaved sessions, in wall-clock and in process CPU time (steadier on a busy machine).

    python bench/runtime_overhead.py [--sessions 40] [--level L1] [--task statistics]

CPU torch, a single-process gloo group, a small MLP; dumps go to a temporary directory."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
import timeit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler  # noqa: E402


class Worker:
    """verl 0.9.1's attribute layout: actor.engine.module."""

    def __init__(self, model):
        self.actor = type("Role", (), {})()
        self.actor.engine = type("Engine", (), {})()
        self.actor.engine.module = model


def bench_not_profiled(prof: PrecisionDebuggerProfiler, number: int) -> tuple[float, float]:
    def stage(self, x):
        return x

    decorated = prof.annotate(role="actor_update")(stage)
    worker = object()
    plain = min(timeit.repeat(lambda: stage(worker, 1), number=number, repeat=7)) / number
    wrapped = min(timeit.repeat(lambda: decorated(worker, 1), number=number, repeat=7)) / number
    return plain, wrapped


def bench_profiled(prof: PrecisionDebuggerProfiler, config_path: str, root: str, sessions: int):
    import torch
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(128, 128), torch.nn.GELU())])
    x = torch.randn(32, 128)
    worker = Worker(model)

    def work(self, batch):
        self.actor.engine.module.zero_grad()
        loss = self.actor.engine.module(batch).pow(2).mean()
        loss.backward()
        return loss.detach()

    stage = prof.annotate(role="actor_update")(work)
    step = iter(range(1, 10**9))

    def ours():
        prof.start(profile_step=next(step))
        stage(worker, x)
        prof.stop()

    from msprobe.pytorch import PrecisionDebugger

    direct_dirs = iter(range(10**9))

    def direct():
        dbg = PrecisionDebugger(config_path=config_path, dump_path=root)  # the process singleton
        dbg.service.config.dump_path = os.path.join(root, "direct", f"step_{next(direct_dirs)}", "actor_update")
        dbg.start(model)
        work(worker, x)
        dbg.stop()
        dbg.service.reset_status()

    for _ in range(3):  # warm-up: msprobe hooks, first directories
        ours()
        direct()
    wall = {"ours": [], "direct": []}
    cpu = {"ours": [], "direct": []}
    for _ in range(sessions):  # interleaved, so drift and noise hit both alike
        for name, fn in (("ours", ours), ("direct", direct)):
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            cpu[name].append(time.process_time() - c0)
            wall[name].append(time.perf_counter() - w0)
    return {kind: (statistics.median(t["ours"]), statistics.median(t["direct"]))
            for kind, t in (("wall", wall), ("cpu", cpu))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--level", default="L1")
    ap.add_argument("--task", default="statistics")
    args = ap.parse_args()

    root = tempfile.mkdtemp(prefix="pdbg-bench-")
    try:
        config_path = os.path.join(root, "config.json")
        with open(config_path, "w") as f:
            json.dump({"task": args.task, "rank": [], "step": [], "level": args.level, "async_dump": False,
                       args.task: {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}, f)
        prof = PrecisionDebuggerProfiler({"config_path": config_path}, rank=0, save_path=os.path.join(root, "ours"))

        plain, wrapped = bench_not_profiled(prof, args.calls)
        profiled = bench_profiled(prof, config_path, root, args.sessions)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    over_us = (wrapped - plain) * 1e6
    print(f"not profiled: decorated {wrapped * 1e6:.3f} us/call, undecorated {plain * 1e6:.3f} us/call: "
          f"ratio {wrapped / plain:.2f}, +{over_us:.3f} us per call (target: a few us) "
          f"{'OK' if over_us < 3 else 'OVER'}")
    for kind, (ours, direct) in profiled.items():
        ratio = ours / direct
        print(f"profiled stage, {kind} time ({args.level} {args.task}, median of {args.sessions} sessions): "
              f"this profiler {ours * 1e3:.2f} ms, msprobe directly {direct * 1e3:.2f} ms: ratio {ratio:.3f} "
              f"(target <= 1.05) {'OK' if ratio <= 1.05 else 'OVER'}")


if __name__ == "__main__":
    main()
