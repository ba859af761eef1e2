"""Mutation testing of the verdict's core (issue 42): mutmut over one module at a time, in a copy of the
project so the work tree is never touched, with the fast tests that hold that module's behaviour. Prints
each module's score and its surviving mutants (with their diff), and with --json writes the figures the
repository keeps (bench/mutation-score.json). Survivors judged equivalent are listed, each with its reason,
in bench/mutation-equivalent.md; the score counts them apart.

    python bench/mutation.py verdict judge            # those modules
    python bench/mutation.py --json bench/mutation-score.json   # all five, the stored figures
    python bench/mutation.py --json bench/mutation-score.json --rescore   # after adding to the equivalents

mutmut is installed into the running venv if missing (`pip install mutmut==3.8.1`): the CI share
(tests/test_mutants_ci.py) needs no mutmut."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTMUT = "mutmut==3.8.1"
EQUIVALENT = ROOT / "bench" / "mutation-equivalent.md"

# module -> (its file, the tests that hold its behaviour: fast ones, in-process)
MODULES = {
    "verdict": ("verl_pdbg_conf/compare/verdict.py",
                ["tests/test_verdict_core.py", "tests/test_compare_decide.py"]),
    "judge": ("verl_pdbg_conf/compare/judge.py",
              ["tests/test_verdict_core.py", "tests/test_compare_bad_values.py"]),
    "records": ("verl_pdbg_conf/compare/records.py",
                ["tests/test_verdict_core.py", "tests/test_compare_bad_values.py", "tests/test_compare_dumpread.py"]),
    # its 1,300 mutants against the in-process tests only: a compare per surviving mutant would take hours
    "dumpread": ("verl_pdbg_conf/compare/dumpread.py", ["tests/test_verdict_core.py", "tests/test_compare_dumpread.py"]),
    "coverage": ("verl_pdbg_conf/compare/pipeline/coverage.py",
                 ["tests/test_verdict_core.py", "tests/test_compare_bad_values.py", "tests/test_compare_decide.py"]),
}
DESELECT = ["-k", "not memory_does_not_grow"]  # a 30 s memory bound: no behaviour of these modules


def ensure_mutmut() -> None:
    try:
        import mutmut  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", MUTMUT], check=True)


def equivalents() -> dict[str, str]:
    """bench/mutation-equivalent.md's table: mutant name -> why it cannot be told apart."""
    out = {}
    if EQUIVALENT.is_file():
        for line in EQUIVALENT.read_text().splitlines():
            m = re.match(r"\|\s*`([^`]+)`\s*\|\s*(.+?)\s*\|$", line)
            if m:
                out[m.group(1)] = m.group(2)
    return out


def workdir(module: str) -> Path:
    """A copy of the tracked files with mutmut's configuration for one module."""
    d = Path(tempfile.mkdtemp(prefix=f"mutation-{module}-"))
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if f.startswith(("verl_pdbg_conf/", "tests/", "examples/", "hydra_plugins/")) or f == "pyproject.toml":
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, d / f)
    path, tests = MODULES[module]
    lines = lambda args: "".join(f"\n    {a}" for a in args)  # noqa: E731 - setup.cfg's lists, one a line
    (d / "setup.cfg").write_text(
        "[mutmut]\n"
        "source_paths = verl_pdbg_conf/\n"
        f"only_mutate = {path}\n"
        f"also_copy ={lines(['examples/', 'hydra_plugins/'])}\n"
        f"pytest_add_cli_args_test_selection ={lines(tests)}\n"
        f"pytest_add_cli_args ={lines(['-p', 'no:cacheprovider', *DESELECT])}\n")
    return d


def run_module(module: str) -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    d = workdir(module)
    t0 = time.time()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.run(["nice", sys.executable, "-m", "mutmut", "run", "--max-children", "1"], cwd=d, env=env,
                         capture_output=True, text=True)
    listed = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=d, env=env,
                            capture_output=True, text=True).stdout
    status = {}
    for line in listed.splitlines():
        m = re.match(r"\s*(\S+): (\S+)", line)
        if m and "__mutmut_" in m.group(1):
            status[m.group(1)] = m.group(2)
    known = equivalents()
    survived = sorted(n for n, s in status.items() if s == "survived")
    diffs = {n: subprocess.run([sys.executable, "-m", "mutmut", "show", n], cwd=d, env=env, capture_output=True,
                               text=True).stdout for n in survived}
    killed = sum(1 for s in status.values() if s in ("killed", "timeout", "segfault", "suspicious"))
    equivalent = [n for n in survived if n in known]
    live = [n for n in survived if n not in known]
    judged = killed + len(live)
    result = {
        "file": MODULES[module][0], "tests": MODULES[module][1], "mutants": len(status), "killed": killed,
        "survived": len(survived), "equivalent": len(equivalent), "not_checked": sum(1 for s in status.values()
                                                                                     if s in ("no tests", "skipped")),
        "score": round(killed / judged, 4) if judged else None,
        "survivors": {n: diffs[n] for n in live}, "equivalent_mutants": equivalent, "seconds": round(time.time() - t0), "commit": commit.strip(),
    }
    if run.returncode != 0 or not killed:
        result["error"] = (run.stdout + run.stderr)[-2000:]
    shutil.rmtree(d, ignore_errors=True)
    return result


def rescore(r: dict, known: dict) -> None:
    """A module's figures with bench/mutation-equivalent.md as it is now: survivors listed there since the run
    are counted as equivalent (nothing else changes: a test added since needs a new run to count)."""
    moved = [n for n in r["survivors"] if n in known]
    r["equivalent"] = r["equivalent"] + len(moved)
    r["equivalent_mutants"] = sorted(set(r.get("equivalent_mutants", [])) | set(moved))
    r["survivors"] = {n: d for n, d in r["survivors"].items() if n not in known}
    judged = r["killed"] + len(r["survivors"])
    r["score"] = round(r["killed"] / judged, 4) if judged else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", choices=[[], *MODULES], help="default: all five, one at a time")
    ap.add_argument("--json", help="write the figures here (merged with what the file holds of other modules)")
    ap.add_argument("--rescore", action="store_true",
                    help="run nothing: recount the --json file's survivors against bench/mutation-equivalent.md")
    args = ap.parse_args(argv)
    doc = json.loads(Path(args.json).read_text()) if args.json and Path(args.json).is_file() else {"modules": {}}
    if args.rescore:
        for r in doc["modules"].values():
            rescore(r, equivalents())
    else:
        ensure_mutmut()
    for module in [] if args.rescore else args.modules or list(MODULES):
        r = run_module(module)
        doc["modules"][module] = r
    for module, r in doc["modules"].items():
        print(f"{module}: {r['killed']}/{r['mutants']} killed, {r['survived']} survived "
              f"({r['equivalent']} equivalent), score {r['score']}, {r['seconds']} s")
        for name, diff in r["survivors"].items():
            print(f"  survived {name}\n" + "\n".join("    " + ln for ln in diff.splitlines() if ln[:1] in "+-"))
        if "error" in r:
            print(r["error"], file=sys.stderr)
    ms = doc["modules"].values()
    killed = sum(m["killed"] for m in ms)
    live = sum(len(m["survivors"]) for m in ms)
    doc.update(killed=killed, survived=sum(m["survived"] for m in ms), equivalent=sum(m["equivalent"] for m in ms),
               score=round(killed / (killed + live), 4) if killed + live else None,
               command="python bench/mutation.py --json bench/mutation-score.json", tool=MUTMUT)
    print(f"total: score {doc['score']} ({killed} killed, {live} surviving not equivalent)")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
