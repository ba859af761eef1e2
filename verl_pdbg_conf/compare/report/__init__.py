"""The one report writer of both compares. A comparison ends as one document, a dict of plain data: the
run compare's (document.as_dict: per pair its status, reason, first divergence, top nodes, coverage,
findings) or the rollout compare's (document.as_dict too, "mode": "rollout": the same pair keys, with per
token and request sections, the routing and a token map). `deliver` writes it the way the
command was asked, for either: JSON as it is, text for the terminal, and one self-contained HTML page.
Every report renders the document only.

- document.py: either compare's document, and its summary.json files under -o
- runs_text.py, runs_html.py: the run compare's pairs as text, and as a page (it plots the layers the
  document holds of its first diverged pairs)
- rollout.py, pictures.py: the rollout compare's pairs as text, and as a page with inline SVG pictures"""

from __future__ import annotations

import json
import os
import sys

ROLLOUT = "rollout"  # the rollout compare's document's "mode"


def text(doc: dict) -> str:
    """The document as text for the terminal."""
    if doc.get("mode") == ROLLOUT:
        from verl_pdbg_conf.compare.report.rollout import render_text
    else:
        from verl_pdbg_conf.compare.report.runs_text import render_text
    return render_text(doc)


def page(doc: dict) -> str:
    """The document as one HTML page."""
    if doc.get("mode") == ROLLOUT:
        from verl_pdbg_conf.compare.report.rollout import render_html

        return render_html(doc)
    from verl_pdbg_conf.compare.report.runs_html import render

    return render(doc)


def deliver(doc: dict, fmt: str, html_path: str | None = None, out=None) -> int:
    """The page written to html_path (checked before any dump was read: output_paths.py), then the document
    as `fmt` (json or text) on stdout; returns the command's exit code, the document's."""
    if html_path:
        from verl_pdbg_conf.compare.output_paths import html_page

        with open(html_path, "w", encoding="utf-8") as fh:
            fh.write(html_page(page(doc)))
        sys.stderr.write(f"HTML report written to {os.path.abspath(html_path)}\n")
    (out or sys.stdout).write(json.dumps(doc, indent=2) + "\n" if fmt == "json" else text(doc))
    return doc["exit_code"]
