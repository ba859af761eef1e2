"""The compare engine against `msprobe compare` on one pair of growing size, measured in one run.

For each depth, two L1 statistics runs of actor_update with 2 mini-batches and an SGD step between
(golden, and one with the middle block's weight scaled by 1.01) are written on CPU by this package's
runtime profiler (tests/make_compare_dumps.py --blocks N). Then, on that pair, whole command against
whole command, each in its own process:

  msprobe   `msprobe compare -tp T/dump.json -gp G/dump.json -o OUT`
  engine    `verl-pdbg-compare T/dump.json G/dump.json --format json` (the first divergence, no CSV)

Printed per size: rows (msprobe's CSV rows = the engine's nodes), wall seconds and peak RSS of each
command, the ratio msprobe / engine, the engine's rows per second (whole command, wall time; and the per-pair
function alone in this process, per CPU second: one core), and whether both name the same first
divergence.

    python bench/compare_engine.py [--blocks 40,160,640,1600] [--repeat 1]"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))


def make_pair(work: str, blocks: int) -> tuple[str, str]:
    cfg = os.path.join(work, "config.json")
    with open(cfg, "w") as fh:
        json.dump({"task": "statistics", "level": "L1", "rank": [], "step": [], "async_dump": False,
                   "statistics": {"scope": [], "list": [], "data_mode": ["all"]}}, fh)
    out = os.path.join(work, f"b{blocks}")
    subprocess.run([sys.executable, os.path.join(REPO, "tests", "make_compare_dumps.py"), out, cfg, "0", "1",
                    "29" + str(500 + blocks % 400), "--steps", "1", "--variants", "golden,scaled", "--stages",
                    "actor_update", "--minibatches", "2", "--blocks", str(blocks), "--block", str(blocks // 2)],
                   check=True, env=ENV, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t, = glob.glob(os.path.join(out, "scaled", "step_1", "actor_update", "*", "*", "dump.json"))
    g, = glob.glob(os.path.join(out, "golden", "step_1", "actor_update", "*", "*", "dump.json"))
    return t, g


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB) of the command's process, and its stdout."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, out


def msprobe_first(out_dir: str, threshold: float) -> tuple[int, str | None]:
    from verl_pdbg_conf.compare.msprobe_csv import parse_value

    import csv

    (path,) = glob.glob(os.path.join(out_dir, "compare_result_*.csv"))
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        v = parse_value(r["NormRelativeErr"])
        if r["Bench Name"] == "N/A" or (v is not None and (v != v or v > threshold)):
            return len(rows), r["NPU Name"]
    return len(rows), None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", default="40,160,640,1600")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    from verl_pdbg_conf.compare.engine import PairJob, compare_pair
    from verl_pdbg_conf.compare.options import PairOptions
    from verl_pdbg_conf.compare.options import DEFAULT_THRESHOLD

    msprobe = shutil.which("msprobe", path=os.path.dirname(sys.executable)) or "msprobe"
    work = tempfile.mkdtemp(prefix="bench-compare-engine-")
    print(f"{'rows':>7} {'dump MB':>8} | {'msprobe s':>9} {'RSS MB':>7} | {'engine s':>8} {'RSS MB':>7} | "
          f"{'ratio':>6} | {'rows/s cmd':>10} {'rows/s/core':>11} | same first")
    try:
        for blocks in (int(b) for b in a.blocks.split(",")):
            t, g = make_pair(work, blocks)
            best = {}
            for _ in range(a.repeat):
                out = tempfile.mkdtemp(dir=work)
                ms = timed([msprobe, "compare", "-tp", t, "-gp", g, "-o", out])
                en = timed([sys.executable, "-m", "verl_pdbg_conf.compare.cli", t, g, "--format", "json",
                            "--top", "0"])
                for k, v in (("ms", ms), ("en", en)):
                    if k not in best or v[0] < best[k][0]:
                        best[k] = v
                rows, ms_first = msprobe_first(out, DEFAULT_THRESHOLD)
                shutil.rmtree(out)
            start = time.process_time()  # CPU time of this process: one core, whatever else runs
            an = compare_pair(PairJob(t, g, PairOptions(top=0))).analysis
            alone = time.process_time() - start
            doc = json.loads(best["en"][2])
            en_first = (doc["pairs"][0]["first_divergence"] or {}).get("name")
            size = (os.path.getsize(t) + os.path.getsize(g)) / 2 ** 20
            print(f"{rows:>7} {size:>8.1f} | {best['ms'][0]:>9.2f} {best['ms'][1]:>7.0f} | {best['en'][0]:>8.2f} "
                  f"{best['en'][1]:>7.0f} | {best['ms'][0] / best['en'][0]:>5.1f}x | {rows / best['en'][0]:>10.0f} "
                  f"{an.n_nodes / alone:>11.0f} | {en_first == ms_first} ({en_first})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
