"""The HTML reports as a reader sees them in a real browser (headless Chromium, tests/browser.py): every
picture drawn and inside the window, no "None" where a number or a dash belongs, and the run chart saying
why the errors left of the first divergence are not its cause. Skipped only where chromium is absent;
.ci/run installs it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from browser import CHROMIUM, WIDTH, seen
from compare_cli import run

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (apt-get install chromium; .ci/run does)")


def _no_none(text: str) -> None:
    assert not re.search(r"\bNone\b|\bnan\b", text), [ln for ln in text.splitlines() if "None" in ln or "nan" in ln]


def test_run_report_as_a_reader_sees_it(tmp_path):
    page = tmp_path / "report.html"
    code, _ = run([EXAMPLES / "compare" / "target", EXAMPLES / "compare" / "golden", "--html", page, "-j", "1"])
    assert code == 1
    s = seen(page)
    _no_none(s["text"])
    assert len(s["images"]) == 2  # one chart per diverged pair
    for img in s["images"]:
        (w, h), (left, right, bw, bh) = img["natural"], img["box"]
        assert w > 500 and h > 200 and bw > 500 and right <= WIDTH  # decoded, drawn, not cut off
    assert s["text"].count("first divergence Functional.linear.3.forward.input.1") == 2
    # actor_update's chart has red bars left of the first divergence: the page says why they are not its cause
    assert "Red bars left of the first divergence are not its cause" in s["text"]
    assert "ran after the first divergence (node 50)" in s["text"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="--rollout reads torch files")
def test_rollout_report_as_a_reader_sees_it(tmp_path):
    page = tmp_path / "rollout.html"
    code, _ = run(["--rollout", EXAMPLES / "rollout", "--html", page])
    assert code == 1
    s = seen(page)
    _no_none(s["text"])
    (svg,) = s["svgs"]
    assert svg["marks"] > 10 and svg["box"][2] > 300 and svg["box"][1] <= s["width"]
    prompts = [t for t in s["titles"] if "prompt position" in t]
    assert prompts and not any("None" in t for t in s["titles"])  # prompt positions: said, not "gap None"
    assert "grey: a prompt position" in s["text"]
