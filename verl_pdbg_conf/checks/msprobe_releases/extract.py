"""Measure one mindstudio-probe release on the case matrix (`cases.py`) and write
`msprobe-<version>.json.gz` beside this script (then the verl pairs table beside it again, from
every release's facts there: verl_pair_extract.write_pairs).

    python -m verl_pdbg_conf.checks.msprobe_releases.extract --venv VENV   # msprobe and torch in VENV
    python -m verl_pdbg_conf.checks.msprobe_releases.extract               # this Python's msprobe

Each case is driven as verl's precision_debugger backend drives msprobe (verl 0.9.1,
`verl/utils/profiler/precision_debugger_profile.py`), in a forked process of its own (the
debugger is a process singleton), rank 0 of a one-process gloo group, on CPU torch:
`PrecisionDebugger(config_path=..., dump_path=...)` built at the first stage, then per stage
`service.config.dump_path = <stage dir>`, `start(model)`, forward and backward of a tiny
model, `stop()`, `service.reset_status()`; two stages. Construction and `start` errors are
swallowed as verl swallows them (non-strict); the stage is then not dumped. Per case it
records `dumped` (both stages wrote a dump.json with data), `partial`, `nothing` or
`raised` (where: construct, start, stop, reset; and msprobe's message), and per release
the package's Requires-Dist and which of the calls verl's backends make exist.

Nothing is typed from reading msprobe: every outcome is what the release did."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FORMAT = 1
DIST = "mindstudio-probe"
STAGES = ("actor_update", "actor_compute_log_prob")
CASE_TIMEOUT = 120
# What verl's backends call on msprobe (verl's precision_debugger backend, and this package's
# runtime): checked on each release by hasattr/signature, never assumed.
API = ("PrecisionDebugger", "PrecisionDebugger.__init__(config_path)", "PrecisionDebugger.__init__(dump_path)",
       "PrecisionDebugger.start(model)", "PrecisionDebugger.stop", "PrecisionDebugger.step",
       "service.config.dump_path", "service.reset_status", "service._reset_status",
       "service._disable_dump_runtime")


# ---------------------------------------------------------------- metadata, no import

def dist_info(site_dirs: list[str]) -> tuple[str | None, dict]:
    """(version, {"requires_dist": [...], "requires_python": ...}) of the installed
    mindstudio-probe, from its dist-info METADATA."""
    rx = re.compile(r"^mindstudio[_-]probe-([^-]+)\.dist-info$", re.I)
    for d in site_dirs:
        try:
            names = sorted(os.listdir(d or "."))
        except OSError:
            continue
        for n in names:
            if rx.match(n):
                meta = {"requires_dist": [], "requires_python": None}
                version = None
                with open(os.path.join(d, n, "METADATA"), encoding="utf-8") as f:
                    for line in f:
                        if not line.strip():
                            break
                        k, _, v = line.partition(":")
                        v = v.strip()
                        if k == "Version":
                            version = v
                        elif k == "Requires-Dist":
                            meta["requires_dist"].append(v)
                        elif k == "Requires-Python":
                            meta["requires_python"] = v
                return version, meta
    return None, {}


# ---------------------------------------------------------------- one case (in the forked child)

def _model():
    import torch

    torch.manual_seed(0)
    # a layer_norm, as every LLM has: msprobe's risk_level CORE keeps only such APIs (matmul, norms,
    # embedding, attention); Module.0 and Module.2 are the Linear layers the scope cases name
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2), torch.nn.LayerNorm(2))


def _reset(debugger):
    """verl's _reset_debugger_status: the public reset_status, else _reset_status."""
    service = getattr(debugger, "service", None)
    if service is None:
        return
    fn = getattr(service, "reset_status", None) or getattr(service, "_reset_status", None)
    if callable(fn):
        fn()


def _stage_dump(stage_dir: str) -> dict | None:
    """What one stage wrote: None when nothing (no dump.json with data, no construct.json with
    entries), else how many records dump.json holds and which files were written."""
    files, records, found = [], 0, False
    for d, _, names in os.walk(stage_dir):
        for n in names:
            full = os.path.join(d, n)
            files.append(n if n.endswith(".json") else "*" + os.path.splitext(n)[1])
            if n in ("dump.json", "construct.json") and os.path.getsize(full) > 2:
                try:
                    with open(full, encoding="utf-8") as f:
                        data = json.load(f)
                except (OSError, ValueError):
                    continue
                if n == "dump.json" and isinstance(data, dict) and data.get("data"):
                    found, records = True, len(data["data"])
                elif n == "construct.json" and data:
                    found = True
    return {"records": records, "files": sorted(set(files))} if found else None


def _run_case(config_file: str, root: str) -> dict:
    """verl's backend, non-strict, over two stages."""
    import torch
    import torch.distributed as dist
    from msprobe.pytorch import PrecisionDebugger

    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(root, "store"), 1), rank=0, world_size=1)
    model = _model()
    x = torch.randn(3, 4)
    debugger, stages, error = None, [], None
    for stage in STAGES:
        dump = os.path.join(root, "out", "step_1", stage)
        os.makedirs(dump, exist_ok=True)
        started = False
        try:
            where = "construct"
            if debugger is None:
                debugger = PrecisionDebugger(config_path=config_file, dump_path=dump)
            where = "start"
            if hasattr(debugger, "service") and hasattr(debugger.service, "config"):
                debugger.service.config.dump_path = dump
            debugger.start(model)
            started = True
        except Exception as e:  # noqa: BLE001 - verl swallows it (non-strict)
            error = error or {"where": where, "type": type(e).__name__, "text": str(e)}
        model(x).sum().backward()
        if started:
            try:
                where = "stop"
                debugger.stop()
                where = "reset"
                _reset(debugger)
            except Exception as e:  # noqa: BLE001 - verl does not catch this: the training step fails
                error = error or {"where": where, "type": type(e).__name__, "text": str(e)}
                stages.append(_stage_dump(dump))
                break
        stages.append(_stage_dump(dump))
    return {"stages": stages, "error": error}


def _fill(value, tmp: str):
    from verl_pdbg_conf.checks.msprobe_releases.cases import EXISTING_DIR, MISSING

    if value == MISSING:
        return os.path.join(tmp, "no_such_dir")
    if value == EXISTING_DIR:
        d = os.path.join(tmp, "existing_dir")
        os.makedirs(d, exist_ok=True)
        return d
    if isinstance(value, dict):
        return {k: _fill(v, tmp) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, tmp) for v in value]
    return value


_ERR_LINE = re.compile(r"\[ERROR\]\s*(.*)")


def _clean(text: str, tmp: str) -> str:
    """A message without this run's paths, pids, addresses or times: the same on every run."""
    text = text.replace(os.path.realpath(tmp), "<dir>").replace(tmp, "<dir>")
    text = re.sub(r"0x[0-9a-fA-F]{6,}", "0x...", text)
    text = re.sub(r"\bproc\d+\b", "proc<pid>", text)
    text = re.sub(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?", "<time>", text)
    return " ".join(text.split())[:400]


def start_case(case: dict) -> dict:
    """Fork the child that runs one case; `finish_case` collects it."""
    tmp = tempfile.mkdtemp(prefix="msprobe-case-")
    cfg = os.path.join(tmp, "config.json")
    with open(cfg, "w", encoding="utf-8") as f:
        json.dump(_fill(case["config"], tmp), f)
    result_file, log_file = os.path.join(tmp, "result.json"), os.path.join(tmp, "log.txt")
    pid = os.fork()
    if pid == 0:  # the child: a fresh singleton, its output to a file
        code = 0
        try:
            fd = os.open(log_file, os.O_WRONLY | os.O_CREAT, 0o600)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.chdir(tmp)
            res = _run_case(cfg, tmp)
            with open(result_file, "w", encoding="utf-8") as f:
                json.dump(res, f)
        except BaseException as e:  # noqa: BLE001 - reported through the result
            try:
                with open(result_file, "w", encoding="utf-8") as f:
                    json.dump({"stages": [], "error": {"where": "driver", "type": type(e).__name__,
                                                       "text": str(e)}}, f)
            except BaseException:  # noqa: BLE001
                code = 3
        finally:
            os._exit(code)
    return {"pid": pid, "tmp": tmp, "deadline": time.monotonic() + CASE_TIMEOUT, "status": None}


def poll_case(h: dict) -> bool:
    """True once the child has ended (killed at its deadline)."""
    done, status = os.waitpid(h["pid"], os.WNOHANG)
    if done:
        h["status"] = status
        return True
    if time.monotonic() > h["deadline"]:
        os.kill(h["pid"], signal.SIGKILL)
        os.waitpid(h["pid"], 0)
        h["status"] = "timeout"
        return True
    return False


def finish_case(h: dict) -> dict:
    tmp = h["tmp"]
    try:
        if h["status"] == "timeout":
            return {"outcome": "raised", "where": "timeout", "message": f"no answer in {CASE_TIMEOUT} s"}
        try:
            with open(os.path.join(tmp, "result.json"), encoding="utf-8") as f:
                res = json.load(f)
        except (OSError, ValueError):
            return {"outcome": "raised", "where": "process", "message": f"the process ended with status {h['status']}"}
        try:
            with open(os.path.join(tmp, "log.txt"), encoding="utf-8", errors="replace") as f:
                log = f.read()
        except OSError:
            log = ""
        return _summary(res, log, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_cases(cases: list[dict], jobs: int = 1, progress=None) -> list[dict]:
    """Every case, `jobs` children at a time; results in the cases' order."""
    results: list = [None] * len(cases)
    running: dict[int, dict] = {}
    nxt = done = 0
    while done < len(cases):
        while nxt < len(cases) and len(running) < jobs:
            running[nxt] = start_case(cases[nxt])
            nxt += 1
        for i, h in list(running.items()):
            if poll_case(h):
                del running[i]
                results[i] = finish_case(h)
                done += 1
                if progress:
                    progress(i, len(cases), cases[i], results[i])
        time.sleep(0.02)
    return results


def run_case(case: dict) -> dict:
    return run_cases([case])[0]


def _summary(res: dict, log: str, tmp: str) -> dict:
    err, stages = res.get("error"), res.get("stages", [])
    out: dict = {}
    n = sum(s is not None for s in stages)
    if err:
        logged = [m.group(1) for m in map(_ERR_LINE.search, log.splitlines()) if m]
        text = f"{err['type']}: {err['text']}" if err["text"] else err["type"]
        if logged:
            text = f"{logged[-1]} ({text})"
        out = {"outcome": "raised" if n == 0 else "partial", "where": err["where"], "message": _clean(text, tmp)}
    else:
        out["outcome"] = "dumped" if n == len(STAGES) else "nothing" if n == 0 else "partial"
    if n:
        out["dump"] = next(s for s in stages if s is not None)
    return out


# ---------------------------------------------------------------- the API verl calls

def api_facts() -> dict:
    import inspect

    from msprobe.pytorch import PrecisionDebugger

    def params(fn):
        try:
            return set(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            return set()

    service_cls = None
    try:  # the service class without building a debugger (a process singleton)
        mod = sys.modules[PrecisionDebugger.__module__]
        for name in dir(mod):
            obj = getattr(mod, name)
            if isinstance(obj, type) and name.endswith("Service"):
                service_cls = obj
    except KeyError:
        pass
    found = {
        "PrecisionDebugger": True,
        "PrecisionDebugger.__init__(config_path)": "config_path" in params(PrecisionDebugger.__init__),
        "PrecisionDebugger.__init__(dump_path)": "dump_path" in params(PrecisionDebugger.__init__),
        "PrecisionDebugger.start(model)": "model" in params(PrecisionDebugger.start),
        "PrecisionDebugger.stop": callable(getattr(PrecisionDebugger, "stop", None)),
        "PrecisionDebugger.step": callable(getattr(PrecisionDebugger, "step", None)),
    }
    for name in ("reset_status", "_reset_status", "_disable_dump_runtime"):
        found[f"service.{name}"] = bool(service_cls and callable(getattr(service_cls, name, None)))
    found["service.config.dump_path"] = None  # filled from a live debugger in measure()
    return found


def _live_api(found: dict) -> dict:
    """The service's methods and config as a built debugger has them (in a child process)."""
    tmp = tempfile.mkdtemp(prefix="msprobe-api-")
    try:
        cfg = os.path.join(tmp, "config.json")
        with open(cfg, "w", encoding="utf-8") as f:
            f.write("{}")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                fd = os.open(os.devnull, os.O_WRONLY)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.chdir(tmp)
                from msprobe.pytorch import PrecisionDebugger

                d = PrecisionDebugger(config_path=cfg, dump_path=os.path.join(tmp, "out"))
                s = getattr(d, "service", None)
                live = {f"service.{n}": bool(s is not None and callable(getattr(s, n, None)))
                        for n in ("reset_status", "_reset_status", "_disable_dump_runtime")}
                live["service.config.dump_path"] = bool(s is not None and hasattr(getattr(s, "config", None),
                                                                                   "dump_path"))
                os.write(w, json.dumps(live).encode())
            finally:
                os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.waitpid(pid, 0)
        if data:
            found.update(json.loads(data))
        return found
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- a release

def _parse_yaml_once():
    """msprobe parses its own YAML lists of torch APIs (pure-Python PyYAML, about a second)
    each time a debugger is built; parse each file once here, before the children fork, and
    hand every call a deep copy of the same data. Speed only: config.json is read as ever."""
    import copy
    import functools

    caches = []
    originals = {}
    for name, mod in list(sys.modules.items()):
        if name.startswith("msprobe") and callable(getattr(mod, "load_yaml", None)):
            originals.setdefault(id(mod.load_yaml), mod.load_yaml)
    for orig in originals.values():
        cache = {}
        caches.append(cache)

        @functools.wraps(orig)
        def cached(path, *a, _orig=orig, _cache=cache, **k):
            key = (path, a, tuple(sorted(k.items())))
            if key not in _cache:
                _cache[key] = _orig(path, *a, **k)
            return copy.deepcopy(_cache[key])

        for name, mod in list(sys.modules.items()):
            if name.startswith("msprobe") and getattr(mod, "load_yaml", None) is orig:
                mod.load_yaml = cached
    _warm(caches)


def _warm(caches: list[dict]) -> None:
    """Build one debugger in a child and bring back what it parsed."""
    import pickle

    tmp = tempfile.mkdtemp(prefix="msprobe-warm-")
    try:
        cfg = os.path.join(tmp, "config.json")
        with open(cfg, "w", encoding="utf-8") as f:
            f.write("{}")
        out = os.path.join(tmp, "caches.pickle")
        pid = os.fork()
        if pid == 0:
            try:
                fd = os.open(os.devnull, os.O_WRONLY)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.chdir(tmp)
                _run_case(cfg, tmp)
                with open(out, "wb") as f:
                    pickle.dump(caches, f)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        if os.path.exists(out):
            with open(out, "rb") as f:
                for mine, theirs in zip(caches, pickle.load(f)):
                    mine.update(theirs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(cases: list[dict], progress=None, jobs: int = 1) -> dict:
    """Every case on the msprobe importable here (run inside the release's venv)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import site

    import torch

    torch.set_num_threads(1)
    import msprobe.pytorch  # noqa: F401 - imported once, before the children fork

    _parse_yaml_once()

    version, meta = dist_info(site.getsitepackages() + [site.getusersitepackages()] + sys.path)
    facts = {"format": FORMAT, "dist": DIST, "version": version, "requires_python": meta.get("requires_python"),
             "requires_dist": meta.get("requires_dist", []), "api": _live_api(api_facts()), "cases": []}
    for case, res in zip(cases, run_cases(cases, jobs, progress)):
        facts["cases"].append({"id": case["id"], "key": case["key"], "config": case["config"], **res})
    return facts


def keyed(cases: list[dict], matrix: list[dict]) -> list[dict]:
    """The measured cases, each with the matrix's key (stored, so that the validator never
    builds the matrix: case_index.py), placed after its id as measure() writes it."""
    keys = {c["id"]: c["key"] for c in matrix}
    return [with_key(c, keys[c["id"]]) for c in cases]


def rekey(out_dir: str) -> int:
    """Write the matrix's keys into every release's facts in out_dir, measuring nothing: after
    the keys of the matrix changed, or facts written without them."""
    from verl_pdbg_conf.checks.msprobe_releases import shipped
    from verl_pdbg_conf.checks.msprobe_releases.cases import matrix

    cases = matrix()
    for version in shipped():
        path = path_for(version, out_dir)
        with gzip.open(path, "rt", encoding="utf-8") as f:
            facts = json.load(f)
        if [c["id"] for c in facts["cases"]] != [c["id"] for c in cases]:
            raise SystemExit(f"{path}: its cases are not the matrix's: measure the release again")
        data = dumps(dict(facts, cases=keyed(facts["cases"], cases)))
        with open(path, "wb") as f:
            f.write(data)
        print(f"{path}: {len(cases)} cases keyed, {len(data)} bytes")
    return 0


def dumps(facts: dict) -> bytes:
    """Deterministic bytes: key order as built, gzip without a time stamp."""
    from verl_pdbg_conf.verl_facts.releases.extract import gzip_bytes

    return gzip_bytes(json.dumps(facts, ensure_ascii=False, indent=0, separators=(",", ":")).encode("utf-8"))


def path_for(version: str, out_dir: str = HERE) -> str:
    return os.path.join(out_dir, f"msprobe-{version}.json.gz")


def _installed_version() -> str | None:
    import site

    return dist_info(site.getsitepackages() + [site.getusersitepackages()] + sys.path)[0]


def write_examples(root: str, jobs: int = 1, missing: bool = False) -> int:
    """Measure the examples (with `missing`: only those the release's outcomes file lacks, kept
    with the rest) and write the release's outcomes file."""
    cases_dir = os.path.join(root, "cases")
    out_dir = os.path.join(root, "outcomes")
    old = {}
    if missing:
        try:
            with open(os.path.join(out_dir, f"msprobe-{_installed_version()}.json"), encoding="utf-8") as f:
                old = json.load(f)["outcomes"]
        except OSError:
            pass
    cases = []
    for n in sorted(os.listdir(cases_dir)):
        if n.endswith(".json") and n[:-5] not in old:
            with open(os.path.join(cases_dir, n), encoding="utf-8") as f:
                cases.append({"id": n[:-5], "key": "", "config": json.load(f)})
    facts = measure(cases, jobs=jobs)
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, f"msprobe-{facts['version']}.json")
    names = {n[:-5] for n in os.listdir(cases_dir) if n.endswith(".json")}
    table = {k: v for k, v in old.items() if k in names}
    table.update({c["id"]: {k: c[k] for k in ("outcome", "where", "message") if k in c} for c in facts["cases"]})
    print(f"measured {len(facts['cases'])} examples")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"version": facts["version"], "outcomes": table}, f, indent=1, ensure_ascii=False, sort_keys=True)
        f.write("\n")
    print(f"{out}: {len(table)} examples")
    return 0


def merge_parts(version: str, out_dir: str) -> int:
    """The facts of VERSION from its --part files, cases in the matrix's order."""
    from verl_pdbg_conf.checks.msprobe_releases.cases import matrix

    parts = []
    for n in sorted(os.listdir(out_dir)):
        if n.startswith(f"msprobe-{version}.part-") and n.endswith(".json"):
            with open(os.path.join(out_dir, n), encoding="utf-8") as f:
                parts.append(json.load(f))
    by_id = {c["id"]: c for p in parts for c in p["cases"]}
    order = [c["id"] for c in matrix()]
    if not parts or set(by_id) != set(order):
        raise SystemExit(f"the parts of {version} do not cover the matrix ({len(by_id)} of {len(order)} cases)")
    facts = dict(parts[0], cases=keyed([by_id[i] for i in order], matrix()))
    data = dumps(facts)
    with open(path_for(version, out_dir), "wb") as f:
        f.write(data)
    print(f"{path_for(version, out_dir)}: {len(order)} cases, {len(data)} bytes")
    return write_pairs(out_dir)


def with_key(case: dict, key: str) -> dict:
    """A measured case with the matrix's key, its fields in the order measure() writes them."""
    return {"id": case["id"], "key": key, **{k: v for k, v in case.items() if k not in ("id", "key")}}


def measure_missing(out_dir: str, jobs: int) -> int:
    """Measure only the matrix cases the installed release's facts file lacks and write the file
    again: the cases it has kept as measured, those the matrix dropped left out, matrix order."""
    from verl_pdbg_conf.checks.msprobe_releases.cases import matrix

    version = _installed_version()
    if not os.path.exists(path_for(version, out_dir)):
        raise SystemExit(f"no facts of msprobe {version} in {out_dir} yet: measure the whole matrix (no --missing)")
    with gzip.open(path_for(version, out_dir), "rt", encoding="utf-8") as f:
        old = json.load(f)
    have = {c["id"]: c for c in old["cases"]}
    cases = matrix()
    todo = [c for c in cases if c["id"] not in have]
    facts = measure(todo, None, jobs)
    got = {c["id"]: c for c in facts["cases"]}
    facts["cases"] = [with_key(have.get(c["id"]) or got[c["id"]], c["key"]) for c in cases]
    data = dumps(facts)
    with open(path_for(version, out_dir), "wb") as f:
        f.write(data)
    print(f"{path_for(version, out_dir)}: {len(todo)} cases measured, {len(cases)} in all, {len(data)} bytes")
    return write_pairs(out_dir)


def write_pairs(out_dir: str) -> int:
    """After facts were written: the verl/msprobe pairs table (verl-msprobe-pairs.json) again, from
    the shipped verl-requires.json and every release's facts in out_dir, written there."""
    from verl_pdbg_conf.checks.msprobe_releases import verl_pair_extract

    verl_pair_extract.write_pairs(facts_dir=out_dir)
    return 0


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m verl_pdbg_conf.checks.msprobe_releases.extract",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--venv", help="a venv holding torch and the mindstudio-probe release to measure "
                                  "(default: this Python)")
    p.add_argument("--out-dir", default=HERE, help="where to write msprobe-<version>.json.gz")
    p.add_argument("--only", help="measure only the cases whose id contains this text, print them, write nothing")
    p.add_argument("--config", action="append", default=[],
                   help="measure these config.json files instead of the matrix; print one JSON line each")
    p.add_argument("--examples", metavar="DIR",
                   help="measure every DIR/cases/*.json and write DIR/outcomes/msprobe-<version>.json (the tests' "
                        "per-release example matrix) instead of the facts")
    p.add_argument("-j", "--jobs", type=int, default=2, help="cases run at once (default 2)")
    p.add_argument("--part", metavar="K/N", help="measure every N-th case from the K-th (0-based) and write "
                                                 "msprobe-<version>.part-K-of-N.json; --merge joins the parts")
    p.add_argument("--merge", metavar="VERSION", help="join the part files of VERSION in --out-dir into its facts")
    p.add_argument("--missing", action="store_true",
                   help="measure only the cases (with --examples: the examples) the release's shipped file lacks, "
                        "and merge them into it")
    p.add_argument("--rekey", action="store_true", help="write the matrix's key of each case into every shipped "
                                                        "release's facts in --out-dir, measuring nothing")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.rekey:
        return rekey(args.out_dir)
    if args.venv:
        py = os.path.join(args.venv, "bin", "python")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_repo_root(),
                                                                        os.environ.get("PYTHONPATH")])))
        cmd = [py, "-m", "verl_pdbg_conf.checks.msprobe_releases.extract", "--out-dir",
               os.path.abspath(args.out_dir)]
        cmd += ["--only", args.only] if args.only else []
        for c in args.config:
            cmd += ["--config", os.path.abspath(c)]
        cmd += ["--examples", os.path.abspath(args.examples)] if args.examples else []
        cmd += ["-q"] if args.quiet else []
        cmd += ["--jobs", str(args.jobs)]
        cmd += ["--part", args.part] if args.part else []
        cmd += ["--missing"] if args.missing else []
        return subprocess.call(cmd, env=env)
    from verl_pdbg_conf.checks.msprobe_releases.cases import matrix

    if args.config:
        cases = []
        for c in args.config:
            with open(c, encoding="utf-8") as f:
                cases.append({"id": c, "key": "", "config": json.load(f)})
        facts = measure(cases, jobs=args.jobs)
        for c in facts["cases"]:
            print(json.dumps({"file": c["id"], "version": facts["version"], "outcome": c["outcome"],
                              **({"where": c["where"], "message": c["message"]} if "where" in c else {})}))
        return 0
    if args.examples:
        return write_examples(args.examples, args.jobs, args.missing)
    if args.missing:
        return measure_missing(args.out_dir, args.jobs)
    if args.merge:
        return merge_parts(args.merge, args.out_dir)
    cases = matrix()
    if args.part:
        k, n = map(int, args.part.split("/"))
        facts = measure(cases[k::n], None, args.jobs)
        out = os.path.join(args.out_dir, f"msprobe-{facts['version']}.part-{k}-of-{n}.json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump(facts, f)
        print(f"{out}: {len(facts['cases'])} cases")
        return 0
    if args.only:
        cases = [c for c in cases if args.only in c["id"]]

    def progress(i, n, case, res):
        if not args.quiet or args.only:
            print(f"[{i + 1}/{n}] {case['id']}: {res['outcome']} {res.get('where', '')} {res.get('message', '')}",
                  flush=True)

    facts = measure(cases, progress, args.jobs)
    if args.only:
        return 0
    out = path_for(facts["version"], args.out_dir)
    data = dumps(facts)
    with open(out, "wb") as f:
        f.write(data)
    counts = {}
    for c in facts["cases"]:
        counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
    print(f"{out}: msprobe {facts['version']}, {len(facts['cases'])} cases {counts}, {len(data)} bytes")
    return write_pairs(args.out_dir)


if __name__ == "__main__":
    sys.exit(main())
