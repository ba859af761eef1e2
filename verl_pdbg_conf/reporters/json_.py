"""One JSON object: diagnostics plus a summary."""

from __future__ import annotations

import json

from verl_pdbg_conf.core.findings import Report


def as_dict(report: Report) -> dict:
    out = {
        "diagnostics": [f.to_dict() for f in report.sorted()],
        "summary": {"errors": report.errors, "warnings": report.warnings, "files": len(report.files)},
    }
    if report.verl_release:
        out["verl_release"] = {"version": report.verl_release[0], "chosen": report.verl_release[1]}
    verls = report.verls()
    if verls:
        out["verl"] = verls[0].as_json()
        if len(verls) > 1:  # inputs judged by different verls (scripts of several repositories)
            out["verls"] = [v.as_json() for v in verls]
    if report.msprobe_release:
        out["msprobe"] = {"version": report.msprobe_release[0], "source": report.msprobe_release[1]}
    return out


def render(report: Report) -> str:
    return json.dumps(as_dict(report), indent=2, ensure_ascii=False) + "\n"
