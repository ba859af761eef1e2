"""Routing replay (verl's R3) on real dumps: the trainer's log-prob forward of a make_rollout_dumps.py MoE run made
again with its routers replaying the experts the engine chose.

    python make_replay_dumps.py ROOT OUT NAME=RUN[:SHIFT] [NAME=RUN[:SHIFT] ...]

ROOT is a `make_rollout_dumps.py --arch qwen3_moe` output (checkpoint, config.json, manifest.json), RUN one of its
runs. OUT/NAME gets a copy of RUN's rollout_generate dumps and a new actor_compute_log_prob (transformers, fp32,
through this package's runtime, as make_rollout_dumps.actor runs it), and OUT/NAME/routed_experts.pt, the replay
record. The replays run one after another in one process (each a model and a profiler of its own): one import of
torch and transformers for all.

The record is what vLLM's routed-experts capture returns and verl puts in the batch (`routed_experts`,
[batch, seq, layers, topk] over prompt + response as the actor's rows lay them out, trainer/ppo/metric_utils.py):
the vLLM CPU build cannot capture it (Model Runner V2 needs Triton), so it is rebuilt from the engine's own dumped
router logits, per engine step and request, as the engine routes (the top_k largest logits). Rows the engine never
computed (padding, the last sampled token) stay zero.

The replay is verl's (utils/veomni/router_replay.py): the slot-th router to fire takes slot `slot` of the record as
its experts, weighted by its own probabilities (renormalised as the model does); a row whose record repeats an
expert (an all-zero row: nothing recorded) routes on its own logits. SHIFT 1 attaches the record one layer off
(the router at layer k gets slot k-1, so layer 0 gets the last layer's by Python's index): the bug class of
replay data attached to routers by list position (miles#2570)."""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import make_rollout_dumps as M  # noqa: E402


def engine_routes(run_dir: str, samples: list[dict], top_k: int, layers: int):
    """The engine's chosen experts per actor row, [batch, seq, layers, topk] (int16, as verl's agent loop keeps
    them), from each engine step's router logits and token record."""
    import torch

    plen = max(len(s["prompt"]) for s in samples)
    rlen = max(len(s["response"]) for s in samples)
    out = torch.zeros(len(samples), plen + rlen, layers, top_k, dtype=torch.int16)
    for rank in sorted(glob.glob(os.path.join(run_dir, "step_1", "rollout_generate", "step*", "rank0"))):
        with open(os.path.join(rank, "tokens.json")) as fh:
            requests = json.load(fh)["requests"]
        with open(os.path.join(rank, "dump.json")) as fh:
            data = json.load(fh)["data"]
        for key, rec in data.items():
            m = re.fullmatch(r"Module\.model\.layers\.(\d+)\.mlp\.gate\.\w+\.forward\.0", key)
            if not m:
                continue
            logits = torch.load(os.path.join(rank, "dump_tensor_data", rec["output"][0]["data_name"]))
            for req in requests:
                b = int(req["request"].split("-")[0])  # vLLM numbers the requests of one generate call
                pad = plen - len(samples[b]["prompt"])
                first, _ = req["rows"]
                for j, pos in enumerate(req["positions"]):
                    out[b, pad + pos, int(m.group(1))] = logits[first + j].float().topk(top_k).indices.to(torch.int16)
    return out


def arm(model, routed, shift: int = 0) -> None:
    """Each router replays its slot of `routed` ([batch, seq, layers, topk], the forward's rows)."""
    import torch
    import torch.nn.functional as F

    routers = [m for _, m in model.named_modules() if type(m).__name__.endswith("TopKRouter")]
    assert len(routers) == routed.shape[2], (len(routers), routed.shape)

    def forward(self, hidden_states):
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)
        logits = F.linear(hidden_states, self.weight)
        probs = torch.softmax(logits, dtype=torch.float, dim=-1)
        own = torch.topk(probs, self.top_k, dim=-1).indices
        target = self.replay_target
        if target.shape != own.shape:
            raise RuntimeError(f"replay record {tuple(target.shape)} for router rows {tuple(own.shape)}")
        ordered = target.sort(dim=-1).values
        unrecorded = (ordered[:, 1:] == ordered[:, :-1]).any(dim=-1, keepdim=True)
        indices = torch.where(unrecorded, own, target)
        weights = probs.gather(1, indices)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return logits, weights.to(logits.dtype), indices

    for slot, router in enumerate(routers):
        router.replay_target = routed[:, :, slot - shift].reshape(-1, routed.shape[-1]).long()
        router.forward = types.MethodType(forward, router)


def replay(root: str, run: str, out: str, shift: int) -> None:
    import torch

    with open(os.path.join(root, "manifest.json")) as fh:
        samples = json.load(fh)[run]["samples"]
    with open(os.path.join(root, "checkpoint", "config.json")) as fh:
        cfg = json.load(fh)
    routed = engine_routes(os.path.join(root, run), samples, cfg["num_experts_per_tok"], cfg["num_hidden_layers"])
    os.makedirs(os.path.join(out, "step_1"), exist_ok=True)
    shutil.copytree(os.path.join(root, run, "step_1", "rollout_generate"),
                    os.path.join(out, "step_1", "rollout_generate"), dirs_exist_ok=True)
    torch.save(routed, os.path.join(out, "routed_experts.pt"))
    lps = M.actor(os.path.dirname(out), os.path.basename(out), {}, os.path.join(root, "checkpoint"),
                  os.path.join(root, "config.json"), samples, prepare=lambda model: arm(model, routed, shift))
    gap = max(abs(a - b) for s, lp in zip(samples, lps) for a, b in zip(s["logprobs"], lp))
    with open(os.path.join(out, "replay.json"), "w") as fh:
        json.dump({"run": run, "shift": shift, "max_logprob_gap": gap}, fh)
    print(f"{run} replayed (shift {shift}): max |log-prob gap| {gap:.3g}", flush=True)


def _spec(text: str) -> tuple[str, str, int]:
    m = re.fullmatch(r"([\w.-]+)=([\w.-]+)(?::(\d+))?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=RUN[:SHIFT]")
    return m.group(1), m.group(2), int(m.group(3) or 0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("out")
    ap.add_argument("replays", nargs="+", type=_spec, metavar="NAME=RUN[:SHIFT]")
    args = ap.parse_args(argv)
    root, out = os.path.abspath(args.root), os.path.abspath(args.out)
    for name, run, shift in args.replays:
        replay(root, run, os.path.join(out, name), shift)
    return 0


if __name__ == "__main__":
    sys.exit(main())
