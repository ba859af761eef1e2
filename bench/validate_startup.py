"""Start-up cost of one check, as a pre-commit hook or a CI step pays it: one conf and its
config.json through `verl-pdbg-validate`, against `check-jsonschema --schemafile
verl_pdbg_conf/schemas/msprobe-config.schema.json config.json`, each a fresh process, run
alternately --repeat times; prints the medians and the ratio (issue 22: ours at most 0.35x of
check-jsonschema's wall time). A valid config.json is judged without importing jsonschema
(core/fast_schema.py); `python -X importtime -m verl_pdbg_conf CONF` shows what start-up costs.

    python bench/validate_startup.py [--repeat 15] [--conf CONF.yaml] [--code CHECKOUT]

Both run as `python -m MODULE` with the same interpreter, so neither pays for a launcher shim.
check-jsonschema runs as pip installed it: from the bytecode pip compiled at install. Ours is
timed three ways: as installed (its bytecode compiled once, by a first run, into a temporary
PYTHONPYCACHEPREFIX, as pip compiles an installed package's); this tree as the environment runs
it (an editable install compiles the tree's bytecode, build_hooks.py; without it, and with
PYTHONDONTWRITEBYTECODE set, every run compiles the package: said so); and from source, a copy
of the package with no bytecode at all, compiled on every run (what an edited tree pays).
`--code CHECKOUT` times the verl_pdbg_conf of another checkout (main, a branch) in the same
harness: a before and after in one run. `--instructions` also counts the instructions of one
run of each under valgrind (callgrind): the same on a busy machine as on a quiet one."""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = os.path.join(REPO, "verl_pdbg_conf", "schemas", "msprobe-config.schema.json")
CONFIG = os.path.join(REPO, "verl_pdbg_conf", "conf", "msprobe", "statistics_l1.json")
CONF = """\
global_profiler:
  tool: precision_debugger
  steps: [1, 2]
  save_path: outputs/profile
  global_tool_config:
    precision_debugger:
      config_path: {config}
      stages: [actor_compute_log_prob, ref_compute_log_prob, actor_update]
      strict: False
actor_rollout_ref:
  actor:
    use_kl_loss: True
    profiler:
      enable: True
"""


def once(cmd: list[str], env: dict, cwd: str) -> tuple[float, int]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    return time.perf_counter() - t, proc.returncode


TARGET = 0.35


def instructions(cmd: list[str], env: dict, cwd: str) -> int | None:
    """Instructions one run executes (valgrind's callgrind), or None without valgrind."""
    import re
    import shutil

    if shutil.which("valgrind") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg", *cmd], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=cwd)
    m = re.search(r"Collected : (\d+)", proc.stderr)
    return int(m.group(1)) if m else None


def from_bytecode(code: str, env: dict) -> bool:
    """Whether a run of the package in `code` reads bytecode as `env` stands: bytecode is written
    unless PYTHONDONTWRITEBYTECODE is set, or was written before (the cli module's .pyc exists)."""
    if not env.get("PYTHONDONTWRITEBYTECODE") or env.get("PYTHONPYCACHEPREFIX"):
        return True
    return os.path.exists(importlib.util.cache_from_source(os.path.join(code, "verl_pdbg_conf", "cli.py")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--conf", help="a conf YAML whose config_path names a config.json (default: a guide-shaped one)")
    ap.add_argument("--code", default=REPO, help="the checkout whose verl_pdbg_conf is timed (default: this one)")
    ap.add_argument("--instructions", action="store_true", help="also count each one's instructions under valgrind")
    args = ap.parse_args()
    code = os.path.abspath(args.code)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (code, os.environ.get("PYTHONPATH")) if p))
    env.pop("GITHUB_ACTIONS", None)
    if importlib.util.find_spec("check_jsonschema") is None or not os.path.exists(SCHEMA):
        print("check-jsonschema or the msprobe schema is missing")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        # The runs start in the temporary directory: `python -m` puts the current directory first on
        # sys.path, and from a checkout it would import that checkout's package whatever --code says.
        conf = os.path.abspath(args.conf) if args.conf else None
        if conf is None:
            conf = os.path.join(tmp, "precision_debugger.yaml")
            with open(conf, "w") as fh:
                fh.write(CONF.format(config=CONFIG))
        ours = [sys.executable, "-m", "verl_pdbg_conf", "--base-dir", os.getcwd(), conf]
        theirs = [sys.executable, "-m", "check_jsonschema", "--schemafile", SCHEMA, CONFIG]
        installed = dict(env, PYTHONPYCACHEPREFIX=os.path.join(tmp, "pyc"))
        installed.pop("PYTHONDONTWRITEBYTECODE", None)
        # a copy of the package with no bytecode at all, run with none written: compiled on every run
        src = os.path.join(tmp, "src")
        shutil.copytree(os.path.join(code, "verl_pdbg_conf"), os.path.join(src, "verl_pdbg_conf"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        source = dict(env, PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p),
                      PYTHONDONTWRITEBYTECODE="1")
        as_is = from_bytecode(code, env)
        variants = (("installed", ours, installed), ("as is", ours, env), ("source", ours, source),
                    ("theirs", theirs, env))
        for _, cmd, e in variants:
            once(cmd, e, tmp)  # bytecode written where it is written, files cached
        counts = {}
        if args.instructions:
            for name, cmd, e in variants:
                counts[name] = instructions(cmd, e, tmp)
        runs = {name: [] for name, _, _ in variants}
        for _ in range(args.repeat):
            for name, cmd, e in variants:
                t, rc = once(cmd, e, tmp)
                runs[name].append((t, rc))
    med = {k: statistics.median(t for t, _ in v) for k, v in runs.items()}
    low = {k: min(t for t, _ in v) for k, v in runs.items()}
    rc = {k: v[-1][1] for k, v in runs.items()}
    where = "" if code == REPO else f", the package of {code}"
    line = "    {:<52} {:7.1f} ms ({:.1f}) exit {}"
    ours_labels = (("installed", "as installed (bytecode, as pip compiles it)"),
                   ("as is", "this tree as the environment runs it (*)"),
                   ("source", "from source, no bytecode (compiled every run)"))
    print(f"{args.repeat} alternating runs, medians (min):")
    print(f"  verl-pdbg-validate conf.yaml (+ its config.json){where}")
    for name, label in ours_labels:
        print(line.format(label, med[name] * 1000, low[name] * 1000, rc[name]))
    print("  check-jsonschema --schemafile msprobe-config.schema.json")
    print(line.format("as installed (pip compiled its bytecode)", med["theirs"] * 1000, low["theirs"] * 1000,
                      rc["theirs"]))
    for name, label in (("installed", "as installed"), ("as is", "as the environment runs it"),
                        ("source", "from source")):
        r = med[name] / med["theirs"]
        print(f"  ratio {label}: {r:.2f}x of check-jsonschema's wall time "
              f"(target <= {TARGET:.2f}x: {'met' if r <= TARGET else 'NOT met'})")
    if counts.get("theirs"):
        print("  instructions of one run (valgrind): " + ", ".join(
            f"{label} {counts[k] / 1e6:.0f} M" for k, label in (("installed", "ours as installed"),
                                                                 ("as is", "as the environment runs it"),
                                                                 ("source", "from source"),
                                                                 ("theirs", "check-jsonschema")) if counts.get(k))
            + "; ratios " + ", ".join(f"{counts[k] / counts['theirs']:.2f}x" for k in ("installed", "as is", "source")
                                      if counts.get(k)))
    print("  (*) " + ("from bytecode (an editable install compiles it: build_hooks.py)" if as_is else
                      "from source: PYTHONDONTWRITEBYTECODE is set and no __pycache__ holds this tree's bytecode, "
                      "so every run compiles the package"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
