"""Reliability scenarios for the runtime profiler, each run in a process of its own (msprobe wraps
torch's APIs for the life of a process and its PrecisionDebugger is a process singleton).

    python reliability_driver.py <scenario> <result.json> [args...]

Scenarios:
    reference   <steps>                              unprofiled training, msprobe never imported
    faults      <config> <out> [<tmpfs>]             every fault case of one msprobe config, in turn
    victim      <config> <out> <mode> <marker>       training that the parent SIGKILLs mid-dump
    rerun       <config> <out>                       the run again, same save_path
    writer      <config> <out> <rank> <world> <port> <batch> <seed> <barrier-dir> <n>
                                                     one of several processes writing one save_path

Training is a tiny actor/ref pair on CPU driven through the runtime as verl drives it (start(profile_step=N),
the annotated stage methods, stop()), in a gloo group so msprobe writes rank{R}/. Results (losses as
float.hex, a sha256 of every parameter and optimizer buffer) are compared bit for bit with `reference`."""

from __future__ import annotations

import contextlib
import copy
import errno
import hashlib
import json
import os
import resource
import signal
import sys
import time

T0 = time.monotonic()
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

STAGES = ("actor_compute_log_prob", "ref_compute_log_prob", "actor_update")
STEPS = (1, 2, 3, 4)
FAULT_STEP = 3
SEED = 1234
BATCH = 4
# An earlier run's dump in every case's save_path: it must come out byte for byte unchanged.
EARLIER = {"step_1/actor_update/step0/rank0/dump.json": '{"earlier": "run", "data": {}}',
           "step_3/actor_compute_log_prob/step0/rank0/dump.json": '{"earlier": "run", "data": {}}',
           "step_3/actor_compute_log_prob/step0/rank0/stack.json": "{}"}


# ---- shared pieces -------------------------------------------------------------------------------

# Shared with the runtime scenarios: one copy of the log capture and the gloo set-up.
sys.path.insert(0, os.path.join(REPO, "tests", "runtime"))
from scenarios import Capture, Role, gloo  # noqa: E402


class Worker:
    """verl 0.9.1's ActorRolloutRefWorker layout (actor.engine.module, ref.engine.module) and its three
    profiled stages; the update takes an optimizer step, so every step depends on all earlier ones."""

    def __init__(self, width: int = 16):
        import torch

        torch.manual_seed(SEED)
        actor = torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.Tanh(), torch.nn.Linear(width, 1))
        self.actor, self.ref = Role(actor), Role(copy.deepcopy(actor))
        self.opt = torch.optim.SGD(actor.parameters(), lr=0.05, momentum=0.9)

    def compute_log_prob(self, x):
        import torch

        with torch.no_grad():
            return self.actor.engine.module(x).squeeze(-1)

    def compute_ref_log_prob(self, x):
        import torch

        with torch.no_grad():
            return self.ref.engine.module(x).squeeze(-1)

    def update_actor(self, x, old, ref):
        self.opt.zero_grad()
        out = self.actor.engine.module(x).squeeze(-1)
        loss = ((out - old.tanh()) ** 2).mean() + 0.1 * ((out - ref) ** 2).mean() + out.mean()
        loss.backward()
        self.opt.step()
        return loss.detach()


METHODS = {"actor_compute_log_prob": Worker.compute_log_prob, "ref_compute_log_prob": Worker.compute_ref_log_prob,
           "actor_update": Worker.update_actor}


def digest(worker: Worker) -> str:
    h = hashlib.sha256()
    for module in (worker.actor.engine.module, worker.ref.engine.module):
        for name, p in sorted(module.state_dict().items()):
            h.update(name.encode())
            h.update(p.detach().contiguous().numpy().tobytes())
    for state in worker.opt.state.values():
        for name, t in sorted(state.items()):
            h.update(name.encode())
            h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def exc_record(e: BaseException) -> dict:
    """Type, message and the chain of causes (type, errno) of an exception."""
    chain, cur = [], e.__cause__ or e.__context__
    while cur is not None and len(chain) < 5:
        chain.append({"type": type(cur).__name__, "msg": str(cur)[:300], "errno": getattr(cur, "errno", None)})
        cur = cur.__cause__ or cur.__context__
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    return {"type": type(e).__name__, "msg": str(e)[:500], "chain": chain,
            "notes": [str(n) for n in getattr(e, "__notes__", ())],
            "where": [f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}" for f in frames[-4:]]}


def train(prof, *, batch: int = BATCH, seed: int = SEED, steps=STEPS, before=None, after=None,
          on_stage=None, width: int = 16) -> dict:
    """Train `steps` steps; profiled through `prof` when given (None: verl's non-profiled path).

    before(step) / after(step) run around each step (fault injection); on_stage(step, stage) runs
    inside each stage call, while its msprobe session is open."""
    import torch

    worker = Worker(width)
    methods = {}
    for stage, fn in METHODS.items():
        def call(owner, *args, _fn=fn, _stage=stage):
            if on_stage is not None:
                on_stage(owner.step, _stage)
            return _fn(owner, *args)

        methods[stage] = prof.annotate(role=stage)(call) if prof is not None else call
    gen = torch.Generator().manual_seed(seed)
    rec: dict = {"losses": [], "outputs": [], "raised": None, "steps_done": 0}
    for step in steps:
        worker.step = step
        x = torch.randn(batch, 8, generator=gen)
        if before is not None:
            before(step)
        try:
            if prof is not None:
                prof.start(profile_step=step)
            try:
                old = methods["actor_compute_log_prob"](worker, x)
                ref = methods["ref_compute_log_prob"](worker, x)
                loss = methods["actor_update"](worker, x, old, ref)
            finally:
                if prof is not None:
                    prof.stop()
        except Exception as e:
            rec["raised"] = dict(exc_record(e), step=step)
            break
        finally:
            if after is not None:
                after(step)
        rec["outputs"].append([float(v).hex() for v in (*old.tolist(), *ref.tolist())])
        rec["losses"].append(float(loss).hex())
        rec["steps_done"] = step
    rec["params"] = digest(worker)
    return rec


def sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def snapshot(root: str) -> dict:
    """relpath -> sha256 of every file under root."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = sha(path)
    return out


def dumps(root: str) -> dict:
    """relpath of every dump.json under root -> its record keys, or None where it does not parse."""
    out = {}
    for dirpath, _, names in os.walk(root):
        if "dump.json" in names:
            path = os.path.join(dirpath, "dump.json")
            try:
                with open(path) as f:
                    out[os.path.relpath(path, root)] = sorted(json.load(f).get("data", {}))
            except (ValueError, OSError):
                out[os.path.relpath(path, root)] = None
    return out


def seed_earlier(save: str) -> None:
    for rel, text in EARLIER.items():
        path = os.path.join(save, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def write(result_path: str, result: dict) -> None:
    with open(result_path + ".tmp", "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    os.replace(result_path + ".tmp", result_path)


# ---- unprofiled reference ------------------------------------------------------------------------

def reference(result_path: str, batch: str = str(BATCH), seed: str = str(SEED)) -> None:
    rec = train(None, batch=int(batch), seed=int(seed))
    rec["msprobe_imported"] = any(m == "msprobe" or m.startswith("msprobe.") for m in sys.modules)
    write(result_path, rec)


# ---- injected faults and full disks ----------------------------------------------------------------

def _boom(what):
    def boom(*args, **kwargs):
        raise RuntimeError(f"injected msprobe failure in {what}")

    return boom


@contextlib.contextmanager
def patched(obj, name, value):
    original = obj.__dict__[name]
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, original)


def fill(path: str, leave: int) -> str:
    """Fill the file system of `path` until `leave` bytes are free (0: until even a 1-byte write fails)."""
    filler = os.path.join(path, "filler.bin")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        if leave == 0:
            for size in (1 << 20, 4096, 1):
                block = b"\0" * size
                try:
                    while True:
                        os.write(fd, block)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
        else:
            st = os.statvfs(path)
            todo = st.f_bavail * st.f_frsize - leave
            while todo >= 4096:  # tmpfs counts whole pages
                todo -= os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    return filler


def faults(result_path: str, config: str, out: str, tmpfs: str = "") -> None:
    """Every fault case of one msprobe config, one after another in this process. For each case:
    a fresh save_path holding an earlier run's dump; steps 1..4 of all three stages; the fault at the
    step(s) the case names. Recorded: training results, the exception strict raised, the runtime's
    warnings, the dump tree before the fault and at the end."""
    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler
    from verl_pdbg_conf.runtime import session as runtime_session

    cap = Capture()
    gloo()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past RLIMIT_FSIZE fails with EFBIG
    tensor = json.load(open(config))["task"] == "tensor"
    cases: dict = {}
    rec_all = {"cases": cases, "tensor": tensor, "plain_before_msprobe": train(None)}

    import msprobe.pytorch.dump.debugger.precision_debugger as pd_module
    from msprobe.pytorch import PrecisionDebugger
    from msprobe.core.dump.data_dump.data_processor.base import BaseDataProcessor
    from msprobe.pytorch.dump.pytorch_service import PytorchService

    def injected(kind: str):
        """A context manager that makes msprobe fail in `kind` while it is active."""
        if kind == "construct":
            return patched(pd_module, "PytorchService", _boom("PrecisionDebugger()"))
        if kind in ("start", "stop"):
            return patched(PrecisionDebugger, kind, classmethod(_boom(f"PrecisionDebugger.{kind}")))
        if kind == "reset":
            return patched(PytorchService, "reset_status", _boom("service.reset_status"))
        if kind == "collect":
            # Statistics and tensor processors inherit it from BaseDataProcessor.
            return patched(BaseDataProcessor, "analyze_forward_output",
                           _boom("BaseDataProcessor.analyze_forward_output (inside a forward hook)"))
        if kind == "fsize":
            return fsize_limit(300)
        if kind in ("diskfull", "nearfull"):
            return disk_full(tmpfs, 0 if kind == "diskfull" else 4 * 4096)
        raise ValueError(kind)

    only = [k for k in os.environ.get("RELIABILITY_CASES", "").split(",") if k]  # run some kinds only

    def case(name: str, kind: str | None, strict: bool, fault_steps=(FAULT_STEP,), root: str = out):
        if only and kind is not None and kind not in only:
            return
        runtime_session.forget_warnings()
        save = os.path.join(root, name + ("-strict" if strict else ""))
        seed_earlier(save)
        rec: dict = {"kind": kind, "strict": strict, "fault_steps": list(fault_steps)}
        prof = PrecisionDebuggerProfiler({"config_path": config, "strict": strict}, rank=0, save_path=save)
        active: list = []

        def before(step):
            if step == min(fault_steps):
                rec["before_fault"] = snapshot(save)
                cap.take()
            if kind is not None and step in fault_steps:
                cm = injected(kind)
                cm.__enter__()
                active.append(cm)

        def after(step):
            while active:
                active.pop().__exit__(None, None, None)
            if step == max(fault_steps):
                rec["fault_warnings"] = cap.take()

        rec.update(train(prof, before=before, after=after))
        rec["warnings"] = cap.take()
        rec["after"] = snapshot(save)
        rec["dumps"] = dumps(save)
        rec["session_left_open"] = runtime_session._state.active is not None
        cases[name + ("-strict" if strict else "")] = rec

    # construction can only fail before the process's debugger exists: these cases come first
    if not tensor:
        case("construct", "construct", True, fault_steps=(1,))
        case("construct", "construct", False, fault_steps=(1, 2))
    rec_all["debugger_built"] = runtime_session._state.debugger is not None
    case("baseline", None, False)
    if not tensor:
        kinds = ("start", "stop", "reset", "collect", "fsize")
    else:
        kinds = ("collect", "fsize") + (("diskfull", "nearfull") if tmpfs else ())
    for kind in kinds:
        for strict in (False, True):
            case(kind, kind, strict, root=tmpfs if kind in ("diskfull", "nearfull") else out)
    rec_all["plain_after_msprobe"] = train(None)
    write(result_path, rec_all)


@contextlib.contextmanager
def fsize_limit(limit: int):
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


@contextlib.contextmanager
def disk_full(path: str, leave: int):
    try:
        fill(path, leave)
        yield
    finally:
        os.remove(os.path.join(path, "filler.bin"))


# ---- a process killed mid-dump, and the rerun ------------------------------------------------------

def victim(result_path: str, config: str, out: str, mode: str, marker: str) -> None:
    """mode "stage": steps 1-2, and at step 2 actor_update sleeps inside the stage (the parent kills
    once the stage's dir appears). mode "json": step 3 only, and msprobe's final dump.json write of
    actor_update stops half-way (the parent kills once `marker` exists)."""
    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler

    gloo()
    prof = PrecisionDebuggerProfiler({"config_path": config}, rank=0, save_path=out)
    if mode == "stage":
        update = Worker.update_actor

        def update_then_hang(self, x, old, ref):
            if self.step == 2:  # the forward pass runs (msprobe writes its tensors), then the stage hangs
                self.actor.engine.module(x)
                with open(marker, "w") as f:
                    f.write("in stage")
                time.sleep(600)
            return update(self, x, old, ref)

        METHODS["actor_update"] = update_then_hang
        train(prof, steps=(1, 2))
    else:
        import msprobe.core.dump.data_dump.json_writer as json_writer

        original = json_writer.save_json

        def half_then_hang(path, data, indent=None, mode="w"):
            if os.path.basename(path) == "dump.json" and data.get("data") and "actor_update" in path:
                text = json.dumps(data, indent=indent)
                with open(path, "w") as f:
                    f.write(text[: len(text) // 2])
                    f.flush()
                    os.fsync(f.fileno())
                with open(marker, "w") as f:
                    f.write(path)
                time.sleep(600)
            return original(path, data, indent=indent, mode=mode)

        json_writer.save_json = half_then_hang
        train(prof, steps=(3,))
    write(result_path, {"finished": True})  # never reached: the parent kills first


def rerun(result_path: str, config: str, out: str) -> None:
    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler
    from verl_pdbg_conf.runtime import session as runtime_session

    cap = Capture()
    gloo()
    prof = PrecisionDebuggerProfiler({"config_path": config}, rank=0, save_path=out)
    wrote: list = []

    def on_stage(step, stage):
        active = runtime_session._state.active
        wrote.append([step, stage, os.path.relpath(active.dump_dir, out) if active is not None else None])

    rec = train(prof, steps=(1, 2, 3), on_stage=on_stage)
    rec.update(wrote=wrote, warnings=cap.take())
    write(result_path, rec)


# ---- several processes writing one save_path at once -----------------------------------------------

def writer(result_path: str, config: str, out: str, rank: str, world: str, port: str, batch: str, seed: str,
           barrier: str, n: str) -> None:
    """One of `n` processes profiling into the same save_path at the same time. All start their
    steps together (file barrier) and each stage dwells a little after msprobe picked its directory,
    so the processes' directory choices overlap in time."""
    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler
    from verl_pdbg_conf.runtime import session as runtime_session

    cap = Capture()
    gloo(int(rank), int(world), int(port))
    prof = PrecisionDebuggerProfiler({"config_path": config}, rank=int(rank), save_path=out)
    original = runtime_session.fresh_dir

    def slow_fresh_dir(base, *args):
        path = original(base, *args)
        time.sleep(0.15)  # widen the window between choosing a directory and msprobe writing in it
        return path

    runtime_session.fresh_dir = slow_fresh_dir
    runtime_session.debugger(config, out)  # import and build msprobe now: after the barrier, only dumps
    Worker()  # torch.optim's first use imports torch._dynamo: also before the barrier
    t_ready = time.monotonic()
    me = os.path.join(barrier, f"ready.{os.getpid()}")
    open(me, "w").close()
    deadline = time.monotonic() + 120
    while len(os.listdir(barrier)) < int(n) and time.monotonic() < deadline:
        time.sleep(0.01)
    t_go = time.monotonic()
    wrote: list = []

    def on_stage(step, stage):
        active = runtime_session._state.active
        wrote.append([step, stage, os.path.relpath(active.dump_dir, out) if active is not None else None])

    rec = train(prof, batch=int(batch), seed=int(seed), steps=(1, 2, 3), on_stage=on_stage)
    import torch.distributed as dist

    if int(world) > 1:
        dist.barrier()
    rec.update(wrote=wrote, warnings=cap.take(), rank=int(rank), batch=int(batch), pid=os.getpid(),
               times={"ready": round(t_ready - T0, 1), "released": round(t_go - T0, 1),
                      "done": round(time.monotonic() - T0, 1)})
    write(result_path, rec)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip torch's and msprobe's seconds-long teardown (all sessions are closed)


if __name__ == "__main__":
    scenario, result, *rest = sys.argv[1:]
    {"reference": reference, "faults": faults, "victim": victim, "rerun": rerun, "writer": writer}[scenario](
        result, *rest)
