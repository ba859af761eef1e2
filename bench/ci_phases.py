"""CI's time, phase by phase: runs `.ci/run` (a fresh venv, then the README's test command) on a clean clone
of HEAD and prints how long each phase took: the set-up (venv, pip install, collection), the tests, the
background venv builds and data jobs (the suite's own summary), and the slowest test steps.

    python bench/ci_phases.py            # pip's and the test venvs' caches as they are on this machine
    python bench/ci_phases.py --fresh    # pip's, the test venvs' and XDG caches empty: what CI is held to (25 min)

The full log is kept (--log). Each change to CI is measured this way before it lands."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_S = 25 * 60
_PROGRESS = re.compile(r"^[.sEFxX]+\s+\[\s*\d+%\]$")
_DURATION = re.compile(r"^(\d+\.\d+)s (setup|call|teardown)\s+(\S+)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fresh", action="store_true", help="empty pip and test-venv caches (a new machine)")
    ap.add_argument("--slowest", type=int, default=15, help="test steps listed (default 15)")
    ap.add_argument("--log", default=os.path.join(tempfile.gettempdir(), "ci_phases.log"))
    args = ap.parse_args(argv)

    work = tempfile.mkdtemp(prefix="ci-phases-")
    clone = os.path.join(work, "clone")
    env = dict(os.environ, CI="true", PYTEST_ADDOPTS=f"--durations={args.slowest}")
    if args.fresh:
        env["PIP_CACHE_DIR"] = os.path.join(work, "pip-cache")
        env["VERL_PDBG_CONF_VENVS"] = os.path.join(work, "venvs")
        env["XDG_CACHE_HOME"] = os.path.join(work, "xdg-cache")  # anything else a tool keeps there
    try:
        t0 = time.monotonic()
        subprocess.run(["git", "clone", "-q", ROOT, clone], check=True)
        marks = {"clone": time.monotonic() - t0}
        first_test = None
        lines = []
        with open(args.log, "w") as log:
            proc = subprocess.Popen(["bash", ".ci/run"], cwd=clone, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
            for line in proc.stdout:
                log.write(line)
                line = line.rstrip("\n")
                if first_test is None and _PROGRESS.match(line):
                    first_test = time.monotonic() - t0
                lines.append(line)
            rc = proc.wait()
        total = time.monotonic() - t0
    finally:
        shutil.rmtree(work, ignore_errors=True)

    setup = (first_test or total) - marks["clone"]
    print(f"caches: {'empty (--fresh)' if args.fresh else 'as on this machine'}; exit {rc}; log {args.log}")
    print(f"  clone                                  {marks['clone']:7.1f} s")
    print(f"  set-up: venv, pip install, collection  {setup:7.1f} s   (until the first test line)")
    print(f"  tests                                  {total - (first_test or total):7.1f} s")
    print(f"  whole run                              {total:7.1f} s   ({total / 60:.1f} min; target "
          f"{TARGET_S // 60} min: {'within' if total <= TARGET_S else 'OVER'})")
    background = _section(lines, "background phases")
    if background:
        print("background (started at / took, from the test session's start):")
        for line in background:
            print("  " + line)
    slow = [m for m in map(_DURATION.match, lines) if m]
    if slow:
        print(f"slowest {len(slow)} test steps:")
        for m in slow:
            print(f"  {float(m.group(1)):7.1f} s {m.group(2):8} {m.group(3)}")
    summary = next((ln for ln in reversed(lines) if re.search(r"\d+ (passed|failed)", ln)), "")
    print(f"result: {summary.strip('= ')}")
    return rc


def _section(lines: list[str], title: str) -> list[str]:
    """The lines of one of pytest's summary sections (`==== title ====` up to the next `====`)."""
    out, inside = [], False
    for line in lines:
        if line.startswith("=") and title in line:
            inside = True
            continue
        if inside and line.startswith("="):
            break
        if inside and line.strip():
            out.append(line)
    return out


if __name__ == "__main__":
    sys.exit(main())
