"""Write real msprobe dumps on CPU for the compare tests and bench, with this package's runtime
profiler (run as a subprocess, one per rank: msprobe wraps torch for the life of the process and
its PrecisionDebugger is a process singleton, so one level/task per process).

    python make_compare_dumps.py OUT_DIR CONFIG_JSON RANK WORLD_SIZE PORT [--steps 1,2] [--variants ...]
                                 [--block N] [--minibatches K]

WORLD_SIZE 0 runs without a process group (msprobe then writes proc<pid>/, not rank<R>/).
One save_path per variant under OUT_DIR, each with steps x three actor/ref stages. The model embeds
token ids (an Embedding, as an LLM does), then 6 blocks (Linear, Tanh) and a head:

  golden   the reference, seed 0
  same     the same run again (nothing differs)
  scaled   blocks[N].fc.weight multiplied by 1.01
  dtype    blocks[N] computes in bfloat16 (its input cast to bfloat16, its output back to float32)
  nan      one element of blocks[N].fc.weight is NaN
  grad     blocks[N]'s output gradient multiplied by 1.01 (actor_update only; nothing else differs)
  token    one token id of every batch changed

actor_update runs K mini-batches with an SGD step after each (K = --minibatches, default 1). With a process
group (WORLD_SIZE >= 1) each stage is laid out as verl 0.9.1's trainer lays it out (trainer_layout.py): rows of
other lengths dealt to the ranks by balance_batch, each call cut to its own longest row, the token count
all-reduced at the start of each pass (the dump's first records, as in a real run), the update's loss the token
mean over the global batch.
N is --block (default 3). Every block's output carries a gradient hook multiplying by 1 (by 1.01 in
grad); --hook-op visible makes it an op msprobe records (a forward-named call during backward).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainer_layout  # noqa: E402

STAGES = ("actor_compute_log_prob", "ref_compute_log_prob", "actor_update")
VARIANTS = ("golden", "same", "scaled", "dtype")
BLOCKS, WIDTH, PERTURBED, VOCAB, SEQ, ROWS = 6, 16, 3, 50, 6, 4
HOOK_OP = "raw"


def build(variant: str, block: int = PERTURBED, blocks: int = BLOCKS):
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(WIDTH, WIDTH)
            self.act = torch.nn.Tanh()
            self.grad_scale = 1.0

        def forward(self, x):
            # The same calls in every variant, so that msprobe's API call numbers line up.
            y = self.act(self.fc(x.to(self.fc.weight.dtype))).to(x.dtype)
            if y.requires_grad:
                # raw: an op msprobe does not record, so only the gradient differs; visible: `g * s`,
                # which msprobe records as a forward-named call made during the backward pass
                mul = torch._C._VariableFunctions.mul if HOOK_OP == "raw" else (lambda g, s: g * s)
                y.register_hook(lambda g: mul(g, self.grad_scale))
            return y

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            # msprobe skips a model's first child and its last module wherever verl is imported, as in every verl
            # run (module_processor.py): the container first, as an HF model's backbone is, so that the
            # embedding keeps its record as embed_tokens does under verl; the head, as lm_head, has none
            self.blocks = torch.nn.Sequential(*(Block() for _ in range(blocks)))
            self.embed = torch.nn.Embedding(VOCAB, WIDTH)
            self.head = torch.nn.Linear(WIDTH, 4)

        def forward(self, ids):
            return self.head(self.blocks(self.embed(ids)))

    torch.manual_seed(0)
    net = Net()
    target = net.blocks[block]
    with torch.no_grad():
        if variant == "scaled":
            target.fc.weight.mul_(1.01)
        elif variant == "nan":
            target.fc.weight[1, 2] = float("nan")
        elif variant == "dtype":
            target.to(torch.bfloat16)
    if variant == "grad":
        target.grad_scale = 1.01
    return net


def stage_batch(step: int, stage: str, rank: int, world: int, minibatches: int) -> list:
    """This rank's calls of the stage, one (ids, mask) of ROWS rows per mini-batch. With a process group, as
    verl's trainer hands them (trainer_layout): one global batch of minibatches x ROWS x world rows of other
    lengths, the same on every rank and in every variant (seeded by step and stage), dealt by balance_batch,
    the rank's share split into mini-batches in order, each cut to its own longest row; without one
    (msprobe's proc<pid>), rows seeded by step, stage and rank, all of length SEQ."""
    import torch

    torch.manual_seed(1000 * step + 10 * STAGES.index(stage) + (0 if world else rank))
    dp = max(world, 1)
    ids = torch.randint(0, VOCAB, (minibatches * ROWS * dp, SEQ))
    if not world:
        return [(x, torch.ones_like(x)) for x in ids.view(minibatches, ROWS, SEQ)]
    lens = torch.randint(3, SEQ + 1, (minibatches * ROWS * dp,))
    mask = (torch.arange(SEQ) < lens[:, None]).long()
    rows = trainer_layout.balanced_partitions(lens.tolist(), dp)[rank]
    return [trainer_layout.pad_to_longest(x, m) for x, m in
            zip((ids * mask)[rows].view(minibatches, ROWS, SEQ), mask[rows].view(minibatches, ROWS, SEQ))]


def run_stage(model, opt, stage: str, calls: list, world: int) -> None:
    """One stage as verl's FSDP engine runs it: each forward_backward_batch (the log-prob pass, each mini-batch
    of the update) starts with the token count all-reduced (with a process group); the update's loss is the
    token mean over the global mini-batch."""
    import torch

    for x, m in calls if stage == "actor_update" else calls[:1]:
        tokens = trainer_layout.stage_token_count(m) if world else m.sum()
        if stage != "actor_update":
            with torch.no_grad():
                model(x)
            continue
        model.zero_grad(set_to_none=True)
        trainer_layout.token_mean_loss(model(x).square().mean(-1), m, tokens, max(world, 1)).backward()
        if len(calls) > 1:
            opt.step()


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
    ap.add_argument("--block", type=int, default=PERTURBED)
    ap.add_argument("--blocks", type=int, default=BLOCKS, help="model depth (bigger dumps for benches)")
    ap.add_argument("--minibatches", type=int, default=1)
    ap.add_argument("--hook-op", choices=("raw", "visible"), default="raw",
                    help="how the gradient hook multiplies (every variant alike, so call numbers line up)")
    a = ap.parse_args()
    global HOOK_OP
    HOOK_OP = a.hook_op

    import torch
    import torch.distributed as dist

    if a.world:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world)
    torch.set_num_threads(1)
    if a.world:  # imported before msprobe hooks a model, as in a verl worker: every stage is hooked alike
        import verl  # noqa: F401
    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler

    stages = a.stages.split(",")
    for variant in a.variants.split(","):
        model = build(variant, a.block, a.blocks)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, foreach=False)
        prof = PrecisionDebuggerProfiler({"config_path": a.config, "stages": stages}, rank=a.rank,
                                         save_path=os.path.join(a.out, variant))
        for step in (int(s) for s in a.steps.split(",")):
            prof.start(profile_step=step)
            for stage in stages:
                calls = stage_batch(step, stage, a.rank, a.world, a.minibatches)
                if variant == "token":
                    for ids, _ in calls:
                        ids[1, 2] = (ids[1, 2] + 1) % VOCAB
                with prof.stage(stage, model=model):
                    run_stage(model, opt, stage, calls, a.world)
            prof.stop()
    if a.world:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
