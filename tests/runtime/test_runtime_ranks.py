"""Two ranks in one gloo group: msprobe's own `rank` filter (config.json `rank: [1]`) decides
which rank dumps; verl keeps its rank gate open for this tool."""

from __future__ import annotations

import os

import pytest

from runtime_helpers import Scenario, config, free_port

pytestmark = pytest.mark.slow


def test_rank_filter_honoured(tmp_path):
    out, port = str(tmp_path / "out"), str(free_port())
    procs = [Scenario(str(tmp_path), "ranks", str(rank), "2", port, config("rank1_statistics"), out, tag=str(rank))
             for rank in (0, 1)]
    results = [p.result() for p in procs]
    for r in results:
        assert r["warnings"] == []
        assert len(r["results"]) == 2 and len(set(r["results"])) == 1
    found = sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs)
    assert found == sorted(f"step_1/{stage}/step0/rank1/{name}"
                           for stage in ("actor_update", "ref_compute_log_prob")
                           for name in ("construct.json", "dump.json", "stack.json"))
