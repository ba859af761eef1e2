"""One root cause, one finding. A setting that did not take (an override that does not compose, a key
verl does not have or drops) leaves what it would have set at verl's defaults, and the checks of those
defaults then fire too: they follow from it. Each such finding is folded into its root's message, so
the user reads one error, the one to fix, and still sees what it left behind.

The table below says which rules follow from which: FOLLOWS[root rule] is the rules a root of that rule
can cause. A root covers a follower by config path: a config group that sets the profiler (SETTING_GROUPS,
e.g. `+profiler=...`) covers every path, since it sets them all; a dotted key covers its own path and the
one its did-you-mean names (a misspelled `precision_debuger` section leaves `precision_debugger.config_path`
unset), nothing else (what else is at verl's defaults would have been said anyway). The folded finding
takes the gravest severity among them, so that the exit status does not change."""

from __future__ import annotations

import os
import re

from verl_pdbg_conf.core.findings import Finding

_MEANT = re.compile(r"did you mean [`'\"]([^`'\"]+)[`'\"]")

# What an unset profiler makes the checks say: each fires on verl's defaults for a setting.
UNSET_PROFILER = frozenset({"tool-missing", "config-path-missing", "steps-none", "role-disabled", "role-unused"})
FOLLOWS: dict[str, frozenset[str]] = {
    "override": UNSET_PROFILER,
    "key-unknown": UNSET_PROFILER,
    "key-dropped": UNSET_PROFILER,
}
_CONF = os.path.join(os.path.dirname(os.path.dirname(__file__)), "conf")
# The config groups this package ships (conf/<group>/*.yaml): each sets the whole profiler.
SETTING_GROUPS = frozenset(d for d in (os.listdir(_CONF) if os.path.isdir(_CONF) else ())
                           if os.path.isdir(os.path.join(_CONF, d))
                           and any(f.endswith(".yaml") for f in os.listdir(os.path.join(_CONF, d))))


def _key(path: str) -> str:
    return (path or "").lstrip("+~")


def _scope(root: Finding) -> tuple[str, ...] | None:
    """The config paths a root covers (each with what is below it): ("",) for all, None for none (a group
    that sets no profiler)."""
    key = _key(root.path)
    if key in SETTING_GROUPS:
        return ("",)
    if "." not in key:
        return None
    m = _MEANT.search(root.hint or "")
    if not m:
        return (key,)
    meant = _key(m.group(1).split("=")[0])
    if "." not in meant:  # one segment suggested: the last one of the path
        meant = key.rsplit(".", 1)[0] + "." + meant
    return (key, meant)


def _covers(scope: tuple[str, ...], path: str) -> bool:
    path = _key(path)
    return any(s == "" or path == s or path.startswith(s + ".") or path.startswith(s + "[") for s in scope)


def fold(findings: list[Finding]) -> list[Finding]:
    """The findings of one composed config with each follower folded into the first root that covers it."""
    roots = [(f, _scope(f)) for f in findings if f.rule in FOLLOWS]
    roots = [(f, s) for f, s in roots if s is not None]
    if not roots:
        return findings
    followers: dict[int, list[Finding]] = {}
    kept = []
    for f in findings:
        root = next((i for i, (r, s) in enumerate(roots)
                     if r is not f and f.rule in FOLLOWS[r.rule] and _covers(s, f.path)), None)
        if root is None:
            kept.append(f)
        else:
            followers.setdefault(root, []).append(f)
    out = []
    for f in kept:
        i = next((i for i, (r, _s) in enumerate(roots) if r is f), None)
        if i is not None and followers.get(i):
            said = "; ".join(f"{g.rule}: {g.message}" for g in followers[i])
            f = f.replace(severity=min([f, *followers[i]], key=lambda g: g.severity.rank).severity, message=f"{f.message} (which also leaves {len(followers[i])} finding(s) that follow from "
                                  f"it and go once it is fixed: {said})")
        out.append(f)
    return out
