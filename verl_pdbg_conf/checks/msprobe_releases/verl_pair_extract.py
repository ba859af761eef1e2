"""verl and msprobe releases as pairs, worked out at extraction time: writes verl-requires.json,
verl's side, from the real wheels, and verl-msprobe-pairs.json, what keeps each verl release in
verl-requires.json and each shipped msprobe release from running together (the table the
validator looks pairs up in, verl_pair.py):

    python -m verl_pdbg_conf.checks.msprobe_releases.verl_pair_extract --wheel verl-0.9.1-py3-none-any.whl
    python -m verl_pdbg_conf.checks.msprobe_releases.verl_pair_extract --installed
    python -m verl_pdbg_conf.checks.msprobe_releases.verl_pair_extract --pairs

Requires-Dist and Requires-Python from the dist-info METADATA; the calls from the backend's
code by AST. A pair cannot run together when pip cannot install both wheels (an unconditional
requirement of both with no version in common, or Requires-Python with none), or when the msprobe
lacks every alternative of a call verl's backend makes. `--pairs` rewrites only the table, from
the shipped verl-requires.json and msprobe facts (extract.py runs it after writing facts). Kept
apart from verl_pair.py so the validator does not compile any of this on every run."""

from __future__ import annotations

import functools
import json
import os
import re
import sys

from verl_pdbg_conf.checks.msprobe_releases.verl_pair import HERE, PAIRS

DATA = os.path.join(HERE, "verl-requires.json")
BACKEND = "verl/utils/profiler/precision_debugger_profile.py"
MSPROBE_PARTS = ("version", "requires_dist", "requires_python", "api")  # what pair_problems reads of msprobe's facts
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(\(?)([^;]*?)\)?\s*(;.*)?$")
_SPEC = re.compile(r"^\s*(~=|==|!=|<=|>=|<|>|===)\s*([^\s,]+)\s*$")


# ---------------------------------------------------------------- reading requirements

def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version(text: str) -> tuple:
    """A release number as a tuple of ints, enough to order bounds ("2.0.0", "1.23", "2.1")."""
    parts = []
    for p in text.split("."):
        m = re.match(r"\d+", p)
        if not m:
            break
        parts.append(int(m.group()))
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def parse_requirement(line: str):
    """(name, [(op, version)]) of a Requires-Dist line, or None for one with a marker (an extra,
    a Python or platform condition): only unconditional requirements are compared."""
    m = _REQ.match(line)
    if not m or m.group(5):
        return None
    specs = []
    for part in filter(None, (p.strip() for p in m.group(4).split(","))):
        sm = _SPEC.match(part)
        if sm:
            specs.append((sm.group(1), sm.group(2)))
    return _norm(m.group(1)), specs


def _interval(specs):
    """(low, low_inclusive, high, high_inclusive) that `specs` allow; None means unbounded."""
    lo, lo_in, hi, hi_in = None, True, None, True
    for op, v in specs:
        if v.endswith(".*"):
            continue
        t = _version(v)
        if op in (">=", ">", "==", "===", "~="):
            inc = op != ">"
            if lo is None or t > lo or (t == lo and not inc):
                lo, lo_in = t, inc
        if op in ("<=", "<", "==", "==="):
            inc = op != "<"
            if hi is None or t < hi or (t == hi and not inc):
                hi, hi_in = t, inc
        if op == "~=":  # ~=1.4.2 is >=1.4.2, <1.5
            up = t[:-1]
            if len(up) >= 1:
                up = up[:-1] + (up[-1] + 1,)
                if hi is None or up < hi:
                    hi, hi_in = up, False
    return lo, lo_in, hi, hi_in


def disjoint(a, b) -> bool:
    """True when no version satisfies both specifier lists."""
    lo, lo_in, hi, hi_in = _interval(list(a) + list(b))
    if lo is None or hi is None:
        return False
    return lo > hi or (lo == hi and not (lo_in and hi_in))


def _show(specs) -> str:
    return ",".join(op + v for op, v in specs) or "any version"


def conflicts(requires_a: list[str], requires_b: list[str]) -> list[tuple[str, str, str]]:
    """(package, spec in a, spec in b) for every package both require with no version in common."""
    a = dict(filter(None, map(parse_requirement, requires_a)))
    b = dict(filter(None, map(parse_requirement, requires_b)))
    return [(n, _show(a[n]), _show(b[n])) for n in sorted(set(a) & set(b)) if disjoint(a[n], b[n])]


def python_conflict(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return False
    sa = [(m.group(1), m.group(2)) for m in map(_SPEC.match, a.split(",")) if m]
    sb = [(m.group(1), m.group(2)) for m in map(_SPEC.match, b.split(",")) if m]
    return disjoint(sa, sb)


# ---------------------------------------------------------------- a pair's problems

def read_requires(path: str = DATA) -> dict:
    """A verl-requires.json as stored; {} where there is none yet."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError:
        return {}


@functools.lru_cache(maxsize=None)
def verl_releases() -> dict:
    """The shipped verl-requires.json."""
    return read_requires()


def problems(verl_version: str, verl: dict, msprobe_facts: dict) -> list[str]:
    """What keeps verl release `verl_version` (its entry in verl-requires.json) and this msprobe
    release from running together, in words. `msprobe_facts`: the release's facts, or just their
    MSPROBE_PARTS."""
    mv = msprobe_facts["version"]
    out = []
    clash = conflicts(verl.get("requires_dist", []), msprobe_facts.get("requires_dist", []))
    if clash:
        what = "; ".join(f"{n}: verl needs {a}, mindstudio-probe needs {b}" for n, a, b in clash)
        out.append(f"verl {verl_version} and mindstudio-probe {mv} cannot be installed together ({what})")
    if python_conflict(verl.get("requires_python"), msprobe_facts.get("requires_python")):
        out.append(f"no Python runs both verl {verl_version} ({verl['requires_python']}) and mindstudio-probe "
                   f"{mv} ({msprobe_facts['requires_python']})")
    api = msprobe_facts.get("api", {})
    for group in verl.get("calls", []):
        if all(api.get(c) is False for c in group):
            out.append(f"verl {verl_version}'s precision_debugger backend calls {' or '.join(group)}, which "
                       f"mindstudio-probe {mv} does not have")
    return out


def pair_problems(verl_version: str, msprobe_facts: dict) -> list[str]:
    """problems() for a verl release in the shipped verl-requires.json; [] for any other."""
    verl = verl_releases().get(verl_version)
    return [] if verl is None else problems(verl_version, verl, msprobe_facts)


def msprobe_facts_in(directory: str = HERE) -> dict[str, dict]:
    """{version: its MSPROBE_PARTS} of every msprobe-<version>.json.gz in `directory`."""
    from verl_pdbg_conf.checks.msprobe_releases.release_files import FACTS_NAME
    from verl_pdbg_conf.verl_facts.releases import read_json_gz, versions_in

    out = {}
    for version in versions_in(directory, FACTS_NAME):
        facts = read_json_gz(os.path.join(directory, f"msprobe-{version}.json.gz"))
        out[version] = {p: facts[p] for p in MSPROBE_PARTS if p in facts}
    return out


def pairs_table(verl: dict, msprobe: dict[str, dict]) -> dict:
    """{verl version: {msprobe version: [problem sentences]}} for every verl release in `verl`
    (verl-requires.json's form) and every msprobe release in `msprobe` ({version: facts})."""
    return {vv: {mv: problems(vv, vf, mf) for mv, mf in msprobe.items()} for vv, vf in verl.items()}


def write_pairs(requires: str = DATA, facts_dir: str = HERE, out: str | None = None) -> str:
    """Write the pairs table of verl-requires.json at `requires` and the msprobe facts in
    `facts_dir` to `out` (default: verl-msprobe-pairs.json in facts_dir); its path."""
    out = out or os.path.join(facts_dir, os.path.basename(PAIRS))
    with open(requires, encoding="utf-8") as f:
        verl = json.load(f)
    table = pairs_table(verl, msprobe_facts_in(facts_dir))
    with open(out, "w", encoding="utf-8") as f:
        f.write(dumps(table))
    bad = sum(1 for row in table.values() for p in row.values() if p)
    print(f"{out}: {len(table)} verl x {len(next(iter(table.values()), {}))} msprobe releases, "
          f"{bad} pairs that cannot run together")
    return out


# ---------------------------------------------------------------- verl's side, from its wheel

def _metadata(text: str) -> dict:
    out = {"version": None, "requires_dist": [], "requires_python": None}
    for line in text.splitlines():
        if not line.strip():
            break
        k, _, v = line.partition(":")
        v = v.strip()
        if k == "Version":
            out["version"] = v
        elif k == "Requires-Dist":
            out["requires_dist"].append(v)
        elif k == "Requires-Python":
            out["requires_python"] = v
    return out


def backend_calls(src: str) -> list[list[str]]:
    """What verl's backend calls on msprobe, as groups of alternatives (a getattr fallback is
    one group), in the names of extract.API."""
    import ast

    tree = ast.parse(src)
    groups: list[list[str]] = []

    def add(group):
        if group not in groups:
            groups.append(group)

    getattr_names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "PrecisionDebugger":
                add(["PrecisionDebugger"])
                for kw in node.keywords:
                    add([f"PrecisionDebugger.__init__({kw.arg})"])
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute) and \
                    f.value.attr == "_debugger" and f.attr in ("start", "stop", "step"):
                add([f"PrecisionDebugger.{f.attr}(model)" if f.attr == "start" and node.args
                     else f"PrecisionDebugger.{f.attr}"])
            elif isinstance(f, ast.Name) and f.id == "getattr" and len(node.args) >= 2 and \
                    isinstance(node.args[0], ast.Name) and node.args[0].id == "service" and \
                    isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                getattr_names.append(f"service.{node.args[1].value}")
    if getattr_names:
        add(sorted(set(getattr_names)))
    return sorted(groups)


def from_wheel(path: str) -> dict:
    import zipfile

    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if re.match(r"verl-[^/]+\.dist-info/METADATA$", n))
        facts = _metadata(z.read(meta).decode("utf-8"))
        src = z.read(BACKEND).decode("utf-8") if BACKEND in z.namelist() else None
    facts["calls"] = backend_calls(src) if src else []
    return facts


def from_installed() -> dict:
    import importlib.metadata
    import importlib.util

    dist = importlib.metadata.distribution("verl")
    facts = _metadata(dist.read_text("METADATA") or "")
    spec = importlib.util.find_spec("verl")
    root = os.path.dirname(list(spec.submodule_search_locations)[0])
    path = os.path.join(root, BACKEND)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            facts["calls"] = backend_calls(f.read())
    else:
        facts["calls"] = []
    return facts


def dumps(table: dict) -> str:
    return json.dumps(table, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m verl_pdbg_conf.checks.msprobe_releases.verl_pair_extract",
                                description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--wheel", action="append", help="a verl wheel (pip download --no-deps verl==X)")
    src.add_argument("--installed", action="store_true", help="the verl installed here")
    src.add_argument("--pairs", action="store_true", help="rewrite only verl-msprobe-pairs.json, from the shipped "
                                                          "verl-requires.json and msprobe facts (no wheel needed)")
    p.add_argument("--out", default=DATA, help="the verl-requires.json to write (the pairs table goes beside it)")
    args = p.parse_args(argv)
    pairs = os.path.join(os.path.dirname(os.path.abspath(args.out)), os.path.basename(PAIRS))
    if args.pairs:
        write_pairs(args.out, HERE, pairs)
        return 0
    table = read_requires(args.out)
    for facts in [from_installed()] if args.installed else [from_wheel(w) for w in args.wheel]:
        version = facts.pop("version")
        table[version] = facts
        print(f"verl {version}: {len(facts['requires_dist'])} requirements, calls {facts['calls']}")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(dumps(table))
    write_pairs(args.out, HERE, pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
