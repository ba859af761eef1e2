"""Write real msprobe dumps on CPU of one small Qwen2 checkpoint run by megatron-core's GPTModel (weights
loaded by mbridge) at tensor-parallel size 1 and 2 and pipeline-parallel size 2, and by transformers itself,
through this package's runtime profiler, for the compare's Megatron-against-transformers tests.

    python make_megatron_dumps.py OUT --level mix --runs hf,fsdp2,tp1,tp2,tp1-fc2,pp2,pp2-fc2 [--layer K] [--steps 1]

OUT/checkpoint is make_cross_impl_dumps' transformers Qwen2 (torch.manual_seed(0), 6 layers), saved once
and loaded by every run. The runs of one backend and layout (tp, pp) share one process group over gloo (one
process per rank): the transformers runs, the TP1 runs, the TP2 runs, the PP2 runs. Each run has a model of
its own, built from the checkpoint before the group's first profiler starts (so a plant stays in its run),
and a profiler of its own writing OUT/<run> (stages actor_compute_log_prob, a no-grad forward, and actor_update:
forward, backward, one SGD step, as make_cross_impl_dumps.run_one); msprobe's PrecisionDebugger is a
process singleton, so one level per invocation. A run is BACKEND[-PLANT]:

  hf       transformers Qwen2ForCausalLM, attention eager, fp32
  fsdp2    the same under FSDP2, fully_shard per decoder layer and the root (one rank)
  tp1      megatron-core GPTModel, local layer spec (torch RMSNorm), tensor parallel 1
  tp2      the same at tensor parallel 2 (two ranks: msprobe writes rank0 and rank1)
  pp2      the same at pipeline parallel 2, tensor parallel 1 (two ranks: stage 0, rank0, holds the
           embedding and layers 0-2, stage 1, rank1, layers 3-5, the final norm and the output layer;
           msprobe names a stage's layers by their local index: rank1's decoder.layers.0 is layer 3)
  tp2pp2   tensor parallel 2 and pipeline parallel 2 (four ranks: rank0, rank1 stage 0; rank2, rank3 stage 1)
  vtp1     megatron-core at tensor parallel 1 run as verl 0.9.1's Megatron engine runs its actor (run_verl):
           log-probs through megatron-core's vocab-parallel cross entropy, the loss each rank's sum over the
           whole batch's token count times the data-parallel size, gradients averaged over the group
  vdp2     the same at data parallel 2 (two ranks, each its half of the batch)

  The pipeline-parallel runs go through megatron-core's own schedule (get_forward_backward_func(), one
  micro-batch, forward_only in the log-prob stage), over gloo's point-to-point sends; the last stage
  computes the log-probs and the loss.

  plants, megatron runs only, after loading, in global layer K (--layer, default 2), on the pipeline stage
  that holds it, at its local index there:
  -fc2     decoder.layers.K.mlp.linear_fc2.weight x1.01
  -qkv     decoder.layers.K.self_attention.linear_qkv.weight x1.01
  -eps     decoder.layers.K.pre_mlp_layernorm (a torch.nn.RMSNorm) eps = 0.1

--arch qwen3_moe: make_cross_impl_dumps' Qwen3-MoE (8 experts, top 2) with 3 layers, and megatron-core's MoE
GPTModel (local spec, SequentialMLP experts, the allgather dispatcher; weights loaded by mbridge's
Qwen3MoEBridge, each SequentialMLP expert under mbridge's grouped name). Its runs:

  hf, fsdp2  as above (transformers 5's fused experts: grouped_mm, every expert's rows in one call)
  hfloop     transformers with experts_implementation="eager": its fused experts run one expert at a time
  ep1        megatron-core, expert parallel 1
  ep2        expert parallel 2 (two ranks: rank r holds global experts 4r..4r+3 as local_experts.0..3 and takes
             batch row r, its loss the sum of its log-probs over the whole batch's token count: run_shards)
  vep1, vep2 EP 1 and EP 2 run as verl's Megatron engine runs its actor (vtp1 above: run_verl)
  plants, in layer K: -expert  global expert MOE_EXPERT's linear_fc2.weight x1.05 (on the rank holding it);
  -router  mlp.router.weight x1.05; -shared  mlp.shared_experts.linear_fc2.weight x1.05 (qwen2_moe)

--arch qwen2_moe: the same sizes as a Qwen2-MoE with a shared expert (intermediate 128) and its gate
(megatron-core's moe_shared_expert_gate), attention biases, top-k weights not renormalised.

The log-probs of every run are checked against the first unplanted run's: unplanted ones agree to 1e-5,
planted ones differ. OUT/manifest.json says per run its backend, tp, pp, plant, layer and the module a
compare must name (`expect_module`, with K the global layer; None: no divergence)."""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import shutil
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime"))

import make_cross_impl_dumps as X  # noqa: E402
from scenarios import gloo  # noqa: E402

# name: backend, tp, pp, ep, dp (data-parallel size: the ranks beside tp x pp, each its share of the batch)
BACKENDS = {"hf": ("hf", 1, 1, 1, 1), "fsdp2": ("fsdp2", 1, 1, 1, 1), "tp1": ("megatron", 1, 1, 1, 1),
            "tp2": ("megatron", 2, 1, 1, 1), "pp2": ("megatron", 1, 2, 1, 1), "tp2pp2": ("megatron", 2, 2, 1, 1),
            "vtp1": ("megatron", 1, 1, 1, 1), "vdp2": ("megatron", 1, 1, 1, 2)}
# the MoE arch's runs: expert parallelism takes a rank per expert shard, each a data-parallel rank of the
# layers outside the experts, with its share of the batch (run_shards, run_verl)
MOE_BACKENDS = {"hf": ("hf", 1, 1, 1, 1), "fsdp2": ("fsdp2", 1, 1, 1, 1), "hfloop": ("hfloop", 1, 1, 1, 1),
                "ep1": ("megatron", 1, 1, 1, 1), "ep2": ("megatron", 1, 1, 2, 2),
                "vep1": ("megatron", 1, 1, 1, 1), "vep2": ("megatron", 1, 1, 2, 2)}
# runs as verl 0.9.1's Megatron engine runs its actor (run_verl): log-probs through megatron-core's
# vocab-parallel cross entropy, the loss over the global batch, gradients averaged over the data-parallel group
VERL_RUNS = ("vtp1", "vdp2", "vep1", "vep2")
PLANTS = {"fc2": "mlp.linear_fc2", "qkv": "self_attention.linear_qkv", "eps": "pre_mlp_layernorm"}
MOE_PLANTS = {"expert": "mlp.experts", "router": "mlp.router", "shared": "mlp.shared_experts.linear_fc2"}
ARCHS = ("qwen2", "qwen3_moe", "qwen2_moe")
MOE_ARCHS = ("qwen3_moe", "qwen2_moe")
MOE_LAYERS = 3  # the MoE checkpoint's layers (make_cross_impl_dumps' Qwen3-MoE config, fewer layers)
MOE_EXPERT = 5  # the expert the -expert plant changes: at EP 2 rank 1's local expert 1
STAGES = X.STAGES
AGREE = 1e-5  # max |log-prob difference| of two unplanted runs


def parse_run(run: str, arch: str = "qwen2") -> tuple[str, int, int, int, int, str | None]:
    """backend, tp, pp, ep, dp, plant"""
    backends, plants = (MOE_BACKENDS, MOE_PLANTS) if arch in MOE_ARCHS else (BACKENDS, PLANTS)
    name, _, plant = run.partition("-")
    if name not in backends or (plant and (plant not in plants or backends[name][0] != "megatron")):
        raise SystemExit(f"unknown run {run!r}: BACKEND[-PLANT], BACKEND in {tuple(backends)}, "
                         f"PLANT in {tuple(plants)} (megatron runs only)")
    backend, tp, pp, ep, dp = backends[name]
    return backend, tp, pp, ep, dp, plant or None


def moe_layers(arch: str) -> int:
    return MOE_LAYERS if arch in MOE_ARCHS else X.LAYERS


def write_checkpoint(path: str, arch: str = "qwen2") -> None:
    if os.path.exists(os.path.join(path, "config.json")):
        return
    if arch == "qwen2_moe":  # the Qwen3-MoE's sizes, with a shared expert and its gate, attention biases
        import torch
        import transformers

        moe = dict(X.MOE["qwen3_moe"], norm_topk_prob=False, shared_expert_intermediate_size=X.INTER)
        moe.pop("head_dim")
        cfg = transformers.Qwen2MoeConfig(hidden_size=X.HIDDEN, intermediate_size=X.INTER, num_hidden_layers=MOE_LAYERS,
                                          num_attention_heads=X.HEADS, num_key_value_heads=X.KV_HEADS,
                                          vocab_size=X.VOCAB, max_position_embeddings=64, tie_word_embeddings=False,
                                          **moe)
        torch.manual_seed(0)
        transformers.Qwen2MoeForCausalLM(cfg).save_pretrained(path, safe_serialization=True)
        return
    if arch == "qwen3_moe":  # make_cross_impl_dumps' Qwen3-MoE with MOE_LAYERS layers
        X.LAYERS = MOE_LAYERS
    X.build(arch, "golden", None, 0, 0).save_pretrained(path, safe_serialization=True)


# ---------------------------------------------------------------- transformers

def hf_model(ckpt: str, fsdp2: bool, loop: bool = False):
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt, attn_implementation="eager", dtype=torch.float32,
                                                              **({"experts_implementation": "eager"} if loop else {}))
    if fsdp2:
        from torch.distributed.fsdp import fully_shard

        for block in model.model.layers:
            fully_shard(block)
        fully_shard(model)
    return model


# ---------------------------------------------------------------- megatron-core on CPU

def patch_cuda_for_cpu() -> None:
    """Megatron asks CUDA for its device and RNG even on CPU: point both at the CPU."""
    import types

    import torch
    from megatron.core.pipeline_parallel import schedules
    from megatron.core.tensor_parallel import random

    # Also the device of the pipeline's receive buffers (p2p_communication: torch.empty(...,
    # device=torch.cuda.current_device()), the shapes it exchanges first and the tensors it receives).
    torch.cuda.current_device = lambda: torch.device("cpu")
    torch.cuda.get_rng_state = lambda device="cuda": torch.get_rng_state()
    torch.cuda.manual_seed = torch.manual_seed
    random._get_cuda_rng_state = lambda *args, **kwargs: torch.get_rng_state()
    random._set_cuda_rng_state = lambda new_state, *args, **kwargs: torch.set_rng_state(new_state)
    # The pipeline's point-to-point exchange (P2PCommunicator._communicate_shapes, always run as mbridge
    # sets variable_seq_lengths) calls torch.cuda.synchronize() after its batch_isend_irecv, "to protect
    # against a race" of CUDA streams; a CPU-only torch raises "Torch not compiled with CUDA enabled". On
    # the CPU every request was waited on already: nothing to synchronize.
    torch.cuda.synchronize = lambda device=None: None
    # forward_backward_pipelining_without_interleaving (and the other schedules) count the tokens in
    # torch.zeros([], dtype=torch.int, device="cuda"): the same error. The schedules module alone sees a
    # torch whose zeros puts "cuda" on the CPU; every other name is torch's own, looked up at each call
    # (so msprobe's wrappers of torch's functions stay in place).
    if schedules.torch is torch:  # once per process
        class _CpuTorch(types.ModuleType):
            def __getattr__(self, name):
                return getattr(torch, name)

            @staticmethod
            def zeros(*args, device=None, **kwargs):
                if device == "cuda" or (isinstance(device, torch.device) and device.type == "cuda"):
                    device = "cpu"
                return torch.zeros(*args, device=device, **kwargs)

        schedules.torch = _CpuTorch("torch")


def patch_moe_for_cpu() -> None:
    """megatron-core's MoE on CPU: the router's gemm names TransformerEngine's (undefined without it), and the
    allgather dispatcher records and waits on CUDA streams and events; on the CPU there is one stream."""
    import contextlib

    import torch
    from megatron.core.transformer.moe import moe_utils

    moe_utils.te_general_gemm = None

    class _Stream:
        def __init__(self, *args, **kwargs):
            pass

        def wait_stream(self, *args, **kwargs):
            pass

        def wait_event(self, *args, **kwargs):
            pass

        def record_event(self, *args, **kwargs):
            return None

        def synchronize(self):
            pass

    torch.cuda.Stream = _Stream
    torch.cuda.current_stream = lambda device=None: _Stream()
    torch.cuda.stream = lambda stream=None: contextlib.nullcontext()


def megatron_init(tp: int, pp: int = 1, ep: int = 1) -> None:
    """Megatron's parallel state, once per process group."""
    from megatron.core import parallel_state, tensor_parallel

    patch_cuda_for_cpu()
    patch_moe_for_cpu()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                             expert_model_parallel_size=ep)
    tensor_parallel.model_parallel_cuda_manual_seed(0)


LOCAL_EXPERT = __import__("re").compile(r"\.mlp\.experts\.local_experts\.(\d+)\.(linear_fc\d)\.weight$")


def sequential_experts(bridge, num_experts: int) -> None:
    """mbridge names an expert's weight as TransformerEngine's grouped linear does (`mlp.experts.linear_fc1.weight5`,
    the global expert after `weight`); the CPU's SequentialMLP holds it as `mlp.experts.local_experts.J.linear_fc1
    .weight`, J local. Put each in mbridge's form, the expert global (J + rank's offset, as mbridge's own expert-
    parallel mapping does), so that its tables load it."""
    from megatron.core import parallel_state

    ep, rank = parallel_state.get_expert_model_parallel_world_size(), parallel_state.get_expert_model_parallel_rank()
    offset = rank * (num_experts // ep)
    local_to_global = bridge._weight_name_mapping_mcore_local_to_global

    def mapping(model, consider_ep=True):
        out = local_to_global(model, consider_ep=False)
        return {k: LOCAL_EXPERT.sub(lambda m: f".mlp.experts.{m.group(2)}.weight{int(m.group(1)) + offset}", v)
                for k, v in out.items()}

    bridge._weight_name_mapping_mcore_local_to_global = mapping


def megatron_model(ckpt: str, plant: str | None, layer: int, expert: int = MOE_EXPERT):
    """GPTModel on the local layer spec, the checkpoint's weights loaded by mbridge, then the plant. At
    pipeline parallel > 1 the model of this rank's stage: the embedding on the first (pre_process), the
    final norm and the output layer on the last (post_process), the stage's layers between, numbered from 0
    in the module tree (their layer_number is global, 1-based). mbridge's load_weights maps each local layer
    to layer_number - 1 (_weight_name_mapping_mcore_local_to_global), so a stage loads its own layers; the
    plant lands in the stage holding global layer `layer`, at its local index, and nowhere else."""
    import torch
    from mbridge import AutoBridge
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from transformers import AutoConfig

    hf_config = AutoConfig.from_pretrained(ckpt)
    if getattr(hf_config, "rope_theta", None) is None:  # transformers 5 keeps it in rope_parameters
        hf_config.rope_theta = hf_config.rope_parameters["rope_theta"]
    bridge = AutoBridge.from_config(hf_config, dtype=torch.float32)
    experts = getattr(hf_config, "num_experts", None)
    # The local spec's norms are modules of their own, not the fused norm of TransformerEngine's linears; an
    # MoE layer's experts one MLP each (SequentialMLP: no grouped gemm on the CPU).
    bridge._get_transformer_layer_spec = lambda vp_stage=None: get_gpt_layer_local_spec(
        normalization="RMSNorm", num_experts=experts, moe_grouped_gemm=False,
        qk_layernorm=bool(getattr(bridge.config, "qk_layernorm", False)))
    bridge._OTHER_MAPPING = {**bridge._OTHER_MAPPING,
                             "input_layernorm.weight": ["model.layers.{layer_number}.input_layernorm.weight"]}
    bridge._MLP_MAPPING = {**bridge._MLP_MAPPING, "pre_mlp_layernorm.weight":
                           ["model.layers.{layer_number}.post_attention_layernorm.weight"]}
    # mbridge turns sequence parallel on at TP > 1 (torch's norms refuse it); no random init: all is loaded
    bridge.set_extra_args(sequence_parallel=False, perform_initialization=False,
                          **(dict(moe_grouped_gemm=False, moe_token_dispatcher_type="allgather", variable_seq_lengths=False,
                                  persist_layer_norm=False, bias_activation_fusion=False,
                                  bias_dropout_fusion=False, moe_shared_expert_overlap=False,
                                  moe_shared_expert_gate=bool(getattr(hf_config, "shared_expert_intermediate_size",
                                                                      0))) if experts else {}))
    # (a shared expert's gate (Qwen2-MoE's shared_expert_gate) is megatron-core's moe_shared_expert_gate, which
    # mbridge leaves off; overlapping the shared expert needs the alltoall dispatcher;
    # the experts' fused activation asks `activation_func == F.silu` at each call, after msprobe has wrapped
    # F.silu: left off, the MLP runs silu and its product unfused; its fused bias-dropout-add is torch.compile,
    # which msprobe refuses; the variable sequence lengths mbridge
    # sets the allgather dispatcher refuses)
    if experts:
        sequential_experts(bridge, experts)
    model = bridge._model_provider([])(pre_process=parallel_state.is_pipeline_first_stage(),
                                        post_process=parallel_state.is_pipeline_last_stage())
    bridge.load_weights([model], ckpt)
    local = {block.layer_number - 1: i for i, block in enumerate(model.decoder.layers)}  # global: local
    if plant and layer in local:
        target = model.decoder.layers[local[layer]]
        if plant == "eps":
            target.pre_mlp_layernorm.eps = 0.1
        elif plant == "expert":  # on the expert-parallel rank holding the global expert, at its local index
            mine = target.mlp.experts.local_experts
            j = expert - parallel_state.get_expert_model_parallel_rank() * len(mine)
            if 0 <= j < len(mine):
                with torch.no_grad():
                    mine[j].linear_fc2.weight.mul_(1.05)
        elif plant in ("router", "shared"):
            with torch.no_grad():
                target.get_submodule(MOE_PLANTS[plant]).weight.mul_(1.05)
        else:
            with torch.no_grad():
                target.get_submodule(PLANTS[plant]).weight.mul_(1.01)
    return model


def megatron_log_probs(model, ids, _mask):
    """GPTModel's logits gathered over the vocabulary shards, so every rank computes the same loss."""
    import torch

    seq = ids.shape[1]
    positions = torch.arange(seq).expand_as(ids)
    causal = torch.ones(seq, seq, dtype=torch.bool).triu(1)[None, None]  # True: masked
    logits = model(ids, positions, causal, runtime_gather_output=True)
    return logits[:, :-1].float().log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def run_pipeline(prof, model, steps: list[int], seen: list) -> None:
    """X.run_one's steps and stages (the same data, the same loss, SGD), each pass through megatron-core's
    pipeline schedule: one micro-batch of the whole batch, forward only in the log-prob stage. Every stage
    runs forward_step_func (the first embeds ids, the others take the hidden states received from the
    stage before); the last computes log-probs and loss (loss_func), kept in `seen` in the log-prob stage."""
    import torch
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func

    forward_backward = get_forward_backward_func()
    last = parallel_state.is_pipeline_last_stage()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, foreach=False)

    def forward_step(data_iterator, model):
        ids = next(data_iterator)
        seq = ids.shape[1]
        positions = torch.arange(seq).expand_as(ids)
        causal = torch.ones(seq, seq, dtype=torch.bool).triu(1)[None, None]  # True: masked
        output = model(ids, positions, causal, runtime_gather_output=True)

        def loss_func(logits):
            lp = logits[:, :-1].float().log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            return -lp.mean(), {"log_probs": lp.detach().clone()}

        return output, loss_func

    def run(ids, forward_only):
        return forward_backward(forward_step_func=forward_step, data_iterator=iter([ids]), model=[model],
                                num_microbatches=1, seq_length=ids.shape[1], micro_batch_size=ids.shape[0],
                                forward_only=forward_only)

    for step in steps:
        torch.manual_seed(1000 * step)  # the same data in every run, on every rank
        ids = torch.randint(0, X.VOCAB, (X.BATCH, X.SEQ))
        prof.start(profile_step=step)
        with prof.stage("actor_compute_log_prob", model=model), torch.no_grad():
            out = run(ids, True)
        if last:
            seen.append(out[0]["log_probs"])
        with prof.stage("actor_update", model=model):
            model.zero_grad(set_to_none=True)
            run(ids, False)
            opt.step()
        prof.stop()


def run_shards(prof, model, steps: list[int], log_probs, rank: int, world: int) -> None:
    """X.run_one's steps and stages with the batch split across the ranks (expert parallelism: each rank a
    data-parallel rank of the layers outside the experts, the experts seeing every rank's tokens): rank r
    takes rows r*B/world.., and its loss is its log-probs' sum over the whole batch's token count, so that
    the ranks' losses add up to the one-rank run's mean."""
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=0.05, foreach=False)
    share = X.BATCH // world
    for step in steps:
        torch.manual_seed(1000 * step)  # the same data as every run's; this rank's rows of it
        ids = torch.randint(0, X.VOCAB, (X.BATCH, X.SEQ))[rank * share:(rank + 1) * share]
        mask = torch.ones_like(ids)
        prof.start(profile_step=step)
        with prof.stage("actor_compute_log_prob", model=model), torch.no_grad():
            log_probs(model, ids, mask)
        with prof.stage("actor_update", model=model):
            model.zero_grad(set_to_none=True)
            (-log_probs(model, ids, mask).sum() / (X.BATCH * (X.SEQ - 1))).backward()
            opt.step()
        prof.stop()


# ---------------------------------------------------------------- one rank of one process group

def verl_log_probs(model, ids, _mask):
    """verl 0.9.1's Megatron engine's log-probs (verl/utils/megatron/tensor_parallel.py
    vocab_parallel_log_probs_from_logits): megatron-core's vocab-parallel cross entropy of the logits as each
    tensor-parallel rank holds them, not gathered; here of every position but the last, against the next ids."""
    import torch
    from megatron.core import tensor_parallel

    seq = ids.shape[1]
    positions = torch.arange(seq).expand_as(ids)
    causal = torch.ones(seq, seq, dtype=torch.bool).triu(1)[None, None]  # True: masked
    logits = model(ids, positions, causal)
    return -tensor_parallel.vocab_parallel_cross_entropy(logits[:, :-1].contiguous(), ids[:, 1:].contiguous())


def average_gradients(model, dp: int) -> None:
    """Megatron's DistributedDataParallel after the backward (finalize_model_grads, average_in_collective off):
    each gradient scaled by 1/dp, then summed over its data-parallel group: the expert-data-parallel group for
    an expert's parameters (megatron-core marks them allreduce=False), the data-parallel group for the rest."""
    import torch
    from megatron.core import parallel_state

    groups = {True: parallel_state.get_data_parallel_group(),
              False: parallel_state.get_expert_data_parallel_group()}
    for param in model.parameters():
        if param.grad is not None:
            torch.distributed.all_reduce(param.grad.div_(dp), group=groups[getattr(param, "allreduce", True)])


def run_verl(prof, model, steps: list[int], log_probs) -> None:
    """X.run_one's steps and stages as verl 0.9.1's Megatron engine runs them (verl/workers/engine/megatron/
    transformer_impl.py forward_backward_batch, verl/workers/utils/losses.py): each data-parallel rank takes
    its rows of the batch (its share, in rank order); each stage starts with the token count all-reduced over
    the data-parallel group (the log-prob pass too, as the engine's forward_backward_batch does); the loss is its
    log-probs' sum over that count of the whole batch, times the data-parallel size; the gradients
    are then averaged over the group (average_gradients), so the step is the one-rank run's."""
    import torch
    from megatron.core import parallel_state

    dp, rank = parallel_state.get_data_parallel_world_size(), parallel_state.get_data_parallel_rank()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, foreach=False)
    share = X.BATCH // dp
    for step in steps:
        torch.manual_seed(1000 * step)  # the same data as every run's; this rank's rows of it
        ids = torch.randint(0, X.VOCAB, (X.BATCH, X.SEQ))[rank * share:(rank + 1) * share]
        mask = torch.ones(ids.shape[0], ids.shape[1] - 1)  # the loss mask of the log-probs
        prof.start(profile_step=step)
        with prof.stage("actor_compute_log_prob", model=model), torch.no_grad():
            # every forward_backward_batch starts so, the forward-only pass too
            torch.distributed.all_reduce(mask.sum(), group=parallel_state.get_data_parallel_group())
            log_probs(model, ids, mask)
        with prof.stage("actor_update", model=model):
            model.zero_grad(set_to_none=True)
            tokens = mask.sum()
            torch.distributed.all_reduce(tokens, group=parallel_state.get_data_parallel_group())
            (-(log_probs(model, ids, mask) * mask).sum() / tokens * dp).backward()
            average_gradients(model, dp)
            opt.step()
        prof.stop()


def build(job: dict):
    if job["backend"] == "megatron":
        return (megatron_model(job["ckpt"], job["plant"], job["layer"]),
                verl_log_probs if job["name"].partition("-")[0] in VERL_RUNS else megatron_log_probs)
    return hf_model(job["ckpt"], job["backend"] == "fsdp2", job["backend"] == "hfloop"), X.log_probs


def worker(rank: int, world: int, port: int, jobs: list[dict], results) -> None:
    """The runs `jobs` one after the other, each with a model of its own and a profiler of its own."""
    import torch

    torch.set_num_threads(1)
    gloo(rank, world, port)
    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler

    megatron = jobs[0]["backend"] == "megatron"
    pp, ep, dp = jobs[0]["pp"], jobs[0]["ep"], jobs[0]["dp"]
    reporter = rank == 0  # the rank whose log-probs are the run's: the last stage's first
    if megatron:
        from megatron.core import parallel_state

        megatron_init(jobs[0]["tp"], pp, ep)
        reporter = parallel_state.is_pipeline_last_stage() and parallel_state.get_tensor_model_parallel_rank() == 0
    # Every model before the first profiler starts, as in a process of its own: msprobe's wrappers of
    # torch's functions would reach the functions a later model captures (megatron's activation).
    models = [build(job) for job in jobs]
    for job, (model, log_probs) in zip(jobs, models):
        if megatron:
            from megatron.core import tensor_parallel

            tensor_parallel.model_parallel_cuda_manual_seed(0)  # its RNG tracker as a fresh process's
        seen = []

        def recorded(model, ids, mask, log_probs=log_probs, seen=seen):
            out = log_probs(model, ids, mask)
            if not torch.is_grad_enabled():  # the log-prob stage's: compared across runs
                seen.append(out.detach().clone())
            return out

        prof = PrecisionDebuggerProfiler({"config_path": job["config"], "stages": list(STAGES)}, rank=rank,
                                         save_path=job["save_path"])
        if job["name"].partition("-")[0] in VERL_RUNS:
            run_verl(prof, model, job["steps"], recorded)
        elif pp > 1:
            run_pipeline(prof, model, job["steps"], seen)
        elif ep > 1:
            run_shards(prof, model, job["steps"], recorded, rank, world)
        else:
            X.run_one(prof, model, "golden", job["steps"], recorded)
        if dp > 1:  # each rank its share of the batch: the run's log-probs are all of them, in rank order
            shares = [None] * world
            torch.distributed.all_gather_object(shares, torch.stack(seen).tolist())
            if rank == 0:
                results.put((job["name"], torch.cat([torch.tensor(s) for s in shares], dim=1).tolist()))
        elif reporter:
            results.put((job["name"], torch.stack(seen).tolist()))
    torch.distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(jobs: list[dict], world: int) -> dict[str, list]:
    """Every rank of one process group in a process of its own (megatron's and msprobe's state is per
    process); the log-probs of each run."""
    import torch.multiprocessing as mp

    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(worker, args=(world, free_port(), jobs, results), nprocs=world, join=True)
    return dict(results.get() for _ in jobs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--arch", choices=ARCHS, default="qwen2")
    ap.add_argument("--level", choices=("mix", "L0", "L1"), default="mix")
    ap.add_argument("--runs", default="hf,tp1,tp2,tp1-fc2")
    ap.add_argument("--layer", type=int, default=2, help="the planted layer K")
    ap.add_argument("--steps", default="1")
    a = ap.parse_args(argv)
    layers = moe_layers(a.arch)
    if not 0 <= a.layer < layers:
        raise SystemExit(f"--layer is a layer 0..{layers - 1}")
    runs = [r for r in a.runs.split(",") if r]
    parsed = [parse_run(r, a.arch) for r in runs]
    plants = MOE_PLANTS if a.arch in MOE_ARCHS else PLANTS
    steps = [int(s) for s in a.steps.split(",")]
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    import torch

    torch.set_num_threads(1)
    out = os.path.abspath(a.out)
    ckpt = os.path.join(out, "checkpoint")
    write_checkpoint(ckpt, a.arch)
    cfg = os.path.join(out, f"config-{a.level}.json")
    with open(cfg, "w") as f:
        json.dump(X.config_doc(a.level, "statistics"), f)
    path = os.path.join(out, "manifest.json")
    manifest = json.load(open(path)) if os.path.exists(path) else {"runs": {}}
    manifest.update({"arch": a.arch, "level": a.level, "layer": a.layer, "layers": layers, "steps": steps,
                     "checkpoint": "checkpoint"})
    if a.arch in MOE_ARCHS:
        manifest["expert"] = MOE_EXPERT
    groups = {}  # (transformers or megatron, tp, pp, ep, dp): its runs' jobs, in the order given
    for name, (backend, tp, pp, ep, dp, plant) in zip(runs, parsed):
        save_path = os.path.join(out, name)
        shutil.rmtree(save_path, ignore_errors=True)  # the runtime would write beside an old dump
        groups.setdefault((backend == "megatron", tp, pp, ep, dp), []).append(
            {"name": name, "backend": backend, "plant": plant, "layer": a.layer, "ckpt": ckpt, "config": cfg,
             "steps": steps, "save_path": save_path, "tp": tp, "pp": pp, "ep": ep, "dp": dp})
    log_probs = {}
    for (_, tp, pp, ep, dp), jobs in groups.items():
        started = time.monotonic()
        log_probs.update((name, torch.tensor(lp)) for name, lp in run(jobs, tp * pp * dp).items())
        print(f"{', '.join(j['name'] for j in jobs)}: written in {time.monotonic() - started:.1f} s", flush=True)
    for name, (backend, tp, pp, ep, dp, plant) in zip(runs, parsed):
        for step, stage, rank in itertools.product(steps, STAGES, range(tp * pp * dp)):
            if not glob.glob(os.path.join(out, name, f"step_{step}", stage, "*", f"rank{rank}", "dump.json")):
                raise SystemExit(f"{name}: msprobe wrote no dump.json for step {step} {stage} rank{rank}")
        manifest["runs"][name] = {"backend": backend, "tp": tp, "pp": pp, "ep": ep, "dp": dp, "plant": plant,
                                  "layer": a.layer if plant else None,
                                  "expect_module": f"decoder.layers.{a.layer}.{plants[plant]}" if plant else None}
        if plant == "expert":
            manifest["runs"][name]["expert"] = MOE_EXPERT

    reference = next((r for r, p in zip(runs, parsed) if p[-1] is None), None)
    bad = []
    for name, (*_, plant) in zip(runs, parsed):
        if reference is None:
            break
        diff = (log_probs[name] - log_probs[reference]).abs().max().item()
        manifest["runs"][name]["log_prob_diff"] = diff
        print(f"{name}: max |log-prob - {reference}'s| = {diff:.3g}", flush=True)
        if (diff > AGREE) != bool(plant):
            bad.append(name)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1)
    if bad:
        raise SystemExit(f"log-probs against {reference}: {', '.join(bad)} "
                         f"{'differ' if len(bad) > 1 else 'differs'} where unplanted or agree where planted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
