#!/usr/bin/env bash
# The declared ranges are honest at their low end: a lowest-direct resolution (uv) of the test extra,
# every direct dependency at the lowest version pyproject.toml allows (torch held at the CPU build),
# installed in a fresh venv, then the whole test suite. Needs uv (pip install uv).
# Pass pytest arguments to run a part of the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$(mktemp -d "${TMPDIR:-/tmp}/verl-pdbg-lowest.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
uv pip compile pyproject.toml --extra test --resolution lowest-direct \
    --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
    --find-links "${TORCH_FIND_LINKS:-/opt/wheels}" --index-strategy unsafe-best-match \
    -c requirements/cpu-torch.in ${UV_EXTRA_ARGS:-} --no-header --quiet -o "$WORK/lowest.txt"
echo "lowest-direct pins of the direct dependencies:"
python3 - "$WORK/lowest.txt" <<'PY'
import re, sys, tomllib
proj = tomllib.load(open("pyproject.toml", "rb"))["project"]
direct = {re.split(r"[<>=!~\[ ;]", r, 1)[0].lower().replace("_", "-")
          for rs in [proj["dependencies"], *proj["optional-dependencies"].values()] for r in rs}
for line in open(sys.argv[1]):
    m = re.match(r"([A-Za-z0-9_.\-]+)==(\S+)", line)
    if m and m.group(1).lower().replace("_", "-") in direct:
        print(f"  {m.group(1)}=={m.group(2)}")
PY
"$(command -v python3.11 || command -v python3)" -m venv "$WORK/venv"
. "$WORK/venv/bin/activate"
unset PYTHONPATH
pip install -q -U pip && pip install -q -r "$WORK/lowest.txt" && pip install -q --no-deps . && python -m pytest -q -p no:cacheprovider "$@"
