"""Projects that carry their own verl: every launch script judged in place, from its repository's
root, against real Hydra composing the config tree the run really imports.

    python bench/verl_corpus_inplace.py [--repos-file bench/verl_corpus_inplace_repos.txt]
        [--fetched DIR] [--bare DIR] [--keep DIR] [--code CHECKOUT] [--jobs N] [--verbose]

Repositories (`owner/name` lines of --repos-file) come from --fetched DIR (trees already extracted,
one folder per repository named `owner__name`: no `+`, which msprobe refuses in paths), else from --bare
DIR (bare git dirs, `owner+name` or `owner+name/repo`, their HEAD extracted into a temporary folder, or into --keep DIR to reuse with
--fetched later), else `git clone --depth 1` from GitHub into a temporary folder. Nothing of theirs
is committed: that code is not ours.

Ours: every `*.sh` mentioning main_ppo, given to verl-pdbg-validate's CLI (in this process, one call
per script, JSON output) with the repository root as the current directory, verl hidden (its import
and find_spec fail, as in a pre-commit environment), and a fresh, empty on-disk cache, so each
repository's first extraction is part of the time.

Truth (independent of the validator's code): one subprocess per repository runs hydra-core's
compose API on each `python -m verl.trainer.main_ppo` (or `verl/trainer/main_ppo.py`) command: the
config_path/config_name of the repository's own `verl/trainer/main_ppo.py` `@hydra.main` (read as
text), then the script's -cp/-cn, and its override words. The only code of ours it uses is the
shell-word reader (launch_scripts/shell_words.py) to get the words bash would pass; which commands
launch main_ppo, the variables they use and the Hydra flags are read here. The repository's
`verl`/`verl.trainer` packages are put in sys.modules as empty stubs whose path is the repository's
folders, so `pkg://verl.trainer.config` finds its configs without running any verl code. A command
whose config, or the key of one of its overrides, cannot be known before the run (environment
variables, `$(...)`) is not judged; an unknown value is composed as a placeholder string.

Printed: scripts/s; scripts with a false error (we give an error, Hydra composes every command
fine); real refusals found (Hydra refuses a command, we give an error in that script);
tracebacks; and the planted test: the guide's six CLI lines inserted into one script per repository,
right when we give an error on them exactly where the repository's verl has no precision_debugger
profiler backend or Hydra refuses them."""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, REPO)

GUIDE_LINES = [  # the guide's "Minimal CLI example", its config.json planted beside it
    "global_profiler.tool=precision_debugger",
    "global_profiler.steps='[1,2]'",
    "global_profiler.save_path=outputs/profile",
    "+global_profiler.global_tool_config.precision_debugger.config_path=configs/_pdbg_planted_l1.json",
    "actor_rollout_ref.actor.profiler.enable=True",
    "actor_rollout_ref.ref.profiler.enable=True",
]
PLANTED_JSON = os.path.join(REPO, "tests", "examples", "scripts", "configs", "statistics_l1.json")
PLANTED = "_pdbg_planted.sh"
PLACEHOLDER = "__unknown_before_the_run__"


# ----------------------------------------------------------------------------- getting the trees

def read_repos(path: str) -> list[str]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for ln in fh:
            name = ln.split("#", 1)[0].strip()
            if name:
                out.append(name)
    return out


def extract(gitdir: str, dst: str) -> int:
    """HEAD of a bare git dir into dst; blobs the snapshot lacks (large data files) are skipped."""
    ls = subprocess.run(["git", "--git-dir", gitdir, "ls-tree", "-r", "-z", "HEAD"], capture_output=True,
                        check=True).stdout
    entries = []
    for rec in ls.split(b"\0"):
        if rec:
            meta, path = rec.split(b"\t", 1)
            mode, typ, sha = meta.split()
            if typ == b"blob" and mode != b"120000":
                entries.append((sha.decode(), path.decode("utf-8", "replace")))
    p = subprocess.Popen(["git", "--git-dir", gitdir, "cat-file", "--batch"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)

    def feed():
        for sha, _ in entries:
            p.stdin.write(sha.encode() + b"\n")
        p.stdin.close()

    threading.Thread(target=feed, daemon=True).start()
    n = 0
    for _, path in entries:
        head = p.stdout.readline().split()
        if len(head) < 3 or head[1] == b"missing":
            continue
        data = p.stdout.read(int(head[2]))
        p.stdout.read(1)
        f = os.path.join(dst, path)
        os.makedirs(os.path.dirname(f), exist_ok=True)
        with open(f, "wb") as fh:
            fh.write(data)
        n += 1
    p.wait()
    return n


def obtain(repo: str, fetched: str | None, bare: str | None, into: str) -> str | None:
    folder = repo.replace("/", "__")
    if fetched and os.path.isdir(os.path.join(fetched, folder)):
        return os.path.join(fetched, folder)
    dst = os.path.join(into, folder)
    if os.path.isdir(dst):
        return dst
    if bare:
        name = repo.replace("/", "+")
        for g in (os.path.join(bare, name, "repo"), os.path.join(bare, name)):
            if os.path.isdir(g):
                os.makedirs(dst)
                extract(g, dst)
                return dst
        return None
    r = subprocess.run(["git", "clone", "-q", "--depth", "1", f"https://github.com/{repo}", dst])
    return dst if r.returncode == 0 else None


def scripts_in(root: str) -> list[str]:
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in (".git", "node_modules"))
        for f in sorted(files):
            if f.endswith(".sh") and f != PLANTED:
                p = os.path.join(d, f)
                try:
                    with open(p, encoding="utf-8", errors="replace") as fh:
                        if "main_ppo" in fh.read():
                            out.append(p)
                except OSError:
                    pass
    return out


# ----------------------------------------------------------------------------- the truth: Hydra

_ASSIGN = re.compile(r"^([A-Za-z_]\w*)\+?=(.*)$", re.S)
_HYDRA_MAIN = re.compile(r"@hydra\.main\(([^)]*)\)")
_CP = ("--config-path", "-cp")
_CN = ("--config-name", "-cn")
_CD = ("--config-dir", "-cd")


def hydra_main_of(path: str) -> tuple[str | None, str | None]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            m = _HYDRA_MAIN.search(fh.read())
    except OSError:
        return None, None
    if m is None:
        return None, None
    args = dict(re.findall(r"(config_path|config_name)\s*=\s*[\"']([^\"']*)[\"']", m.group(1)))
    return args.get("config_path"), args.get("config_name")


def not_installed(searchpath: str) -> str:
    """The first `pkg://` entry of a `hydra.searchpath=[...]` override whose package is not installed
    here (its configs cannot be composed: the command is not judged), else ""."""
    import importlib.util

    for pkg in re.findall(r"pkg://([\w.]+)", searchpath):
        if pkg.startswith("verl."):
            continue
        try:
            found = importlib.util.find_spec(pkg.split(".")[0]) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return f"pkg://{pkg}"
    return ""


def truth_commands(path: str, root: str) -> list[dict]:
    """The main_ppo commands of a script: {line, config_dir, config_name, overrides} or
    {line, unknown: why}. Variables: literal top-level assignments only; `source` makes them unknown."""
    from verl_pdbg_conf.launch_scripts.shell_words import Reader, Variables

    trainer = os.path.join(root, "verl", "trainer")
    cp0, cn0 = hydra_main_of(os.path.join(trainer, "main_ppo.py"))
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    v = Variables()
    out = []
    for cmd in Reader(text, v).commands():
        ws = cmd.words
        head = ws[0].text if ws[0].known else ""
        assigns = ws[1:] if head in ("export", "declare", "local", "readonly", "typeset") else ws
        if all(_ASSIGN.match(w.text) for w in assigns if not w.text.startswith("-")):
            for w in assigns:
                m = _ASSIGN.match(w.text)
                if not m:
                    continue
                if cmd.depth > 0 or "+=" in w.text.split("=", 1)[0] + "=":
                    v.set(m.group(1), None, "assigned in a block or appended")
                elif w.array is not None:
                    v.set_array(m.group(1), w.array)
                elif w.known:
                    v.set(m.group(1), m.group(2))
                else:
                    v.set(m.group(1), None, w.unknown)
            continue
        if head in ("source", "."):
            v.taint_all("sourced")
            continue
        if head in ("echo", "printf", "cat"):
            continue
        k = None
        for i, w in enumerate(ws):
            if w.known and w.text.endswith("verl/trainer/main_ppo.py"):
                k = i + 1
                break
            if w.known and re.fullmatch(r"-[A-Za-z]*m", w.text) and i + 1 < len(ws) and ws[i + 1].known \
                    and ws[i + 1].text == "verl.trainer.main_ppo":
                k = i + 2
                break
            if w.known and w.text == "-mverl.trainer.main_ppo":
                k = i + 1
                break
        if k is None:
            continue
        line = ws[k - 1].line
        if cp0 is None or cn0 is None:
            out.append({"line": line, "unknown": "the repository's main_ppo.py has no readable @hydra.main"})
            continue
        cp, cn, overrides, why = cp0, cn0, [], ""
        args = ws[k:]
        j = 0
        while j < len(args):
            w = args[j]
            t = w.text
            flag, val = None, None
            if w.known and t in _CP + _CN + _CD and j + 1 < len(args):
                flag, val = t, args[j + 1]
                j += 2
            elif re.match(r"^(--config-path|--config-name|--config-dir|-cp|-cn|-cd)=", t):
                flag, _, rest = t.partition("=")
                val = type(w)(rest, w.line, w.column, unknown=w.unknown)
                j += 1
            if flag:
                if not val.known:
                    why = f"{flag} is not known before the run"
                elif flag in _CP:
                    cp = val.text
                elif flag in _CN:
                    cn = val.text[:-5] if val.text.endswith(".yaml") else val.text
                else:
                    why = "--config-dir is not judged here"
                continue
            j += 1
            if w.known and t.startswith("-"):
                continue  # --multirun and other Hydra flags
            if not w.known:
                key, eq, _ = t.partition("=")
                if not eq or w.unknown_at < len(key) + 1:
                    if w.unknown_at == 0 and re.fullmatch(r'"?\$\{?[@*]\}?"?', w.raw or t):
                        continue  # the script's own arguments: not known, not part of the judged command
                    why = f"`{w.raw}` cannot be known before the run"
                    continue
                t = key + "=" + PLACEHOLDER
            if t.strip() == "":
                continue
            if t.lstrip("+~").startswith("hydra.searchpath=") and not_installed(t):
                why = f"configs from {not_installed(t)} are not installed here"
                continue
            if t.lstrip("+~").startswith("hydra."):
                continue
            overrides.append(t)
        if why:
            out.append({"line": line, "unknown": why})
            continue
        if cp.startswith("pkg://"):
            out.append({"line": line, "unknown": f"config path {cp}"})
            continue
        cdir = cp if os.path.isabs(cp) else os.path.normpath(os.path.join(trainer, cp))
        out.append({"line": line, "config_dir": cdir, "config_name": cn, "overrides": overrides})
    return out


def _stub_verl(root: str) -> None:
    """`verl`, `verl.trainer` (and `verl.trainer.config` when it is a package) as empty packages whose
    path is the repository's folders: pkg://verl.trainer.config resolves there, no verl code runs."""
    import importlib.machinery
    import importlib.util

    for name in ("verl", "verl.trainer", "verl.trainer.config"):
        d = os.path.join(root, *name.split("."))
        if not os.path.isdir(d):
            break
        init = os.path.join(d, "__init__.py")  # its loader reads resources only: the file is never run
        spec = importlib.machinery.ModuleSpec(name, importlib.machinery.SourceFileLoader(name, init),
                                              origin=init, is_package=True)
        spec.submodule_search_locations = [d]
        mod = importlib.util.module_from_spec(spec)
        mod.__file__ = os.path.join(d, "__init__.py")
        sys.modules[name] = mod


def truth_worker(root: str) -> None:
    """stdin: JSON list of scripts (their commands read here), or {script: [commands]} (commands read
    elsewhere: real bash's words, bench/verl_corpus_bash.py); stdout: JSON {script: [command verdicts]}."""
    scripts = json.load(sys.stdin)
    given = scripts if isinstance(scripts, dict) else None
    _stub_verl(root)
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    memo: dict = {}
    result = {}
    for s in scripts:
        verdicts = []
        try:
            commands = given[s] if given is not None else truth_commands(s, root)
        except Exception as e:  # the reader on a script the shell itself would reject
            commands = [{"line": 0, "unknown": f"unreadable: {e!r}"}]
        for c in commands:
            if "unknown" in c:
                verdicts.append({"line": c["line"], "verdict": "unknown", "why": c["unknown"]})
                continue
            key = (c["config_dir"], c["config_name"], tuple(c["overrides"]))
            if key not in memo:
                try:
                    GlobalHydra.instance().clear()
                    if not os.path.isdir(c["config_dir"]):
                        raise FileNotFoundError(f"Primary config directory not found: {c['config_dir']}")
                    with initialize_config_dir(config_dir=c["config_dir"], version_base=None):
                        compose(config_name=c["config_name"], overrides=list(c["overrides"]))
                    memo[key] = ("ok", "")
                except Exception as e:
                    memo[key] = ("refused", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            verdict, why = memo[key]
            verdicts.append({"line": c["line"], "verdict": verdict, "why": why, "overrides": c["overrides"]})
        result[s] = verdicts
    json.dump(result, sys.stdout)


def run_truth(root: str, scripts) -> dict:
    """Real Hydra's verdicts on the scripts' commands: `scripts` a list (commands read by
    truth_commands) or {script: [commands]}."""
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--truth-worker", root],
                       input=json.dumps(scripts), capture_output=True, text=True, cwd=root,
                       env=dict(os.environ, PYTHONPATH=REPO, HYDRA_FULL_ERROR="1"))
    if r.returncode != 0:
        raise RuntimeError(f"truth worker failed on {root}:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)


def has_pdbg_backend(root: str) -> bool:
    """The repository's verl has a profiler backend for the `precision_debugger` tool: a module of
    its verl/utils/profiler naming it (read as text, as the truth needs no verl code)."""
    d = os.path.join(root, "verl", "utils", "profiler")
    if not os.path.isdir(d):
        return False
    for f in os.listdir(d):
        if f.endswith(".py") and "precision_debugger" in f:
            return True
    return False


# ----------------------------------------------------------------------------- ours

def ours(script: str, root: str) -> tuple[list[dict] | None, str]:
    """verl-pdbg-validate SCRIPT -f json, run from the repository root: (diagnostics, traceback)."""
    from verl_pdbg_conf.cli import main

    buf = io.StringIO()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            code = main([os.path.relpath(script, root), "-f", "json"])
    except SystemExit as e:
        code = e.code
    except Exception:
        return None, traceback.format_exc()
    if code not in (0, 1):
        return None, f"exit code {code}"
    try:
        return json.loads(buf.getvalue())["diagnostics"], ""
    except (ValueError, KeyError):
        return None, "unreadable JSON output:\n" + buf.getvalue()[-500:]


def plant(script: str, line: int) -> tuple[str, int, int]:
    """The script with the guide's lines inserted after its main_ppo line `line` (the command must
    go on there): the planted copy's path and the first and last inserted lines."""
    with open(script, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines(keepends=True)
    k = line  # 1-based line of the main_ppo word; insert right after it
    if not lines[k - 1].rstrip().endswith("\\"):
        return "", 0, 0
    dst = os.path.join(os.path.dirname(script), PLANTED)
    new = lines[:k] + [f"    {x} \\\n" for x in GUIDE_LINES] + lines[k:]
    with open(dst, "w", encoding="utf-8") as fh:
        fh.write("".join(new))
    return dst, k + 1, k + len(GUIDE_LINES)


# ----------------------------------------------------------------------------- the run

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repos-file", default=os.path.join(HERE, "verl_corpus_inplace_repos.txt"))
    ap.add_argument("--fetched", help="folder of already-extracted trees, one per repository (owner__name)")
    ap.add_argument("--bare", help="folder of bare git dirs (owner+name or owner+name/repo) to extract")
    ap.add_argument("--keep", help="extract/clone into this folder (kept, reusable as --fetched)")
    ap.add_argument("--code", default=REPO, help="checkout whose verl_pdbg_conf is judged (default: this one), "
                    "e.g. the main branch's for a baseline")
    ap.add_argument("--jobs", type=int, default=1, help="repositories split over this many processes (the "
                    "scripts/s printed is per process: the scripts over the sum of their times)")
    ap.add_argument("--max-scripts", type=int, default=0, help="at most N scripts per repository, spread evenly "
                    "over its sorted list (a quick run on a busy machine); 0: all")
    ap.add_argument("--summary-json", help=argparse.SUPPRESS)
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="print the summary of earlier --summary-json runs")
    ap.add_argument("--verbose", action="store_true", help="print every false error and missed refusal")
    ap.add_argument("--truth-worker", metavar="ROOT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.truth_worker:
        truth_worker(args.truth_worker)
        return 0
    if args.merge:
        return report(merge([_load(f) for f in args.merge]), args.verbose)
    repos = read_repos(args.repos_file)
    if args.jobs > 1:
        return report(merge(fan_out(repos, args)), args.verbose)
    data = run(repos, args)
    if args.summary_json:
        with open(args.summary_json, "w") as fh:
            json.dump(data, fh)
        return 0
    return report(data, args.verbose)


def _load(path: str) -> dict:
    with open(path) as fh:
        return json.load(fh)


def fan_out(repos: list[str], args) -> list[dict]:
    """Each of --jobs processes takes a share of the repositories (balanced by script count)."""
    sizes = {}
    for r in repos:
        d = os.path.join(args.fetched or "", r.replace("/", "__"))
        sizes[r] = len(scripts_in(d)) if args.fetched and os.path.isdir(d) else 1
        sizes[r] = min(sizes[r], args.max_scripts or sizes[r])
    groups: list[list[str]] = [[] for _ in range(args.jobs)]
    load = [0] * args.jobs
    for r in sorted(repos, key=lambda r: -sizes[r]):
        k = load.index(min(load))
        groups[k].append(r)
        load[k] += sizes[r]
    tmp = tempfile.mkdtemp(prefix="verl-inplace-jobs-")
    procs = []
    for k, g in enumerate(x for x in groups if x):
        rf, out = os.path.join(tmp, f"repos{k}.txt"), os.path.join(tmp, f"summary{k}.json")
        with open(rf, "w") as fh:
            fh.write("\n".join(g) + "\n")
        cmd = [sys.executable, os.path.abspath(__file__), "--repos-file", rf, "--summary-json", out,
               "--code", args.code, "--max-scripts", str(args.max_scripts)]
        for flag in ("fetched", "bare", "keep"):
            if getattr(args, flag):
                cmd += [f"--{flag}", getattr(args, flag)]
        procs.append((subprocess.Popen(cmd), out))
    data = []
    for p, out in procs:
        p.wait()
        if os.path.isfile(out):
            data.append(_load(out))
    shutil.rmtree(tmp, ignore_errors=True)
    return data


def merge(parts: list[dict]) -> dict:
    out = {"totals": collections.Counter(), "our_wall": 0.0, "false_msgs": collections.Counter(), "code": "",
           "tracebacks": [], "false_errors": [], "missed": [], "found_refusals": [], "planted_rows": []}
    for d in parts:
        out["totals"].update(d["totals"])
        out["false_msgs"].update(d["false_msgs"])
        out["our_wall"] += d["our_wall"]
        out["code"] = d["code"]
        for k in ("tracebacks", "false_errors", "missed", "found_refusals", "planted_rows"):
            out[k] += d[k]
    return out


def run(repos: list[str], args) -> dict:
    """Ours and the truth on every repository, in this process."""
    sys.path.insert(0, HERE)
    from verl_corpus import _hide

    sys.path.insert(0, os.path.abspath(args.code))  # after verl_corpus, which puts this checkout first
    _hide("verl")
    tmp = tempfile.mkdtemp(prefix="verl-inplace-")
    os.environ["VERL_PDBG_CONF_CACHE"] = os.path.join(tmp, "cache")  # empty: first extractions are timed
    os.environ.pop("GITHUB_ACTIONS", None)
    into = args.keep or tmp
    here = os.getcwd()
    totals = collections.Counter()
    our_wall = 0.0
    tracebacks, false_errors, missed, found_refusals = [], [], [], []
    planted_rows = []
    false_msgs = collections.Counter()
    try:
        for repo in repos:
            root = obtain(repo, args.fetched, args.bare, into)
            if root is None or not os.path.isfile(os.path.join(root, "verl", "trainer", "main_ppo.py")):
                print(f"  {repo}: not available or no verl/trainer/main_ppo.py at its root; skipped")
                continue
            root = os.path.abspath(root)
            version = ""
            vf = os.path.join(root, "verl", "version", "version")
            if os.path.isfile(vf):
                with open(vf) as fh:
                    version = fh.read().strip()
            scripts = scripts_in(root)
            if args.max_scripts and len(scripts) > args.max_scripts:
                step = len(scripts) / args.max_scripts
                scripts = [scripts[int(k * step)] for k in range(args.max_scripts)]
            t = time.perf_counter()
            mine = {}
            for s in scripts:
                diags, tb = ours(s, root)
                if tb:
                    tracebacks.append((s, tb))
                mine[s] = diags or []
            wall = time.perf_counter() - t
            our_wall += wall
            truth = run_truth(root, scripts)
            n_false = n_ref = n_found = 0
            for s in scripts:
                verdicts = truth.get(s, [])
                rel = s[s.index(root) + len(root) + 1:]
                errs = [d for d in mine[s] if d.get("severity") == "error"]
                totals["scripts"] += 1
                if not verdicts:
                    totals["no main_ppo command (truth)"] += 1
                    continue
                if any(x["verdict"] == "unknown" for x in verdicts):
                    totals["not judged by the truth (unknowable)"] += 1
                    continue
                totals["judged"] += 1
                if all(x["verdict"] == "ok" for x in verdicts):
                    if errs:
                        n_false += 1
                        false_errors.append((repo, rel, errs))
                        for d in errs:
                            false_msgs[re.sub(r"`[^`]*`|'[^']*'|\S+\.yaml|\d+(\.\d+)*", "_", d["message"])[:110]] += 1
                else:
                    n_ref += 1
                    why = next(x["why"] for x in verdicts if x["verdict"] == "refused")
                    if errs:
                        n_found += 1
                        found_refusals.append((repo, rel, why, errs[0]["message"]))
                    else:
                        missed.append((repo, rel, why))
            totals["false"] += n_false
            totals["refused"] += n_ref
            totals["found"] += n_found
            # the planted test
            backend = has_pdbg_backend(root)
            row = (repo, version, backend, None, None, "")
            for s in scripts:
                v = truth.get(s, [])
                if len(v) == 1 and v[0]["verdict"] == "ok":  # Hydra composes it as it is
                    dst, first, last = plant(s, v[0]["line"])
                    if not dst:
                        continue
                    jdir = os.path.join(root, "configs")
                    made_dir = not os.path.isdir(jdir)
                    os.makedirs(jdir, exist_ok=True)
                    jpath = os.path.join(jdir, "_pdbg_planted_l1.json")
                    shutil.copyfile(PLANTED_JSON, jpath)
                    try:
                        pt = run_truth(root, [dst]).get(dst, [])
                        composes = len(pt) == 1 and pt[0]["verdict"] == "ok"
                        diags, tb = ours(dst, root)
                        if tb:
                            tracebacks.append((dst, tb))
                        ours_err = [d for d in diags or [] if d.get("severity") == "error"
                                    and os.path.basename(d.get("file", "")) == PLANTED and first <= d["line"] <= last]
                        want_error = not (backend and composes)
                        row = (repo, version, backend, composes, bool(ours_err) == want_error,
                               f"{os.path.relpath(s, root)}; ours: " + ("; ".join(
                                   f"{d['line'] - first + 1}:{d['rule']}" for d in ours_err) or "no error"))
                    finally:  # the corpus is left as it was
                        for f in (dst, jpath):
                            with contextlib.suppress(OSError):
                                os.remove(f)
                        if made_dir:
                            with contextlib.suppress(OSError):
                                os.rmdir(jdir)
                    break
            planted_rows.append(row)
            print(f"  {repo} (verl {version or '?'}): {len(scripts)} scripts in {wall:.1f} s; false errors "
                  f"{n_false}, Hydra refusals {n_ref} (found {n_found})", flush=True)
    finally:
        os.chdir(here)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    import verl_pdbg_conf

    return {"totals": totals, "our_wall": our_wall, "false_msgs": false_msgs, "tracebacks": tracebacks,
            "false_errors": false_errors, "missed": missed, "found_refusals": found_refusals,
            "planted_rows": planted_rows,
            "code": os.path.dirname(os.path.dirname(os.path.abspath(verl_pdbg_conf.__file__)))}


def report(data: dict, verbose: bool) -> int:
    totals, our_wall, false_msgs = collections.Counter(data["totals"]), data["our_wall"], \
        collections.Counter(data["false_msgs"])
    tracebacks, false_errors, missed = data["tracebacks"], data["false_errors"], data["missed"]
    found_refusals, planted_rows = data["found_refusals"], data["planted_rows"]
    n = totals["scripts"]
    judged = totals["judged"]
    print(f"\ncode judged: {data['code']}")
    print(f"repositories: {len(planted_rows)}; scripts mentioning main_ppo: {n}; judged by Hydra: {judged} "
          f"(not judged: {totals['not judged by the truth (unknowable)']} unknowable before the run, "
          f"{totals['no main_ppo command (truth)']} without a main_ppo command)")
    print(f"ours: {our_wall:.1f} s wall, {n / max(our_wall, 1e-9):.2f} scripts/s (target >= 5; each repository's first "
          f"extraction included; load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print(f"scripts with a false error: {totals['false']} of {judged} judged ({100 * totals['false'] / max(judged, 1):.1f}%;"
          " target <= 2%)")
    for msg, k in false_msgs.most_common(12):
        print(f"  {k:5}  {msg}")
    print(f"real refusals found: {totals['found']} of {totals['refused']} "
          f"({100 * totals['found'] / max(totals['refused'], 1):.0f}%; target >= 95%)")
    for repo, rel, why in missed[:15]:
        print(f"  missed {repo}/{rel}: {why[:140]}")
    print(f"tracebacks: {len(tracebacks)}")
    for s, tb in tracebacks[:10]:
        print(f"  {s}\n" + "".join("    " + ln + "\n" for ln in tb.splitlines()[-5:]))
    right = sum(1 for r in planted_rows if r[4])
    tried = sum(1 for r in planted_rows if r[4] is not None)
    print(f"planted guide lines judged right: {right} of {tried} repositories "
          "(right: an error on them exactly where the repository's verl lacks the backend or Hydra refuses them)")
    for repo, version, backend, composes, ok, what in planted_rows:
        if ok is None:
            print(f"  {repo} (verl {version}): no script to plant into")
            continue
        print(f"  {'ok   ' if ok else 'WRONG'} {repo} (verl {version}): backend {backend}, Hydra composes "
              f"{composes}: {what}")
    if verbose:
        for repo, rel, errs in false_errors:
            print(f"  false: {repo}/{rel}: " + " | ".join(f"{d['line']}:{d['rule']} {d['message'][:140]}"
                                                          for d in errs[:3]))
        for repo, rel, why, msg in found_refusals:
            print(f"  found: {repo}/{rel}: hydra: {why[:100]} | ours: {msg[:100]}")
    return 1 if tracebacks else 0


if __name__ == "__main__":
    sys.exit(main())
