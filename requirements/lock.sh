#!/usr/bin/env bash
# Regenerates requirements/test.lock: every package of the test environment pinned, so that
# `pip install -c requirements/test.lock ".[test]"` resolves at once. Needs uv (pip install uv).
# The CPU build of torch comes from pip's find-links on this machine image (/opt/wheels); elsewhere
# pass --find-links or --extra-index-url https://download.pytorch.org/whl/cpu in UV_EXTRA_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
uv pip compile pyproject.toml --extra test \
    --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
    --find-links "${TORCH_FIND_LINKS:-/opt/wheels}" --index-strategy unsafe-best-match \
    -c requirements/cpu-torch.in ${UV_EXTRA_ARGS:-} \
    --custom-compile-command "bash requirements/lock.sh" \
    -o requirements/test.lock "$@"
if grep -qiE '^(nvidia-|cuda-)' requirements/test.lock; then
    echo "requirements/test.lock pins CUDA packages: the CPU torch build was not taken" >&2; exit 1
fi
