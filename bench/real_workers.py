#!/usr/bin/env python
"""verl 0.9.1's real PPO workers on CPU, profiled with `tool: precision_debugger`, two steps.

    python bench/real_workers.py --out DIR [--level L0|L1] [--runtime pdbg|verl] [--strict] [--nproc N] [--steps 1,2]
                                 [--attn eager|sdpa] [--dtype bf16|fp32] [--plant-layer K]
                                 [--checkpoint DIR] [--sequences FILE] [--stages all|actor_compute_log_prob]
                                 [--msprobe-config PATH] [--remove-padding]

Builds a tiny random Qwen2 causal LM from a transformers config (no download), then verl's own
worker classes (verl/workers/engine_workers.py): ActorRolloutRefWorker with role "actor" and with
role "ref", and the critic's TrainingWorker(model_type="value_model"), each on verl's FSDP2 engine
in a gloo world of --nproc ranks (1 by default; one process per rank, each given its share of
the batch as verl's trainer deals it: balance_batch, then the data-parallel dispatch). For each global
step (--steps, default 1 and 2) it does what RayPPOTrainer does: start_profile on each worker group
(profile_step=N), then the real decorated methods with batches in the trainer's form (DataProto ->
TensorDict -> no-padding, plus the non-tensor keys each method reads):
actor compute_log_prob, ref compute_ref_log_prob, critic infer_batch (values), critic
train_mini_batch (-> train_batch per mini-batch), update_actor; then stop_profile.

--attn: actor_rollout_ref.model.override_config.attn_implementation, the actor's and the ref's attention
(eager by default; the critic stays eager, see its shim). --dtype: the actor's and the ref's FSDP
mixed_precision.param_dtype (verl's default bf16; fp32 runs them unmixed). --plant-layer K: a planted
change, the actor's model.layers.K.mlp.down_proj.weight scaled by 1.01 in place after init_model (the ref
keeps the loaded weights), for compares that must name layer K.

The actor against a rollout (docs/compare-rollout.md): --checkpoint DIR loads the weights from that HF
checkpoint instead of the random model (copied, with a word-level tokenizer over its vocabulary added when it
has none). --sequences FILE (with --stages actor_compute_log_prob) is a JSON list of {"prompt": [ids],
"response": [ids]} (manifest.json's samples of tests/make_rollout_dumps.py; a "logprobs" list there is compared
with the actor's output), laid out as the trainer holds it after generation (left-padded prompts, right-padded
responses, attention_mask, position_ids, responses, response_mask) and run as one log-prob micro-batch.
--stages actor_compute_log_prob builds the actor alone and runs its compute_log_prob only (step 1 unless
--steps). --msprobe-config PATH replaces statistics_<level>.json (e.g. conf/msprobe/tensor_rollout.json: task
tensor, L0, forward). --remove-padding sets actor_rollout_ref.model.use_remove_padding=True (verl packs the
batch into one row). The summary then adds `log_probs` (the actor's, per row in the order the trainer hands
them, response tokens only), `rows` (each row's index in the sequences: balance_batch reorders them),
`max_logprob_gap` (against the sequences' log-probs, where given) and `model_inputs`. msprobe itself skips the
model's first child and last module when verl is imported (module_processor.py): the dump has no lm_head.

--runtime pdbg: this package's runtime, installed as a user does (verl_pdbg_conf.runtime.install()
before verl is imported). --runtime verl: verl 0.9.1's own precision_debugger backend (baseline).

The run happens in a child process (msprobe wraps torch for the life of a process); the parent
reads the dump tree and prints ONE JSON line: stages collected per step, dump files with their
record counts and sizes, warnings, the "model not resolved" count, where the runtime found each
stage's model, and seconds.

What verl cannot do on CPU without help, and the two shims used here (nothing else is replaced):
- verl has no CPU platform: one is registered through verl's own PlatformRegistry (a plugin, the
  mechanism verl documents for new hardware), and VERL_ENGINE_DEVICE=cuda (verl's own override)
  selects the FSDP engine, which verl registers only for cuda/npu.
- the process group is initialised here with gloo (verl's own init builds "cpu:gloo,cpu:gloo").
- SHIM ref_offload_without_pinned_memory: FSDP2 with forward_only (the ref) hard-codes
  CPUOffloadPolicy(pin_memory=True), and pinning needs an accelerator; no config reaches it.
- SHIM valuehead_eager_attention: verl's load_valuehead_model (critic) hard-codes
  attn_implementation="flash_attention_2", ignoring override_config; flash-attn needs CUDA.
docs/real-workers.md lists every obstacle and its error."""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MSPROBE_CONFIGS = os.path.join(REPO, "verl_pdbg_conf", "conf", "msprobe")
STEPS = (1, 2)
BATCH, PROMPT_LEN, RESPONSE_LEN, MINI_BATCH = 8, 4, 5, 4  # two update mini-batches per step
NOT_RESOLVED = "model not resolved"
# stage dir -> the worker (built in the run) whose model it binds; the attribute is checked against stages.py
WORKER_OF_STAGE = {"actor_compute_log_prob": "actor", "actor_update": "actor", "ref_compute_log_prob": "ref",
                   "critic_update": "critic"}
STAGE_SETS = ("all", "actor_compute_log_prob")  # --stages: every stage, or the actor's log-prob forward alone


# ---------------------------------------------------------------------------------------------
# child: the run itself
# ---------------------------------------------------------------------------------------------

_WARNING_SOURCES = ("verl", "verl_pdbg_conf", "msprobe")


class _Capture:
    """Warnings of verl, msprobe and this package, and the runtime's debug lines. Other libraries'
    warnings are not the profiler's (transformers logs the value head's load report, and its
    records reach the root logger only where CI is set)."""

    def __init__(self):
        import logging

        self.warnings: list[str] = []
        self.resolved: list[str] = []
        outer = self

        class Handler(logging.Handler):
            def emit(self, record):
                msg = record.getMessage()
                if record.levelno >= logging.WARNING and record.name.split(".")[0] in _WARNING_SOURCES:
                    outer.warnings.append(f"{record.name}: {msg}")
                elif record.name.startswith("verl_pdbg_conf") and "model resolved" in msg:
                    outer.resolved.append(msg)

        logging.getLogger().addHandler(Handler(logging.DEBUG))
        logging.getLogger("verl_pdbg_conf.runtime").setLevel(logging.DEBUG)


def _register_cpu_platform():
    """verl 0.9.1 has no CPU platform; register one through verl's own PlatformRegistry."""
    import types
    from contextlib import contextmanager

    import torch
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry, set_platform

    # torch.cpu lacks what verl calls on the device module (engine_workers.py, flops_counter.py).
    cpu_module = types.SimpleNamespace(**{k: getattr(torch.cpu, k) for k in dir(torch.cpu) if not k.startswith("_")})
    vars(cpu_module).update(
        max_memory_allocated=lambda *a, **k: 0, max_memory_reserved=lambda *a, **k: 0,
        memory_allocated=lambda *a, **k: 0, memory_reserved=lambda *a, **k: 0, mem_get_info=lambda *a, **k: (0, 0),
        reset_peak_memory_stats=lambda *a, **k: None, empty_cache=lambda: None,
        get_device_name=lambda *a, **k: "CPU", is_available=lambda: True)

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        device_name = "cpu"
        vendor_name = "cpu"
        device_module = cpu_module

        def is_available(self):
            return True

        def current_device(self):
            return "cpu"  # what torch.cpu.current_device() says; verl passes it to .to(device=...)

        def device_count(self):
            return 1

        def set_device(self, device_index):
            return None

        def synchronize(self, device_index=None):
            return None

        def manual_seed(self, seed):
            torch.manual_seed(seed)

        def manual_seed_all(self, seed):
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings):
            return None

        def empty_cache(self):
            return None

        def get_device_capability(self, device_index=0):
            return (None, None)

        def communication_backend_name(self):
            return "gloo"

        def visible_devices_envvar(self):
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg):
            yield

        def profiler_start(self):
            return None

        def profiler_stop(self):
            return None

        def ray_resource_name(self):
            return "CPU"

        def ray_noset_envvars(self):
            return []

        def is_ipc_supported(self):
            return False

        def cudart(self):
            return None

    set_platform(PlatformCPU())


def _shims() -> list[str]:
    """The two places no configuration reaches on CPU (see the module docstring)."""
    import transformers
    from verl.utils import model as verl_model
    from verl.workers.engine.fsdp import transformer_impl

    base = transformer_impl.CPUOffloadPolicy

    class CPUOffloadPolicyWithoutPinnedMemory(base):
        """SHIM ref_offload_without_pinned_memory: transformer_impl.py forces pin_memory=True."""

        def __init__(self, pin_memory: bool = True):
            super().__init__(pin_memory=False)

    transformer_impl.CPUOffloadPolicy = CPUOffloadPolicyWithoutPinnedMemory

    original = verl_model.load_valuehead_model

    def load_valuehead_model_eager(*args, **kwargs):
        """SHIM valuehead_eager_attention: utils/model.py passes attn_implementation="flash_attention_2"."""
        auto = transformers.AutoModelForTokenClassification
        real = auto.from_pretrained.__func__

        def from_pretrained(cls, *a, **kw):
            if kw.get("attn_implementation") == "flash_attention_2":
                kw["attn_implementation"] = "eager"
            return real(cls, *a, **kw)

        auto.from_pretrained = classmethod(from_pretrained)
        try:
            return original(*args, **kwargs)
        finally:
            auto.from_pretrained = classmethod(real)

    verl_model.load_valuehead_model = load_valuehead_model_eager
    return ["ref_offload_without_pinned_memory", "valuehead_eager_attention"]


def _tiny_model(path: str) -> None:
    """A 2-layer random Qwen2 and a word-level tokenizer, saved where verl loads them from."""
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{f"w{i}": i + 3 for i in range(61)}}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<unk>")),
                                  pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", bos_token="<eos>")
    tok.save_pretrained(path)
    cfg = Qwen2Config(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False, pad_token_id=0, eos_token_id=1, bos_token_id=1,
                      architectures=["Qwen2ForCausalLM"])
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)


ATTN = ("eager", "sdpa")  # attention implementations transformers runs on CPU
PLANT_SCALE = 1.01


def _overrides(model_dir: str, save_path: str, config_path: str, strict: bool, steps=STEPS,
               attn: str = "eager", dtype: str = "bf16", remove_padding: bool = False,
               log_prob_micro_batch: int = 2, mini_batch: int = MINI_BATCH) -> list[str]:
    pd = "global_profiler.global_tool_config.precision_debugger"
    out = [
        f"actor_rollout_ref.model.path={model_dir}", f"critic.model.path={model_dir}",
        f"critic.model.tokenizer_path={model_dir}",
        f"actor_rollout_ref.model.override_config.attn_implementation={attn}",
        f"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype={dtype}",
        f"actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype={dtype}",
        "critic.model.override_config.attn_implementation=eager",
        f"actor_rollout_ref.model.use_remove_padding={remove_padding}", "critic.model.use_remove_padding=False",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "critic.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile=False", "critic.fsdp.use_torch_compile=False",
        "actor_rollout_ref.actor.use_torch_compile=False", "actor_rollout_ref.ref.use_torch_compile=False",
        "actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2", "critic.strategy=fsdp2",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini_batch}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={log_prob_micro_batch}",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        f"critic.ppo_mini_batch_size={MINI_BATCH}", "critic.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.n=1", "actor_rollout_ref.actor.use_kl_loss=True",
        "global_profiler.tool=precision_debugger", f"global_profiler.save_path={save_path}",
        f"global_profiler.steps=[{','.join(map(str, steps))}]",
        f"{pd}.config_path={config_path}", f"{pd}.strict={strict}",
    ]
    for role in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic"):
        out += [f"{role}.profiler.enable=True", f"{role}.profiler.all_ranks=True"]
    return out


def _batch(step: int):
    """The DataProto the trainer holds after generation: left-padded prompts, right-padded responses."""
    import numpy as np
    import torch
    from verl import DataProto

    g = torch.Generator().manual_seed(step)
    prompt_lens = torch.tensor([PROMPT_LEN - (i % 2) for i in range(BATCH)])
    response_lens = torch.tensor([RESPONSE_LEN - (i % 3) for i in range(BATCH)])
    prompts = torch.randint(3, 64, (BATCH, PROMPT_LEN), generator=g)
    responses = torch.randint(3, 64, (BATCH, RESPONSE_LEN), generator=g)
    p_mask = torch.arange(PROMPT_LEN)[None, :] >= (PROMPT_LEN - prompt_lens)[:, None]
    r_mask = torch.arange(RESPONSE_LEN)[None, :] < response_lens[:, None]
    prompts, responses = prompts.masked_fill(~p_mask, 0), responses.masked_fill(~r_mask, 0)
    attention_mask = torch.cat([p_mask, r_mask], dim=1).long()
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    batch = DataProto.from_dict(
        tensors={"input_ids": torch.cat([prompts, responses], 1), "attention_mask": attention_mask,
                 "position_ids": position_ids, "prompts": prompts, "responses": responses,
                 "response_mask": r_mask.long()},
        non_tensors={"uid": np.array([f"uid-{step}-{i // 2}" for i in range(BATCH)], dtype=object)},
        meta_info={"temperature": 1.0, "global_token_num": attention_mask.sum(-1).tolist()})
    return batch


def _read_sequences(path: str) -> list[dict]:
    """--sequences: a JSON list of {"prompt": [ids], "response": [ids], ...}."""
    with open(path) as f:
        seqs = json.load(f)
    if not isinstance(seqs, list) or not seqs or not all(
            isinstance(x, dict) and x.get("prompt") and x.get("response") for x in seqs):
        raise SystemExit(f"{path}: expected a JSON list of {{\"prompt\": [ids], \"response\": [ids]}}")
    return seqs


def _batch_of(sequences: list[dict], pad_token_id: int = 0):
    """The DataProto the trainer holds after generation, of given token ids: prompts left-padded to the
    longest prompt, responses right-padded to the longest response (agent loop / vLLM rollout layout),
    attention_mask over both, position_ids = cumsum(mask) - 1 clipped at 0 (compute_position_id_with_mask)."""
    import numpy as np
    import torch
    from verl import DataProto

    n = len(sequences)
    plen = max(len(x["prompt"]) for x in sequences)
    rlen = max(len(x["response"]) for x in sequences)
    prompts = torch.full((n, plen), pad_token_id, dtype=torch.long)
    responses = torch.full((n, rlen), pad_token_id, dtype=torch.long)
    p_mask = torch.zeros((n, plen), dtype=torch.long)
    r_mask = torch.zeros((n, rlen), dtype=torch.long)
    for i, x in enumerate(sequences):
        p, r = list(map(int, x["prompt"])), list(map(int, x["response"]))
        prompts[i, plen - len(p):] = torch.tensor(p)
        p_mask[i, plen - len(p):] = 1
        responses[i, :len(r)] = torch.tensor(r)
        r_mask[i, :len(r)] = 1
    attention_mask = torch.cat([p_mask, r_mask], dim=1)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return DataProto.from_dict(
        tensors={"input_ids": torch.cat([prompts, responses], 1), "attention_mask": attention_mask,
                 "position_ids": position_ids, "prompts": prompts, "responses": responses,
                 "response_mask": r_mask},
        non_tensors={"uid": np.array([f"uid-{i}" for i in range(n)], dtype=object)},
        meta_info={"temperature": 1.0, "global_token_num": attention_mask.sum(-1).tolist()})


def _model_from_checkpoint(src: str, dst: str) -> None:
    """The checkpoint's files copied where verl loads them from, with a word-level tokenizer over its
    vocabulary (pad 0) added when it has none (verl's HFModelConfig loads a tokenizer from the model path)."""
    import shutil

    shutil.copytree(src, dst)
    if any(os.path.exists(os.path.join(dst, f)) for f in ("tokenizer.json", "tokenizer_config.json")):
        return
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    with open(os.path.join(dst, "config.json")) as f:
        size = int(json.load(f)["vocab_size"])
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{f"w{i}": i for i in range(3, size)}}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<unk>")),
                                  pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", bos_token="<eos>")
    tok.save_pretrained(dst)


def _dealt(batch, rank: int, world: int):
    """This rank's share as the trainer hands it: trainer.balance_batch (on by default, at any data-parallel size)
    reorders the batch by sequence length (tests/trainer_layout.py, verl's own partitioning), then verl's
    DP_COMPUTE_PROTO dispatch gives rank r the r-th chunk, the meta_info whole. Returns the share and its rows'
    indices in the batch."""
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    import trainer_layout

    parts = trainer_layout.balanced_partitions(batch.batch["attention_mask"].sum(-1).tolist(), world)
    batch.reorder(torch.tensor([i for part in parts for i in part]))
    return (batch.chunk(world)[rank] if world > 1 else batch), parts[rank]


def _td(batch, **non_tensor):
    """DataProto -> TensorDict -> no-padding, plus the non-tensor keys (ray_trainer.py's steps 1-3)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    td = left_right_2_no_padding(batch.to_tensordict())  # needs tensordict 0.10 (the workers extra)
    tu.assign_non_tensor(td, **non_tensor)
    return td


def _padded(out, key, td):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding

    return no_padding_2_padding(tu.get(out, key), td).float()


def child(args) -> dict:
    capture = _Capture()
    steps = tuple(int(s) for s in args.steps.split(","))
    t0 = time.perf_counter()
    if args.runtime == "pdbg":
        from verl_pdbg_conf.runtime import install

        install()  # as a user does: before verl builds any DistProfiler

    import torch
    import torch.distributed as dist

    _register_cpu_platform()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)

    from functools import partial

    import verl
    from omegaconf import OmegaConf
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker, TrainingWorkerConfig
    from verl.workers.utils.losses import value_loss

    shims = _shims()
    t_import = time.perf_counter()

    if args.checkpoint:
        _model_from_checkpoint(args.checkpoint, args.model_dir)
    else:
        _tiny_model(args.model_dir)
    sequences = _read_sequences(args.sequences) if args.sequences else None
    config_path = args.msprobe_config or os.path.join(MSPROBE_CONFIGS, f"statistics_{args.level.lower()}.json")
    trainer_yaml = os.path.join(os.path.dirname(verl.__file__), "trainer", "config", "_generated_ppo_trainer.yaml")
    sizes = {}
    if sequences is not None:  # one log-prob micro-batch per rank holds its whole share: one forward
        share = -(-len(sequences) // world)
        sizes = dict(log_prob_micro_batch=share, mini_batch=len(sequences))
    cfg = OmegaConf.merge(OmegaConf.load(trainer_yaml),
                          OmegaConf.from_dotlist(_overrides(args.model_dir, args.out, config_path, args.strict, steps,
                                                             args.attn, args.dtype, args.remove_padding, **sizes)))
    OmegaConf.resolve(cfg)  # main_ppo.py does this; unresolved, every role profiler is a no-op
    if args.stages == "actor_compute_log_prob":
        return _child_log_prob_only(args, cfg, steps, sequences, capture, shims, t0, t_import)

    ref = ActorRolloutRefWorker(config=cfg.actor_rollout_ref, role="ref")
    ref.init_model()
    actor = ActorRolloutRefWorker(config=cfg.actor_rollout_ref, role="actor")
    actor.init_model()
    planted = _plant(actor, args.plant_layer) if args.plant_layer is not None else None
    # the critic, as ray_trainer.py builds it for the engine workers
    critic_cfg = omega_conf_to_dataclass(cfg.critic)
    engine = critic_cfg.engine
    engine.infer_max_token_len_per_gpu = critic_cfg.ppo_infer_max_token_len_per_gpu
    engine.max_token_len_per_gpu = critic_cfg.ppo_max_token_len_per_gpu
    critic = TrainingWorker(config=TrainingWorkerConfig(
        model_type="value_model", model_config=critic_cfg.model, engine_config=engine,
        optimizer_config=critic_cfg.optim, checkpoint_config=critic_cfg.checkpoint,
        profiler_config=omega_conf_to_dataclass(cfg.critic.profiler)))
    critic.reset()
    critic.set_loss_fn(partial(value_loss, config=critic_cfg))
    workers = {"actor": actor, "ref": ref, "critic": critic}
    t_build = time.perf_counter()

    impls = {name: f"{type(w.profiler._impl).__module__}.{type(w.profiler._impl).__name__}"
             for name, w in workers.items()}
    a = cfg.actor_rollout_ref.actor
    errors, metrics = [], {}
    for step in steps:
        batch, _ = _dealt(_batch(step), rank, world)
        # ray_trainer._start_profiling: actor group with role="train", then each distinct group
        actor.start_profile(role="train", profile_step=step)
        ref.start_profile(profile_step=step)
        critic.start_profile(profile_step=step)
        try:
            out = actor.compute_log_prob(_td(batch, calculate_entropy=True, calculate_sum_pi_squared=False,
                                             compute_loss=False))
            old = _td(batch)
            old_log_probs = _padded(out, "log_probs", old)
            out = ref.compute_ref_log_prob(_td(batch, calculate_entropy=False, compute_loss=False))
            ref_log_prob = _padded(out, "log_probs", old)
            out = critic.infer_batch(_td(batch, compute_loss=False))
            values = _padded(out, "values", old)
            g = torch.Generator().manual_seed(100 + step)
            mask = batch.batch["response_mask"].float()
            advantages = torch.randn(values.shape, generator=g) * mask
            batch.batch.update({"old_log_probs": old_log_probs, "ref_log_prob": ref_log_prob, "values": values,
                                "advantages": advantages, "returns": (values + advantages) * mask})
            loader = dict(global_batch_size=MINI_BATCH, mini_batch_size=MINI_BATCH, epochs=1, seed=42,
                          dataloader_kwargs={"shuffle": False})
            out = critic.train_mini_batch(_td(batch, **loader))
            metrics[f"step_{step}/critic"] = sorted(tu.get(out, "metrics"))
            batch.meta_info["multi_turn"] = False
            out = actor.update_actor(_td(batch, calculate_entropy=bool(a.calculate_entropy), compute_loss=True,
                                         distillation_use_topk=False, distillation_only=False, **loader))
            metrics[f"step_{step}/actor"] = sorted(tu.get(out, "metrics"))
        except Exception:  # reported, not hidden: the parent's JSON carries it
            import traceback

            errors.append(f"step {step}: {traceback.format_exc(limit=8)}")
        finally:
            last = step == steps[-1]
            actor.stop_profile(run_command=last)
            ref.stop_profile(run_command=last)
            critic.stop_profile(run_command=last)
    t_steps = time.perf_counter()

    # where the stage table's candidates find each real worker's model (a resolver call)
    from verl_pdbg_conf.runtime.model import resolve_model
    from verl_pdbg_conf.verl_facts.stages import STAGES

    found = {}
    for stage, who in WORKER_OF_STAGE.items():
        model, path = resolve_model(workers[who], STAGES[stage].models)
        found[stage] = {"worker": type(workers[who]).__name__, "path": path, "model": type(model).__name__,
                        "is_engine_module": model is not None and model is _engine(workers[who], who)}
    # what verl 0.9.1's own backend would bind for the same stages (its candidates, its fallback)
    from verl.utils.profiler import precision_debugger_profile as verl_pd

    verl_cls = getattr(verl_pd, "__verl_pdbg_conf_original__", None) or verl_pd.PrecisionDebuggerProfiler
    for stage, who in WORKER_OF_STAGE.items():
        model = verl_cls._resolve_model(verl_cls.__new__(verl_cls), workers[who], stage)
        found[stage]["verl_backend_binds"] = type(model).__name__ if model is not None else None
    dist.destroy_process_group()
    import tensordict

    return {"impl": impls, "attn": _attn_of(actor, ref), "planted": planted, "tensordict": tensordict.__version__,
            "shims": shims, "errors": errors,
            "metrics": metrics, "warnings": capture.warnings, "runtime_resolved": capture.resolved, "resolver": found,
            "seconds": {"import": round(t_import - t0, 2), "build": round(t_build - t_import, 2),
                        "steps": round(t_steps - t_build, 2)}}


def _child_log_prob_only(args, cfg, steps, sequences, capture, shims, t0, t_import) -> dict:
    """--stages actor_compute_log_prob: the actor alone, its compute_log_prob in each profiled step."""
    import torch.distributed as dist
    from verl.workers.engine_workers import ActorRolloutRefWorker

    rank, world = dist.get_rank(), dist.get_world_size()
    actor = ActorRolloutRefWorker(config=cfg.actor_rollout_ref, role="actor")
    actor.init_model()
    planted = _plant(actor, args.plant_layer) if args.plant_layer is not None else None
    t_build = time.perf_counter()
    impl = actor.profiler._impl
    errors, log_probs, rows = [], {}, {}
    for step in steps:
        batch, rows[f"step_{step}"] = _dealt(_batch(step) if sequences is None else _batch_of(sequences), rank, world)
        actor.start_profile(role="train", profile_step=step)
        try:
            out = actor.compute_log_prob(_td(batch, calculate_entropy=True, calculate_sum_pi_squared=False,
                                             compute_loss=False))
            padded = _padded(out, "log_probs", _td(batch))
            mask = batch.batch["response_mask"].bool()
            log_probs[f"step_{step}"] = [row[m].tolist() for row, m in zip(padded, mask)]
        except Exception:
            import traceback

            errors.append(f"step {step}: {traceback.format_exc(limit=8)}")
        finally:
            actor.stop_profile(run_command=step == steps[-1])
    t_steps = time.perf_counter()
    from verl_pdbg_conf.runtime.model import resolve_model
    from verl_pdbg_conf.verl_facts.stages import STAGES

    model, path = resolve_model(actor, STAGES["actor_compute_log_prob"].models)
    found = {"actor_compute_log_prob": {"worker": type(actor).__name__, "path": path, "model": type(model).__name__,
                                        "is_engine_module": model is not None and model is actor.actor.engine.module}}
    gap = None
    if sequences is not None and log_probs and all("logprobs" in x for x in sequences) and world == 1:
        last, order = log_probs[f"step_{steps[-1]}"], rows[f"step_{steps[-1]}"]
        gap = max(abs(a - float(b)) for got, i in zip(last, order) for a, b in zip(got, sequences[i]["logprobs"]))
    dist.destroy_process_group()
    import tensordict

    return {"impl": {"actor": f"{type(impl).__module__}.{type(impl).__name__}"}, "attn": _attn_of(actor, None),
            "planted": planted, "tensordict": tensordict.__version__, "shims": shims, "errors": errors,
            "metrics": {}, "warnings": capture.warnings, "runtime_resolved": capture.resolved, "resolver": found,
            "log_probs": log_probs, "rows": rows, "max_logprob_gap": gap,
            "model_inputs": {"use_remove_padding": bool(cfg.actor_rollout_ref.model.use_remove_padding),
                             "param_dtype": str(cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype),
                             "log_prob_micro_batch_size_per_gpu":
                                 cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu},
            "seconds": {"import": round(t_import - t0, 2), "build": round(t_build - t_import, 2),
                        "steps": round(t_steps - t_build, 2)}}


def _plant(actor, layer: int) -> str:
    """Scale one decoder layer's down_proj weight of the actor's own engine module (FSDP2: a DTensor,
    scaled shard by shard) by PLANT_SCALE; the name of the parameter changed."""
    import torch

    name = f"model.layers.{layer}.mlp.down_proj.weight"
    param = dict(actor.actor.engine.module.named_parameters())[name]
    with torch.no_grad():
        param.mul_(PLANT_SCALE)
    return name


def _attn_of(actor, ref) -> dict:
    """The attention implementation each model really runs (transformers' config._attn_implementation)."""
    pairs = (("actor", actor.actor),) + ((("ref", ref.ref),) if ref is not None else ())
    return {who: w.engine.module.config._attn_implementation for who, w in pairs}


def _engine(worker, who):
    return worker.engine.module if who == "critic" else getattr(worker, who).engine.module


# ---------------------------------------------------------------------------------------------
# parent: one child per run, then the dump tree
# ---------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dump_tree(out: str) -> dict:
    """{relative dump.json path: {"records": n, "bytes": size, "backward": n}} under out."""
    files = {}
    for root, _, names in os.walk(out):
        for name in names:
            if name != "dump.json":
                continue
            path = os.path.join(root, name)
            with open(path) as f:
                data = json.load(f).get("data") or {}
            files[os.path.relpath(path, out)] = {
                "records": len(data), "bytes": os.path.getsize(path),
                "backward": sum(1 for k in data if ".backward" in k)}
    return dict(sorted(files.items()))


def stages_collected(files: dict) -> dict:
    """{step_N: [stage, ...]} of dumps with at least one record."""
    out: dict = {}
    for rel, info in files.items():
        parts = rel.split(os.sep)
        if info["records"]:
            out.setdefault(parts[0], set()).add(parts[1])
    return {k: sorted(v) for k, v in sorted(out.items())}


def _runtime_resolved(lines: list[str]) -> dict:
    """{stage: sorted "Worker.attr.path"} from the runtime's debug lines ("model resolved at ...")."""
    found: dict = {}
    for line in lines:
        m = re.search(r"stage '(\w+)': model resolved at (\S+)", line)
        if m:
            found.setdefault(m.group(1), set()).add(m.group(2))
    return {k: sorted(v) for k, v in sorted(found.items())}


def _matches_stages_py(resolver: dict, resolved: dict, runtime: str) -> dict:
    """{stage: bool}: stages.py's recorded (worker, attribute) is where the resolver found the real
    worker's model (the engine's module itself) and, with this runtime, where the runtime bound it."""
    sys.path.insert(0, REPO)
    from verl_pdbg_conf.verl_facts.stages import VERL_TARGETS

    out = {}
    for stage, (worker, path) in VERL_TARGETS["0.9.1"].model_at.items():
        if resolver and stage not in resolver:  # a stage this run did not build (--stages)
            continue
        r = resolver.get(stage) or {}
        ok = r.get("worker") == worker and r.get("path") == path and r.get("is_engine_module") is True
        if runtime == "pdbg":
            ok = ok and resolved.get(stage) == [f"{worker}.{path}"]
        out[stage] = ok
    return out


def run(out: str, level: str = "L1", runtime: str = "pdbg", strict: bool = False, timeout: float = 600,
        nproc: int = 1, steps: tuple = STEPS, attn: str = "eager", plant_layer: int | None = None,
        dtype: str = "bf16", checkpoint: str | None = None, sequences: str | None = None, stages: str = "all",
        msprobe_config: str | None = None, remove_padding: bool = False) -> dict:
    """One child per rank (all at once, one gloo world); the summary is rank 0's, errors are every rank's."""
    out = os.path.abspath(out)
    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="real_workers_") as tmp:
        port = str(_free_port())
        procs = []
        for rank in range(nproc):
            result_path = os.path.join(tmp, f"child{rank}.json")
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE=str(nproc),
                       RANK=str(rank), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(nproc), VERL_PLATFORM="cpu",
                       VERL_ENGINE_DEVICE="cuda", CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false",
                       PYTHONUNBUFFERED="1",
                       PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
            cmd = [sys.executable, os.path.abspath(__file__), "--child", result_path, "--out", out, "--level", level,
                   "--runtime", runtime, "--model-dir", os.path.join(tmp, f"tiny_qwen2_{rank}"),
                   "--steps", ",".join(map(str, steps)), "--attn", attn, "--dtype", dtype]
            cmd += ["--strict"] if strict else []
            cmd += ["--plant-layer", str(plant_layer)] if plant_layer is not None else []
            cmd += ["--checkpoint", os.path.abspath(checkpoint)] if checkpoint else []
            cmd += ["--sequences", os.path.abspath(sequences)] if sequences else []
            cmd += ["--msprobe-config", os.path.abspath(msprobe_config)] if msprobe_config else []
            cmd += ["--stages", stages] + (["--remove-padding"] if remove_padding else [])
            procs.append((result_path, subprocess.Popen(cmd, env=env, cwd=tmp, stdout=subprocess.PIPE,
                                                        stderr=subprocess.STDOUT, text=True)))
        outputs, children, codes = [], [], []
        for result_path, proc in procs:
            try:
                outputs.append(proc.communicate(timeout=timeout)[0])
            except subprocess.TimeoutExpired:  # a rank stuck in a collective its peer never reached
                for _, other in procs:
                    other.kill()
                outputs.append(proc.communicate()[0] + f"\n(killed after {timeout:g} s)")
            codes.append(proc.returncode)
            child_result = {}
            if os.path.exists(result_path):
                with open(result_path) as f:
                    child_result = json.load(f)
            children.append(child_result)
    child_result, output = children[0], "\n".join(outputs)
    errors = [e for c in children for e in (c.get("errors") or [])]
    errors += [f"rank {r}: exit {c}\n{o[-4000:]}" for r, (c, o) in enumerate(zip(codes, outputs)) if c]
    files = dump_tree(out)
    warnings = [w for c in children for w in c.get("warnings", [])]
    resolved = _runtime_resolved(child_result.get("runtime_resolved") or [])
    return {
        "runtime": runtime, "level": level, "strict": strict, "nproc": nproc, "exit": max(codes),
        "stages": stages_collected(files), "dump_files": files,
        "warnings": sorted(set(warnings)), "warning_count": len(warnings),
        "model_not_resolved": sum(line.count(NOT_RESOLVED) for line in output.splitlines()),
        "profiler_impl": child_result.get("impl"), "shims": child_result.get("shims"),
        "model_found_at": child_result.get("resolver"), "runtime_resolved": resolved,
        "model_at_matches_stages_py": _matches_stages_py(child_result.get("resolver") or {}, resolved, runtime),
        "tensordict": child_result.get("tensordict"), "attn": child_result.get("attn"),
        "planted": child_result.get("planted"),
        "metrics": child_result.get("metrics"), "errors": errors,
        **({k: child_result.get(k) for k in ("log_probs", "rows", "max_logprob_gap", "model_inputs")}
           if stages != "all" else {}),
        "seconds": round(time.perf_counter() - t0, 2), "child_seconds": child_result.get("seconds"),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="global_profiler.save_path (an empty directory)")
    p.add_argument("--level", choices=("L0", "L1"), default="L1")
    p.add_argument("--runtime", choices=("pdbg", "verl"), default="pdbg",
                   help="pdbg: this package's runtime (install()); verl: verl 0.9.1's own backend")
    p.add_argument("--strict", action="store_true", help="precision_debugger.strict: True")
    p.add_argument("--nproc", type=int, default=1, help="ranks (processes) of the gloo world (FSDP2 shards over them)")
    p.add_argument("--steps", default=None, help="global steps to run and profile "
                   f"(default {','.join(map(str, STEPS))}; 1 with --stages actor_compute_log_prob)")
    p.add_argument("--attn", choices=ATTN, default="eager",
                   help="actor_rollout_ref.model.override_config.attn_implementation (actor and ref; default eager)")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16",
                   help="the actor's and the ref's fsdp_config.mixed_precision.param_dtype (verl's default bf16)")
    p.add_argument("--plant-layer", type=int, metavar="K", help="planted change: the actor's "
                   f"model.layers.K.mlp.down_proj.weight x{PLANT_SCALE} after load (the ref keeps the loaded weights)")
    p.add_argument("--checkpoint", metavar="DIR", help="load the models' weights from this HF checkpoint "
                   "(instead of the random tiny Qwen2)")
    p.add_argument("--sequences", metavar="FILE", help='a JSON list of {"prompt": [ids], "response": [ids]}: '
                   "the batch (trainer layout, one log-prob micro-batch) instead of random tokens")
    p.add_argument("--stages", choices=STAGE_SETS, default="all", help="all (default) or actor_compute_log_prob: "
                   "the actor alone, its compute_log_prob only (step 1 unless --steps)")
    p.add_argument("--msprobe-config", metavar="PATH", help="the msprobe config (default "
                   "conf/msprobe/statistics_<level>.json), e.g. verl_pdbg_conf/conf/msprobe/tensor_rollout.json")
    p.add_argument("--remove-padding", action="store_true",
                   help="actor_rollout_ref.model.use_remove_padding=True (the actor's batch packed in one row)")
    p.add_argument("--child", metavar="RESULT", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.sequences and args.stages == "all":
        p.error("--sequences needs --stages actor_compute_log_prob (the update's mini-batches assume the random batch)")
    if args.steps is None:
        args.steps = "1" if args.stages == "actor_compute_log_prob" else ",".join(map(str, STEPS))
    if args.child:
        args.out = os.path.abspath(args.out)
        result = child(args)
        with open(args.child, "w") as f:
            json.dump(result, f)
        return 0
    result = run(args.out, args.level, args.runtime, args.strict, nproc=args.nproc,
                 steps=tuple(int(s) for s in args.steps.split(",")), attn=args.attn,
                 plant_layer=args.plant_layer, dtype=args.dtype, checkpoint=args.checkpoint,
                 sequences=args.sequences, stages=args.stages, msprobe_config=args.msprobe_config,
                 remove_padding=args.remove_padding)
    print(json.dumps(result, sort_keys=True))
    return 0 if result["exit"] == 0 and not result["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
