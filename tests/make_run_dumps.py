"""Write real msprobe dumps on CPU for the inspect tests (run as a subprocess: msprobe wraps
torch for the life of the process).

    python make_run_dumps.py OUT_DIR CONFIG_JSON

OUT_DIR/clean    this package's runtime profiler, steps 1 and 2, three actor/ref stages
OUT_DIR/rerun    the same run twice into one save_path, the second with steps 1, 2 and 3
                 (the runtime keeps step_N/<stage> and writes the second session to <stage>.1)
OUT_DIR/noreset  msprobe driven by hand without service.reset_status(): the reset problem
"""

from __future__ import annotations

import os
import socket
import sys

STAGES = ("actor_compute_log_prob", "ref_compute_log_prob", "actor_update")


def main(out: str, config: str) -> None:
    import torch
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

    def run_stage(stage: str) -> None:
        if stage == "actor_update":
            model(torch.randn(2, 8)).sum().backward()
        else:
            with torch.no_grad():
                model(torch.randn(2, 8))

    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler

    def runtime_run(save: str, steps) -> None:
        prof = PrecisionDebuggerProfiler({"config_path": config, "stages": list(STAGES)}, rank=0, save_path=save)
        for step in steps:
            prof.start(profile_step=step)
            for stage in STAGES:
                with prof.stage(stage, model=model):
                    run_stage(stage)
            prof.stop()

    runtime_run(os.path.join(out, "clean"), (1, 2))
    runtime_run(os.path.join(out, "rerun"), (1, 2))
    runtime_run(os.path.join(out, "rerun"), (1, 2, 3))

    from msprobe.pytorch import PrecisionDebugger

    dbg = PrecisionDebugger(config_path=config)  # the process singleton the runtime created
    for step in (1, 2):
        for stage in STAGES:
            dbg.service.config.dump_path = os.path.join(out, "noreset", f"step_{step}", stage)
            dbg.start(model)
            run_stage(stage)
            dbg.stop()  # no service.reset_status(): msprobe's cache keeps every earlier record


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
