"""SARIF 2.1.0, for code-scanning uploads."""

from __future__ import annotations

import json

from verl_pdbg_conf import __version__
from verl_pdbg_conf.core.findings import Report
from verl_pdbg_conf.core.rules import RULES

_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def render(report: Report) -> str:
    findings = report.sorted()
    used = sorted({f.rule for f in findings})
    results = []
    for f in findings:
        text = f.message + (f" Hint: {f.hint}" if f.hint else "")
        result = {
            "ruleId": f.rule,
            "ruleIndex": used.index(f.rule),
            "level": _LEVEL[f.severity.value],
            "message": {"text": text},
            "locations": [{
                "physicalLocation": {
                    "artifactLocation": {"uri": _uri(f.file)},
                    "region": {"startLine": f.line, "startColumn": f.column},
                },
            }],
        }
        if f.path:
            result["locations"][0]["logicalLocations"] = [{"fullyQualifiedName": f.path, "kind": "member"}]
        results.append(result)
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "verl-pdbg-validate",
                "version": __version__,
                "informationUri": "https://pypi.org/project/verl-pdbg-conf/",
                "rules": [{"id": r, "shortDescription": {"text": RULES.get(r, r)}} for r in used],
            }},
            "results": results,
        }],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _uri(path: str) -> str:
    from urllib.parse import quote

    if path.startswith("<"):
        return quote(path.strip("<>"))
    return quote(path.replace("\\", "/"))
