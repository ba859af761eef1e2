"""Launch scripts judged against real bash: every script mentioning main_ppo is run by bash with
`python3` replaced by a recorder (tests/bash_oracle.py), so the words main_ppo gets are the ones
bash really passes; real Hydra composes those words on the repository's own tree; and our reader
and verdict are compared with both.

    python bench/verl_corpus_bash.py --tree DIR [--tree DIR ...] [--under examples]
    python bench/verl_corpus_bash.py --repos-file bench/verl_corpus_inplace_repos.txt [--fetched DIR |
        --bare DIR] [--keep DIR] [--max-scripts N]

--tree: a checkout of a repository carrying verl at its root (verl main itself: its examples);
otherwise the repositories of the in-place bench, obtained as it does (bench/verl_corpus_inplace.py,
whose Hydra truth worker and `ours` runner are used here unchanged: only the words differ).

Printed, over the scripts where bash reached a main_ppo launch:
- words: each launch bash makes is paired with the reader's invocation of that command (file and
  line); the words must fit (tests/bash_oracle.same_words: an unknown part of the reader's word
  matches anything, `"$@"` any number of words);
- verdicts as the in-place bench counts them: a false error (we give an error, Hydra composes every
  launch bash made) and real refusals found (Hydra refuses one, we give an error in the script);
  a script where bash runs an override word as a command of its own (a backslash continuation
  broken by a comment line, a blank line or a space after the backslash) counts as a refusal: its
  launch drops them;
- scripts/s of ours (the CLI on each script, in this process, from the repository root)."""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [REPO, HERE, os.path.join(REPO, "tests")]

from bash_oracle import Sandbox, compare_words, launches, overrides_run_as_commands  # noqa: E402
from verl_corpus_inplace import (hydra_main_of, not_installed, obtain, ours, read_repos, run_truth,  # noqa: E402
                                 scripts_in)

_CP, _CN, _CD = ("--config-path", "-cp"), ("--config-name", "-cn"), ("--config-dir", "-cd")
_WITH_ARG = ("--cfg", "-c", "--package", "-p")


def hydra_command(args: list[str], root: str, line: int) -> dict:
    """main_ppo's argv as Hydra's own argparse reads it: {line, config_dir, config_name, overrides},
    or {line, unknown} when its configs are not here."""
    trainer = os.path.join(root, "verl", "trainer")
    cp, cn = hydra_main_of(os.path.join(trainer, "main_ppo.py"))
    if cp is None or cn is None:
        return {"line": line, "unknown": "the repository's main_ppo.py has no readable @hydra.main"}
    overrides, j = [], 0
    while j < len(args):
        t = args[j]
        m = re.match(r"^(--config-path|--config-name|--config-dir|-cp|-cn|-cd)(?:=(.*))?$", t, re.S)
        if m:
            val = m.group(2) if m.group(2) is not None else (args[j + 1] if j + 1 < len(args) else "")
            j += 1 if m.group(2) is not None else 2
            if m.group(1) in _CP:
                cp = val
            elif m.group(1) in _CN:
                cn = val[:-5] if val.endswith(".yaml") else val
            else:
                return {"line": line, "unknown": "--config-dir is not judged here"}
            continue
        j += 1
        if t.startswith("-"):
            j += 1 if t in _WITH_ARG else 0
            continue
        key = t.partition("=")[0]
        if key.lstrip("+~") == "hydra.searchpath":
            if not_installed(t):
                return {"line": line, "unknown": f"configs from {not_installed(t)} are not installed here"}
            overrides.append(t)
            continue
        if key.lstrip("+~").startswith("hydra."):
            continue
        overrides.append(t)
    if cp.startswith("pkg://"):
        return {"line": line, "unknown": f"config path {cp}"}
    if not cn or not cp:  # `--config-name=$CONFIG_NAME` with nothing in the environment: set by whoever runs it
        return {"line": line, "unknown": "the config name or path is empty in an empty environment"}
    cdir = cp if os.path.isabs(cp) else os.path.normpath(os.path.join(trainer, cp))
    return {"line": line, "config_dir": cdir, "config_name": cn, "overrides": overrides}


def judge_repo(root: str, scripts: list[str], totals, rows, verbose: bool) -> None:
    root = os.path.abspath(root)
    with Sandbox(root) as box:
        bash = {s: box.run(s) for s in scripts}
    commands, runs, dropped = {}, {}, {}
    for s, (calls, ended) in bash.items():
        runs[s] = launches(calls)
        dropped[s] = overrides_run_as_commands(calls)
        commands[s] = [hydra_command(r["words"], root, r["line"]) for r in runs[s]
                       if r["module"] == "verl.trainer.main_ppo"]
        if ended:
            totals["bash timed out"] += 1
            rows["timed out"].append(os.path.relpath(s, root))
    truth = run_truth(root, commands)
    t = time.perf_counter()
    mine = {s: ours(s, root) for s in scripts}
    totals["our_wall"] += time.perf_counter() - t
    for s in scripts:
        rel = os.path.relpath(s, root)
        totals["scripts"] += 1
        diags, tb = mine[s]
        if tb:
            rows["tracebacks"].append((rel, tb))
        errs = [d for d in diags or [] if d.get("severity") == "error"]
        if not runs[s]:
            totals["bash made no main_ppo launch"] += 1
            continue
        totals["launched"] += 1
        problems, paired = compare_words(s, root, runs[s])
        totals["launches"] += len(runs[s])
        totals["launches paired"] += paired
        if problems:
            rows["words"].append((rel, problems))
        else:
            totals["words equal"] += 1
        verdicts = truth.get(s, [])
        if dropped[s]:  # bash ran an override as a command: the script is wrong whatever Hydra says
            verdicts = [{"verdict": "refused", "why": f"bash runs `{dropped[s][0]}` as a command (the launch "
                         "ended before it)"}]
        if not verdicts or any(v["verdict"] == "unknown" for v in verdicts):
            totals["not judged (configs not here)"] += 1
            continue
        totals["judged"] += 1
        if all(v["verdict"] == "ok" for v in verdicts):
            if errs:
                totals["false"] += 1
                rows["false"].append((rel, errs))
        else:
            totals["refused"] += 1
            why = next(v["why"] for v in verdicts if v["verdict"] == "refused")
            if errs:
                totals["found"] += 1
                rows["found"].append((rel, why, errs[0]["message"]))
            else:
                rows["missed"].append((rel, why))


def report(totals, rows, verbose: bool) -> None:
    n, launched, judged = totals["scripts"], totals["launched"], totals["judged"]
    print(f"scripts mentioning main_ppo: {n}; bash made a main_ppo launch in {launched} "
          f"({totals['bash made no main_ppo launch']} none, {totals['bash timed out']} timed out"
          + "".join(f": {r}" for r in rows["timed out"][:3]) + ")")
    print(f"words: {totals['words equal']} of {launched} scripts fit bash's words exactly; launches paired with "
          f"the reader's invocation: {totals['launches paired']} of {totals['launches']}")
    for rel, problems in rows["words"][:40]:
        print(f"  {rel}: " + " | ".join(p[:200] for p in problems[:3]))
    print(f"judged by Hydra on bash's words: {judged} ({totals['not judged (configs not here)']} not judged: "
          "configs not here)")
    print(f"scripts with a false error: {totals['false']} of {judged} ({100 * totals['false'] / max(judged, 1):.1f}%)")
    for rel, errs in rows["false"][:40]:
        print(f"  false: {rel}: " + " | ".join(f"{d['line']}:{d['rule']} {d['message'][:150]}" for d in errs[:3]))
    print(f"real refusals found: {totals['found']} of {totals['refused']}")
    for rel, why in rows["missed"]:
        print(f"  missed {rel}: {why[:160]}")
    if verbose:
        for rel, why, msg in rows["found"]:
            print(f"  found {rel}: hydra: {why[:110]} | ours: {msg[:110]}")
    print(f"ours: {totals['our_wall']:.1f} s wall, {n / max(totals['our_wall'], 1e-9):.2f} scripts/s "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print(f"tracebacks: {len(rows['tracebacks'])}")
    for rel, tb in rows["tracebacks"][:5]:
        print(f"  {rel}\n" + "".join("    " + ln + "\n" for ln in tb.splitlines()[-4:]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", default=[], help="a repository checkout (repeatable)")
    ap.add_argument("--under", default="", help="only scripts under this folder of each tree (e.g. examples)")
    ap.add_argument("--repos-file", help="owner/name lines, obtained as bench/verl_corpus_inplace.py does")
    ap.add_argument("--fetched")
    ap.add_argument("--bare")
    ap.add_argument("--keep")
    ap.add_argument("--max-scripts", type=int, default=0, help="at most N scripts per repository, spread evenly")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    from verl_corpus import _hide

    _hide("verl")
    tmp = tempfile.mkdtemp(prefix="verl-bash-")
    os.environ["VERL_PDBG_CONF_CACHE"] = os.path.join(tmp, "cache")
    os.environ.pop("GITHUB_ACTIONS", None)
    roots = [(t, t) for t in args.tree]
    for repo in read_repos(args.repos_file) if args.repos_file else []:
        roots.append((repo, obtain(repo, args.fetched, args.bare, args.keep or tmp)))
    totals, rows = collections.Counter(), collections.defaultdict(list)
    here = os.getcwd()
    try:
        judge_all(roots, args, totals, rows)
    finally:
        os.chdir(here)
        shutil.rmtree(tmp, ignore_errors=True)
    report(totals, rows, args.verbose)
    return 1 if rows["tracebacks"] else 0


def judge_all(roots, args, totals, rows) -> None:
    here = os.getcwd()
    for name, root in roots:
        if root is None or not os.path.isfile(os.path.join(root, "verl", "trainer", "main_ppo.py")):
            print(f"  {name}: not available or no verl/trainer/main_ppo.py at its root; skipped")
            continue
        scripts = [s for s in scripts_in(root) if not args.under or
                   os.path.relpath(s, root).startswith(args.under.rstrip("/") + "/")]
        if args.max_scripts and len(scripts) > args.max_scripts:
            step = len(scripts) / args.max_scripts
            scripts = [scripts[int(k * step)] for k in range(args.max_scripts)]
        before = dict(totals)
        judge_repo(root, scripts, totals, rows, args.verbose)
        os.chdir(here)
        d = {k: totals[k] - before.get(k, 0) for k in ("scripts", "launched", "words equal", "false", "refused",
                                                       "found")}
        print(f"  {name}: {d['scripts']} scripts, {d['launched']} launched by bash, words equal {d['words equal']}, "
              f"false errors {d['false']}, refusals {d['refused']} (found {d['found']})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
