"""The long fuzz campaign for the validator: every mutation of every real config, every hostile
input, then random stacked mutations until the budget is spent. For each case it checks the
promises (no exception escapes validate_files; each finding has a file, a line >= 1, a column
>= 1 and a known rule, at a position inside the file; every reporter renders it; time and peak
traced memory per file within bounds; nothing on disk changes) and prints cases, failures,
and the worst time and memory, overall and per source file.

    python bench/fuzz_campaign.py [--cases N] [--seconds S] [--seed K] [--no-memory]
                                  [--time-limit 2.0] [--memory-limit-mb 64] [--out DIR] [--json FILE]

Sources, taken in turn (one case from each, round robin) until --cases or --seconds runs out:
  - each real config (tests/examples/verl/positive/*.yaml, tests/examples/verl/configs/*.json,
    tests/examples/msprobe/positive/*.json): truncation every N bytes (about 200 cuts), 100 byte flips,
    whole-file re-encodings (BOM, CRLF, tabs, UTF-16, Latin-1, gzip, ...), every key line duplicated,
    and every wrong value at every key path; each config.json case also through a conf's config_path;
  - hostile inputs: deep nesting, huge lists, alias bombs, recursive aliases, tags, long lines, binary, empty;
  - random stacked edits of the real configs (endless; seeded).
Failing inputs are written to --out (default: a new temporary directory) with their problems.
Exit status 1 when any case failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from itertools import chain
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))

import fuzz_harness as H  # noqa: E402
import mutations as M  # noqa: E402


def corpus_source(p):
    size = p.stat().st_size
    for name, data in chain(M.truncations(p, every=max(1, size // 200)), M.byte_flips(p, count=100),
                            M.text_mutations(p), M.wrong_types(p)):
        yield p.name, name, data


def hostile_source():
    for name, data in M.special_cases(full=True):
        yield "(hostile)", name, data


def round_robin(sources):
    """One case from each source in turn, so a run cut short by --seconds samples all of them."""
    sources = list(sources)
    while sources:
        for src in list(sources):
            try:
                yield next(src)
            except StopIteration:
                sources.remove(src)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=0, help="stop after N cases (0: no limit)")
    ap.add_argument("--seconds", type=float, default=600, help="stop after S seconds (0: no limit)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the byte flips and the random edits")
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass (about 3x faster)")
    ap.add_argument("--time-limit", type=float, default=H.TIME_LIMIT, help="seconds per file (default %(default)s)")
    ap.add_argument("--memory-limit-mb", type=float, default=H.MEMORY_LIMIT / 2**20,
                    help="peak traced MiB per file (default %(default)s)")
    ap.add_argument("--skip", default="", help="comma-separated sources to skip: corpus,hostile,random")
    ap.add_argument("--out", default=None, help="directory for failing inputs (default: a new temp dir)")
    ap.add_argument("--json", default=None, help="also write the summary as JSON to this file")
    args = ap.parse_args(argv)
    if args.cases <= 0 and args.seconds <= 0:
        ap.error("give --cases or --seconds a positive limit: the random source never ends")

    corpus = H.corpus_files()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    sources = []
    if "corpus" not in skip:
        sources += [corpus_source(p) for p in corpus]
    if "hostile" not in skip:
        sources.append(hostile_source())
    if "random" not in skip:
        sources.append(((f"(random, seed {args.seed})", name, data)
                        for _, name, data in M.random_mutations(corpus, args.seed)))
    ws = H.Workspace()
    H.warm_up(ws)
    out_dir = Path(args.out or tempfile.mkdtemp(prefix="verl-pdbg-fuzz-failures-"))
    kw = dict(memory=not args.no_memory, time_limit=args.time_limit, memory_limit=int(args.memory_limit_mb * 2**20))

    per = defaultdict(lambda: {"cases": 0, "failures": 0, "time": (0.0, ""), "memory": (0, "")})
    total = {"cases": 0, "failures": 0, "time": (0.0, ""), "memory": (0, "")}
    failures = []
    t0 = last = time.monotonic()
    print(f"fuzz campaign: seed {args.seed}, python {platform.python_version()}, {os.cpu_count()} cpus, "
          f"limits {args.time_limit} s and {args.memory_limit_mb:g} MiB per file"
          f"{'' if kw['memory'] else ' (memory not measured)'}", flush=True)

    def record(src, o):
        for agg in (per[src], total):
            agg["cases"] += 1
            agg["failures"] += not o.ok
            agg["time"] = max(agg["time"], (o.seconds, o.name))
            agg["memory"] = max(agg["memory"], (o.peak, o.name))
        if not o.ok:
            failures.append((src, o))
            safe = o.name.replace("/", "_").replace(" ", "_")[:150]
            try:
                (out_dir / (safe + ".problems.txt")).write_text("\n".join(o.problems), encoding="utf-8",
                                                               errors="backslashreplace")
            except OSError:
                pass

    def done():
        elapsed = time.monotonic() - t0
        return (args.cases and total["cases"] >= args.cases) or (args.seconds and elapsed >= args.seconds)

    for src, name, data in round_robin(sources):
        if done():
            break
        o = H.run_case(name, data, ws, **kw)
        if not o.ok:
            (out_dir / name.replace("/", "_")[:150]).write_bytes(data)
        record(src, o)
        if name.endswith(".json") and not done():
            record(src, H.via_config_path(name, data, ws, **kw))
        ws.clean_cases()
        if time.monotonic() - last > 15:
            last = time.monotonic()
            print(f"  ... {total['cases']} cases, {total['failures']} failures, {last - t0:.0f} s", file=sys.stderr,
                  flush=True)

    elapsed = time.monotonic() - t0
    print(f"cases {total['cases']}   failures {total['failures']}   elapsed {elapsed:.1f} s")
    print(f"worst time   {total['time'][0]:.3f} s    {total['time'][1]}")
    if kw["memory"]:
        print(f"worst memory {total['memory'][0] / 2**20:.1f} MiB  {total['memory'][1]}")
    print(f"\n{'source':46} {'cases':>7} {'failures':>8} {'worst time':>11} {'worst memory':>13}")
    for src, agg in sorted(per.items()):
        mem = f"{agg['memory'][0] / 2**20:.1f} MiB" if kw["memory"] else "-"
        print(f"{src[:46]:46} {agg['cases']:7} {agg['failures']:8} {agg['time'][0]:9.3f} s {mem:>13}")
    if failures:
        print(f"\nfailures (inputs and problems in {out_dir}):")
        for src, o in failures[:20]:
            print(f"--- {o.name} ({o.size} bytes, from {src})")
            print("    " + "\n    ".join("\n".join(o.problems).splitlines()[:12]))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "seed": args.seed, "elapsed": elapsed, "cases": total["cases"], "failures": total["failures"],
            "worst_time": {"seconds": total["time"][0], "case": total["time"][1]},
            "worst_memory": {"bytes": total["memory"][0], "case": total["memory"][1]},
            "per_source": {k: {"cases": v["cases"], "failures": v["failures"], "worst_time": v["time"][0],
                               "worst_memory": v["memory"][0]} for k, v in per.items()},
            "failing_cases": [o.name for _, o in failures]}, indent=2))
    ws.close()
    if not failures:
        try:
            out_dir.rmdir()  # nothing was written
        except OSError:
            pass
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
