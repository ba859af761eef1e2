"""msprobe's own compare, run for its CSV only (--msprobe-csv): in a worker process through msprobe's CLI
code, or on a Ray node (its CSV sent back as bytes); and, when it writes nothing, which dump is at fault."""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import tempfile

from verl_pdbg_conf.core.findings import Finding
from verl_pdbg_conf.compare.pairs import E, W, Pair, RankDump
from verl_pdbg_conf.compare.verdict import finding


def msprobe_compare(job: tuple[str, str, str]) -> dict:
    """In a worker process: `msprobe compare -tp T -gp G -o OUT` through msprobe's own CLI code, its
    output to OUT/msprobe.log. Returns the result file it wrote, or the error."""
    tp, gp, out = job
    log = os.path.join(out, "msprobe.log")
    before = set(os.listdir(out))
    error = ""
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        import argparse
        import sys

        import msprobe

        if "fork" in multiprocessing.get_all_start_methods() and multiprocessing.get_start_method() != "fork":
            # This worker was spawned and inherited "spawn"; msprobe's tensor compare starts its own pool,
            # as under its command (fork on Linux), not one that imports torch and msprobe again per pair.
            multiprocessing.set_start_method("fork", force=True)
        extra = os.path.join(os.path.dirname(msprobe.__file__), "msaccucmp")
        if extra not in sys.path:
            sys.path.append(extra)  # as msprobe's own command does before importing its compare code
        from msprobe.core.compare.compare_cli import compare_cli
        from msprobe.core.compare.utils import _compare_parser

        argv = ["-tp", tp, "-gp", gp, "-o", out]
        parser = argparse.ArgumentParser(prog="msprobe compare")
        _compare_parser(parser)
        compare_cli(parser.parse_args(argv), argv)
    except BaseException as e:  # msprobe raises CompareException, or exits: report it, keep the worker
        error = f"{type(e).__name__}: {e}".strip()
    finally:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)
    new = sorted(f for f in os.listdir(out) if f not in before and f.startswith("compare_result") and
                 f.endswith(".csv"))
    return {"result": os.path.join(out, new[-1]) if new else None, "error": error, "log": log}


def _log_tail(log: str | None, n: int = 3) -> str:
    """msprobe's last errors and warnings (not its CANN complaint, which every CPU run logs)."""
    try:
        with open(log, encoding="utf-8", errors="replace") as fh:
            lines = [ln.strip() for ln in fh if ("[ERROR]" in ln or "[WARNING]" in ln) and "CANN" not in ln]
    except (OSError, TypeError):
        return ""
    return " | ".join(re.sub(r"^.*?\[(ERROR|WARNING)\]\s*", r"\1: ", ln) for ln in lines[-n:])


def precheck(side: RankDump) -> Finding | None:
    """A dump.json msprobe should not even be given: absent or empty."""
    if not os.path.isfile(side.path):
        return finding("dump-missing", E, f"{side.label}: no dump.json", os.path.dirname(side.path),
                        "the session was started but never stopped (a crash inside the stage?)")
    if os.path.getsize(side.path) == 0:
        return finding("dump-empty", E, f"{side.file_label} is empty (0 bytes)", side.path,
                        "the writer was interrupted or the stage collected nothing; collect it again")
    return None


def diagnose(pair: Pair, outcome: dict) -> Finding:
    """msprobe wrote no result: say which dump.json is at fault, or quote msprobe; a warning (the engine's
    verdict stands, only msprobe's CSV is missing)."""
    import json

    for side in (pair.target, pair.golden):
        try:
            with open(side.path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except ValueError as e:
            return finding("dump-corrupt", W, f"{side.file_label} is not valid JSON ({e.msg} at line "
                            f"{e.lineno if hasattr(e, 'lineno') else '?'}): truncated or overwritten", side.path,
                            "the writer was interrupted (a killed worker, a full disk); collect this stage again")
        except OSError as e:
            return finding("dump-missing", W, f"{side.file_label} cannot be read ({e.strerror})", side.path)
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, dict):
            return finding("dump-corrupt", W, f"{side.file_label} has no \"data\" mapping: not an msprobe "
                            "dump", side.path)
        if not data:
            return finding("dump-empty", W, f"{side.file_label} holds no records", side.path,
                            "the stage ran no hooked API or module (config.json scope/list/level, or the stage's "
                            "model was not resolved)")
    said = outcome.get("log_tail") or _log_tail(outcome.get("log")) or outcome.get("error") or "no result file"
    return finding("compare-failed", W, f"{pair.label}: msprobe compare wrote no result: {said}",
                    outcome.get("log") or pair.target.path,
                    "the two dumps may be of different tasks or levels, or hold no call in common; "
                    "see msprobe.log beside it")


def msprobe_remote(job: tuple[str, str]) -> dict:
    """On a Ray node: msprobe's own compare into a temporary directory there; its CSV comes back as bytes
    (the driver writes it), with the tail of msprobe's log."""
    out = tempfile.mkdtemp(prefix="verl-pdbg-csv-")
    try:
        outcome = msprobe_compare((job[0], job[1], out))
        outcome["log_tail"] = _log_tail(outcome["log"])
        if outcome["result"]:
            with open(outcome["result"], "rb") as fh:
                outcome["csv"] = (os.path.basename(outcome["result"]), fh.read())
        outcome["result"] = outcome["log"] = None
        return outcome
    finally:
        shutil.rmtree(out, ignore_errors=True)


def csv_written(p: Pair, outcome: dict) -> dict:
    if outcome.get("csv"):
        name, data = outcome.pop("csv")
        outcome["result"] = os.path.join(p.out_dir, name)
        with open(outcome["result"], "wb") as fh:
            fh.write(data)
    return outcome
