"""What to install, as the hints say it: one line per need, each naming a package its registry holds (this
package is not on PyPI, so never `verl-pdbg-conf[extra]`), with the version pyproject's extra pins. Kept
beside no import of what they install: the validator and the compare's refusals read them."""

from __future__ import annotations

# pyproject's `report` extra
MATPLOTLIB = "pip install 'matplotlib>=3.9'"
# pyproject's `runtime` extra
MSPROBE = "pip install mindstudio-probe==26.2.0"
# torch's CPU build: plain `pip install torch` pulls the CUDA build (gigabytes) on a machine without a GPU
TORCH_CPU = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
