"""Start-up stays light: validating a conf and its config.json (and planning it) in a fresh process
imports none of torch, msprobe, verl, hydra or ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EX = REPO / "tests" / "examples" / "verl"
HEAVY = ("torch", "msprobe", "verl", "hydra", "ray")

PROBE = """
import json, sys
from verl_pdbg_conf.cli import main
code = main(sys.argv[1:])
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(%r))
sys.stderr.write('\\nIMPORTS ' + json.dumps({'code': code, 'heavy': heavy}) + '\\n')
""" % (HEAVY,)


def probe(*argv: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    env.pop("GITHUB_ACTIONS", None)
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=EX, env=env, capture_output=True, text=True,
                          timeout=120)
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("IMPORTS ")]
    assert line, proc.stdout + proc.stderr
    return json.loads(line[-1][len("IMPORTS "):])


@pytest.mark.parametrize("argv", [
    ("positive/guide_minimal.yaml", "configs/statistics_l1.json"),
    ("positive/interpolated.yaml",),
    ("--plan", "positive/guide_minimal.yaml"),
    ("--format", "sarif", "negative/stage-unknown__typo.yaml"),
], ids=["conf+config.json", "interpolations", "plan", "sarif"])
def test_no_heavy_imports(argv):
    got = probe(*argv)
    assert got["code"] in (0, 1)
    assert got["heavy"] == [], f"imported {got['heavy']}"
