"""Write real msprobe tensor dumps (L1) of one tiny language model's log-prob forward and update over the same
four sequences, laid out as verl's trainer lays them out at other settings, through this package's runtime
profiler (which writes each forward's token record, tokens.json). Run as a subprocess: msprobe wraps torch for
the life of the process.

    python make_token_dumps.py OUT [--level mix] [RUN ...]

Runs (each a save_path OUT/<run>):
  one     one call of the four rows, right-padded to the longest ([4, L]): world size 1, micro-batch 4
  two     two calls of two rows each, in another order, each padded to its own longest (world size 2's
          rows dealt by length, or micro-batch 2)
  packed  two calls, each its rows packed into one row ([1, T], position ids restarting: use_remove_padding)
  plant   as two, layer 1's mlp.down_proj weight x1.01
Level L1 as precision_debugger_tensor collects (API calls), or mix as precision_debugger_rollout does (module calls
too). The update's loss is the mean over every real token of the batch (the count taken over all calls, as verl's
token-mean does with its all-reduced count), so per-token gradients do not depend on the layout."""

from __future__ import annotations

import json
import os
import socket
import sys

SEQS = ([5, 9, 3, 7, 11, 2], [4, 8, 1], [6, 6, 12, 10, 3, 1, 9, 2], [13, 2, 5, 5])
LAYOUTS = {"one": [[0, 1, 2, 3]], "two": [[2, 0], [3, 1]], "packed": [[1, 3], [0, 2]], "plant": [[2, 0], [3, 1]]}
CONFIG = {"task": "tensor", "rank": [], "step": [], "level": "L1", "async_dump": False,
          "tensor": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}


def build():
    import torch
    import torch.nn.functional as F

    class Mlp(torch.nn.Module):
        def __init__(self, h):
            super().__init__()
            self.up_proj, self.down_proj = torch.nn.Linear(h, 2 * h, bias=False), torch.nn.Linear(2 * h, h, bias=False)

        def forward(self, x):
            return self.down_proj(F.gelu(self.up_proj(x)))

    class Layer(torch.nn.Module):
        def __init__(self, h):
            super().__init__()
            self.qkv, self.o = torch.nn.Linear(h, 3 * h, bias=False), torch.nn.Linear(h, h, bias=False)
            self.mlp = Mlp(h)

        def forward(self, x, mask):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            x = x + self.o(F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
            return x + self.mlp(x)

    class Model(torch.nn.Module):
        def __init__(self, vocab=16, h=8, layers=2):
            super().__init__()
            self.embed, self.pos = torch.nn.Embedding(vocab, h), torch.nn.Embedding(16, h)
            self.layers = torch.nn.ModuleList(Layer(h) for _ in range(layers))
            self.head = torch.nn.Linear(h, vocab, bias=False)

        def forward(self, input_ids, attention_mask=None, position_ids=None):
            x = self.embed(input_ids) + self.pos(position_ids)
            n = input_ids.shape[1]
            causal = torch.ones(n, n, dtype=torch.bool).tril()
            if attention_mask is not None:  # padded rows: each token sees its row's real tokens before it
                mask = causal[None] & attention_mask.bool()[:, None, :]
            else:  # packed rows: a sequence starts where the position restarts at 0
                seq = (position_ids == 0).cumsum(-1)
                mask = causal[None] & (seq[:, :, None] == seq[:, None, :])
            for layer in self.layers:
                x = layer(x, mask)
            return self.head(x)

    torch.manual_seed(0)
    return Model()


def batch(rows: list[list[int]], packed: bool):
    import torch

    if packed:
        ids = torch.tensor([[t for r in rows for t in r]])
        pos = torch.tensor([[i for r in rows for i in range(len(r))]])
        return {"input_ids": ids, "position_ids": pos}, torch.ones_like(ids, dtype=torch.bool)
    n = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (n - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (n - len(r)) for r in rows])
    pos = torch.arange(n).expand(len(rows), n) * mask
    return {"input_ids": ids, "attention_mask": mask, "position_ids": pos}, mask.bool()


def main(out: str, runs: list[str], level: str = "L1") -> None:
    import torch
    import torch.distributed as dist

    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    config = os.path.join(out, "config.json")
    os.makedirs(out, exist_ok=True)
    with open(config, "w") as fh:
        json.dump(dict(CONFIG, level=level), fh)
    total = sum(len(s) for s in SEQS)
    for run in runs:
        model = build()
        if run == "plant":
            with torch.no_grad():
                model.layers[1].mlp.down_proj.weight.mul_(1.01)
        calls = [[SEQS[i] for i in call] for call in LAYOUTS[run]]
        prof = PrecisionDebuggerProfiler({"config_path": config, "strict": True,
                                          "stages": ["actor_compute_log_prob", "actor_update"]},
                                         rank=0, save_path=os.path.join(out, run))
        prof.start(profile_step=1)
        with torch.no_grad(), prof.stage("actor_compute_log_prob", model=model):
            for rows in calls:
                kw, _real = batch(rows, run == "packed")
                model(**kw)
        with prof.stage("actor_update", model=model):
            for rows in calls:
                kw, real = batch(rows, run == "packed")
                logits = model(**kw)
                logp = torch.log_softmax(logits, -1).gather(-1, kw["input_ids"][..., None])[..., 0]
                (-(logp * real).sum() / total).backward()
        prof.stop()


if __name__ == "__main__":
    args = sys.argv[2:]
    lvl = "L1"
    if args[:1] == ["--level"]:
        lvl, args = args[1], args[2:]
    main(sys.argv[1], args or list(LAYOUTS), lvl)
