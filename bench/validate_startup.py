"""Start-up cost of one check, as a pre-commit hook or a CI step pays it: one conf and its
config.json through `verl-pdbg-validate`, against `check-jsonschema --schemafile
verl_pdbg_conf/schemas/msprobe-config.schema.json config.json`, each a fresh process, run
alternately --repeat times; prints the medians and the ratio (issue 10: ours at most 0.5x of
check-jsonschema's wall time). A valid config.json is judged without importing jsonschema
(core/fast_schema.py); `python -X importtime -m verl_pdbg_conf CONF` shows what start-up costs.

    python bench/validate_startup.py [--repeat 15] [--conf CONF.yaml]

Both run as `python -m MODULE` with the same interpreter, so neither pays for a launcher shim."""

from __future__ import annotations

import argparse
import importlib.util
import os
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


def once(cmd: list[str], env: dict) -> tuple[float, int]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--conf", help="a conf YAML whose config_path names a config.json (default: a guide-shaped one)")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    env.pop("GITHUB_ACTIONS", None)
    with tempfile.TemporaryDirectory() as tmp:
        conf = args.conf
        if conf is None:
            conf = os.path.join(tmp, "precision_debugger.yaml")
            with open(conf, "w") as fh:
                fh.write(CONF.format(config=CONFIG))
        ours = [sys.executable, "-m", "verl_pdbg_conf", conf]
        theirs = [sys.executable, "-m", "check_jsonschema", "--schemafile", SCHEMA, CONFIG]
        if importlib.util.find_spec("check_jsonschema") is None or not os.path.exists(SCHEMA):
            print("check-jsonschema or the msprobe schema is missing")
            return 1
        once(ours, env), once(theirs, env)  # warm the file cache and .pyc files
        a, b = [], []
        for _ in range(args.repeat):
            t, ca = once(ours, env)
            a.append(t)
            t, cb = once(theirs, env)
            b.append(t)
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{args.repeat} alternating runs, medians (min):")
    print(f"  verl-pdbg-validate conf.yaml (+ its config.json):           {ma * 1000:7.1f} ms "
          f"({min(a) * 1000:.1f}) exit {ca}")
    print(f"  check-jsonschema --schemafile msprobe-config.schema.json:   {mb * 1000:7.1f} ms "
          f"({min(b) * 1000:.1f}) exit {cb}")
    print(f"  ratio verl-pdbg-validate / check-jsonschema: {ma / mb:.2f}x of its wall time "
          f"(target <= 0.50x: {'met' if ma / mb <= 0.5 else 'NOT met'}; check-jsonschema / ours = {mb / ma:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
