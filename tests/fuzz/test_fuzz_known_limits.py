"""What the fuzz campaign found in files outside the loaders and the verl profiler checks,
kept as regression tests now that each is fixed. (Time limits of interpolation.py are reported, not
tested here: the cases that show them take many seconds and depend on the machine.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time


from verl_pdbg_conf.context import Options
from verl_pdbg_conf.core.findings import Severity
from verl_pdbg_conf.validate import validate_files

GP = "global_profiler:\n  tool: precision_debugger\n  steps: [1]\n"
BOUND = 2.0  # seconds per file, as in fuzz_harness.TIME_LIMIT


def timed(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    t = time.perf_counter()
    report = validate_files([str(p)], Options(base_dir=str(tmp_path)))
    return time.perf_counter() - t, report


def test_duplicate_key_in_a_verl_conf_is_an_error(tmp_path):
    _, report = timed(tmp_path, "c.yaml", GP + "  tool: nsys\n")
    dup = [f for f in report.findings if f.rule == "duplicate-key"]
    assert dup and dup[0].severity is Severity.ERROR


def test_cli_renders_a_non_utf8_file_name(tmp_path):
    name = os.fsdecode(b"\xff.yaml")
    (tmp_path / name).write_text("x: 1\n")
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    r = subprocess.run([sys.executable, "-m", "verl_pdbg_conf", name], cwd=tmp_path, env=env, capture_output=True,
                       timeout=600)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr[-500:]
