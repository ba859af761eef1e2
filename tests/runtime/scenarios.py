"""Runtime scenarios, each run in a process of its own: msprobe wraps torch's APIs for the life
of a process and its PrecisionDebugger is a process singleton, so every msprobe configuration
and every fault injection that must not leak gets a fresh interpreter.

    python scenarios.py <scenario> <result.json> [args...]

Each scenario writes a JSON result (dump tree, warnings, return values) for the tests to check.
Models are tiny torch modules on CPU in a gloo process group, so msprobe writes rank{R}/."""

from __future__ import annotations

import ast
import copy
import json
import logging
import os
import sys
import types

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

GUIDE_ORDER = ("actor_compute_log_prob", "ref_compute_log_prob", "actor_update")


# ---- shared pieces -------------------------------------------------------------------------------

class Capture(logging.Handler):
    """The runtime's warnings, as messages."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        logging.getLogger("verl_pdbg_conf.runtime").addHandler(self)

    def emit(self, record):
        self.messages.append(record.getMessage())

    def take(self) -> list[str]:
        out, self.messages = self.messages, []
        return out


def gloo(rank: int = 0, world: int = 1, port: int | None = None) -> None:
    import socket

    import torch.distributed as dist

    if port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)


def tiny_model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


def batch():
    import torch

    return torch.linspace(-1.0, 1.0, 32).reshape(4, 8)


def work(model, x) -> float:
    """The same forward and backward in every stage, so identical stages dump identical records."""
    model.zero_grad()
    loss = model(x).sum()
    loss.backward()
    return round(float(loss.detach()), 6)


class Engine:
    def __init__(self, module):
        self.module = module


class Role:
    def __init__(self, module):
        self.engine = Engine(module)


class ActorRefLayout:
    """verl 0.9.1's ActorRolloutRefWorker attribute layout: actor.engine.module, ref.engine.module."""

    def __init__(self, actor, ref):
        self.actor, self.ref = Role(actor), Role(ref)


STAGE_MODEL = {"actor_compute_log_prob": "actor", "ref_compute_log_prob": "ref", "actor_update": "actor"}


def tree(root: str) -> dict:
    """Every file under root with its size, and the record count of every dump.json."""
    files, records = {}, {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            files[rel] = os.path.getsize(path)
            if name == "dump.json":
                with open(path) as f:
                    records[rel] = len(json.load(f).get("data", {}))
    return {"files": files, "records": records}


def write(result_path: str, result: dict) -> None:
    from verl_pdbg_conf.runtime import compat

    result["msprobe"] = compat.release()  # the release this process ran on
    with open(result_path, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)


# ---- scenarios -----------------------------------------------------------------------------------

def layout(result_path: str, config: str, out: str) -> None:
    """Two profiled steps x the guide's three stages, driven as verl's DistProfiler drives the backend."""
    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler

    cap = Capture()
    gloo()
    model = tiny_model()
    worker = ActorRefLayout(model, copy.deepcopy(model))
    prof = PrecisionDebuggerProfiler({"config_path": config, "stages": list(GUIDE_ORDER), "strict": True},
                                     rank=0, save_path=out)
    methods = {s: prof.annotate(role=s)(lambda self, x, _r=STAGE_MODEL[s]: work(getattr(self, _r).engine.module, x))
               for s in GUIDE_ORDER}
    results = []
    for step in (1, 2):
        prof.start(role="train", profile_step=step)
        results += [methods[s](worker, batch()) for s in GUIDE_ORDER]
        prof.stop()
    results.append(methods["actor_update"](worker, batch()))  # a step not profiled: no dump
    plain = [work(model, batch())] * 7
    write(result_path, {"tree": tree(out), "warnings": cap.take(), "results": results, "plain": plain})


def ranks(result_path: str, rank: str, world: str, port: str, config: str, out: str) -> None:
    """One rank of a gloo group; msprobe's own `rank` filter decides which rank dumps."""
    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler

    cap = Capture()
    gloo(int(rank), int(world), int(port))
    model = tiny_model()
    worker = ActorRefLayout(model, copy.deepcopy(model))
    prof = PrecisionDebuggerProfiler({"config_path": config}, rank=int(rank), save_path=out)
    update = prof.annotate(role="actor_update")(lambda self, x: work(self.actor.engine.module, x))
    ref = prof.annotate(role="ref_compute_log_prob")(lambda self, x: work(self.ref.engine.module, x))
    prof.start(profile_step=1)
    results = [ref(worker, batch()), update(worker, batch())]
    prof.stop()
    import torch.distributed as dist

    dist.barrier()
    write(result_path, {"warnings": cap.take(), "results": results})


def _trainer_class():
    """verl 0.9.1's PPOTrainer profiling methods, compiled from the installed source.

    trainer_base cannot be imported here (it needs transfer_queue and a rollout stack), but its
    _start_profiling/_stop_profiling are what decide when workers get start/stop_profile."""
    import importlib.util

    path = os.path.join(os.path.dirname(importlib.util.find_spec("verl").origin),
                        "trainer", "ppo", "v1", "trainer_base.py")
    with open(path) as f:
        mod = ast.parse(f.read())
    cls = next(n for n in mod.body if isinstance(n, ast.ClassDef) and n.name == "PPOTrainer")
    wanted = {"_start_profiling", "_stop_profiling", "_start_rollout_profiling", "_stop_rollout_profiling",
              "_rollout_server_managers"}
    cls.body = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    cls.bases, cls.keywords, cls.decorator_list = [], [], []
    assert {n.name for n in cls.body} == wanted, "verl's PPOTrainer changed"
    module = types.ModuleType("verl.trainer.ppo.v1.trainer_base")
    exec(compile(ast.Module(body=[cls], type_ignores=[]), path, "exec"), module.__dict__)
    return module


class WorkerGroup:
    """A Ray worker group of one local worker: start/stop_profile reach the worker directly."""

    def __init__(self, worker, calls: list):
        self.worker, self.calls = worker, calls

    def start_profile(self, **kw):
        self.calls.append(("start", type(self.worker).__name__, kw.get("profile_step")))
        self.worker.start_profile(**kw)

    def stop_profile(self, **kw):
        self.calls.append(("stop", type(self.worker).__name__))
        self.worker.stop_profile(**kw)


def verl_dist(result_path: str, config: str, out: str) -> None:
    """verl 0.9.1's real DistProfiler and DistProfilerExtension dispatching to this profiler."""
    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler, install

    install()
    install()  # idempotent
    from omegaconf import OmegaConf
    from verl.utils.profiler import DistProfiler, DistProfilerExtension, ProfilerConfig
    from verl.utils.profiler.config import PrecisionDebuggerToolConfig

    from verl_pdbg_conf.runtime import patch

    cap = Capture()
    gloo()
    model = tiny_model()
    cfg = ProfilerConfig(tool="precision_debugger", enable=True, save_path=out)
    tool = PrecisionDebuggerToolConfig(config_path=config, stages=None, strict=False)

    class ActorRolloutRefWorker(DistProfilerExtension):
        def __init__(self):
            self.actor, self.ref = Role(model), Role(copy.deepcopy(model))
            DistProfilerExtension.__init__(self, DistProfiler(rank=0, config=cfg, tool_config=tool))

        @DistProfiler.annotate(color="blue", role="actor_compute_log_prob")
        def compute_log_prob(self, data):
            return work(self.actor.engine.module, batch())

        @DistProfiler.annotate(color="olive", role="ref_compute_log_prob")
        def compute_ref_log_prob(self, data):
            return work(self.ref.engine.module, batch())

        @DistProfiler.annotate(color="red", role="actor_update", scheduled=True)
        def update_actor(self, data):
            return work(self.actor.engine.module, batch())

        @DistProfiler.annotate(color="gray", role="rollout_generate")
        def generate_sequences(self, data):
            return "generated"

    class TrainingWorker(DistProfilerExtension):
        """verl 0.9.1's TrainingWorker layout: engine.module, config.model_type."""

        def __init__(self, model_type):
            self.engine = Engine(copy.deepcopy(model))
            self.config = types.SimpleNamespace(model_type=model_type)
            DistProfilerExtension.__init__(self, DistProfiler(rank=0, config=cfg, tool_config=tool))

        @DistProfiler.annotate(color="red", role="train_batch")
        def train_batch(self, data):
            return work(self.engine.module, batch())

        def train_mini_batch(self, data, n=3):
            return [self.train_batch(data) for _ in range(n)]

    actor, critic, inner = ActorRolloutRefWorker(), TrainingWorker("value_model"), TrainingWorker("language_model")
    impls = [type(w.profiler._impl).__module__ + "." + type(w.profiler._impl).__name__ for w in (actor, critic)]
    rec: dict = {"impl": impls, "ours": all(isinstance(w.profiler._impl, PrecisionDebuggerProfiler)
                                             for w in (actor, critic, inner))}

    def actor_step(data=None):
        return [actor.compute_log_prob(data), actor.compute_ref_log_prob(data), actor.update_actor(data),
                actor.generate_sequences(data)]

    rec["results"] = []
    # profiled steps 1 and 3, step 2 not profiled (the trainer sends no start_profile)
    for step, profiled in ((1, True), (2, False), (3, True)):
        if profiled:
            actor.start_profile(role="train", profile_step=step)
            critic.start_profile(profile_step=step)
        rec["results"].append(actor_step())
        rec["results"].append(critic.train_mini_batch(None))
        if profiled:
            actor.stop_profile(run_command=step == 3)
            critic.stop_profile(run_command=step == 3)
    rec["warnings_main"] = cap.take()

    # the actor's own TrainingWorker runs train_batch too: not the critic's update
    inner.start_profile(profile_step=3)
    rec["inner"] = inner.train_mini_batch(None)
    inner.stop_profile()
    rec["warnings_inner"] = cap.take()

    # a batch carrying its global step (DataProto meta_info) wins over start_profile's
    actor.start_profile(role="train", profile_step=4)
    actor.update_actor(types.SimpleNamespace(meta_info={"global_steps": 40}))
    actor.stop_profile()

    # profile_continuous_steps with verl's own trainer logic, steps [5, 6] (one window)
    trainer_mod = _trainer_class()
    calls: list = []

    def run(trainer_steps, continuous, retag):
        trainer = trainer_mod.PPOTrainer()
        trainer.config = OmegaConf.create({"global_profiler": {
            "tool": "precision_debugger", "steps": trainer_steps, "profile_continuous_steps": continuous}})
        trainer.actor_rollout_wg = trainer.ref_policy_wg = WorkerGroup(actor, calls)  # hybrid: aliased
        trainer.critic_wg = WorkerGroup(critic, calls)
        trainer.use_reference_policy = trainer.use_critic = True
        trainer.prev_step_profile, trainer.next_step_profile = False, False
        trainer.total_training_steps = max(trainer_steps)
        if retag:
            patch._patch_trainer(trainer_mod)
        for step in range(min(trainer_steps), max(trainer_steps) + 1):
            trainer.global_steps = step
            trainer.curr_step_profile = step in trainer_steps
            trainer._start_profiling()
            actor_step()
            critic.train_mini_batch(None)
            trainer._stop_profiling()

    run([8, 9], continuous=True, retag=False)  # verl alone: one start_profile(8) for the window
    rec["calls_unpatched"], calls[:] = list(calls), []
    run([5, 6], continuous=True, retag=True)
    rec["calls_patched"], calls[:] = list(calls), []
    rec["warnings_continuous"] = cap.take()
    patch._unpatch_trainer(trainer_mod)
    rec["unpatched_restored"] = not hasattr(trainer_mod.PPOTrainer._start_profiling, patch._MARK)

    # uninstall: DistProfilers built afterwards use verl's own backend again
    from verl_pdbg_conf.runtime import uninstall

    uninstall()
    rec["after_uninstall"] = type(DistProfiler(rank=0, config=cfg, tool_config=tool)._impl).__module__
    install()
    rec["after_reinstall"] = type(DistProfiler(rank=0, config=cfg, tool_config=tool)._impl).__module__
    rec["tree"] = tree(out)
    rec["plain"] = work(model, batch())
    write(result_path, rec)


def matrix(result_path: str, config: str, out: str) -> None:
    """strict / non-strict with injected faults. Each case: does construction or the call raise,
    does the stage run and return its result unchanged, which warnings, which dumps."""
    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler
    from verl_pdbg_conf.runtime import session as runtime_session

    cap = Capture()
    counter = {"n": 0}
    cases: dict = {}

    def stage_fn(owner, x):
        counter["n"] += 1
        return work(owner.actor.engine.module, x) if hasattr(owner, "actor") else ("ran", counter["n"])

    def case(name, tool_config, strict, owner=None, calls=3, stage="actor_update"):
        runtime_session.forget_warnings()
        counter["n"] = 0
        save = os.path.join(out, name + ("-strict" if strict else ""))
        rec = {"construct": None, "call": None, "results": []}
        try:
            prof = PrecisionDebuggerProfiler(dict(tool_config, strict=strict), rank=0, save_path=save)
        except Exception as e:
            rec["construct"] = type(e).__name__
            rec["construct_msg"] = str(e)
        else:
            fn = prof.annotate(role=stage)(stage_fn)
            try:
                for step in range(1, calls + 1):  # one call per profiled step
                    prof.start(profile_step=step)
                    rec["results"].append(fn(owner if owner is not None else worker, batch()))
                    prof.stop()
            except Exception as e:
                rec["call"] = type(e).__name__
                rec["call_msg"] = str(e)
                prof.stop()
        rec["ran"] = counter["n"]
        rec["running_after"] = msprobe_running()
        rec["warnings"] = cap.take()
        rec["tree"] = tree(save)
        cases[name + ("-strict" if strict else "")] = rec

    def msprobe_running():
        """msprobe's dump switches after a case: [Runtime.is_running, service.primitive_switch]."""
        runtime = sys.modules.get("msprobe.core.common.runtime")
        dbg = runtime_session._state.debugger
        if runtime is None or dbg is None:
            return None
        return [bool(runtime.Runtime.is_running), bool(getattr(dbg.service, "primitive_switch", False))]

    good = {"config_path": config}

    # msprobe missing: blocked before anything imports it
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "msprobe" or k.startswith("msprobe.")}
    assert not saved, "msprobe imported too early"
    sys.modules["msprobe"] = None
    gloo()
    model = tiny_model()
    worker = ActorRefLayout(model, copy.deepcopy(model))
    for strict in (False, True):
        case("msprobe-missing", good, strict)
    del sys.modules["msprobe"]

    for strict in (False, True):
        case("baseline", good, strict)
        case("config-path-missing", {}, strict)
        case("config-path-nonexistent", {"config_path": os.path.join(out, "nope.json")}, strict)
        case("unknown-stage", dict(good, stages=["actor_update", "actor_updte"]), strict)
        case("model-not-resolved", good, strict, owner=types.SimpleNamespace())

    from msprobe.pytorch import PrecisionDebugger

    def boom(*a, **k):
        raise RuntimeError("injected msprobe failure")

    from verl_pdbg_conf.runtime import compat

    for method in ("start", "stop"):
        original = PrecisionDebugger.__dict__[method]
        setattr(PrecisionDebugger, method, classmethod(boom))
        for strict in (False, True):
            case(f"{method}-raises", good, strict)
        if method == "stop":
            # msprobe started, its stop() failed: the runtime must switch collection off itself
            # (26.x: service._disable_dump_runtime(); 8.x: compat's own switch-off). Replayed with
            # that switch-off made a no-op, to show what it changes; then switched off for real.
            disable_dump, compat.disable_dump = compat.disable_dump, lambda service: None
            case("stop-raises-unstopped", good, False, calls=1)
            compat.disable_dump = disable_dump
            disable_dump(PrecisionDebugger._instance.service)
        setattr(PrecisionDebugger, method, original)
        case(f"after-{method}-raises", good, False)  # msprobe works again and its dump has not grown

    # msprobe's data processor raising inside a hook (as on a full disk). 26.x lets it out of the hook:
    # the runtime's guard stops collection for the rest of the stage, which runs on. 8.x catches it in
    # its own collector (and logs it there). "-unstopped" replays it with the switch-off a no-op.
    processor = type(PrecisionDebugger._instance.service.data_collector.data_processor)
    own = processor.__dict__.get("analyze_forward_output")

    def full_disk(self, *a, **k):
        raise OSError(28, "injected: no space left on device")

    processor.analyze_forward_output = full_disk
    for strict in (False, True):
        case("collect-raises", good, strict)
    disable_dump, compat.disable_dump = compat.disable_dump, lambda service: None
    case("collect-raises-unstopped", good, False)
    compat.disable_dump = disable_dump
    if own is None:
        del processor.analyze_forward_output
    else:
        processor.analyze_forward_output = own
    case("after-collect-raises", good, False)

    # the stage's own exception reaches the caller unchanged, and the session is closed
    def failing(owner, x):
        counter["n"] += 1
        raise KeyError("stage failed")

    for strict in (False, True):
        runtime_session.forget_warnings()
        name = "stage-raises" + ("-strict" if strict else "")
        prof = PrecisionDebuggerProfiler(dict(good, strict=strict), rank=0, save_path=os.path.join(out, name))
        prof.start(profile_step=1)
        try:
            prof.annotate(role="actor_update")(failing)(worker, batch())
            raised = None
        except Exception as e:
            raised = type(e).__name__
        prof.stop()
        cases[name] = {"call": raised, "active": runtime_session._state.active is not None, "warnings": cap.take()}
    case("after-stage-raises", good, False)

    # nothing is lost: a dump from an earlier run stays, the new session writes beside it
    earlier = os.path.join(out, "earlier", "step_1", "actor_update", "step0", "rank0")
    os.makedirs(earlier)
    with open(os.path.join(earlier, "dump.json"), "w") as f:
        f.write('{"earlier": true}')
    runtime_session.forget_warnings()
    prof = PrecisionDebuggerProfiler(good, rank=0, save_path=os.path.join(out, "earlier"))
    fn = prof.annotate(role="actor_update")(stage_fn)
    prof.start(profile_step=1)
    fn(worker, batch())
    fn(worker, batch())  # the same stage twice in one step: a second sibling, not an overwrite
    prof.stop()
    with open(os.path.join(earlier, "dump.json")) as f:
        kept = f.read()
    cases["earlier-run"] = {"kept": kept, "warnings": cap.take(), "tree": tree(os.path.join(out, "earlier"))}

    # the stage API for other loops: context manager with an explicit model, and a decorator
    runtime_session.forget_warnings()
    prof = PrecisionDebuggerProfiler(good, rank=0, save_path=os.path.join(out, "loop"))
    results = []
    for step in (1, 2, 3):
        if step != 2:
            prof.start(profile_step=step)
        with prof.stage("actor_compute_log_prob", model=model):
            results.append(work(model, batch()))
        decorated = prof.stage("ref_compute_log_prob")(lambda self, x: work(self.ref.engine.module, x))
        results.append(decorated(worker, batch()))
        prof.stop()
    cases["loop"] = {"results": results, "warnings": cap.take(), "tree": tree(os.path.join(out, "loop"))}
    write(result_path, {"cases": cases, "plain": work(model, batch())})


def ray_worker(result_path: str, config: str, out: str) -> None:
    """install() as Ray's worker_process_setup_hook, seen from inside a real local Ray worker."""
    import ray

    ray.init(address="local", num_cpus=1,  # a cluster of its own, whatever else runs here
             include_dashboard=False, logging_level="ERROR", log_to_driver=False,
             runtime_env={"worker_process_setup_hook": "verl_pdbg_conf.runtime.install"})

    @ray.remote
    def probe(config, out):
        import sys

        from verl_pdbg_conf.runtime import patch

        rec = {"hook_installed": patch.installed(),
               "verl_imported_by_hook": any(m == "verl" or m.startswith("verl.") for m in sys.modules)}
        import verl.utils.profiler.precision_debugger_profile as verl_backend
        from verl.utils.profiler import DistProfiler, ProfilerConfig

        rec["module_attr"] = verl_backend.PrecisionDebuggerProfiler.__module__
        profiler = DistProfiler(rank=0, config=ProfilerConfig(tool="precision_debugger", enable=True, save_path=out),
                                tool_config={"config_path": config})
        rec["impl"] = type(profiler._impl).__module__ + "." + type(profiler._impl).__name__
        return rec

    try:
        rec = ray.get(probe.remote(config, out), timeout=120)
    finally:
        ray.shutdown()
    write(result_path, rec)


if __name__ == "__main__":
    scenario, result, *rest = sys.argv[1:]
    {"layout": layout, "ranks": ranks, "verl": verl_dist, "matrix": matrix, "ray": ray_worker}[scenario](result, *rest)
