"""verl-pdbg-compare against running `msprobe compare` by hand for each pair, measured in one run.

Two runs (golden, and one with blocks.3.fc's weight scaled by 1.01) of 2 steps x 3 stages x 2 ranks,
written on CPU by this package's runtime profiler through a two-rank gloo group (tests/make_compare_dumps.py).
Then, in one run of this script:

  by hand   `msprobe compare -tp T/dump.json -gp G/dump.json -o OUT` for each of the 12 pairs, one after
            the other (what --compare prints today), results not read;
  ours      `verl-pdbg-compare T G --format json -o OUT` (the command, in its own process: pairs, runs
            msprobe compare on every pair in worker processes, reads the 12 results, names the first
            divergence of each).

Each is timed --repeat times, interleaved; medians and the ratio by-hand / ours are printed. Both must
agree: the first row over the threshold in each by-hand CSV is the first divergence ours names.

    python bench/compare_runs.py [--repeat 3] [--level mix] [--task statistics] [--jobs N]"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))


def make_runs(work: str, level: str, task: str) -> None:
    cfg = os.path.join(work, "config.json")
    with open(cfg, "w") as fh:
        json.dump({"task": task, "level": level, "rank": [], "step": [], "async_dump": False,
                   task: {"scope": [], "list": [], "data_mode": ["all"]}}, fh)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    maker = [sys.executable, os.path.join(REPO, "tests", "make_compare_dumps.py"), os.path.join(work, "runs"), cfg]
    procs = [subprocess.Popen(maker + [str(r), "2", str(port), "--steps", "1,2", "--variants", "golden,scaled"],
                              cwd=work, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in (0, 1)]
    for p in procs:
        out, _ = p.communicate(timeout=900)
        if p.returncode:
            sys.exit(f"making the dumps failed:\n{out[-3000:]}")


def pairs(target: str, golden: str) -> list[tuple[str, str, str]]:
    found = sorted(glob.glob(os.path.join(target, "step_*", "*", "step0", "rank*", "dump.json")))
    return [(t, t.replace(target, golden, 1), os.path.relpath(os.path.dirname(t), target)) for t in found]


def by_hand(todo, out: str) -> float:
    t0 = time.perf_counter()
    for tp, gp, rel in todo:
        proc = subprocess.run(["msprobe", "compare", "-tp", tp, "-gp", gp, "-o", os.path.join(out, rel)],
                              capture_output=True, text=True, env=ENV)
        if proc.returncode:
            sys.exit(f"msprobe compare failed on {rel}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def ours(target: str, golden: str, out: str, jobs: int | None) -> tuple[float, dict]:
    argv = [sys.executable, "-m", "verl_pdbg_conf.compare.cli", target, golden, "--format", "json", "-o", out]
    if jobs:
        argv += ["--jobs", str(jobs)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV)
    dt = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"verl-pdbg-compare exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return dt, json.loads(proc.stdout)


def csv_first(csv_path: str, threshold: float) -> str | None:
    """msprobe's CSV read by hand: forward rows before backward ones, the first with no golden counterpart,
    another shape or dtype, a NaN or a NormRelativeErr over the threshold."""
    import csv

    from verl_pdbg_conf.compare.msprobe_csv import parse_value
    from verl_pdbg_conf.compare.nodes import split_name

    with open(csv_path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    rows.sort(key=lambda r: split_name(r["NPU Name"])[0] == "backward")
    for r in rows:
        v = parse_value(r.get("NormRelativeErr"))
        if (r["Bench Name"] in ("", "N/A") or r["NPU Tensor Shape"] != r["Bench Tensor Shape"]
                or r["NPU Dtype"] != r["Bench Dtype"] or (v is not None and (v != v or v > threshold))):
            return r["NPU Name"]
    return None


def agree(doc: dict, hand_out: str, target: str) -> int:
    """Pairs whose by-hand CSV's first row over the threshold is the first divergence ours names."""
    n = 0
    for p in doc["pairs"]:
        rel = os.path.relpath(os.path.dirname(p["target"]), target)
        (csv_path,) = glob.glob(os.path.join(hand_out, rel, "compare_result_*.csv"))
        mine = p["first_divergence"]["name"] if p["first_divergence"] else None
        n += csv_first(csv_path, doc["threshold"]) == mine
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--level", default="mix")
    ap.add_argument("--task", default="statistics")
    ap.add_argument("--jobs", type=int, default=None)
    a = ap.parse_args()
    if shutil.which("msprobe") is None:
        sys.exit("msprobe's command is not on PATH")
    work = tempfile.mkdtemp(prefix="bench-compare-")
    try:
        t0 = time.perf_counter()
        make_runs(work, a.level, a.task)
        target, golden = os.path.join(work, "runs", "scaled"), os.path.join(work, "runs", "golden")
        todo = pairs(target, golden)
        print(f"dumps: {len(todo)} pairs ({a.level}, {a.task}; 2 steps x 3 stages x 2 ranks) made in "
              f"{time.perf_counter() - t0:.1f} s")
        hand_t, ours_t = [], []
        for i in range(a.repeat):
            hand_out, our_out = os.path.join(work, f"hand{i}"), os.path.join(work, f"ours{i}")
            hand_t.append(by_hand(todo, hand_out))
            dt, doc = ours(target, golden, our_out, a.jobs)
            ours_t.append(dt)
            ok = agree(doc, hand_out, target)
            print(f"  round {i + 1}: by hand {hand_t[-1]:.1f} s, verl-pdbg-compare {dt:.1f} s; "
                  f"first divergence agrees on {ok}/{len(doc['pairs'])} pairs")
            if ok != len(doc["pairs"]) or len(doc["pairs"]) != len(todo):
                sys.exit("verl-pdbg-compare and the by-hand results disagree")
        h, o = statistics.median(hand_t), statistics.median(ours_t)
        print(f"by hand (sequential msprobe compare x {len(todo)}): median {h:.2f} s")
        from verl_pdbg_conf.compare.modes import default_jobs

        print(f"verl-pdbg-compare (jobs {a.jobs or default_jobs()}): median {o:.2f} s")
        print(f"ratio by hand / verl-pdbg-compare: {h / o:.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
