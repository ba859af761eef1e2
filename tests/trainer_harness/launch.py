"""One verl 0.9.1 training run on CPU, as a user launches it: `python -m verl.trainer.main_ppo OVERRIDES
+profiler=GROUP` in the trainer venv (requirements/venvs/vllm.in), then what it wrote, read back.

What is ours in the run: the CPU platform plugin (verl_cpu_platform.py, through VERL_USE_EXTERNAL_MODULES), the
tiny model and data (tiny.py), and this package itself, installed from the source tree as a wheel into a
directory on PYTHONPATH (its console scripts, its vLLM plugin entry point and its Hydra search path, as
`pip install` gives a user). Everything else is verl's, Ray's and vLLM's own."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HARNESS = Path(__file__).resolve().parent
ROOT = HARNESS.parents[1]
MARKER = "verl_trainer_run.json"  # what makes --out a directory this harness wrote
SAVE_PATH = "outputs/precision_debugger"  # the groups' own save_path, relative to the launch directory
BROKEN_CONFIG = {"task": "statistics", "level": "L7", "rank": [], "step": []}  # msprobe refuses level L7
STAGE_TIMERS = {  # verl's timing_s/<key> -> the stage it times
    "gen": "rollout_generate", "old_log_prob": "actor_compute_log_prob", "ref": "ref_compute_log_prob",
    "values": "compute_values", "update_critic": "critic_update", "update_actor": "actor_update"}


@dataclasses.dataclass
class Spec:
    group: str | None = "precision_debugger_l1"  # None: no profiler group (a baseline run)
    model: str = "qwen2"
    layers: int = 2  # the tiny model's decoder layers
    steps: int = 2
    nproc: int = 1
    micro_batch: int = 2  # rows per call of the actor's, ref's and critic's forward and update, per rank
    rollout_dtype: str = "float32"
    plant_rollout_layer: int | None = None
    plant_from_step: int = 1
    plant_actor_layer: int | None = None  # fault injection: the actor's weight, after step 1's rollout
    remove_padding: bool = False
    greedy: bool = False  # rollout.top_k=1: two runs sample the same responses
    strict: bool | None = None  # None: the group's own setting
    broken_config: bool = False
    no_msprobe: bool = False
    unresolved_stage: str | None = None  # fault injection: the runtime finds no model for this stage
    algo: str | None = None  # grpo | ppo (a critic); None: ppo for the _critic groups, else grpo
    profile_steps: list[int] | None = None  # None: the group's own steps
    extra: list[str] = dataclasses.field(default_factory=list)

    @property
    def algorithm(self) -> str:
        return self.algo or ("ppo" if self.group and self.group.endswith("_critic") else "grpo")


def overrides(spec: Spec, data: dict, out: Path) -> list[str]:
    """The main_ppo command line: a small GRPO or PPO run as verl's own examples set it up, shrunk to a tiny
    model, plus what CPU needs (FSDP2, eager attention, no sleep mode, Ray told of N "GPUs")."""
    batch = 4
    n = 2 if spec.algorithm == "grpo" else 1
    mb = spec.micro_batch
    a = "actor_rollout_ref"
    ov = [
        f"algorithm.adv_estimator={'grpo' if spec.algorithm == 'grpo' else 'gae'}",
        f"data.train_files={data['train']}", f"data.val_files={data['val']}",
        f"data.train_batch_size={batch}", "data.max_prompt_length=20", "data.max_response_length=8",
        "data.dataloader_num_workers=0", "data.shuffle=False",
        f"{a}.model.path={data['model']}", f"{a}.model.tokenizer_path={data['tokenizer']}",
        f"+{a}.model.override_config.attn_implementation=eager",
        f"{a}.model.use_remove_padding={spec.remove_padding}",
        f"{a}.model.enable_gradient_checkpointing=False",
        f"{a}.actor.strategy=fsdp2", f"{a}.ref.strategy=fsdp2",
        # the trainer in fp32 (verl's default autocasts to bf16): the rollout compare's reference
        f"+{a}.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        f"+{a}.ref.fsdp_config.mixed_precision.param_dtype=fp32",
        f"{a}.actor.fsdp_config.use_torch_compile=False", f"{a}.ref.fsdp_config.use_torch_compile=False",
        f"{a}.actor.ppo_mini_batch_size={batch}", f"{a}.actor.ppo_micro_batch_size_per_gpu={mb}",
        f"{a}.rollout.log_prob_micro_batch_size_per_gpu={mb}", f"{a}.ref.log_prob_micro_batch_size_per_gpu={mb}",
        f"{a}.rollout.name=vllm", f"{a}.rollout.n={n}", f"{a}.rollout.dtype={spec.rollout_dtype}",
        f"{a}.rollout.tensor_model_parallel_size=1", f"{a}.rollout.enforce_eager=True",
        f"{a}.rollout.free_cache_engine=False", f"+{a}.rollout.enable_sleep_mode=False",
        f"{a}.rollout.max_model_len=64", f"{a}.rollout.gpu_memory_utilization=0.3",
        f"{a}.rollout.max_num_batched_tokens=256", f"{a}.rollout.agent.num_workers=1",
        f"reward.custom_reward_function.path={data['reward']}", "reward.num_workers=1",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        f"trainer.n_gpus_per_node={spec.nproc}", "trainer.nnodes=1", f"trainer.total_training_steps={spec.steps}",
        "trainer.logger=[console]", "trainer.val_before_train=False", "trainer.test_freq=-1", "trainer.save_freq=-1",
        "trainer.project_name=verl_pdbg_conf", f"trainer.experiment_name=cpu_{spec.group or 'baseline'}",
        f"trainer.default_local_dir={out / 'checkpoints'}",
        f"+ray_kwargs.ray_init.num_gpus={spec.nproc}", "ray_kwargs.ray_init.num_cpus=16",
    ]
    if spec.algorithm == "ppo":
        ov += [f"critic.model.path={data['model']}", f"critic.model.tokenizer_path={data['tokenizer']}",
               "critic.strategy=fsdp2", f"critic.ppo_micro_batch_size_per_gpu={mb}",
               "+critic.model.override_config.attn_implementation=eager",
               f"critic.model.use_remove_padding={spec.remove_padding}",
               "critic.model.enable_gradient_checkpointing=False",
               "critic.fsdp.use_torch_compile=False", "+critic.fsdp.mixed_precision.param_dtype=fp32"]
    if spec.greedy:
        ov.append(f"{a}.rollout.top_k=1")
    if spec.group:
        ov.append(f"+profiler={spec.group}")
    pd = "global_profiler.global_tool_config.precision_debugger"
    if spec.strict is not None:
        ov.append(f"{pd}.strict={spec.strict}")
    if spec.broken_config:
        ov.append(f"{pd}.config_path={out / 'broken_config.json'}")
    if spec.profile_steps is not None:
        ov.append(f"global_profiler.steps=[{','.join(map(str, spec.profile_steps))}]")
    return ov + list(spec.extra)


def environment(spec: Spec, overlay: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONHOME"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(overlay), str(HARNESS)]),
        VERL_USE_EXTERNAL_MODULES="verl_cpu_platform", VERL_PLATFORM="cpu",
        VERL_ENGINE_DEVICE="cuda",  # verl's own override: its FSDP engines register for cuda/npu only
        VLLM_CPU_KVCACHE_SPACE="1", VLLM_TARGET_DEVICE="cpu",
        RAY_DEDUP_LOGS="0", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", WANDB_MODE="disabled",
        PYTHONUNBUFFERED="1")
    if spec.plant_rollout_layer is not None:
        env["VERL_CPU_PLANT_ROLLOUT"] = f"{spec.plant_rollout_layer}:{spec.plant_from_step}"
    if spec.plant_actor_layer is not None:
        env["VERL_CPU_PLANT_ACTOR"] = str(spec.plant_actor_layer)
    if spec.no_msprobe:
        env["VERL_CPU_HIDE_MSPROBE"] = "1"
    if spec.unresolved_stage:
        env["VERL_CPU_UNRESOLVED_STAGE"] = spec.unresolved_stage
    return env


# Ray waits a hard-coded 30 s for its own raylet to register (ray/_private/node.py); on a loaded 2-core machine
# it can take longer, before verl has run a line: that start, and only that, is tried again.
RAY_START_RETRIES = 2
RAY_START_TIMEOUT = "The current node timed out during startup"


def ray_start_timed_out(log_path: Path, start: int) -> bool:
    with open(log_path, errors="replace") as fh:
        fh.seek(start)
        return RAY_START_TIMEOUT in fh.read()


def prepare_out(out: Path) -> None:
    """--out is new, empty, or an earlier run of this harness (then replaced); anything else is refused."""
    if out.exists() and any(out.iterdir()):
        if not (out / MARKER).is_file():
            raise SystemExit(f"{out}: not empty and not written by this script ({MARKER} missing); "
                             f"give a new or empty directory")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("{}\n")


def install_package(python: str, overlay: Path, log) -> None:
    """This package as `pip install` gives it (wheel built from the source tree), on PYTHONPATH."""
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(overlay), str(ROOT)], check=True, stdout=log, stderr=subprocess.STDOUT,
                   env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))


def execute(spec: Spec, venv: Path, out: Path, timeout: float = 1800) -> dict:
    """Make the data, run main_ppo in `out` (the launch directory), and read back what it wrote."""
    started = time.monotonic()
    python = str(venv / "bin" / "python")
    prepare_out(out)
    data_dir, overlay, log_path = out / "data", out / "site", out / "main_ppo.log"
    with open(log_path, "w") as log:
        subprocess.run([python, str(HARNESS / "tiny.py"), str(data_dir), spec.model, str(spec.layers)], check=True,
                       stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=str(HARNESS)))
        install_package(python, overlay, log)
    if spec.broken_config:
        (out / "broken_config.json").write_text(json.dumps(BROKEN_CONFIG))
    data = json.loads((data_dir / "paths.json").read_text())
    ov = overrides(spec, data, out)
    command = [python, "-m", "verl.trainer.main_ppo", *ov]
    prepared = time.monotonic() - started
    with open(log_path, "a") as log:
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        t0 = time.monotonic()
        for attempt in range(1 + RAY_START_RETRIES):
            start = log.tell()
            try:
                proc = subprocess.run(command, cwd=out, env=environment(spec, overlay), stdout=log,
                                      stderr=subprocess.STDOUT, timeout=timeout)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
            if rc == 0 or not ray_start_timed_out(log_path, start):
                break
            log.write(f"\n$ (Ray's node did not start within its 30 s: attempt {attempt + 2})\n")
            log.flush()
        trained = time.monotonic() - t0
    text = log_path.read_text(errors="replace")
    result = {"command": ["python", "-m", "verl.trainer.main_ppo", *ov], "returncode": rc, "log": str(log_path),
              "save_path": str(out / SAVE_PATH), **read_log(text), "config": read_config(out),
              **read_dumps(out / SAVE_PATH),
              "seconds": {"prepare": round(prepared, 1), "main_ppo": round(trained, 1),
                          "total": round(time.monotonic() - started, 1)}}
    result["step_times"] = step_times(result["metrics"], profiled_steps(result["config"]))
    (out / MARKER).write_text(json.dumps(result, indent=1) + "\n")
    return result


# ------------------------------------------------------------------------------------ reading the run

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PREFIX = re.compile(r"^\((\w+) pid=\d+(?:, ip=[^)]*)?\)\s*")
_STEP = re.compile(r"step:(\d+) - (.*)$")
_WARN = re.compile(r"precision_debugger|PrecisionDebugger|verl_pdbg_conf|model not resolved|\[msprobe\].*(WARN|ERROR)")


def read_log(text: str) -> dict:
    """verl's console metrics per step, the profiler's warnings (who said it, how often), the error that ended
    the run, and the resolved config verl printed."""
    metrics, warnings, error = {}, {}, None
    lines = [_ANSI.sub("", ln) for ln in text.splitlines()]
    for ln in lines:
        m = _STEP.search(ln)
        if m and " - " in m.group(2):
            metrics[int(m.group(1))] = {k: _number(v) for k, _, v in
                                        (kv.partition(":") for kv in m.group(2).split(" - "))}
            continue
        body = _PREFIX.sub("", ln)
        if _WARN.search(body) and re.search(r"\b(WARNING|ERROR)\b|not resolved|not collected|Unknown", body) \
                and not body.startswith("ray init kwargs"):
            who = (_PREFIX.match(ln).group(1) if _PREFIX.match(ln) else "driver")
            said = re.sub(r"^.*?(WARNING|ERROR)[^a-zA-Z]*", r"\1 ", body).strip()
            key = f"{who}: {said}"
            warnings[key] = warnings.get(key, 0) + 1
    # the innermost cause: what the exception said, not Ray's or Hydra's wrapping (Ray's where it is the cause)
    raised = [b for b in (_PREFIX.sub("", ln).strip() for ln in lines)
              if re.match(r"^[\w.]*(Error|Exception)\b[^:]*: ", b) and not b.startswith("Error executing")]
    error = next((b for b in reversed(raised) if not b.startswith("ray.")), raised[-1] if raised else None)
    return {"metrics": metrics, "warnings": warnings, "error": error}


def read_config(out: Path) -> dict:
    """global_profiler.steps as Hydra composed it (the group, then the command line's overrides)."""
    import yaml

    found = sorted(out.glob("outputs/*/*/.hydra/config.yaml"))
    if not found:
        return {"global_profiler.steps": None}
    cfg = yaml.safe_load(found[-1].read_text()) or {}
    return {"global_profiler.steps": (cfg.get("global_profiler") or {}).get("steps")}


def _number(v: str):
    v = v.strip()
    m = re.fullmatch(r"np\.\w+\((.*)\)", v)
    v = m.group(1) if m else v
    try:
        return float(v)
    except ValueError:
        return v


def profiled_steps(config: dict) -> list[int]:
    return list(config.get("global_profiler.steps") or [])


def step_times(metrics: dict, profiled: list[int]) -> dict:
    """Each step's wall time and its stages' (verl's timing_s), marked profiled or not."""
    out = {}
    for step, m in sorted(metrics.items()):
        out[step] = {"profiled": step in profiled, "step": m.get("timing_s/step"),
                     **{stage: m[f"timing_s/{k}"] for k, stage in STAGE_TIMERS.items() if f"timing_s/{k}" in m}}
    return out


def read_dumps(save_path: Path) -> dict:
    """step_N/<stage>/stepK/rankR/dump.json under the save path: stages per step, each dump's records and
    size, and each stage directory's bytes."""
    stages, dumps, disk, empty = {}, [], {}, []
    if save_path.is_dir():
        for step_dir in sorted(save_path.glob("step_*")):
            step = step_dir.name[len("step_"):]
            # a stage is collected where msprobe wrote a dump.json (verl's own backend leaves empty directories)
            stages[step] = sorted(p.name for p in step_dir.iterdir() if p.is_dir() and any(p.rglob("dump.json")))
            empty += [f"{step_dir.name}/{p.name}" for p in step_dir.iterdir() if p.is_dir() and not any(p.rglob("dump.json"))]
            for stage_dir in step_dir.iterdir():
                disk[f"{step_dir.name}/{stage_dir.name}"] = sum(f.stat().st_size for f in stage_dir.rglob("*")
                                                                if f.is_file())
        for dump in sorted(save_path.rglob("dump.json")):
            try:
                records = len(json.loads(dump.read_text()).get("data") or {})
            except (ValueError, OSError) as e:
                records = f"unreadable: {e}"
            dumps.append({"path": str(dump.relative_to(save_path)), "records": records,
                          "bytes": dump.stat().st_size})
    return {"stages": stages, "dumps": dumps, "disk": disk, "empty_stage_dirs": sorted(empty)}
