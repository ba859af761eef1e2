"""The kinds of file the validator reads, told apart before any is parsed: a file of another kind (a
directory, a .py, a package.json) is the user's mistake, one line and exit 2, not a finding against its
content as if it were a config."""

from __future__ import annotations

import json
import os

CONF = (".yaml", ".yml")
MAX_JSON = 1 << 20  # read whole to tell an msprobe config.json (a few hundred bytes) from another JSON
KINDS = "a verl conf (.yaml), an msprobe config.json or a launch script (.sh, or a shell shebang)"


def _msprobe_keys() -> set[str]:
    """msprobe config.json's top-level keys, as the shipped schema names them."""
    here = os.path.join(os.path.dirname(__file__), "schemas", "msprobe-config.schema.json")
    with open(here, encoding="utf-8") as fh:
        return set(json.load(fh).get("properties", {})) - {"$schema"}


def wrong_kind(path: str) -> str | None:
    """Why `path` is not an input the validator reads, in one line; None where it is one. A JSON file that
    does not parse is not refused here: its parse error is a finding at line:column."""
    if os.path.isdir(path):
        return (f"{path} is a directory: give the files in it to check ({KINDS}), "
                f"e.g. {os.path.join(path, '*.yaml')}")
    low = path.lower()
    if low.endswith(CONF):
        return None
    if low.endswith(".json"):
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_JSON:
            return None  # a FIFO, device or huge file: its own finding says so, without reading it here
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            return None
        if isinstance(doc, dict) and doc and not set(doc) & _msprobe_keys():
            return (f"{path} is not an msprobe config.json: none of its keys ({', '.join(sorted(doc)[:4])}"
                    f"{', ...' if len(doc) > 4 else ''}) is msprobe's (task, dump_path, level, ...)")
        return None
    from verl_pdbg_conf.launch_scripts.launch_script import is_launch_script

    if is_launch_script(path):
        return None
    return f"{path} is none of the files the validator reads: give {KINDS}"
