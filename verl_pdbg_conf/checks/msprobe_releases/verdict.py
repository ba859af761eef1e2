"""The judging msprobe release decides the verdicts: the rules of checks/msprobe.py are
msprobe 26.x's; here each config.json is matched against what the judging release really did
on the case matrix (cases.py, measured by extract.py).

- A case that applies (all its pairs are the config's) and raised, dumped nothing or dumped
  only part is an error at the case's key, saying what that release does; an existing finding
  at that key is rewritten (its rule kept), not doubled.
- An error of the 26.x rules at a key where every applying case of that key dumped normally
  on this release becomes a warning that says so.
- Keys the matrix does not cover keep the 26.x rules' verdict."""

from __future__ import annotations

import dataclasses
import json
import re

from verl_pdbg_conf.checks.msprobe_releases import load
from verl_pdbg_conf.checks.msprobe_releases.cases import UNKNOWN, pairs
from verl_pdbg_conf.core.findings import Finding, Severity

FAILED = ("raised", "nothing", "partial")
RULE_OF_KEY = {"task": "msprobe-task", "level": "msprobe-level", "dump_enable": "msprobe-dump-disabled",
               "load": "msprobe-dump-disabled", UNKNOWN: "msprobe-unknown-key"}
_INDEX = re.compile(r"\[\d+\]")


def _key_of(path: str) -> str:
    return _INDEX.sub("", path)


def _show(v) -> str:
    return json.dumps(v, ensure_ascii=False)


def _value_at(config: dict, key: str):
    node = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _unknown_keys(config: dict, props) -> list[str]:
    return [k for k in config if k not in props]


def what_it_does(version: str, case: dict, strict: bool) -> str:
    """One release's outcome on one case, in words."""
    where, msg = case.get("where"), case.get("message", "")
    said = f" ({msg})" if msg else ""
    if case["outcome"] == "nothing":
        return f"msprobe {version} dumps nothing with it"
    if where in ("stop", "reset"):
        return (f"msprobe {version} raises in {'stop()' if where == 'stop' else 'reset_status()'}{said}; "
                "verl does not catch it and the training step fails")
    at = "at construction" if where == "construct" else "in start()" if where == "start" else f"({where})"
    if case["outcome"] == "partial":
        return f"msprobe {version} raises {at}{said} and only part of the stages is dumped"
    if strict:
        return f"msprobe {version} raises {at}{said}; with strict: True the run stops at the first profiled stage"
    return f"msprobe {version} raises {at}{said}; verl swallows it and nothing is dumped"


def judge(findings: list[Finding], doc, config: dict, version: str, strict: bool = False) -> list[Finding]:
    """`findings` (the 26.x rules' verdict on `config`) as release `version` decides them."""
    facts = load(version)
    have = pairs(config)
    applying = [c for c in facts["cases"] if c["pairs"] <= have]
    failing = [c for c in applying if c["outcome"] in FAILED]
    # one root cause, one finding: a failing case that holds a smaller failing case is its echo
    failing = [c for c in failing if not any(o is not c and o["pairs"] < c["pairs"] for o in failing)]
    out = list(findings)
    done_keys: set[str] = set()
    for c in failing:
        key = c["key"]
        if key in done_keys:
            continue
        done_keys.add(key)
        out = _fail_at(out, doc, config, key, c, version, strict)
    dumped_keys = {}
    for c in applying:
        dumped_keys.setdefault(c["key"], []).append(c)
    result = []
    for f in out:
        k = _key_of(f.path)
        if f.severity is Severity.ERROR and k not in done_keys and k in dumped_keys and k != "" and \
                all(c["outcome"] == "dumped" for c in dumped_keys[k]):
            shown = _value_at(config, k)
            f = dataclasses.replace(
                f, severity=Severity.WARNING,
                message=f"msprobe {version} dumps normally with {k} {_show(shown)} (measured on that release); "
                        f"it is an error only on newer msprobe: {f.message}")
        result.append(f)
    return result


def _fail_at(out: list[Finding], doc, config: dict, key: str, case: dict, version: str, strict: bool):
    does = what_it_does(version, case, strict)
    if key == UNKNOWN:
        from verl_pdbg_conf.checks.msprobe_releases.cases import props

        paths = [(k,) for k in _unknown_keys(config, props())] or [()]
    elif key == "":
        paths = [()]
    else:
        paths = [tuple(key.split("."))]
    for path in paths:
        dotted = ".".join(path)
        at = [i for i, f in enumerate(out) if _key_of(f.path) == dotted and f.severity is not Severity.INFO]
        if at:
            i = min(at, key=lambda j: out[j].severity.rank)
            f = out[i]
            out[i] = dataclasses.replace(f, severity=Severity.ERROR,
                                         message=f"{does}. {f.message}" if f.severity is not Severity.ERROR
                                         or case["outcome"] != "raised" else f"{does}; {_plain(f.message)}")
            continue
        value = _value_at(config, dotted) if dotted else None
        what = f"{dotted} {_show(value)}" if dotted else "this config.json"
        out.append(doc.finding(RULE_OF_KEY.get(key, "msprobe-schema"), Severity.ERROR, f"{what}: {does}", path,
                               hint=_hint(key, version), key=key == UNKNOWN))
    return out


def _plain(message: str) -> str:
    """A 26.x message without its own account of the crash (the release's replaces it)."""
    for tail in ("msprobe raises when the debugger is built; verl swallows the error and no stage is dumped",
                 "msprobe raises when the debugger is built, and with strict: True the run stops at the first "
                 "profiled stage"):
        message = message.replace(": " + tail, "").replace(tail, "")
    return message.rstrip(" :;")


def _hint(key: str, version: str) -> str:
    if key == UNKNOWN:
        return f"delete the key: msprobe {version} does not run with it"
    if key in ("", "task", "level"):
        return f"choose a setting msprobe {version} runs, or judge by the msprobe release you will install"
    return f"change or delete \"{key.split('.')[-1]}\"; msprobe {version} does not dump with this value"
