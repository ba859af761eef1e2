"""`file:line:col: severity rule message`, then the hint, for a terminal."""

from __future__ import annotations

from verl_pdbg_conf.core.findings import Report


def render(report: Report, color: bool = False) -> str:
    lines = []
    for f in report.sorted():
        where = f" [{f.path}]" if f.path else ""
        lines.append(f"{f.file}:{f.line}:{f.column}: {f.severity.value} {f.rule} {f.message}{where}")
        if f.hint:
            lines.append(f"    hint: {f.hint}")
    n = len(report.files)
    lines.append(f"{report.errors} error(s), {report.warnings} warning(s) in {n} file{'s' if n != 1 else ''}")
    if report.msprobe_release:
        lines.append(f"judged as msprobe {report.msprobe_release[0]} ({report.msprobe_release[1]})")
    verls = report.verls()
    if verls:
        lines += [f"judged as {v.label}" for v in verls]
    elif report.verl_release:
        lines.append(f"judged as verl {report.verl_release[0]} ({report.verl_release[1]})")
    return "\n".join(lines) + "\n"
