"""rollout_generate in vLLM's own processes: the multiprocess engine (a front end, an EngineCore process and a
worker process, as verl's rollout servers run it) with this package's vLLM plugin registered and switched on
by VERL_PDBG_CONF_ROLLOUT (steps [2]), and start_profile / stop_profile around generation. Without PREFIX,
start_profile() takes no argument, as verl's trainer calls it through its rollout server on a profiled step:
the plugin then numbers the step from `steps`, so the rollout and the actor are written under step_2. Runs
in the vllm venv:

    python rollout_plugin_run.py CHECKPOINT SAVE_PATH CONFIG_JSON [PREFIX]

The same process then runs the actor's log-prob forward on the rollout's tokens (make_rollout_dumps.actor),
into the same save_path, so that the two can be compared. The plugin is registered as an installed package
would register it: a dist-info directory with the entry
point on PYTHONPATH (made here, in a temporary directory), so the worker processes vLLM spawns find it."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP = 2  # not the first session's number: the plugin must take it from `steps`
PROMPTS = ([5, 17, 33, 8, 91, 12, 40], [7, 3, 101, 56], [11, 23, 5, 77, 120, 9, 14, 60, 2, 31, 44])


def entry_point_dir() -> str:
    d = tempfile.mkdtemp(prefix="pdbg-plugin-")
    info = os.path.join(d, "verl_pdbg_conf_rollout_plugin-0.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as fh:
        fh.write("Metadata-Version: 2.1\nName: verl-pdbg-conf-rollout-plugin\nVersion: 0\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as fh:
        fh.write("[vllm.general_plugins]\nverl_pdbg_conf_rollout = verl_pdbg_conf.runtime.vllm_plugin:register\n")
    return d


def main(argv=None) -> int:
    ckpt, save_path, config = (argv or sys.argv[1:])[:3]
    prefix = (argv or sys.argv[1:])[3] if len(argv or sys.argv[1:]) > 3 else None
    os.environ["PYTHONPATH"] = os.pathsep.join([entry_point_dir(), ROOT, os.environ.get("PYTHONPATH", "")])
    sys.path[:0] = os.environ["PYTHONPATH"].split(os.pathsep)[:2]
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ["VERL_PDBG_CONF_ROLLOUT"] = json.dumps({"config_path": config, "save_path": save_path, "steps": [STEP]})
    from vllm import LLM, SamplingParams

    llm = LLM(ckpt, dtype="float32", enforce_eager=True, max_model_len=128, skip_tokenizer_init=True, seed=0)
    params = SamplingParams(max_tokens=3, temperature=1.0, seed=0, logprobs=0, ignore_eos=True)
    llm.generate([{"prompt_token_ids": list(p)} for p in PROMPTS], params, use_tqdm=False)  # not profiled
    if prefix:
        llm.start_profile(prefix)
    else:
        llm.start_profile()
    outs = llm.generate([{"prompt_token_ids": list(p)} for p in PROMPTS], params, use_tqdm=False)
    llm.stop_profile()
    samples = [{"prompt": list(p), "response": list(o.outputs[0].token_ids),
                "logprobs": [next(iter(d.values())).logprob for d in o.outputs[0].logprobs]}
               for p, o in zip(PROMPTS, outs)]
    del llm  # the engine's processes end before the actor runs in this one
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_rollout_dumps

    step = int(re.findall(r"\d+", prefix)[-1]) if prefix else STEP
    make_rollout_dumps.actor(os.path.dirname(save_path), os.path.basename(save_path), {}, ckpt, config, samples, step)
    print(json.dumps(samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
