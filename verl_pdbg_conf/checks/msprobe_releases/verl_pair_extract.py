"""Writes verl-requires.json, verl's side of verl_pair.py, from the real wheels:

    python -m verl_pdbg_conf.checks.msprobe_releases.verl_pair_extract --wheel verl-0.9.1-py3-none-any.whl
    python -m verl_pdbg_conf.checks.msprobe_releases.verl_pair_extract --installed

Requires-Dist and Requires-Python from the dist-info METADATA; the calls from the backend's
code by AST. Kept apart from verl_pair.py so the validator does not compile it on every run."""

from __future__ import annotations

import json
import os
import re
import sys

from verl_pdbg_conf.checks.msprobe_releases.verl_pair import BACKEND, DATA


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
    p.add_argument("--out", default=DATA)
    args = p.parse_args(argv)
    try:
        with open(args.out, encoding="utf-8") as f:
            table = json.load(f)
    except OSError:
        table = {}
    for facts in [from_installed()] if args.installed else [from_wheel(w) for w in args.wheel]:
        version = facts.pop("version")
        table[version] = facts
        print(f"verl {version}: {len(facts['requires_dist'])} requirements, calls {facts['calls']}")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(dumps(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
