"""TARGET and GOLDEN told apart from what is no run at all, before any dump is read: a path that does not
exist, a file that is no msprobe dump (a YAML, a binary), one folder given twice. Each is the user's
mistake (UsageError, exit 2), not a pair that could not be compared (exit 3). A file named dump.json is
always taken as a dump: one that is corrupt is that pair's finding, as the compare's exit codes promise."""

from __future__ import annotations

import os

from verl_pdbg_conf.compare.verdict import UsageError

DUMP = "dump.json"
HEAD = 4096  # bytes read of a file given as a dump: its header, where msprobe writes task and level
DUMP_KEYS = (b'"task"', b'"level"', b'"data"')  # a dump.json's first keys, whatever the msprobe release


def _looks_like_dump(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEAD)
    except OSError:
        return False
    return b"\0" not in head and head.lstrip().startswith(b"{") and any(k in head for k in DUMP_KEYS)


def check_inputs(paths: tuple[str, ...]) -> None:
    """The command's check: UsageError, in one line, for the first path that cannot be a run's dumps, and
    for one folder given as both TARGET and GOLDEN."""
    check_kinds(paths)
    if len(paths) == 2 and os.path.realpath(paths[0]) == os.path.realpath(paths[1]):
        raise UsageError(f"TARGET and GOLDEN are the same path ({paths[0]}): a run against itself is always "
                         "'same'; give two runs, or one run with --ranks to compare its ranks")


def check_kinds(paths: tuple[str, ...]) -> None:
    """The API's check (compare_runs): every path exists and can be a run's dumps. A run against itself is
    the command's refusal only: the API may mean it (a test of the reader)."""
    for p in paths:
        if not os.path.exists(p):
            raise UsageError(f"{p}: no such file or directory")
        if os.path.isfile(p) and os.path.basename(p) != DUMP and not _looks_like_dump(p):
            raise UsageError(f"{p} is not an msprobe dump: give a save_path, a step_N/<stage> directory or a "
                             f"{DUMP} msprobe wrote")


def refuse_swallowed(values: dict[str, str | None]) -> None:
    """UsageError where an option that takes no path (option -> the value argparse gave it, like --ray's
    optional ADDRESS) took a path that exists: it swallowed a run given after it."""
    for option, value in values.items():
        if value and os.path.exists(value) and value != "auto":
            raise UsageError(f"{option} took {value} as its value, and that is a path: put {option} after the runs "
                             f"(or give its value: {option} auto)" if option == "--ray" else
                             f"{option} took {value} as its value, and that is a path: put {option} after the runs")
