"""Score verl-pdbg-compare on pairs of runs whose code paths differ, against the right answers, beside msprobe's
own compare; then time cross-implementation pairs against same-code pairs, 2k to 200k records.

Pairs: tests/make_cross_impl_dumps.py's matrix (16 targets against the eager fp32 golden, at mix and at L1:
32 verdicts per model; --arch llama or qwen2,llama for more), made here or read from --dumps. Each pair goes
through the command as a user runs it, `verl-pdbg-compare TARGET GOLDEN --format json` (`--dtype-aware` for
the bf16 targets). A verdict is right when
  nothing was planted:   no pair (step, stage) "diverged" (exit 0, or 3 when a pair could not be compared);
  layer K was planted:   every pair diverged, and its first divergence names layer K: JSON `layer` == K at
                         L1, `module` holding `layers.K` at mix.
Printed: one line per pair, right/total per kind (the target's implementation) and the total.

msprobe's own compare beside it (`msprobe compare -tp -gp -o` on the dump.json of each stage in
--msprobe-stages, the forward stage by default; '' leaves it out): the node msprobe names, its first row
whose Result is `error` in dump order, and whether ours names the same node (the same call, or at mix the
same layer).

Timing (--sizes; '' skips): the L1 actor_update dumps of a cross-implementation pair (sdpa-weight) and a
same-code pair (same-weight), each cut or replicated to N records by bench/compare_scale.py's resize, one
`verl-pdbg-compare -j 1` each; the ratio cross/same per size.

    python bench/cross_impl.py [--dumps DIR] [--arch qwen2] [--levels mix,L1] [--layer K | --seed S]
                               [--msprobe-stages all|''] [--sizes 2000,20000,200000] [--json FILE]"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, os.path.join(REPO, "tests"), os.path.join(REPO, "bench")]

import compare_scale  # noqa: E402
import make_cross_impl_dumps as X  # noqa: E402

ENV = compare_scale.ENV
MSPROBE = next((p for p in (os.path.join(os.path.dirname(sys.executable), "msprobe"), shutil.which("msprobe"))
                if p and os.path.exists(p)), "msprobe")
def ours(pair: dict, out: str) -> tuple[int, dict, float]:
    """verl-pdbg-compare on one pair as a user runs it: (exit code, its JSON, seconds)."""
    cmd = compare_scale.ours_cmd(pair["target"], pair["golden"], out)
    if pair.get("dtype_aware"):
        cmd.append("--dtype-aware")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = {"error": (proc.stderr or proc.stdout)[-2000:]}
    return proc.returncode, doc, dt


# ---------------------------------------------------------------- msprobe's compare beside it

def stage_dumps(run: str) -> dict[str, str]:
    """{stage: its dump.json} of one run (step 1)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(run, "step_*", "*", "step0", "*", "dump.json"))):
        out.setdefault(path.split(os.sep)[-4], path)
    return out


def msprobe_first_error(target: str, golden: str, out: str) -> tuple[str | None, str]:
    """msprobe compare on two dump.json files: (its first row named `error`, in dump order, or None; a note)."""
    os.makedirs(out, exist_ok=True)
    proc = subprocess.run([MSPROBE, "compare", "-tp", target, "-gp", golden, "-o", out], env=ENV,
                          capture_output=True, text=True)
    found = sorted(glob.glob(os.path.join(out, "compare_result_*.csv")))
    if proc.returncode or not found:
        return None, f"msprobe exit {proc.returncode}"
    with open(found[-1], newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    errors = [r for r in rows if str(r.get("Result", "")).strip().lower() == "error"]
    if not errors:
        return None, f"{len(rows)} rows, none error"
    return errors[0].get("NPU Name"), f"{len(errors)} of {len(rows)} rows error"


def node_of(name: str | None) -> str:
    """Record name -> its call (Functional.linear.3.forward.output.0 -> Functional.linear.3.forward)."""
    m = re.match(r"^(.*?\.(?:forward|backward))(?:\.|$)", name or "")
    return m.group(1) if m else (name or "")


def agreement(pair: dict, doc: dict, work: str, stages: set[str] | None) -> list[str]:
    """Per stage: what msprobe names and whether ours names the same node (or, at mix, the same layer)."""
    firsts = {p["stage"]: (p.get("first_divergence") or {}) if p["status"] == "diverged" else {}
              for p in doc.get("pairs", [])}
    t, g = stage_dumps(pair["target"]), stage_dumps(pair["golden"])
    lines = []
    for stage in sorted(set(t) & set(g) & (stages or set(t))):
        node, note = msprobe_first_error(t[stage], g[stage], os.path.join(work, "msprobe", pair["name"], stage))
        if node is None:
            lines.append(f"{stage}: msprobe names no node ({note})")
            continue
        mine = firsts.get(stage, {})
        same = node_of(mine.get("name")) == node_of(node) or (
            pair["level"] != "L1" and X.module_layer(node) is not None
            and X.module_layer(node) == X.named_layer(mine, pair["level"]))
        lines.append(f"{stage}: msprobe names {node} ({note}); ours {'agrees' if same else 'differs'}"
                     f" ({mine.get('name') or 'no divergence'})")
    return lines


# ---------------------------------------------------------------- the matrix, scored

def make_matrix(root: str, archs: list[str], levels: list[str], layer: int) -> None:
    t0 = time.perf_counter()
    X.make([X.job(root, arch, level, "statistics", X.MATRIX, layer) for arch in archs for level in levels],
           parallel=2)
    print(f"made {len(archs) * len(levels) * (len(X.MATRIX) + 1)} runs in {time.perf_counter() - t0:.0f} s",
          flush=True)


def score(pairs: list[dict], work: str, msprobe_stages: set[str] | None) -> dict:
    per_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    results = []
    for pair in pairs:
        code, doc, dt = ours(pair, os.path.join(work, "ours", pair["name"]))
        right, said = X.judge(pair, code, doc)
        kind = pair["impl"] + ("+" + pair["plant"] if pair["plant"] else "")
        per_kind[kind][0] += right
        per_kind[kind][1] += 1
        want = "no divergence" if pair["expect_layer"] is None else f"layer {pair['expect_layer']}"
        print(f"{'RIGHT' if right else 'wrong'}  {pair['name']:34} want {want:13} {dt:5.1f} s  {said}", flush=True)
        ref = agreement(pair, doc, work, msprobe_stages or None) if msprobe_stages != set() else []
        for line in ref:
            print(f"         msprobe {line}", flush=True)
        results.append({"pair": pair["name"], "kind": kind, "level": pair["level"], "right": right,
                        "expect_layer": pair["expect_layer"], "said": said, "exit": code, "seconds": dt,
                        "msprobe": ref})
    total = sum(r["right"] for r in results)
    print(f"\n{'kind':22} right/total")
    for kind, (r, n) in sorted(per_kind.items()):
        print(f"{kind:22} {r}/{n}")
    print(f"{'total':22} {total}/{len(results)}")
    return {"right": total, "total": len(results), "per_kind": {k: v for k, v in per_kind.items()},
            "pairs": results}


def timing(pairs: list[dict], sizes: list[int], work: str) -> list[dict]:
    """verl-pdbg-compare -j 1 per pair at each size: the cross-implementation pair against the same-code one."""
    if not sizes:
        return []
    by = {p["name"]: p for p in pairs}
    l1 = [n for n in by if "-L1-" in n]
    cross = next((by[n] for n in l1 if n.endswith("/sdpa-weight")), None)
    same = next((by[n] for n in l1 if n.endswith("/same-weight")), None)
    if not (cross and same):
        print("timing: needs the L1 pairs sdpa-weight and same-weight")
        return []
    print(f"\n{'records':>9} | {'same-code s':>11} {'cross-impl s':>12} | {'cross/same':>10}")
    rows = []
    for size in sizes:
        secs = {}
        for label, pair in (("same", same), ("cross", cross)):
            d = os.path.join(work, "time", f"{label}{size}")
            for side in ("target", "golden"):
                src = stage_dumps(pair[side])["actor_update"]
                n = compare_scale.resize(src, os.path.join(d, side), size)
            dt, _, proc = compare_scale.measured(compare_scale.ours_cmd(
                os.path.join(d, "target", "dump.json"), os.path.join(d, "golden", "dump.json"),
                os.path.join(d, "out"), "-j", "1"))
            if proc.returncode not in (0, 1, 3):
                print(f"  {label} at {size}: exit {proc.returncode}: {proc.stderr[-500:]}")
            secs[label] = dt
        print(f"{n:>9,} | {secs['same']:>11.2f} {secs['cross']:>12.2f} | {secs['cross'] / secs['same']:>9.2f}x",
              flush=True)
        rows.append({"records": n, "same_s": secs["same"], "cross_s": secs["cross"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dumps", help="a directory make_cross_impl_dumps.make wrote (default: make them now)")
    ap.add_argument("--arch", default="qwen2", help="comma-separated: qwen2, llama")
    ap.add_argument("--levels", default="mix,L1")
    ap.add_argument("--layer", type=int, default=None, help="the planted layer (default: seeded by --seed)")
    ap.add_argument("--seed", default=None, help="seeds the planted layer (default: today's date)")
    ap.add_argument("--msprobe-stages", default="actor_compute_log_prob",
                    help="stages msprobe's compare runs on, comma-separated; 'all'; '' leaves it out "
                         "(each takes seconds: the forward stage alone by default)")
    ap.add_argument("--sizes", default="2000,20000,200000", help="records per pair for the timing ('' skips)")
    ap.add_argument("--only", default="", help="a regex: score only the pairs whose name matches")
    ap.add_argument("--json", help="also write the results as JSON to this file")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-cross-impl-") as work:
        root = a.dumps or os.path.join(work, "dumps")
        if not a.dumps:
            layer = X.default_layer(a.seed) if a.layer is None else a.layer
            print(f"planted layer K = {layer} ({'--layer' if a.layer is not None else a.seed or 'date'})")
            make_matrix(root, a.arch.split(","), a.levels.split(","), layer)
        pairs = [p for p in X.pairs(root) if p["arch"] in a.arch.split(",") and p["level"] in a.levels.split(",")
                 and re.search(a.only, p["name"])]
        if not pairs:
            sys.exit(f"no pairs under {root}")
        print(f"{len(pairs)} pairs; planted layer {sorted({p['expect_layer'] for p in pairs} - {None})}; "
              f"verl-pdbg-compare's per-pair job: {compare_scale.job_name()}\n", flush=True)
        stages = None if a.msprobe_stages == "all" else {s for s in a.msprobe_stages.split(",") if s}
        result = score(pairs, work, stages)
        result["timing"] = timing(pairs, [int(s) for s in a.sizes.split(",") if s], work)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
