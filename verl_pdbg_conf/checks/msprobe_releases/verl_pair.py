"""A verl release and an msprobe release as a pair: can pip install them together (both
wheels' Requires-Dist and Requires-Python), and does the msprobe have every call verl's
precision_debugger backend makes?

verl's side is data too, `verl-requires.json`, written from the real wheels by
verl_pair_extract.py; msprobe's side is in its facts (extract.py)."""

from __future__ import annotations

import functools
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "verl-requires.json")
BACKEND = "verl/utils/profiler/precision_debugger_profile.py"
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


# ---------------------------------------------------------------- verl's side, shipped as data

@functools.lru_cache(maxsize=None)
def verl_releases() -> dict:
    try:
        with open(DATA, encoding="utf-8") as f:
            return json.load(f)
    except OSError:
        return {}


MSPROBE_PARTS = ("version", "requires_dist", "requires_python", "api")  # what pair_problems reads of msprobe's facts


def pair_problems(verl_version: str, msprobe_facts: dict) -> list[str]:
    """What keeps this verl release and this msprobe release from running together, in words.
    `msprobe_facts`: the release's facts, or just their MSPROBE_PARTS."""
    verl = verl_releases().get(verl_version)
    if verl is None:
        return []
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
