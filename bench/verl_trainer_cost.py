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
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "trainer_harness"), str(ROOT / "bench")]

import launch  # noqa: E402
import verl_trainer_run  # noqa: E402

GROUPS = ("precision_debugger_l0", "precision_debugger_l1", "precision_debugger_tensor",
          "precision_debugger_l1_critic", "precision_debugger_rollout")


# --fit: the tiny model's layers and the micro-batch size (so the calls per stage) varied, per level
FIT_GROUPS = ("precision_debugger_l1", "precision_debugger_l0")
FIT_SHAPES = ((2, 2), (4, 2), (2, 1))  # (layers, micro-batch size per GPU); the first is the runs' own


def run_group(out: Path, group: str, steps: int, profiled: int, layers: int = 2, micro: int = 2) -> dict:
    """The run's result, with the plan made again by this tree's validator (the estimate may have changed)."""
    marker = out / launch.MARKER
    done = json.loads(marker.read_text()) if marker.is_file() else {}
    if done.get("returncode") == 0 and "plan" in done:
        done["plan"] = verl_trainer_run.plan(done["command"][3:])
        return done
    subprocess.run([sys.executable, str(ROOT / "bench" / "verl_trainer_run.py"), "--out", str(out), "--group", group,
                    "--steps", str(steps), "--profile-steps", str(profiled), "--layers", str(layers),
                    "--micro-batch", str(micro)], check=True, stdout=subprocess.DEVNULL)
    return run_group(out, group, steps, profiled, layers, micro)


def measured(result: dict, profiled: int) -> list[dict]:
    """Per stage: seconds on the profiled step, the mean of the unprofiled steps after the first, their ratio,
    and the MB the stage wrote on the profiled step."""
    times = {int(k): v for k, v in result["step_times"].items()}
    base = [t for s, t in times.items() if s != profiled and s != 1]
    rows = []
    written = set(result["stages"].get(str(profiled), ()))
    for stage in launch.STAGE_TIMERS.values():
        if stage not in written:
            continue
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


def beyond(got: float, lo: float, hi: float) -> float:
    """How far a measurement lies outside the estimate's range: 1.0 inside, else measured / the nearer bound."""
    if lo > 0 and got < lo:
        return round(got / lo, 2)
    if hi > 0 and got > hi:
        return round(got / hi, 2)
    return 1.0


def against_estimate(rows: list[dict], estimate: dict | None) -> list[dict]:
    """The estimate's MB per stage and extra seconds beside the measurement: measured over the nearer bound of
    the estimate's range (1.0 inside it)."""
    if not estimate:
        return rows
    mb = {s["stage"]: s["mb_per_step_per_rank"] for s in estimate.get("stages") or ()}
    extra = {s["stage"]: s["extra_seconds"] for s in estimate.get("stages") or ()}
    for row in rows:
        lo_hi = mb.get(row["stage"]) if row["stage"] != "step" else \
            [sum(v[i] for v in mb.values()) for i in (0, 1)] if mb else None
        if lo_hi:
            row["estimate_mb"] = lo_hi
            row["mb_measured_over_estimate"] = beyond(row["mb"], *lo_hi)
        e = extra.get(row["stage"]) if row["stage"] != "step" else estimate.get("extra_seconds_per_profiled_step")
        if e:
            row["estimate_extra_s"] = e
            row["extra_s_measured_over_estimate"] = beyond(row["profiled_s"] - row["unprofiled_s"], *e)
    return rows


BASIS_FILE = ROOT / "verl_pdbg_conf" / "run" / "cost_basis.json"


def line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x."""
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def fit(results: dict[str, dict]) -> dict:
    """From the statistics runs: per level and kind, MB per call = a + b x layers (least squares), and a stage's
    extra seconds = a + b x MB. From the tensor runs: per level and kind, the tensor data's hidden-sized fp32
    tensors per layer and token, and its seconds per MB. The spread: the largest measured/fitted MB ratio."""
    sys.path.insert(0, str(ROOT))
    from verl_pdbg_conf.run.estimate import KIND, TENSOR_BYTES

    def rows_of(result):
        est = result["plan"]["estimate"]
        by = {s["stage"]: s for s in est["stages"]}
        for row in measured(result, int(result["plan"]["steps"][0])):
            s = by.get(row["stage"])
            if s and s.get("calls_per_step_per_rank"):
                yield est, s, row, KIND.get(row["stage"], "forward")

    stats = {name: r for name, r in results.items() if r["plan"]["estimate"]["task"] == "statistics"}
    tensor = {name: r for name, r in results.items() if r["plan"]["estimate"]["task"] == "tensor"}
    points: dict = {}
    for result in stats.values():
        for est, s, row, kind in rows_of(result):
            points.setdefault((est["level"], kind), []).append((est["layers"], row["mb"] / s["calls_per_step_per_rank"],
                                                                row))
    levels: dict = {}
    for (level, kind), pts in sorted(points.items()):
        a, b = line([p[0] for p in pts], [p[1] for p in pts])
        levels.setdefault(level, {})[kind] = {"mb_per_call": round(a, 5), "mb_per_layer_call": round(b, 5),
                                              "points": len(pts)}
    for level in levels:  # extra seconds = a session's cost per kind of stage + seconds per MB written
        by_kind = {k: [p[2] for p in pts] for (lv, k), pts in points.items() if lv == level}
        xs = {k: [r["mb"] for r in rows] for k, rows in by_kind.items()}
        ys = {k: [r["profiled_s"] - r["unprofiled_s"] for r in rows] for k, rows in by_kind.items()}
        num = sum((x - statistics.mean(xs[k])) * (y - statistics.mean(ys[k])) for k in xs for x, y in zip(xs[k], ys[k]))
        den = sum((x - statistics.mean(xs[k])) ** 2 for k in xs for x in xs[k])
        b = max(num / den, 0.0) if den else 0.0  # a negative slope is the noise of a loaded machine
        levels[level]["seconds_per_stage"] = {k: round(max(statistics.mean(ys[k]) - b * statistics.mean(xs[k]), 0.0),
                                                       3) for k in xs}
        levels[level]["seconds_per_mb"] = round(b, 3)
        # the slowest rate is the fit's; the fastest measured (a critic's update writes faster than an actor's)
        # is the range's low end, so a stage the fit overrates still lies in it
        rates = [(y - levels[level]["seconds_per_stage"][k]) / x for k in xs for x, y in zip(xs[k], ys[k]) if x > 0]
        levels[level]["seconds_per_mb_low"] = round(min(max(min(rates), 0.0), b), 3) if rates else round(b, 3)

    def stats_mb(level, kind, calls, layers):
        f = levels[level]["forward" if kind == "engine" else kind]
        return calls * (f["mb_per_call"] + f["mb_per_layer_call"] * layers)

    per: dict = {}
    for result in tensor.values():
        for est, s, row, kind in rows_of(result):
            lv = levels[est["level"]]
            base = stats_mb(est["level"], kind, s["calls_per_step_per_rank"], est["layers"])
            data = max(row["mb"] - base, 0.0)
            unit = est["layers"] * s["tokens_per_step_per_rank"] * est["hidden_size"] * TENSOR_BYTES / 1e6
            session = lv["seconds_per_stage"]["forward" if kind == "engine" else kind]
            secs = row["profiled_s"] - row["unprofiled_s"] - session - base * lv["seconds_per_mb"]
            per.setdefault(est["level"], []).append((kind, data / unit, data, secs))
    for level, found in per.items():
        levels[level]["tensor"] = {k: round(statistics.mean(t for kk, t, _, _ in found if kk == k), 4)
                                   for k in sorted({f[0] for f in found})}
        levels[level]["seconds_per_tensor_mb"] = round(max(sum(f[3] for f in found), 0.0) / sum(f[2] for f in found), 4)
    worst = 1.0
    for (level, kind), pts in points.items():
        f = levels[level][kind]
        for x, y, _ in pts:
            got = f["mb_per_call"] + f["mb_per_layer_call"] * x
            worst = max(worst, y / got, got / y) if got > 0 and y > 0 else worst
    return {"source": "bench/verl_trainer_cost.py --fit --write: verl 0.9.1's trainer on CPU, tiny Qwen2 (fp32), "
                      f"statistics runs at (layers, micro-batch) {list(FIT_SHAPES)}, tensor runs of the groups "
                      f"{sorted(tensor)}",
            "source_rate": "the rate measured on CPU (bench/verl_trainer_cost.py --fit)",
            "spread": round(worst, 2), "levels": levels}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--profiled", type=int, default=3)
    ap.add_argument("--fit", action="store_true",
                    help=f"also run {', '.join(FIT_GROUPS)} at (layers, micro-batch) {FIT_SHAPES} and fit the "
                         "estimate's disk and time per call and layer")
    ap.add_argument("--write", action="store_true", help="with --fit: write the fit to the package's cost_basis.json")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    fitted = {}
    report = {}
    results = {}
    for group in args.groups.split(","):
        result = results[group] = run_group(args.out / group, group, args.steps, args.profiled)
        report[group] = against_estimate(measured(result, args.profiled), result.get("plan", {}).get("estimate"))
    if args.fit:
        for group in FIT_GROUPS:
            for layers, micro in FIT_SHAPES:
                name = group if (layers, micro) == FIT_SHAPES[0] else f"{group}-L{layers}-m{micro}"
                result = run_group(args.out / name, group, args.steps, args.profiled, layers, micro)
                fitted[name] = result
                report[name] = against_estimate(measured(result, args.profiled),
                                                result.get("plan", {}).get("estimate"))
    if args.fit:
        fitted.update({g: r for g, r in results.items() if g not in fitted})
        report["fit"] = fit(fitted)
        if args.write:
            BASIS_FILE.write_text(json.dumps(report["fit"], indent=1) + "\n")
    if args.json:
        print(json.dumps(report))
        return 0
    for group, rows in report.items():
        if group == "fit":
            print("fit", json.dumps(rows))
            continue
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
