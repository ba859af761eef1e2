"""GitHub Actions workflow commands: one annotation per finding."""

from __future__ import annotations

from verl_pdbg_conf.core.findings import Report

_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def render(report: Report) -> str:
    out = []
    for f in report.sorted():
        msg = f.message + (f" [{f.path}]" if f.path else "") + (f"\nhint: {f.hint}" if f.hint else "")
        props = f"file={_escape_prop(f.file)},line={f.line},col={f.column},title={_escape_prop(f.rule)}"
        out.append(f"::{_LEVEL[f.severity.value]} {props}::{_escape_data(msg)}")
    return "\n".join(out) + ("\n" if out else "")
