"""What comparing the routing adds to a rollout compare of an MoE model: `verl-pdbg-compare --rollout` on the
same dumps with the routing comparison and without it (routing.routes answering nothing, as for a dense
model), alternated in one process, each the best of --repeat runs. The target: at most 20% more.

Dumps: an MoE run made by tests/make_rollout_dumps.py in the vLLM venv, e.g.

    VLLM_PY=~/.cache/verl-pdbg-conf/venvs/vllm-py3.11.7-<hash>/bin/python
    PYTHONPATH=. $VLLM_PY tests/make_rollout_dumps.py /tmp/moe --arch qwen3_moe --runs same,router
    python bench/rollout_routing_cost.py /tmp/moe/router --repeat 7
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from verl_pdbg_conf.compare.rollout import routing
from verl_pdbg_conf.compare.options import CompareOptions
from verl_pdbg_conf.compare.report.document import as_dict
from verl_pdbg_conf.compare.rollout.steps import compare_rollout

_ROUTES = routing.routes


def _no_routes(*_args, **_kwargs):
    return {}, {}


def _timed(root: str, with_routing: bool) -> tuple[float, dict]:
    routing.routes = _ROUTES if with_routing else _no_routes
    try:
        t0 = time.perf_counter()
        doc = as_dict(compare_rollout(root, options=CompareOptions(jobs=1)))  # in this process, where it is patched
        return time.perf_counter() - t0, doc
    finally:
        routing.routes = _ROUTES


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="an MoE run's save_path (rollout_generate and actor_compute_log_prob)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    _timed(args.root, True)  # imports and file system caches warm for both
    base, full = [], []
    for _ in range(args.repeat):
        base.append(_timed(args.root, False)[0])
        t, doc = _timed(args.root, True)
        full.append(t)
    pair = doc["pairs"][0]
    r = pair.get("routing") or {}
    print(f"{args.root}: {pair['coverage']['tokens_compared']} tokens, {len(r.get('layers') or [])} MoE layers, "
          f"{r.get('routed_differently')} routed differently; status {pair['status']}")
    print(f"without routing: best {min(base) * 1e3:.1f} ms, median {statistics.median(base) * 1e3:.1f} ms")
    print(f"with routing:    best {min(full) * 1e3:.1f} ms, median {statistics.median(full) * 1e3:.1f} ms")
    ratio = min(full) / min(base)
    print(f"ratio {ratio:.3f} (target at most 1.20: {'within' if ratio <= 1.2 else 'OVER'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
