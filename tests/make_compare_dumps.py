"""Write real msprobe dumps on CPU for the compare tests and bench, with this package's runtime
profiler (run as a subprocess, one per rank: msprobe wraps torch for the life of the process and
its PrecisionDebugger is a process singleton, so one level/task per process).

    python make_compare_dumps.py OUT_DIR CONFIG_JSON RANK WORLD_SIZE PORT [--steps 1,2] [--variants ...]
                                 [--blocks 6] [--calls 1]

WORLD_SIZE 0 runs without a process group (msprobe then writes proc<pid>/, not rank<R>/).
One save_path per variant under OUT_DIR, each with steps x three actor/ref stages:

  golden   the reference: a 6-block model (--blocks), seed 0; each stage calls it --calls times
  same     the same run again (nothing differs)
  scaled   blocks.3.fc.weight multiplied by 1.01
  dtype    blocks.3 computes in bfloat16 (its input cast to bfloat16, its output back to float32)
"""

from __future__ import annotations

import argparse
import os

STAGES = ("actor_compute_log_prob", "ref_compute_log_prob", "actor_update")
VARIANTS = ("golden", "same", "scaled", "dtype")
BLOCKS, WIDTH, PERTURBED = 6, 16, 3


def build(variant: str, blocks: int = BLOCKS):
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(WIDTH, WIDTH)
            self.act = torch.nn.Tanh()

        def forward(self, x):
            # The same calls in every variant, so that msprobe's API call numbers line up.
            return self.act(self.fc(x.to(self.fc.weight.dtype))).to(x.dtype)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.Sequential(*(Block() for _ in range(blocks)))
            self.head = torch.nn.Linear(WIDTH, 4)

        def forward(self, x):
            return self.head(self.blocks(x))

    torch.manual_seed(0)
    net = Net()
    if variant == "scaled":
        with torch.no_grad():
            net.blocks[PERTURBED].fc.weight.mul_(1.01)
    elif variant == "dtype":
        net.blocks[PERTURBED].to(torch.bfloat16)
    return net


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("config")
    ap.add_argument("rank", type=int)
    ap.add_argument("world", type=int)
    ap.add_argument("port", type=int)
    ap.add_argument("--steps", default="1,2")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--blocks", type=int, default=BLOCKS, help="model depth (records grow with it)")
    ap.add_argument("--calls", type=int, default=1, help="forward (and backward) passes per stage")
    a = ap.parse_args()

    import torch
    import torch.distributed as dist

    if a.world:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world)
    torch.set_num_threads(1)
    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler

    stages = a.stages.split(",")
    for variant in a.variants.split(","):
        model = build(variant, a.blocks)
        prof = PrecisionDebuggerProfiler({"config_path": a.config, "stages": stages}, rank=a.rank,
                                         save_path=os.path.join(a.out, variant))
        for step in (int(s) for s in a.steps.split(",")):
            prof.start(profile_step=step)
            for stage in stages:
                # the same data in every variant: seeded by step, stage and rank
                torch.manual_seed(1000 * step + 10 * STAGES.index(stage) + a.rank)
                x = torch.randn(4, WIDTH)
                with prof.stage(stage, model=model):
                    for _ in range(a.calls):
                        if stage == "actor_update":
                            model.zero_grad(set_to_none=True)
                            model(x).square().mean().backward()
                        else:
                            with torch.no_grad():
                                model(x)
            prof.stop()
    if a.world:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
