"""Can this shipped verl release and this shipped msprobe release run together? Looked up in
`verl-msprobe-pairs.json`, worked out at extraction time by verl_pair_extract.py from
verl-requires.json and each release's facts, so that the validator compiles no requirement
parsing."""

from __future__ import annotations

import functools
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
PAIRS = os.path.join(HERE, "verl-msprobe-pairs.json")


@functools.lru_cache(maxsize=None)
def table() -> dict:
    """{verl version: {msprobe version: [problem sentences]}}; {} when the file is missing."""
    try:
        with open(PAIRS, encoding="utf-8") as f:
            return json.load(f)
    except OSError:
        return {}


def pair_problems(verl_version: str, msprobe_version: str) -> list[str]:
    """What keeps the two releases from running together, in words; [] for a release not in the table."""
    return table().get(verl_version, {}).get(msprobe_version, [])
