"""install() as Ray's worker_process_setup_hook takes effect in a real local Ray worker."""

from __future__ import annotations

import pytest

from runtime_helpers import Scenario, config

pytestmark = pytest.mark.slow


def test_setup_hook_installs_in_ray_worker(tmp_path):
    rec = Scenario(str(tmp_path), "ray", config("l1_statistics"), str(tmp_path / "out")).result(timeout=300)
    assert rec["hook_installed"] is True
    assert rec["verl_imported_by_hook"] is False  # the hook itself stays cheap
    assert rec["module_attr"] == "verl_pdbg_conf.runtime.profiler"
    assert rec["impl"] == "verl_pdbg_conf.runtime.profiler.PrecisionDebuggerProfiler"
