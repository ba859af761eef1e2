"""Start reliability_driver.py scenarios in subprocesses, kill them mid-dump, read what they left.

Also a command line, for the commands in docs/reliability-runtime.md:

    python tests/reliability/reliability_helpers.py <job> <workdir>

runs one job (reference, faults-statistics, faults-tensor, kill-rerun, same-rank, two-ranks) and
prints its result file(s)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DRIVER = os.path.join(HERE, "reliability_driver.py")
CONFIGS = os.path.join(REPO, "tests", "runtime", "configs")


def config(name: str) -> str:
    return os.path.join(CONFIGS, name + ".json")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Failed(RuntimeError):
    pass


class Proc:
    """One driver process; result() waits for it and returns its JSON result."""

    def __init__(self, workdir: str, name: str, scenario: str, *args: str, env: dict | None = None):
        os.makedirs(workdir, exist_ok=True)
        self.name = name
        self.result_path = os.path.join(workdir, f"{name}.result.json")
        self.log_path = os.path.join(workdir, f"{name}.log")
        full_env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
                        PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
        full_env.update(env or {})
        self._log = open(self.log_path, "w")
        # A pipe, not a file: a scenario that lowers RLIMIT_FSIZE must still be able to log (this
        # process, without the limit, copies the output to the log file).
        self.proc = subprocess.Popen([sys.executable, DRIVER, scenario, self.result_path, *args], cwd=workdir,
                                     env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.t0 = time.monotonic()
        self._tail = b""
        self._reader = None
        self._start_reader()

    def _start_reader(self):
        import threading

        def pump():
            for chunk in iter(lambda: self.proc.stdout.read1(65536), b""):
                self._log.write(chunk.decode(errors="replace"))
                self._tail = (self._tail + chunk)[-8000:]
            self._log.flush()

        self._reader = threading.Thread(target=pump, daemon=True)
        self._reader.start()

    def wait(self, timeout: float = 240) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._reader.join(10)
        self._log.close()
        self.seconds = round(time.monotonic() - self.t0, 1)
        return rc

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.wait()

    def result(self, timeout: float = 240) -> dict:
        rc = self.wait(timeout)
        if rc != 0 or not os.path.exists(self.result_path):
            raise Failed(f"{self.name} failed (exit {rc}); output tail:\n{self._tail.decode(errors='replace')}")
        with open(self.result_path) as f:
            out = json.load(f)
        out["_seconds"] = self.seconds
        return out


# ---- a size-limited file system --------------------------------------------------------------------

@contextlib.contextmanager
def tmpfs(path: str, size: str = "16m"):
    """A tmpfs of `size` mounted at `path` (root only), or None where mounting is not possible."""
    os.makedirs(path, exist_ok=True)
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        r = None
        reason = repr(e)
    else:
        reason = r.stderr.strip()
    if r is None or r.returncode != 0:
        yield None, reason
        return
    try:
        yield path, ""
    finally:
        subprocess.run(["umount", "-l", path], capture_output=True, timeout=30)


# ---- jobs ------------------------------------------------------------------------------------------

def reference(workdir: str) -> dict:
    return Proc(workdir, "reference", "reference").result()


def faults(workdir: str, cfg: str, tmpfs_path: str | None = None) -> dict:
    args = [config(cfg), os.path.join(workdir, "out-" + cfg)] + ([tmpfs_path] if tmpfs_path else [])
    return Proc(workdir, "faults-" + cfg, "faults", *args).result()


def wait_for(predicate, timeout: float, proc: Proc) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc.proc.poll() is not None:
            return False
        time.sleep(0.005)
    return False


def _stage_dir_has_files(path: str) -> bool:
    for _, _, names in os.walk(path):
        if any(n.endswith(".pt") for n in names):
            return True
    return False


def kill_rerun(workdir: str, cfg: str = "l1_tensor") -> dict:
    """Two victims SIGKILLed mid-dump into one save_path, then a rerun into it.

    Victim "stage" is killed as soon as step_2/actor_update's rank dir holds a tensor file (msprobe is
    writing the stage's dump); victim "json" is killed while msprobe's final dump.json of step 3's
    actor_update is half written. Returns the snapshots before and after the rerun, and the rerun's
    own record."""
    from reliability_driver import dumps, snapshot

    out = os.path.join(workdir, "out")
    rec: dict = {"out": out}
    stage_dir = os.path.join(out, "step_2", "actor_update")
    v1 = Proc(workdir, "victim-stage", "victim", config(cfg), out, "stage", os.path.join(workdir, "stage.marker"))
    json_marker = os.path.join(workdir, "json.marker")
    v2 = Proc(workdir, "victim-json", "victim", config(cfg), out, "json", json_marker)
    rec["stage_killed_mid_dump"] = wait_for(lambda: _stage_dir_has_files(stage_dir), 90, v1)
    v1.kill()
    rec["json_killed_mid_write"] = wait_for(lambda: os.path.exists(json_marker), 90, v2)
    v2.kill()
    rec["victim_exit"] = [v1.proc.returncode, v2.proc.returncode]
    rec["before"] = snapshot(out)
    rec["dumps_before"] = dumps(out)
    rec["rerun"] = Proc(workdir, "rerun", "rerun", config(cfg), out).result()
    rec["after"] = snapshot(out)
    rec["dumps_after"] = dumps(out)
    return rec


def writers(workdir: str, pairs: str, cfg: str = "l1_tensor") -> dict:
    """Two processes writing one save_path at the same time: "same-rank" (each rank 0 of its own gloo
    group) or "two-ranks" (ranks 0 and 1 of one 2-process group). Batch sizes and data differ per
    process, so a file holding the other process's tensors is visible."""
    from reliability_driver import dumps

    out = os.path.join(workdir, "out")
    barrier = os.path.join(workdir, "barrier")
    os.makedirs(barrier, exist_ok=True)
    port = free_port()
    specs = [(0, 1, free_port(), 4, 11), (0, 1, free_port(), 6, 22)] if pairs == "same-rank" else \
        [(0, 2, port, 4, 11), (1, 2, port, 6, 22)]
    procs = [Proc(workdir, f"writer{i}", "writer", config(cfg), out, str(rank), str(world), str(p), str(batch),
                  str(seed), barrier, str(len(specs)))
             for i, (rank, world, p, batch, seed) in enumerate(specs)]
    results = [p.result() for p in procs]
    return {"out": out, "writers": results, "dumps": dumps(out)}


JOBS = {
    "reference": lambda w: reference(w),
    "faults-statistics": lambda w: faults(w, "l1_statistics"),
    "faults-tensor": None,  # needs the tmpfs: see main()
    "kill-rerun": lambda w: kill_rerun(w),
    "same-rank": lambda w: writers(w, "same-rank"),
    "two-ranks": lambda w: writers(w, "two-ranks"),
}


def main(argv: list[str]) -> None:
    job, workdir = argv
    workdir = os.path.abspath(workdir)
    sys.path.insert(0, HERE)
    if job == "faults-tensor":
        with tmpfs(os.path.join(workdir, "tmpfs")) as (mounted, reason):
            if mounted is None:
                print(f"tmpfs not mountable here ({reason}); full-disk cases skipped", file=sys.stderr)
            rec = faults(workdir, "l1_tensor", mounted)
    else:
        rec = JOBS[job](workdir)
    json.dump(rec, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1:])


# ---- what a dump directory holds ---------------------------------------------------------------------

def _tensor_refs(node, out: list) -> None:
    if isinstance(node, dict):
        if "data_name" in node and isinstance(node.get("shape"), list):
            out.append(node)
        for v in node.values():
            _tensor_refs(v, out)
    elif isinstance(node, list):
        for v in node:
            _tensor_refs(v, out)


def check_rank_dir(rank_dir: str) -> dict:
    """Whether one msprobe rank dir is whole and its own: dump.json parses, every tensor it names is
    in its dump_tensor_data with the recorded shape and max/min, no tensor file there is unnamed, and
    the batch size of the stage's input. Returns {"problems": [...], "batch": int|None, "records": n}."""
    import torch

    problems: list[str] = []
    try:
        with open(os.path.join(rank_dir, "dump.json")) as f:
            dump = json.load(f)
    except (OSError, ValueError) as e:
        return {"problems": [f"dump.json: {e!r}"], "batch": None, "records": 0}
    data = dump.get("data", {})
    refs: list = []
    _tensor_refs(data, refs)
    tensor_dir = os.path.join(rank_dir, "dump_tensor_data")
    if dump.get("dump_data_dir") not in (None, tensor_dir):
        problems.append(f"dump_data_dir {dump.get('dump_data_dir')} is not {tensor_dir}")
    named = set()
    for ref in refs:
        named.add(ref["data_name"])
        path = os.path.join(tensor_dir, ref["data_name"])
        try:
            t = torch.load(path, weights_only=True)
        except Exception as e:
            problems.append(f"{ref['data_name']}: {e!r}")
            continue
        if list(t.shape) != ref["shape"]:
            problems.append(f"{ref['data_name']}: shape {list(t.shape)} != recorded {ref['shape']}")
        elif t.numel() and isinstance(ref.get("Max"), float) and abs(float(t.max()) - ref["Max"]) > 1e-5 * (
                1 + abs(ref["Max"])):
            problems.append(f"{ref['data_name']}: max {float(t.max())} != recorded {ref['Max']}")
    if os.path.isdir(tensor_dir):
        unnamed = sorted(set(os.listdir(tensor_dir)) - named)
        if unnamed:
            problems.append(f"tensor files no record names: {unnamed[:5]}")
    first = data.get("Functional.linear.0.forward", {}).get("input_args", [{}])[0]
    batch = first.get("shape", [None])[0] if isinstance(first, dict) else None
    return {"problems": problems, "batch": batch, "records": len(data)}


def rank_dirs(root: str) -> list[str]:
    """relpath of every directory under root that holds a dump.json."""
    return sorted(os.path.relpath(d, root) for d, _, names in os.walk(root) if "dump.json" in names)
