"""The hostile-input campaign for verl-pdbg-compare: mutated dump.json, stack.json, construct.json and
tokens.json of real pairs and rollouts, each case through the CLI's main() (in this process, -j 1), and the promises checked: one of the
documented exit codes 0 same, 1 diverged, 2 usage, 3 incomplete (4, the compare's own fault, is a failure), no
exception and no traceback, a JSON document on stdout for 0, 1 and 3, no input file changed, no `same` after a
read value was spoiled, no crash exiting as diverged, every pair not holding the spoiled file as it was.
Prints the cases, the count of each broken promise, the count per exit code, the failures, and the worst
time, overall and per source.

    python bench/fuzz_compare.py [--cases 10000] [--seconds 0] [--seed 0] [--dumps DIR] [--records 60]
                               [--out DIR] [--json FILE]

Seeds: three real pairs from tests/make_cross_impl_dumps.py (Qwen2: sdpa with layer K's down_proj x1.01 at
mix, the same code with it at L1, a forward split into two calls at mix; --dumps reads a matrix made
before), the first one's golden against itself, both stages, and again with every rank doubled, each cut to --records records
(tests/fuzz/compare_harness.py); examples/rollout (real vLLM against its actor) and --rollout save_paths. Cases, one from each source in turn: per seed file, its structural edits
(tests/fuzz/dump_mutations.py: records dropped, duplicated, renumbered, reordered, split into half
batches; stack groups and construct parents broken), every read field given each JSON type it cannot hold
(tests/fuzz/field_mutations.py) and the validator campaign's mutations
(tests/fuzz/mutations.py: truncations, byte flips, re-encodings, wrong values at key paths); its hostile
inputs from nothing; its random stacked edits (endless, seeded). Each failing pair is written whole to
--out with a PROBLEM.txt. Exit status 1 when any case failed."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, os.path.join(REPO, "tests"), os.path.join(REPO, "tests", "fuzz")]

import compare_harness as H  # noqa: E402
import make_cross_impl_dumps as X  # noqa: E402


def seed_pairs(dumps: str | None, work: str) -> list[dict]:
    """The pairs the seeds are cut from: read from a matrix, or made now (two processes)."""
    if dumps:
        return X.pairs(dumps)
    root = os.path.join(work, "dumps")
    layer = X.default_layer()
    X.make([X.job(root, "qwen2", "mix", "statistics", ("sdpa-weight", "split"), layer),
            X.job(root, "qwen2", "L1", "statistics", ("same-weight",), layer)], parallel=2)
    return X.pairs(root)


# what the issue counts, each of which must be 0
KINDS = {"tracebacks": ("exception escaped", "a traceback on"), "false same": (H.FALSE_SAME,),
         "crashes read as divergences": (H.CRASH_AS_DIVERGENCE,), "faults that left their pair": (H.FAULT_LEFT_PAIR,)}


def campaign(ws: H.Workspace, files: dict, n_cases: int, seconds: float, seed: int, out_dir: str | None,
             progress=None) -> dict:
    """Run cases until n_cases or seconds is spent: the counts, per source and per exit code, and failures."""
    per = defaultdict(lambda: {"cases": 0, "failures": 0, "worst": (0.0, "")})
    codes: Counter = Counter()
    kinds: Counter = Counter({k: 0 for k in KINDS})
    failures, t0, last = [], time.monotonic(), time.monotonic()
    for src, n, rel, name, data in H.cases(files, seed):
        if (n_cases and sum(codes.values()) >= n_cases) or (seconds and time.monotonic() - t0 >= seconds):
            break
        o = ws.run_case(n, rel, name, data, reads=H.reads(src))
        codes[o.code] += 1
        for kind, words in KINDS.items():
            kinds[kind] += any(w in p for p in o.problems for w in words)
        agg = per[src]
        agg["cases"] += 1
        agg["worst"] = max(agg["worst"], (o.seconds, o.name))
        if not o.ok:
            agg["failures"] += 1
            where = H.write_reproducer(out_dir, ws, n, rel, data, o) if out_dir else ""
            failures.append({"case": o.name, "code": o.code, "problems": o.problems, "reproducer": where})
        if progress and time.monotonic() - last > 15:
            last = time.monotonic()
            progress(f"  ... {sum(codes.values())} cases, {len(failures)} failures, {last - t0:.0f} s")
    return {"cases": sum(codes.values()), "failures": len(failures), "elapsed": time.monotonic() - t0,
            "kinds": dict(kinds), "exit_codes": {str(k): v for k, v in sorted(codes.items(), key=lambda kv: str(kv[0]))},
            "per_source": {k: {"cases": v["cases"], "failures": v["failures"], "worst_seconds": v["worst"][0],
                               "worst_case": v["worst"][1]} for k, v in per.items()},
            "failing_cases": failures}


def report(s: dict) -> None:
    print(f"cases {s['cases']}   failures {s['failures']}   elapsed {s['elapsed']:.1f} s")
    print("counted      " + "   ".join(f"{k}: {v}" for k, v in s["kinds"].items()))
    print("exit codes   " + "   ".join(f"{k}: {v}" for k, v in s["exit_codes"].items()))
    worst = max(s["per_source"].values(), key=lambda v: v["worst_seconds"], default=None)
    if worst:
        print(f"worst time   {worst['worst_seconds']:.3f} s   {worst['worst_case'][:110]}")
    print(f"\n{'source':44} {'cases':>7} {'failures':>8} {'worst time':>11}")
    for src, v in sorted(s["per_source"].items()):
        print(f"{src[:44]:44} {v['cases']:7} {v['failures']:8} {v['worst_seconds']:9.3f} s")
    for f in s["failing_cases"][:20]:
        print(f"\n--- {f['case']} (exit {f['code']}) {f['reproducer']}")
        print("    " + "\n    ".join("\n".join(f["problems"]).splitlines()[-14:]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=10000, help="stop after N cases (0: no limit)")
    ap.add_argument("--seconds", type=float, default=0, help="stop after S seconds (0: no limit)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the byte flips, structural and random edits")
    ap.add_argument("--dumps", help="a make_cross_impl_dumps matrix to cut the seeds from (default: make 3 pairs)")
    ap.add_argument("--records", type=int, default=60,
                    help="records kept per stage: the first 2/3 and the last 1/3 (0: the whole stage)")
    ap.add_argument("--rollout", nargs="*", default=[],
                    help="more rollout save_paths to mutate (examples/rollout always is one)")
    ap.add_argument("--out", help="where failing pairs are written (default: a new temporary directory)")
    ap.add_argument("--json", help="also write the summary as JSON to this file")
    a = ap.parse_args(argv)
    if a.cases <= 0 and a.seconds <= 0:
        ap.error("give --cases or --seconds a positive limit: the random source never ends")
    with tempfile.TemporaryDirectory(prefix="bench-fuzz-compare-") as work:
        t0 = time.perf_counter()
        head = a.records - a.records // 3
        seeds = H.make_seeds(seed_pairs(a.dumps, work), os.path.join(work, "seeds"), head, a.records - head)
        if not seeds:
            sys.exit("no seed pairs found")
        seeds.append(H.two_ranks(seeds[-1], os.path.join(work, "seeds", "two-ranks")))
        seeds += [H.Seed(p, rollout=True) for p in [os.path.join(REPO, "examples", "rollout"), *a.rollout]]
        ws = H.Workspace(seeds)
        try:
            files = H.corpus(ws, os.path.join(work, "corpus"))
            print(f"fuzz compare: seed {a.seed}, {len(seeds)} seed pairs, {len(files)} files to mutate, made in "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
            out_dir = a.out or tempfile.mkdtemp(prefix="verl-pdbg-fuzz-compare-failures-")
            s = campaign(ws, files, a.cases, a.seconds, a.seed, out_dir,
                         lambda m: print(m, file=sys.stderr, flush=True))
        finally:
            ws.close()
    report(s)
    if s["failures"]:
        print(f"\nfailing pairs in {out_dir}")
    elif not a.out:
        os.rmdir(out_dir)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"seed": a.seed, **s}, fh, indent=1)
    return 1 if s["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
