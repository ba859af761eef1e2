"""The judging msprobe release decides the verdicts: the rules of checks/msprobe.py are
msprobe 26.x's; here each config.json is matched against what the judging release really did
on the case matrix (cases.py, measured by extract.py).

- The cases that apply are those whose pairs are all the config's, the most specific of them.
- An error of the 26.x rules at a key where every applying case of that key dumped normally
  on this release becomes a warning that says so.
- When no error is left, an applying case that raised, dumped nothing or dumped only part is
  an error at the case's key, saying what that release does; a finding already at that key
  is raised to an error (its rule kept), not doubled. While the file has an error, that one
  root cause is reported alone.
- The release's vocabulary (vocab.py) comes first: a key it does not read is ignored whatever
  its value (any finding there a warning naming the release); a key it reads and checks, where
  no measured case applies, is judged by its own construction checks. Failures that only say
  the case ran without an NPU (nan_check, L2) do not count."""

from __future__ import annotations

import json
import re

from verl_pdbg_conf.checks.msprobe_releases.case_index import cases_for
from verl_pdbg_conf.checks.msprobe_releases.shapes import UNKNOWN, pairs
from verl_pdbg_conf.checks.msprobe_releases.vocab import failing_check, reads, value_specs, vocabulary
from verl_pdbg_conf.core.findings import Finding, Severity

FAILED = ("raised", "nothing", "partial")
NPU_ONLY = frozenset({("task", "=nan_check"), ("level", "=L2")})
RULE_OF_KEY = {"task": "msprobe-task", "level": "msprobe-level", "dump_enable": "msprobe-dump-disabled",
               "load": "msprobe-dump-disabled", UNKNOWN: "msprobe-unknown-key"}
_INDEX = re.compile(r"\[\d+\]")
# Errors about what verl makes of a setting, not whether msprobe runs it: the release data
# cannot lift them (dump_path: msprobe dumps, but to verl's path, and the named one stays empty).
VERL_RULES = {"msprobe-dump-path"}


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


def _tidy(msg: str) -> str:
    """msprobe's message without its empty exception wrapper ("(MsprobeException: [msprobe] 无效参数：)")."""
    msg = re.sub(r"\s*\(\w+: \[msprobe\] [^()]*：\)$", "", msg)
    return re.sub(r"^\w*Exception: \[msprobe\] [^：]*：", "", msg).strip()


def what_it_does(version: str, case: dict, strict: bool) -> str:
    """One release's outcome on one case, in words."""
    where, msg = case.get("where"), _tidy(case.get("message", ""))
    said = f" ({msg})" if msg else ""
    if case["outcome"] == "nothing":
        return f"msprobe {version} dumps nothing with it"
    if where == "driver":
        return (f"msprobe {version} raises while the model runs{said}; verl does not catch it and the training "
                "step fails")
    if where in ("stop", "reset"):
        return (f"msprobe {version} raises in {'stop()' if where == 'stop' else 'reset_status()'}{said}; "
                "verl does not catch it and the training step fails")
    at = "at construction" if where == "construct" else "in start()" if where == "start" else f"({where})"
    if case["outcome"] == "partial":
        return f"msprobe {version} raises {at}{said} and only part of the stages is dumped"
    if strict:
        return f"msprobe {version} raises {at}{said}; with strict: True the run stops at the first profiled stage"
    return f"msprobe {version} raises {at}{said}; verl swallows it and nothing is dumped"


def applying_cases(facts: dict, config: dict) -> list[dict]:
    """The most specific cases that apply to `config`.

    A case applies when all its pairs, msprobe's defaults for task and level included, are the
    config's. Where no case of a key applies so, a case applies that holds at least the pairs it
    sets itself (a case measured at the default level stands for the other levels too). Of
    those, a case whose pairs another applying case holds, and more, gives way to it."""
    have = pairs(config, value_specs(facts["version"]))
    strict = [c for c in facts["cases"] if c["strict"] <= have]
    keys = {c["key"] for c in strict}
    loose = [dict(c, loose=True) for c in facts["cases"] if c["key"] not in keys and c["pairs"] <= have]
    apply = strict + loose
    return [c for c in apply if not any(o["pairs"] > c["pairs"] or o["strict"] > c["strict"] for o in apply)]


def _dumps_with(cases: list[dict] | None, f: Finding) -> bool:
    """The release dumped normally in every applying case of the finding's key. A cross-field
    error is lifted only by a case measured in the config's own task and level."""
    if not cases or not all(c["outcome"] == "dumped" for c in cases):
        return False
    return f.rule != "msprobe-cross-field" or not any(c.get("loose") for c in cases)


def _measured_off_npu(case: dict) -> bool:
    """A failure that only says the case ran on CPU: NPU-only settings (task nan_check, level L2)
    dump nothing or raise for want of torch_npu here, and may well dump on Ascend."""
    if not case["pairs"] & NPU_ONLY:
        return False
    return case["outcome"] == "nothing" or "npu" in case.get("message", "").lower()


def _leaf_paths(config: dict, vocab: dict) -> list[str]:
    """The paths of `config` this release reads: top-level keys, then the keys of the parts it reads."""
    out = []
    for k, v in config.items():
        if not reads(vocab, config, k):
            continue
        out.append(k)
        if isinstance(v, dict):
            out += [f"{k}.{sk}" for sk in v if reads(vocab, config, f"{k}.{sk}")]
    return out


def _check_cases(vocab: dict, config: dict, cases: list[dict]) -> list[dict]:
    """The release's own construction checks that fire on this config, as cases, at the keys no
    measured case applies to. A check that passes proves nothing: construction checks more than
    the config classes do (scope windows, L2, async_dump), and those only the measured cases see."""
    measured = {c["key"] for c in cases}
    fired = []
    for path in _leaf_paths(config, vocab):
        if path in measured:
            continue
        check, _ = failing_check(vocab, config, path)
        if check is not None:
            fired.append({"key": path, "outcome": "raised", "where": "construct", "message": check["message"],
                          "pairs": frozenset(), "strict": frozenset(), "check": check["test"]})
    return fired


def _read_key(path: str) -> str:
    """The key a finding's path is read as: a top-level key, or a section's key ("statistics.slice")."""
    parts = path.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else path


def _ignored(f: Finding, k: str, version: str) -> Finding:
    """A finding at a key this release does not read: the release ignores it, whatever its value."""
    k = _read_key(k)
    said = f.message if f.rule == "msprobe-unknown-key" else f"an error on releases that read it: {f.message}"
    return f.replace(severity=Severity.WARNING,
                               message=f"msprobe {version} does not read '{k}': it is ignored whatever its value "
                                       f"({said})",
                               hint=f"delete \"{k.split('.')[-1]}\" unless a release that reads it will run; "
                                    f"msprobe {version} does not use it")


def _read_here(f: Finding, k: str, version: str) -> Finding:
    """An "unknown key" of the newest rules that this release does read."""
    return f.replace(message=f"'{k}' is read by msprobe {version} (the newest rules do not know it: "
                                          f"{f.message})", hint=f"nothing to change for msprobe {version}; releases "
                                                                f"that do not read it ignore it")


def judge(findings: list[Finding], doc, config: dict, version: str, strict: bool = False) -> list[Finding]:
    """`findings` (the 26.x rules' verdict on `config`) as release `version` decides them."""
    cases = applying_cases({"version": version, "cases": cases_for(version, config)}, config)  # only those that can apply
    vocab = vocabulary(version)
    failing = [c for c in cases if c["outcome"] in FAILED and not _measured_off_npu(c)]
    if vocab:
        failing = [c for c in failing if c["key"] in ("", UNKNOWN) or reads(vocab, config, c["key"])]
        failing += [c for c in _check_cases(vocab, config, cases) if c["key"] not in {x["key"] for x in failing}]
    by_key: dict[str, list[dict]] = {}
    for c in cases:
        by_key.setdefault(c["key"], []).append(c)
    out = []
    for f in findings:
        k = _key_of(f.path)
        if vocab and f.severity is not Severity.INFO and f.rule not in VERL_RULES and not reads(vocab, config, k):
            f = _ignored(f, k, version)
        elif vocab and f.rule == "msprobe-unknown-key" and k and k in {c["key"] for c in failing}:
            continue  # the release reads it and fails on it: that finding is made below, in its words
        elif vocab and f.rule == "msprobe-unknown-key" and k:
            f = _read_here(f, k, version)  # read (the branch above: not read), and no failure at it
        elif f.severity is Severity.ERROR and not failing and f.rule not in VERL_RULES and _dumps_with(by_key.get(k), f):
            f = f.replace(
                severity=Severity.WARNING,
                message=f"msprobe {version} dumps normally with {k} {_show(_value_at(config, k))} (measured on that "
                        f"release); it is an error only on other msprobe releases: {f.message}")
        elif f.severity is Severity.ERROR and failing:
            f = f.replace(message=f.message.replace("msprobe raises when", f"msprobe {version} raises when"))
        out.append(f)
    if any(f.severity is Severity.ERROR for f in out):
        return out  # the file already fails; one root cause, one finding
    done: set[str] = set()
    for c in failing:
        if c["key"] not in done:
            done.add(c["key"])
            out = _fail_at(out, doc, config, c["key"], c, version, strict)
    return out


def _fail_at(out: list[Finding], doc, config: dict, key: str, case: dict, version: str, strict: bool):
    does = what_it_does(version, case, strict)
    if key == UNKNOWN:
        from verl_pdbg_conf.checks.msprobe_releases.shapes import props

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
            out[i] = f.replace(severity=Severity.ERROR, message=f"{does}. {f.message}")
            continue
        value = _value_at(config, dotted) if dotted else None
        what = f"{dotted} {_show(value)}" if dotted else "this config.json"
        out.append(doc.finding(RULE_OF_KEY.get(key, "msprobe-schema"), Severity.ERROR, f"{what}: {does}", path,
                               hint=_hint(key, version), key=key == UNKNOWN))
    return out


def _hint(key: str, version: str) -> str:
    if key == UNKNOWN:
        return f"delete the key: msprobe {version} does not run with it"
    if key in ("", "task", "level"):
        return f"choose a setting msprobe {version} runs, or judge by the msprobe release you will install"
    return f"change or delete \"{key.split('.')[-1]}\"; msprobe {version} does not dump with this value"
