"""What a verl copy without precision_debugger support does with the guide's settings, read
off that copy's extracted facts (its config tree and its profiler code), never a version table:

- no `global_profiler` in its ppo_trainer: Hydra stops at start-up on the first override of
  it (and of a role `profiler` section it lacks); a `+global_profiler...` key is added and
  ignored;
- a `global_profiler` but no precision_debugger tool in its DistProfiler: the tool is not one
  it dispatches on, so it does what its code does with an unknown tool (a no-op profiler:
  nothing is collected, silently).

Either way there is one root cause, so one error, at the first line that asks for the profiler."""

from __future__ import annotations

import re

from verl_pdbg_conf.core.findings import Finding, Severity
from verl_pdbg_conf.verl_facts.stages import TOOL

RULE = "verl-no-backend"
E = Severity.ERROR
_OVERRIDE = re.compile(r"^override `([^`]*)` does not compose: (.*)$", re.S)
_UNKNOWN_TOOL = {
    "no-op": "its DistProfiler falls back to a no-op profiler for a tool it does not know: the run starts and "
             "collects nothing, silently",
    "raise": "its DistProfiler raises for a tool it does not know: the workers fail when they build their profiler",
    "nothing": "its DistProfiler builds no profiler for a tool it does not know: the run collects nothing",
}


def with_backend() -> str:
    """The shipped releases whose facts have the backend (read off the facts, not typed here)."""
    from verl_pdbg_conf.verl_facts import releases

    have = [v for v in releases.shipped() if releases.load(v)["stages"].get("backend")]
    return "a verl with the precision_debugger backend" + (f" ({', '.join(have)})" if have else "")


def unknown_tool_effect(target) -> str:
    return _UNKNOWN_TOOL.get(target.unknown_tool or "", "what its DistProfiler does with a tool it does not "
                             "know could not be read from its code")


def lacks_backend(target) -> bool:
    """No precision_debugger in this verl: no backend module, or a DistProfiler that does not
    dispatch on the tool (read off its code)."""
    return not target.backend or target.global_profiler is False or (bool(target.tools) and TOOL not in target.tools)


def _profiler_key(key: str, target) -> bool:
    """An override key this copy refuses because it has no profiler config for it."""
    bare = key.lstrip("+~")
    if bare == "global_profiler" or bare.startswith("global_profiler."):
        return target.global_profiler is False
    parts = bare.split(".")
    if "profiler" in parts:
        section = ".".join(parts[:parts.index("profiler") + 1])
        return section not in target.role_profilers
    return False


def one_per_cause(findings: list[Finding], target) -> list[Finding]:
    """Replace the override failures and findings that all come from a copy without a
    `global_profiler` by one error at the first of them."""
    if target.global_profiler is not False:
        return findings
    caused, rest = [], []
    for f in findings:
        m = _OVERRIDE.match(f.message) if f.rule == "override" else None
        if f.rule == RULE or (m and _profiler_key(f.path or m.group(1).split("=")[0], target)):
            caused.append(f)
        else:
            rest.append(f)
    if not caused:
        return findings
    caused.sort(key=lambda f: (f.file, f.line, f.column))
    # at the line that asks for the tool when there is one, else at the first
    first = next((f for f in caused if (f.path or "").lstrip("+~") == "global_profiler.tool"), caused[0])
    caused.remove(first)
    caused.insert(0, first)
    m = _OVERRIDE.match(first.message)
    what = f"`{m.group(1)}`: {m.group(2)}" if m else "its profiler settings"
    more = [f for f in caused[1:] if f.rule == "override"]
    also = f"; the same for {len(more)} more profiler override(s) (line {', '.join(str(f.line) for f in more)})" \
        if more else ""
    msg = (f"{target.label} has no precision_debugger profiler: its ppo_trainer has no `global_profiler` "
           f"section, so Hydra stops at start-up on {what}{also}")
    if first.rule == RULE:
        msg = first.message
    return rest + [Finding(RULE, E, msg, first.file, first.line, first.column, first.path or "global_profiler",
                           hint=f"profile with {with_backend()}, or drop the profiler overrides for this copy")]
