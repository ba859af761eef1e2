"""Validating many files in one process: files per second, and the ratio to check-jsonschema
on the same msprobe config.json files.

Makes N conf files (copies of the realistic examples in tests/examples/verl/positive and the
shipped Hydra options, each pointing at its own config.json, a copy of a shipped msprobe config),
then times, each as one command over all files, best of --repeat runs:

  1. verl-pdbg-validate CONF_1 .. CONF_N   (each conf and the config.json it names: 2N files)
  2. verl-pdbg-validate CONFIG_1.json .. CONFIG_N.json
  3. check-jsonschema --schemafile verl_pdbg_conf/schemas/msprobe-config.schema.json CONFIG_1.json ..

and prints files per second and ratio = (our files/s) / (check-jsonschema's files/s) on the same
config.json files (> 1: we are faster). Also the in-process throughput of validate_files alone.

    python bench/validate_many.py [-n 1000] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = os.path.join(REPO, "verl_pdbg_conf", "schemas", "msprobe-config.schema.json")
CONFIG_PATH_LINE = re.compile(r"^(\s*)config_path:.*$", re.M)


def sources() -> tuple[list[str], list[str]]:
    """Realistic conf texts (with a config_path line) and msprobe config.json texts."""
    confs = []
    for f in sorted(glob.glob(os.path.join(REPO, "tests", "examples", "verl", "positive", "*.yaml"))
                    + glob.glob(os.path.join(REPO, "verl_pdbg_conf", "conf", "profiler", "*.yaml"))):
        text = open(f, encoding="utf-8").read()
        if CONFIG_PATH_LINE.search(text) and "${" not in text and len(text) < 20000:
            confs.append(text)
    jsons = [open(f, encoding="utf-8").read()
             for f in sorted(glob.glob(os.path.join(REPO, "verl_pdbg_conf", "conf", "msprobe", "*.json")))]
    if not jsons:
        jsons = [json.dumps({"task": "statistics", "rank": [], "step": [], "level": "L1", "async_dump": False,
                             "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                                            "summary_mode": "statistics"}}, indent=2)]
    return confs, jsons


def make_files(root: str, n: int) -> tuple[list[str], list[str]]:
    confs, jsons = sources()
    conf_files, json_files = [], []
    for i in range(n):
        d = os.path.join(root, f"exp{i:04d}")
        os.makedirs(d)
        cfg = os.path.join(d, "msprobe_config.json")
        with open(cfg, "w", encoding="utf-8") as fh:
            fh.write(jsons[i % len(jsons)])
        text = CONFIG_PATH_LINE.sub(lambda m: f"{m.group(1)}config_path: {cfg}", confs[i % len(confs)], count=1)
        conf = os.path.join(d, "precision_debugger.yaml")
        with open(conf, "w", encoding="utf-8") as fh:
            fh.write(text)
        conf_files.append(conf)
        json_files.append(cfg)
    return conf_files, json_files


def timed(cmd: list[str], repeat: int, env: dict) -> tuple[float, int]:
    best, code = float("inf"), 0
    for _ in range(repeat):
        t = time.perf_counter()
        proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        best = min(best, time.perf_counter() - t)
        code = proc.returncode
    return best, code


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", help="write the files here instead of a temporary directory")
    args = ap.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="pdbg-many-")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    env.pop("GITHUB_ACTIONS", None)
    try:
        conf_files, json_files = make_files(root, args.n)
        ours = [sys.executable, "-m", "verl_pdbg_conf", "--format", "json"]
        t_conf, c1 = timed(ours + conf_files, args.repeat, env)
        t_json, c2 = timed(ours + json_files, args.repeat, env)
        print(f"{args.n} confs, each with its own config.json; best of {args.repeat}, one process per command")
        print(f"  verl-pdbg-validate {args.n} confs (+ their config.json): {t_conf:.2f} s, "
              f"{2 * args.n / t_conf:.0f} files/s (exit {c1})")
        print(f"  verl-pdbg-validate {args.n} config.json:                {t_json:.2f} s, "
              f"{args.n / t_json:.0f} files/s (exit {c2})")
        if importlib.util.find_spec("check_jsonschema") is None or not os.path.exists(SCHEMA):
            print("  check-jsonschema or the msprobe schema is missing: no ratio")
        else:  # both as `python -m`, so neither pays for a launcher shim
            cj = [sys.executable, "-m", "check_jsonschema"]
            t_cj, c3 = timed(cj + ["--schemafile", SCHEMA] + json_files, args.repeat, env)
            print(f"  check-jsonschema --schemafile msprobe-config.schema.json {args.n} config.json: {t_cj:.2f} s, "
                  f"{args.n / t_cj:.0f} files/s (exit {c3})")
            print(f"  ratio on the same config.json files (ours / check-jsonschema, files/s): {t_cj / t_json:.2f}x")
            print(f"  ratio, ours checking conf + config.json (2 files each) vs check-jsonschema's config.json "
                  f"only: {(2 * args.n / t_conf) / (args.n / t_cj):.2f}x")
        sys.path.insert(0, REPO)
        from verl_pdbg_conf.context import Options
        from verl_pdbg_conf.validate import validate_files

        t = time.perf_counter()
        report = validate_files(conf_files, Options(base_dir=root))
        dt = time.perf_counter() - t
        print(f"  in process, validate_files on {args.n} confs (+ config.json), after import: {dt:.2f} s, "
              f"{2 * args.n / dt:.0f} files/s, {report.errors} errors")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
