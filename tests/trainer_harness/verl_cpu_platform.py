"""verl 0.9.1 on CPU: a platform plugin, loaded in every process that imports verl.

verl imports the modules named in VERL_USE_EXTERNAL_MODULES at `import verl` (verl/__init__.py), in the
driver, in every Ray worker and in vLLM's engine processes (verl's worker extension imports verl there);
with VERL_PLATFORM=cpu verl then uses the platform registered here. This is the mechanism verl documents
for new hardware (verl/plugin/platform/README.md). Nothing here is part of the package under test.

Each SHIM below names the error it avoids; docs/verl-trainer-on-cpu.md lists them. None touches the
profiler backend's selection, the trainer's start/stop_profile calls, vLLMHttpServer, the models, or how
the trainer numbers steps and shards the batch."""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
import types
from contextlib import contextmanager

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

SHIMS: dict[str, str] = {}  # name -> the error it avoids (docs/verl-trainer-on-cpu.md)


def _cpu_module():
    """torch.cpu lacks what verl calls on the device module (engine_workers.py, flops_counter.py)."""
    mod = types.SimpleNamespace(**{k: getattr(torch.cpu, k) for k in dir(torch.cpu) if not k.startswith("_")})
    vars(mod).update(
        max_memory_allocated=lambda *a, **k: 0, max_memory_reserved=lambda *a, **k: 0,
        memory_allocated=lambda *a, **k: 0, memory_reserved=lambda *a, **k: 0, mem_get_info=lambda *a, **k: (0, 0),
        reset_peak_memory_stats=lambda *a, **k: None, empty_cache=lambda: None,
        get_device_name=lambda *a, **k: "CPU", is_available=lambda: True, device_count=lambda: 1,
        set_device=lambda *a, **k: None, current_device=lambda: 0, synchronize=lambda *a, **k: None)
    return mod


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    device_name = "cpu"
    vendor_name = "cpu"
    device_module = _cpu_module()

    def is_available(self):
        return True

    def current_device(self):
        return "cpu"

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
        # Ray refuses "CPU" inside resources={...}; the run declares GPUs it does not have
        # (ray_kwargs.ray_init.num_gpus), which Ray allows, and every actor asks for one.
        return "GPU"

    def ray_noset_envvars(self):
        return []

    def is_ipc_supported(self):
        return False  # verl's weight sync then takes its shared-memory path

    def cudart(self):
        return None


# ------------------------------------------------------------------------------------------ shims


def _shim(name: str, error: str):
    def deco(fn):
        SHIMS[name] = error
        return fn
    return deco


@_shim("process_group_gloo", "ValueError: Duplicate device type cpu (verl builds the backend 'cpu:gloo,cpu:gloo')")
def _process_group_gloo():
    import torch.distributed as dist

    original = dist.init_process_group
    if getattr(original, "_cpu_shim", False):
        return

    @functools.wraps(original)
    def init_process_group(*args, backend=None, **kwargs):
        if isinstance(backend, str) and backend.replace(" ", "") == "cpu:gloo,cpu:gloo":
            backend = "gloo"
        return original(*args, backend=backend, **kwargs)

    init_process_group._cpu_shim = True
    dist.init_process_group = init_process_group


def _after_import(module_name: str, patch) -> None:
    """Run patch(module) now if the module is loaded, else right after its first import."""
    if module_name in sys.modules:
        patch(sys.modules[module_name])
        return

    class Loader(importlib.abc.Loader):
        def __init__(self, loader):
            self._loader = loader

        def create_module(self, spec):
            return self._loader.create_module(spec)

        def exec_module(self, module):
            self._loader.exec_module(module)
            patch(module)

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname != module_name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None and spec.loader is not None:
                spec.loader = Loader(spec.loader)
            return spec

    sys.meta_path.insert(0, Finder())


@_shim("ref_offload_without_pinned_memory",
       "RuntimeError: Cannot access accelerator device when none is available (FSDP2 forward-only "
       "hard-codes CPUOffloadPolicy(pin_memory=True), workers/engine/fsdp/transformer_impl.py)")
def _ref_offload():
    def patch(module):
        base = module.CPUOffloadPolicy
        if getattr(base, "_cpu_shim", False):
            return

        class CPUOffloadPolicyWithoutPinnedMemory(base):
            _cpu_shim = True

            def __init__(self, pin_memory: bool = True, *args, **kwargs):
                super().__init__(*args, pin_memory=False, **kwargs)

        module.CPUOffloadPolicy = CPUOffloadPolicyWithoutPinnedMemory

    _after_import("verl.workers.engine.fsdp.transformer_impl", patch)


@_shim("valuehead_eager_attention",
       "RuntimeError: model(...) is not a value head model, please install trl (utils/model.py's "
       "load_valuehead_model hard-codes attn_implementation='flash_attention_2')")
def _valuehead_attention():
    def patch(module):
        original = module.load_valuehead_model
        if getattr(original, "_cpu_shim", False):
            return

        @functools.wraps(original)
        def load_valuehead_model(*args, **kwargs):
            import transformers

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

        load_valuehead_model._cpu_shim = True
        module.load_valuehead_model = load_valuehead_model

    _after_import("verl.utils.model", patch)


@_shim("vllm_cpu_gemm_keeps_weight",
       "AttributeError: 'Parameter' object has no attribute 'weight_loader' (vLLM's CPU linear layers "
       "replace their weight after the first load, model_executor/layers/utils.py "
       "dispatch_cpu_unquantized_gemm(remove_weight=True); verl's weight sync loads into it again)")
def _vllm_keep_weight():
    def patch(module):
        original = module.dispatch_cpu_unquantized_gemm
        if getattr(original, "_cpu_shim", False):
            return

        @functools.wraps(original)
        def dispatch_cpu_unquantized_gemm(layer, remove_weight):
            return original(layer, remove_weight=False)

        dispatch_cpu_unquantized_gemm._cpu_shim = True
        module.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm

    _after_import("vllm.model_executor.layers.utils", patch)


# ------------------------------------------------------------------ fault injection (tests only)

PLANT_SCALE = 1.01


def _plant_rollout(spec: str) -> None:
    """VERL_CPU_PLANT_ROLLOUT="K:S": from the S-th weight sync on (sync 1 feeds step 1's rollout), the engine
    receives layer K's mlp.down_proj.weight scaled by 1.01: a change on the engine's side only."""
    layer, _, first = spec.partition(":")
    name = f"model.layers.{int(layer)}.mlp.down_proj.weight"
    first_sync = int(first or 1)

    def patch(module):
        cls = module.vLLMColocateWorkerExtension
        receive, load = cls.update_weights_from_ipc, cls._update_weights
        syncs = {"n": 0}

        def update_weights_from_ipc(self, *args, **kwargs):
            syncs["n"] += 1
            return receive(self, *args, **kwargs)

        def _update_weights(self, weights, *args, **kwargs):
            if syncs["n"] >= first_sync:
                weights = [(n, t * PLANT_SCALE if n == name else t) for n, t in weights]
            return load(self, weights, *args, **kwargs)

        cls.update_weights_from_ipc, cls._update_weights = update_weights_from_ipc, _update_weights

    _after_import("verl.workers.rollout.vllm_rollout.utils", patch)


def _plant_actor(layer: str) -> None:
    """VERL_CPU_PLANT_ACTOR=K: before the actor's first log-prob forward (after the weight sync that feeds
    step 1's rollout), its layer K mlp.down_proj.weight is scaled by 1.01 in place on every rank's shard:
    the trainer's side changes, the step 1 batch does not."""
    name = f"model.layers.{int(layer)}.mlp.down_proj.weight"

    def patch(module):
        cls = module.ActorRolloutRefWorker
        original = cls.compute_log_prob
        done = set()

        @functools.wraps(original)
        def compute_log_prob(self, *args, **kwargs):
            if id(self) not in done and getattr(self, "actor", None) is not None:
                done.add(id(self))
                params = dict(self.actor.engine.module.named_parameters())
                with torch.no_grad():
                    params[name].mul_(PLANT_SCALE)
            return original(self, *args, **kwargs)

        cls.compute_log_prob = compute_log_prob

    _after_import("verl.workers.engine_workers", patch)


def _hide_msprobe() -> None:
    """VERL_CPU_HIDE_MSPROBE=1: msprobe cannot be imported in this process, as where it is not installed."""

    class Hidden(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname == "msprobe" or fullname.startswith("msprobe."):
                raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
            return None

    sys.meta_path.insert(0, Hidden())


def _unresolved_stage(stage: str) -> None:
    """VERL_CPU_UNRESOLVED_STAGE=NAME: this package's runtime finds no model for that stage, as on a worker
    layout its table does not know (the guide's "PrecisionDebugger model not resolved")."""

    def patch(module):
        from verl_pdbg_conf.verl_facts.stages import STAGES

        hidden = STAGES[stage].models
        resolve = module.resolve_model

        def resolve_model(owner, candidates):
            return (None, None) if tuple(candidates) == tuple(hidden) else resolve(owner, candidates)

        module.resolve_model = resolve_model

    _after_import("verl_pdbg_conf.runtime.model", patch)


def install() -> None:
    os.environ.setdefault("VERL_PLATFORM", "cpu")
    for fn in (_process_group_gloo, _ref_offload, _valuehead_attention, _vllm_keep_weight):
        fn()
    if os.environ.get("VERL_CPU_PLANT_ROLLOUT"):
        _plant_rollout(os.environ["VERL_CPU_PLANT_ROLLOUT"])
    if os.environ.get("VERL_CPU_PLANT_ACTOR"):
        _plant_actor(os.environ["VERL_CPU_PLANT_ACTOR"])
    if os.environ.get("VERL_CPU_HIDE_MSPROBE"):
        _hide_msprobe()
    if os.environ.get("VERL_CPU_UNRESOLVED_STAGE"):
        _unresolved_stage(os.environ["VERL_CPU_UNRESOLVED_STAGE"])


install()
