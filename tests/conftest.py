"""The test session composes afresh: the on-disk composition cache (verl_facts/disk_cache.py) is
off unless a test turns it on with its own directory (tests/test_disk_cache.py). fsdp2_runs: two
identical 2-rank FSDP2 runs of verl's real workers, made once per session for the tests that ask."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("VERL_PDBG_CONF_CACHE", "off")

_REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def fsdp2_runs(tmp_path_factory) -> tuple[Path, Path]:
    """Two identical runs of verl's real workers on 2 gloo ranks (FSDP2), L1 statistics, global step 1,
    made once per session by bench/real_workers.py, both at once (4 processes). Their save_paths."""
    out = tmp_path_factory.mktemp("fsdp2_runs")
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(_REPO), os.environ.get("PYTHONPATH")) if p))
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, str(_REPO / "bench" / "real_workers.py"), "--out", str(out / name),
                               "--nproc", "2", "--steps", "1", "--level", "L1"], cwd=out, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in "ab"]
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"exit {proc.returncode}\n{stdout[-3000:]}{stderr[-3000:]}"
        result = json.loads(stdout.strip().splitlines()[-1])
        assert result["nproc"] == 2 and not result["errors"], result["errors"]
    sys.stderr.write(f"\nfsdp2_runs: two 2-rank runs in {time.perf_counter() - t0:.0f} s\n")
    return out / "a", out / "b"
