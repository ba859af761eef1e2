"""verl-pdbg-compare's main() run in this process with its stdout captured: the compare tests' one way to call
the command as a user does and read what it prints."""

from __future__ import annotations

import contextlib
import io
import json


def run(argv) -> tuple[int, str]:
    from verl_pdbg_conf.compare.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main([str(a) for a in argv])
    return code, buf.getvalue()


def run_json(*argv) -> tuple[int, dict]:
    """(exit code, the JSON report) of `verl-pdbg-compare ARGV --format json`."""
    code, out = run([*argv, "--format", "json"])
    return code, json.loads(out)
