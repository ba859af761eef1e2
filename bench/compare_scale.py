"""verl-pdbg-compare at the scale of a real run, against `msprobe compare -tp -gp -o`, in one run.

Dumps: one real pair written on CPU by this package's runtime profiler (tests/make_compare_dumps.py: L1
statistics, a deeper model: --blocks, --minibatches forward+backward passes with an optimizer step in
one actor_update stage; the target's blocks.3.fc weight scaled by 1.01). A size up to the real pair's is its first records; a bigger one is
the real records replicated (each copy's API calls renumbered after the last, so every name stays
unique and in execution order): real 200k-record L1 runs take too long on 2 shared cores. The script
says which each size is. A record is one tensor's statistics (one row of msprobe's CSV).

Per size, one pair, each whole command timed once, side by side:
  ours     `verl-pdbg-compare T G --format json -o OUT -j 1` (whatever per-pair job it runs: the
           script names it; -j 1 runs one pair in the command's own process)
  msprobe  `msprobe compare -tp T -gp G -o OUT`
records/s = records in the pair / wall time; peak = the largest sum of RSS over the command's process
tree (sampled every 50 ms). Then the whole-run time of --pairs pairs (--run-size records each) with the
local process pool and with a local Ray cluster of --ray-nodes nodes (ray.cluster_utils.Cluster, one CPU
each; its start-up not counted).

    python bench/compare_scale.py [--sizes 2000,20000,200000] [--pairs 4] [--run-size 20000] [--ray-nodes 2]"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
CALL = re.compile(r"^(?P<api>.+)\.(?P<n>\d+)\.(?P<dir>forward|backward)$")


def make_real(work: str, blocks: int, minibatches: int) -> tuple[str, str]:
    """One real pair (golden, scaled) of one actor_update stage; returns the two dump.json paths."""
    cfg = os.path.join(work, "l1.json")
    with open(cfg, "w") as fh:
        json.dump({"task": "statistics", "level": "L1", "rank": [], "step": [], "async_dump": False,
                   "statistics": {"scope": [], "list": [], "data_mode": ["all"]}}, fh)
    proc = subprocess.run([sys.executable, os.path.join(REPO, "tests", "make_compare_dumps.py"),
                           os.path.join(work, "real"), cfg, "0", "0", "0", "--steps", "1", "--stages", "actor_update",
                           "--variants", "golden,scaled", "--blocks", str(blocks), "--minibatches", str(minibatches)],
                          cwd=work, env=ENV, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"making the dumps failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    found = []
    for variant in ("golden", "scaled"):
        for here, _dirs, files in os.walk(os.path.join(work, "real", variant)):
            if "dump.json" in files:
                found.append(os.path.join(here, "dump.json"))
    return found[0], found[1]


def count(value) -> int:
    """Tensor statistics records in one API call's entry (one CSV row each)."""
    if isinstance(value, dict):
        if "Norm" in value or "Max" in value and "type" in value:
            return 1
        return sum(count(v) for v in value.values())
    if isinstance(value, list):
        return sum(count(v) for v in value)
    return 0


def resize(src: str, dst_dir: str, records: int) -> int:
    """dst_dir/dump.json (+ stack.json, construct.json) with about `records` records of src: its first
    calls, or its calls replicated and renumbered. Returns the records written."""
    with open(src) as fh:
        doc = json.load(fh)
    calls = list(doc["data"].items())
    top: dict[str, int] = {}
    for name, _ in calls:
        m = CALL.match(name)
        if m:
            top[m["api"]] = max(top.get(m["api"], -1), int(m["n"]))
    data, n, copy = {}, 0, 0
    while n < records:
        for name, entry in calls:
            m = CALL.match(name)
            new = f"{m['api']}.{int(m['n']) + copy * (top[m['api']] + 1)}.{m['dir']}" if m and copy else name
            data[new] = entry
            n += count(entry)
            if n >= records:
                break
        copy += 1
    doc["data"] = data
    os.makedirs(dst_dir, exist_ok=True)
    with open(os.path.join(dst_dir, "dump.json"), "w") as fh:
        json.dump(doc, fh)
    for extra in ("stack.json", "construct.json"):
        if os.path.exists(os.path.join(os.path.dirname(src), extra)):
            shutil.copy(os.path.join(os.path.dirname(src), extra), dst_dir)
    return n


def measured(argv: list[str]) -> tuple[float, int, subprocess.CompletedProcess]:
    """(wall seconds, peak RSS of the process tree in bytes, the finished process)."""
    import psutil

    # output to files, not pipes: msprobe prints progress bars enough to fill a pipe nobody reads yet
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=ENV, stdout=out, stderr=err, text=True)
        root = psutil.Process(proc.pid)
        peak = 0
        while proc.poll() is None:
            try:
                rss = sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
            except psutil.Error:
                rss = 0
            peak = max(peak, rss)
            time.sleep(0.05)
        dt = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        return dt, peak, subprocess.CompletedProcess(argv, proc.returncode, out.read(), err.read())


def ours_cmd(target: str, golden: str, out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "verl_pdbg_conf.compare.cli", target, golden, "--format", "json", "-o", out, *extra]


def check(proc: subprocess.CompletedProcess, what: str) -> dict:
    if proc.returncode not in (0, 1):
        sys.exit(f"{what} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return json.loads(proc.stdout) if proc.stdout.startswith("{") else {}


def job_name() -> str:
    """The per-pair job verl-pdbg-compare runs by default (the engine once it has landed)."""
    from verl_pdbg_conf.compare import modes

    fn = inspect.signature(modes.compare_runs).parameters.get("job_fn")
    fn = (fn.default or modes.compare_pair) if fn is not None else None  # None: the engine's, looked up per call
    return f"{fn.__module__}.{fn.__name__}" if fn else "unknown"


def layout(root: str, pairs: int, src: str, records: int) -> None:
    for r in range(pairs):
        resize(src, os.path.join(root, "step_1", "actor_update", "step0", f"rank{r}"), records)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="2000,20000,200000", help="records per pair ('' for the whole run only)")
    ap.add_argument("--blocks", type=int, default=64, help="depth of the real model")
    ap.add_argument("--minibatches", type=int, default=8, help="forward+backward passes in the real stage")
    ap.add_argument("--pairs", type=int, default=4, help="pairs of the whole run")
    ap.add_argument("--run-size", type=int, default=20000, help="records per pair of the whole run")
    ap.add_argument("--ray-nodes", type=int, default=2)
    ap.add_argument("--no-ray", action="store_true")
    a = ap.parse_args()
    if shutil.which("msprobe") is None:
        sys.exit("msprobe's command is not on PATH")
    work = tempfile.mkdtemp(prefix="bench-compare-scale-")
    try:
        t0 = time.perf_counter()
        real_g, real_t = make_real(work, a.blocks, a.minibatches)
        with open(real_g) as fh:
            real = count(json.load(fh)["data"])
        print(f"real pair: {real:,} records (L1 statistics, {a.blocks} blocks x {a.minibatches} mini-batches, "
              f"actor_update) made in {time.perf_counter() - t0:.0f} s; bigger sizes replicate its records")
        job = job_name()
        engine = ".engine." in job
        print(f"verl-pdbg-compare's per-pair job: {job}" + ("" if engine else
              " (not the engine: this measures today's per-pair job)"))
        print()
        head = (f"{'records':>9} {'made':>10} | {'ours s':>8} {'rec/s':>8} {'peak MB':>8} | {'msprobe s':>9} "
                f"{'rec/s':>8} {'peak MB':>8} | {'msprobe/ours':>12}")
        print(head)
        print("-" * len(head))
        for size in (int(s) for s in a.sizes.split(",") if s):
            d = os.path.join(work, f"s{size}")
            n = resize(real_t, os.path.join(d, "t"), size)
            resize(real_g, os.path.join(d, "g"), size)
            made = "real" if n <= real else "replicated"
            tp, gp = os.path.join(d, "t", "dump.json"), os.path.join(d, "g", "dump.json")
            ot, om, proc = measured(ours_cmd(tp, gp, os.path.join(d, "ours"), "-j", "1"))
            doc = check(proc, "verl-pdbg-compare")
            mt, mm, proc = measured(["msprobe", "compare", "-tp", tp, "-gp", gp, "-o", os.path.join(d, "msprobe")])
            check(proc, "msprobe compare")
            pair = (doc.get("pairs") or [{}])[0]
            first = pair.get("first_divergence") or {}
            print(f"{n:>9,} {made:>10} | {ot:>8.2f} {n / ot:>8,.0f} {om / 2**20:>8.0f} | {mt:>9.2f} {n / mt:>8,.0f} "
                  f"{mm / 2**20:>8.0f} | {mt / ot:>11.2f}x   ({pair.get('nodes')} nodes judged; first: "
                  f"{first.get('name')} {first.get('module') or first.get('where') or ''})", flush=True)
            shutil.rmtree(d, ignore_errors=True)
        print()
        target, golden = os.path.join(work, "run", "target"), os.path.join(work, "run", "golden")
        layout(target, a.pairs, real_t, a.run_size)
        layout(golden, a.pairs, real_g, a.run_size)
        dt, _, proc = measured(ours_cmd(target, golden, os.path.join(work, "run", "local")))
        doc = check(proc, "verl-pdbg-compare (local pool)")
        from verl_pdbg_conf.compare.modes import default_jobs

        print(f"whole run, {a.pairs} pairs x {a.run_size:,} records: local pool ({default_jobs()} workers) {dt:.1f} s, "
              f"{sum(p['status'] == 'diverged' for p in doc['pairs'])} diverged", flush=True)
        if not a.no_ray:
            ray_run(a, target, golden, work, dt)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ray_run(a, target: str, golden: str, work: str, local: float) -> None:
    os.environ["PYTHONPATH"] = ENV["PYTHONPATH"]  # the nodes' workers import this checkout
    from ray.cluster_utils import Cluster

    t0 = time.perf_counter()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(a.ray_nodes):
            c.add_node(num_cpus=1)
        c.wait_for_nodes()
        up = time.perf_counter() - t0
        dt, _, proc = measured(ours_cmd(target, golden, os.path.join(work, "run", "ray"), "--ray", c.address))
        doc = check(proc, "verl-pdbg-compare --ray")
        nodes = {p.get("ran_on") for p in doc["pairs"]}
        print(f"whole run, {a.pairs} pairs x {a.run_size:,} records: Ray, {a.ray_nodes} nodes x 1 CPU on this machine "
              f"{dt:.1f} s (cluster start {up:.0f} s not counted; pairs ran on {len(nodes)} nodes), "
              f"{sum(p['status'] == 'diverged' for p in doc['pairs'])} diverged; local/Ray {local / dt:.2f}x")
    finally:
        c.shutdown()


if __name__ == "__main__":
    main()
