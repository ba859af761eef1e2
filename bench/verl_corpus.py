"""verl's own launch scripts as the test corpus: every `*.sh` under examples/ and recipe/ of a
volcengine/verl checkout, validated in ONE process, as a user's CI would lint them.

    python bench/verl_corpus.py [--repo PATH] [--verbose]

--repo: a local clone, or a bare git directory (its HEAD is extracted with `git archive` into a
temporary directory); default: `git clone --depth 1 https://github.com/volcengine/verl` into a
temporary directory. Nothing of verl's is kept or committed: that code is not ours.

Prints: scripts, scripts/s (first script included: the start-up and the first composition are
part of a user's wall time), findings by rule and severity, tracebacks, scripts whose error is
the tool's own failure (must be 0), and every other error finding: the real mistakes found in
verl's scripts, each to be read by a human (they are listed, not asserted).

Also the wall time of one script as its own process (`python -m verl_pdbg_conf script.sh`),
against a bare `python -c pass` measured in the same run.

The checkout carries its own `verl/`, so its scripts are judged by that tree's facts, extracted
live on the first script; `--verl-version X` judges them by a shipped release's facts instead."""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

# A finding is the tool's own failure when it says the tool could not compose or read what the
# script says, instead of judging the script. Such findings must not exist.
TOOL_FAILURE = re.compile(
    r"Primary config directory not found|Cannot find primary config|trainer does not compose|verl is not installed|"
    r"internal error|Traceback|could not be composed|Unsupported interpolation type|ConfigCompositionException",
    re.I)


def _hide(package: str) -> None:
    """Make `package` unimportable and invisible to importlib.util.find_spec in this process."""
    import importlib.abc

    class Hidden(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == package or name.startswith(package + "."):
                raise ModuleNotFoundError(f"No module named {name!r} (hidden by --hide-verl)")
            return None

    sys.meta_path.insert(0, Hidden())


def checkout(repo: str | None, tmp: str) -> str:
    dst = os.path.join(tmp, "verl")
    if repo is None:
        subprocess.run(["git", "clone", "-q", "--depth", "1", "https://github.com/volcengine/verl", dst], check=True)
        return dst
    bare = subprocess.run(["git", "-C", repo, "rev-parse", "--is-bare-repository"], capture_output=True, text=True)
    if bare.stdout.strip() != "true":
        return repo
    os.makedirs(dst)
    archive = subprocess.Popen(["git", "-C", repo, "archive", "HEAD"], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", dst], stdin=archive.stdout, check=True)
    archive.wait()
    return dst


def scripts_in(root: str, everywhere: bool = False) -> list[str]:
    out = []
    for top in ("",) if everywhere else ("examples", "recipe"):
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".sh")]
    return out


def one_process_wall(script: str, cwd: str, cache: str, repeat: int = 5,
                     version: str | None = None) -> tuple[float, float, float]:
    """Medians of `python -m verl_pdbg_conf SCRIPT` without the on-disk composition cache, with it
    (warmed by a first run), and of `python -c pass`, alternated."""
    env = dict(os.environ, PYTHONPATH=REPO)
    env.pop("GITHUB_ACTIONS", None)

    def once(cmd, cache_dir):
        t = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, env=dict(env, VERL_PDBG_CONF_CACHE=cache_dir),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - t

    ours = [sys.executable, "-m", "verl_pdbg_conf", script] + (["--verl-version", version] if version else [])
    once(ours, cache)  # fills the cache
    cold, warm, bare = [], [], []
    for _ in range(repeat):
        cold.append(once(ours, "off"))
        warm.append(once(ours, cache))
        bare.append(once([sys.executable, "-c", "pass"], cache))
    return tuple(sorted(x)[repeat // 2] for x in (cold, warm, bare))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", help="clone or bare git dir of volcengine/verl (default: clone from GitHub)")
    ap.add_argument("--verbose", action="store_true", help="print every finding")
    ap.add_argument("--no-single", action="store_true", help="skip the one-script-per-process timing")
    ap.add_argument("--everywhere", action="store_true", help="every *.sh of the checkout (tests/, scripts/ too)")
    ap.add_argument("--hide-verl", action="store_true",
                    help="run as if verl were not installed (its import and find_spec fail), as in a pre-commit env")
    ap.add_argument("--verl-version", default=None,
                    help="judge by this shipped release instead of the checkout's own verl/ (the shipped-facts path)")
    args = ap.parse_args()
    if args.hide_verl:
        _hide("verl")
    with tempfile.TemporaryDirectory(prefix="verl-corpus-") as tmp:
        root = checkout(args.repo, tmp)
        scripts = scripts_in(root, args.everywhere)
        os.environ["VERL_PDBG_CONF_CACHE"] = "off"  # the batch is measured cold: no composition kept on disk
        t0, c0 = time.perf_counter(), time.process_time()
        from verl_pdbg_conf.context import Options
        from verl_pdbg_conf.core.findings import Severity
        from verl_pdbg_conf.launch_scripts.launch_script import validate_script

        options = Options(base_dir=root, verl_version=args.verl_version)
        judged: collections.Counter = collections.Counter()
        by_rule: collections.Counter = collections.Counter()
        tracebacks, tool_failures, mistakes, notes = [], [], [], []
        slowest = []
        for s in scripts:
            t = time.perf_counter()
            try:
                report = validate_script(s, options)
            except Exception:
                tracebacks.append((s, traceback.format_exc()))
                continue
            slowest.append((time.perf_counter() - t, s))
            judged.update(v.label for v in report.verls())
            for f in report.sorted():
                by_rule[(f.rule, f.severity.value)] += 1
                rel = os.path.relpath(f.file, root) if os.path.isabs(f.file) else f.file
                line = f"{rel}:{f.line}:{f.column}: {f.severity.value} {f.rule} {f.message}"
                if args.verbose:
                    print("  " + line)
                if TOOL_FAILURE.search(f.message):
                    tool_failures.append(line)
                elif f.severity is Severity.ERROR:
                    mistakes.append(line)
                elif f.severity is Severity.WARNING:
                    notes.append(line)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        failing_scripts = {ln.split(":", 1)[0] for ln in tool_failures}
        import importlib.util

        try:
            seen = importlib.util.find_spec("verl") is not None
        except ImportError:
            seen = False
        print(f"verl checkout: {root}; verl installed and visible here: {seen}")
        print(f"scripts: {len(scripts)}; judged as: " + ", ".join(f"{k} x{n}" for k, n in judged.most_common()))
        print(f"one process: {wall:.1f} s wall, {len(scripts) / wall:.1f} scripts/s (target >= 10; CPU {cpu:.1f} s, "
              f"{len(scripts) / cpu:.1f} scripts per CPU second; load average now {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} cores) "
              f"(slowest: " + ", ".join(f"{os.path.relpath(s, root)} {t:.2f}s"
                                         for t, s in sorted(slowest, reverse=True)[:3]) + ")")
        print("findings by rule:")
        for (rule, sev), n in sorted(by_rule.items()):
            print(f"  {rule:22} {sev:8} {n}")
        unjudged = [ln for ln in notes if "not judged" in ln]
        print(f"main_ppo invocations whose overrides are not judged (one warning each): {len(unjudged)}")
        for ln in unjudged:
            print("  " + ln)
        print(f"tracebacks: {len(tracebacks)}")
        for s, tb in tracebacks:
            print(f"  {os.path.relpath(s, root)}\n" + "".join("    " + ln + "\n" for ln in tb.splitlines()[-6:]))
        print(f"scripts whose error is the tool's own failure: {len(failing_scripts)} (must be 0)")
        for ln in tool_failures[:40]:
            print("  " + ln)
        print(f"real mistakes found (errors; read each): {len(mistakes)}")
        for ln in mistakes:
            print("  " + ln)
        if not args.no_single and scripts:
            pick = next((s for s in scripts if s.endswith("run_qwen2-7b_seq_balance.sh")), scripts[0])
            cold, warm, bare = one_process_wall(pick, root, os.path.join(tmp, "cache"), version=args.verl_version)
            print(f"one script, own process ({os.path.relpath(pick, root)}), median of 5: {warm:.2f} s wall with "
                  f"the on-disk composition cache, {cold:.2f} s without it (VERL_PDBG_CONF_CACHE=off; target "
                  f"<= 0.5 s); bare `python -c pass` {bare:.2f} s")
        return 1 if tracebacks or failing_scripts else 0


if __name__ == "__main__":
    sys.exit(main())
