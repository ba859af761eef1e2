"""This checkout's compare against an earlier commit's, on the same healthy pairs, in one run: the ratio of
whole-command wall times, so "no slower than before" is a figure measured side by side, not remembered.

The earlier commit is checked out into a temporary git worktree; each command runs in its own process with
that tree first on PYTHONPATH, the two in turn (A B A B ...), and the median of the per-round ratios is
printed. The pairs:

  runs     `verl-pdbg-compare T G` on two L1 statistics runs of actor_update (tests/make_compare_dumps.py,
           --blocks N, a copy of the golden against it: a healthy pair, every record compared; one path given
           twice is refused)
  rollout  `verl-pdbg-compare --rollout examples/rollout` (real vLLM against its actor, tensors)

    python bench/compare_vs_commit.py BASE_COMMIT [--blocks 400] [--rounds 7]

A ratio above 1 means this checkout is slower."""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))

import compare_engine  # noqa: E402


def run(tree: str, args: list[str]) -> float:
    env = dict(os.environ, PYTHONPATH=tree)
    t0 = time.perf_counter()
    jobs = [] if "--rollout" in args else ["-j", "1"]  # --rollout before issue 41 refused -j (one step: one process)
    proc = subprocess.run([sys.executable, "-m", "verl_pdbg_conf.compare.cli", *args, "--format", "json", *jobs],
                          env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - t0
    if proc.returncode not in (0, 1, 3):
        sys.exit(f"{tree}: exit {proc.returncode}: {proc.stderr[-800:]}")
    return took


def _copy_file(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy2(src, dst)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", help="the earlier commit (a hash, a branch, a tag)")
    ap.add_argument("--blocks", type=int, default=400, help="blocks of the runs pair's model (default 400)")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-compare-vs-") as work:
        base = os.path.join(work, "base")
        subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", "-q", base, a.base], check=True)
        try:
            _t, g = compare_engine.make_pair(work, a.blocks)
            twin = os.path.join(work, "golden-copy", os.path.basename(g))  # one path twice is refused (usage)
            (shutil.copytree if os.path.isdir(g) else _copy_file)(g, twin)
            rollout = os.path.join(REPO, "examples", "rollout")
            cases = {"runs": [twin, g], "rollout": ["--rollout", rollout]}
            print(f"this checkout against {a.base}: {a.rounds} rounds, whole command, wall seconds")
            for name, args in cases.items():
                run(REPO, args), run(base, args)  # warm-up: imports and files cached alike
                ratios, here, there = [], [], []
                for _ in range(a.rounds):
                    here.append(run(REPO, args))
                    there.append(run(base, args))
                    ratios.append(here[-1] / there[-1])
                print(f"{name:8} this {statistics.median(here):.3f} s   base {statistics.median(there):.3f} s   "
                      f"ratio median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")
        finally:
            subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", base], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
