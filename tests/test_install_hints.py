"""Every install line a hint shows names what pyproject's extra pins, on a registry: never this package
(not on PyPI) with an extra, never a plain `pip install torch` (the CUDA build on a CPU machine)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from verl_pdbg_conf import install_hints

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_each_hint_installs_what_its_extra_pins():
    assert install_hints.MATPLOTLIB == f"pip install '{EXTRAS['report'][0]}'"
    assert install_hints.MSPROBE == f"pip install {EXTRAS['runtime'][0]}"
    assert install_hints.TORCH_CPU.endswith("--index-url https://download.pytorch.org/whl/cpu")


def test_no_hint_in_the_package_names_an_extra_of_this_package_or_plain_torch():
    seen, said = 0, []
    for path in (ROOT / "verl_pdbg_conf").rglob("*.py"):
        hints = re.findall(r"pip install[^\"'\n)]*", path.read_text(encoding="utf-8"))
        seen += len(hints)
        said += [(path.name, m) for m in hints if "verl-pdbg-conf[" in m or m.strip() == "pip install torch"]
    assert seen >= 4 and said == []  # the scan reads the hints (install_hints.py's and the runtime's)
