"""Tables of facts read off another project's installed package by a script and shipped beside their reader
(megatron/mbridge-<version>.json, rollout/transformers-<version>.json): the newest one of a kind."""

from __future__ import annotations

import glob
import json
import os
import re


def newest(folder: str, prefix: str) -> dict:
    """The table `<prefix>-<version>.json` in `folder` of the highest version ({} where there is none)."""
    files = sorted(glob.glob(os.path.join(folder, f"{prefix}-*.json")),
                   key=lambda p: [int(x) if x.isdigit() else x for x in re.split(r"[.-]", os.path.basename(p))])
    if not files:
        return {}
    with open(files[-1], encoding="utf-8") as f:
        return json.load(f)
