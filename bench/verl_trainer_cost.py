#!/usr/bin/env python
"""What profiling costs in verl's real trainer on CPU, per group and stage, against `--plan`'s estimate.

    python bench/verl_trainer_cost.py --out DIR [--groups precision_debugger_l1,...] [--steps 4 --profiled 3]

One run per group (bench/verl_trainer_run.py, the same tiny model and command line): steps 1..N with one
profiled step, so each stage's time on the profiled step is set against the same stage on the unprofiled steps
around it (step 1, which starts the engines, is left out), as a ratio from that one run; and the disk each stage
wrote on the profiled step. Then `verl-pdbg-validate --plan` on the same command line, and the ratio of the
measured figure to the estimate. An existing run directory under DIR is read again, not run again.

Prints a table, and the JSON of it with --json."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "trainer_harness")]

import launch  # noqa: E402

GROUPS = ("precision_debugger_l0", "precision_debugger_l1", "precision_debugger_tensor",
          "precision_debugger_l1_critic", "precision_debugger_rollout")


def run_group(out: Path, group: str, steps: int, profiled: int) -> dict:
    marker = out / launch.MARKER
    if marker.is_file():
        done = json.loads(marker.read_text())
        if done.get("returncode") == 0 and "plan" in done:
            return done
    subprocess.run([sys.executable, str(ROOT / "bench" / "verl_trainer_run.py"), "--out", str(out), "--group", group,
                    "--steps", str(steps), "--profile-steps", str(profiled)], check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads(marker.read_text())


def measured(result: dict, profiled: int) -> list[dict]:
    """Per stage: seconds on the profiled step, the mean of the unprofiled steps after the first, their ratio,
    and the MB the stage wrote on the profiled step."""
    times = {int(k): v for k, v in result["step_times"].items()}
    base = [t for s, t in times.items() if s != profiled and s != 1]
    rows = []
    for stage in launch.STAGE_TIMERS.values():
        on = times.get(profiled, {}).get(stage)
        off = [t[stage] for t in base if stage in t]
        if on is None or not off:
            continue
        mb = result["disk"].get(f"step_{profiled}/{stage}", 0) / 1e6
        rows.append({"stage": stage, "profiled_s": round(on, 3), "unprofiled_s": round(statistics.mean(off), 3),
                     "ratio": round(on / statistics.mean(off), 2), "mb": round(mb, 3)})
    step_on, step_off = times[profiled]["step"], statistics.mean(t["step"] for t in base)
    rows.append({"stage": "step", "profiled_s": round(step_on, 3), "unprofiled_s": round(step_off, 3),
                 "ratio": round(step_on / step_off, 2),
                 "mb": round(sum(v for k, v in result["disk"].items() if k.startswith(f"step_{profiled}/")) / 1e6, 3)})
    return rows


def against_estimate(rows: list[dict], estimate: dict | None) -> list[dict]:
    """The estimate's MB per stage and extra seconds per step beside the measurement, as measured / estimate."""
    if not estimate:
        return rows
    mb = {s["stage"]: s["mb_per_step_per_rank"] for s in estimate.get("stages") or ()}
    extra = estimate.get("extra_seconds_per_stage") or {}
    for row in rows:
        lo_hi = mb.get(row["stage"]) if row["stage"] != "step" else \
            [sum(v[i] for v in mb.values()) for i in (0, 1)] if mb else None
        if lo_hi:
            row["estimate_mb"] = lo_hi
            mid = sum(lo_hi) / 2
            row["mb_measured_over_estimate"] = round(row["mb"] / mid, 2) if mid else None
        e = extra.get(row["stage"]) if row["stage"] != "step" else estimate.get("extra_seconds_per_profiled_step")
        if e:
            row["estimate_extra_s"] = e
            mid = sum(e) / 2
            got = row["profiled_s"] - row["unprofiled_s"]
            row["extra_s_measured_over_estimate"] = round(got / mid, 2) if mid else None
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--profiled", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    report = {}
    for group in args.groups.split(","):
        result = run_group(args.out / group, group, args.steps, args.profiled)
        report[group] = against_estimate(measured(result, args.profiled), result.get("plan", {}).get("estimate"))
    if args.json:
        print(json.dumps(report))
        return 0
    for group, rows in report.items():
        print(group)
        for r in rows:
            est = ""
            if "mb_measured_over_estimate" in r:
                est += f"  disk/estimate {r['mb_measured_over_estimate']}"
            if "extra_s_measured_over_estimate" in r:
                est += f"  extra s/estimate {r['extra_s_measured_over_estimate']}"
            print(f"  {r['stage']:24} {r['profiled_s']:8.2f} s vs {r['unprofiled_s']:6.2f} s  x{r['ratio']:<6} "
                  f"{r['mb']:8.3f} MB{est}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
