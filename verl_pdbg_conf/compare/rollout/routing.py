"""Which experts each side chose, token by token, in every mixture-of-experts layer.

The engine chooses inside its fused experts and dumps only the router logits (its GateLinear's output).
Its choice is read from the routed_experts it captured where its token record holds them (vLLM's
enable_return_routed_experts, what verl's R3 turns on), else recomputed from the logits the way its router
does (extract.py probed it: softmax scoring keeps the top_k largest logits; top_k is the HF config key the
model's FusedMoE call reads). The trainer's router returns its choice (output 2, the top-k indices); where
it does not, it is recomputed from its logits the same way. Each side's margin is its logit of the last
expert kept minus that of the first one dropped: a small margin is a near-tie that rounding can flip.

`blame_experts` then names the expert that parts in a layer whose experts' output diverged while their
input and the routing agreed: the tokens routed to it part, the tokens that did not use it agree.

Routing replay (verl's R3) is read off the dumps, not off a setting: a router that returns experts its own
logits rank below one it dropped (a negative margin for its own choice) took them from outside, and only a
replay does that. Under replay a token routed differently is a replay bug, never a near-tie; `replay` says per
layer which engine layer's choices the actor's follow, which names a replay attached to the wrong layer."""

from __future__ import annotations

from dataclasses import dataclass

from verl_pdbg_conf.compare.records import Record
from verl_pdbg_conf.compare.rollout import table as T
from verl_pdbg_conf.compare.rollout.walk import Walk, cell, pick
from verl_pdbg_conf.compare.rollout.tokens import natural


@dataclass
class Route:
    """One token at one MoE layer: each side's chosen experts (sorted) and its margin."""

    layer: str  # the MoE block's path (the router's parent)
    engine: tuple[int, ...]
    trainer: tuple[int, ...]
    engine_margin: float
    trainer_margin: float
    captured: bool = False  # the engine's choice from its captured routed_experts, not recomputed

    @property
    def differs(self) -> bool:
        return self.engine != self.trainer

    @property
    def imposed(self) -> bool:
        """The actor kept an expert its own logits rank below one it dropped: its choice came from outside its
        router (a routing replay), so a difference is no rounding."""
        return self.trainer_margin < 0

    def to_dict(self) -> dict:
        return {"engine": list(self.engine), "trainer": list(self.trainer),
                "engine_margin": _finite(self.engine_margin), "trainer_margin": _finite(self.trainer_margin),
                **({"replayed": True} if self.imposed else {})}


def _finite(x: float) -> float | None:
    """None where every expert is kept (no margin): JSON has no infinity."""
    return x if x != float("inf") else None


@dataclass
class Setting:
    """How the engine routes, or why it is not recomputed (`unknown`)."""

    top_k: int | None
    unknown: str = ""


def setting(moe: dict, hf_config: dict) -> Setting:
    """The engine's routing for an architecture (its FusedMoE call, extract.py) under its HF config."""
    if not moe:
        return Setting(None, "no fused experts known for this architecture")

    def read(key: str, default=None):
        v = moe.get(key)
        if v is None:
            return default
        if "constant" in v:
            return v["constant"]
        if "config" in v:
            return hf_config.get(v["config"], default)
        return _Unread(v.get("expression") or v.get("self") or "?")

    routing = T.facts().get("routing") or {}
    scoring = read("scoring_func", "softmax")
    grouped = read("use_grouped_topk", False)
    if isinstance(scoring, _Unread) or scoring not in routing or grouped or read("custom_routing_function"):
        return Setting(None, f"the engine's router (scoring {scoring}, grouped top-k {grouped}) is not one this "
                             f"compare recomputes ({', '.join(routing) or 'none'})")
    if read("e_score_correction_bias") is not None:
        return Setting(None, "the engine's router adds a score-correction bias that is not dumped")
    k = read("top_k")
    return Setting(k if isinstance(k, int) else None)


class _Unread(str):
    """A setting the model computes in code: not read from data."""


def choose(logits, k: int) -> tuple[tuple[int, ...], float]:
    """The top_k largest logits (softmax is monotonic): the experts kept, sorted, and the margin."""
    vals, idx = logits.topk(min(k + 1, logits.numel()))
    margin = float(vals[k - 1] - vals[k]) if vals.numel() > k else float("inf")
    return tuple(sorted(int(i) for i in idx[:k])), margin


def margin_of(logits, chosen: tuple[int, ...]) -> float:
    """The lowest logit kept minus the highest dropped, for a choice made elsewhere."""
    import torch

    mask = torch.zeros(logits.numel(), dtype=torch.bool)
    mask[list(chosen)] = True
    if mask.all():
        return float("inf")
    return float(logits[mask].min() - logits[~mask].max())


def routers(engine) -> dict[int, list[Record]]:
    """Per engine step, its routers' records (empty for a dense model)."""
    return {k: [r for r in d.records if T.class_role(r.base).get("router")] for k, d in engine}


def captured(engine) -> dict[int, dict[int, list]]:
    """Per engine step, row -> the engine's own routing of that row ([layers][top_k], by decoder layer), where
    its token record holds the routed_experts vLLM captured (checked at reading: dumpread.read_tokens)."""
    out: dict[int, dict[int, list]] = {}
    for k, d in engine:
        for req in (d.tokens or {}).get("requests") or ():
            if req is not None and req.get("routed_experts") is not None:
                first = (req.get("rows") or [0])[0]
                out.setdefault(k, {}).update({first + j: row for j, row in enumerate(req["routed_experts"])})
    return out


def routes(al, found: dict[int, list[Record]], trainer: list[dict[str, list[Record]]], judge: Walk,
           setting_: Setting, engine_routed: dict[int, dict[int, list]] | None = None) \
        -> tuple[dict, dict[str, dict[str, int]]]:
    """(request, position) -> {MoE block path: Route} for every aligned token and MoE layer, from each engine
    step's routers (`found`, routers()) or, where its token record holds them, the experts the engine
    captured (`engine_routed`, captured()); and the routes that could not be compared: MoE block path ->
    {why: tokens}."""
    out: dict = {}
    missed: dict[str, dict[str, int]] = {}
    engine_routed = engine_routed or {}
    if (setting_.unknown and not engine_routed) or not any(found.values()):
        return out, missed
    for req, seq in al.pairs:
        for p in sorted(req.rows):
            if p >= len(seq.at):
                continue
            k, row = req.rows[p]
            src, c, b, s = seq.at[p]
            for rec in found.get(k, ()):
                got = _route(rec, row, trainer[src].get(rec.module), c, b, s, judge.shapes.get((src, c)), judge,
                             setting_, engine_routed.get(k, {}).get(row))
                if isinstance(got, Route):
                    out.setdefault((req.id, p), {})[got.layer] = got
                else:
                    why = missed.setdefault(rec.module.rpartition(".")[0], {})
                    why[got] = why.get(got, 0) + 1
    return out, missed


def _route(rec: Record, row: int, trainer_recs, c: int, b: int, s: int, bs, judge: Walk,
           setting_: Setting, routed: list | None = None) -> Route | str:
    """Both sides' experts for one token at one router; or why they cannot be compared."""
    if setting_.unknown and routed is None:
        return f"the engine's choice is not recomputed ({setting_.unknown}) and it captured no routed_experts"
    trec = trainer_recs[c] if trainer_recs and c < len(trainer_recs) else None
    if trec is None:
        return "the actor's dump has no record of this router"
    e = pick(judge.tensors, rec, "output", 0)
    if e is None or e.dim() != 2 or row >= e.shape[0]:
        return "the engine's router logits are not [tokens, experts] holding this token"
    tl = cell(pick(judge.tensors, trec, "output", 0), b, s, bs)
    ti = cell(pick(judge.tensors, trec, "output", 2), b, s, bs)
    k = setting_.top_k or (len(routed[0]) if routed else None) or (ti.numel() if ti is not None else None)
    if tl is None or tl.numel() != e.shape[1]:
        return "the actor's router logits are not one row of as many experts as the engine's"
    if not k or k >= tl.numel():
        return "no top-k below the number of experts (the model config's num_experts_per_tok)"
    # (tensors are loaded as float64: an expert number must be a whole one)
    if ti is not None and (ti.numel() != k or not all(float(i).is_integer() and 0 <= i < tl.numel()
                                                      for i in ti.flatten().tolist())):
        return "the actor's router top-k indices are not top-k distinct expert numbers in range"
    chosen_e, margin_e = choose(e[row].flatten(), k)
    used = False
    if routed is not None:  # the engine's own record of its choice, by decoder layer
        layer = _layer_number(rec.module)
        if layer is None or layer >= len(routed):
            return "the engine's routed_experts hold no record of this layer (routing records for some layers only)"
        picked = tuple(sorted(set(routed[layer])))
        if len(picked) == len(routed[layer]) == k and picked[-1] < e.shape[1]:
            chosen_e, margin_e, used = picked, margin_of(e[row].flatten(), picked), True
        elif len(picked) == len(routed[layer]):  # distinct, yet not top-k in range: not the engine's choice
            return "the engine's routed_experts are not top-k distinct expert numbers in range"
        elif setting_.unknown:
            return "the engine did not record this row's experts and its choice is not recomputed"
        # else a repeated expert: a row the engine did not record (vLLM leaves it zero), recomputed instead
    if ti is not None:
        chosen_t = tuple(sorted({int(i) for i in ti.flatten()}))
        if len(chosen_t) != k:
            return "the actor's router top-k indices are not top-k distinct expert numbers in range"
        margin_t = margin_of(tl.flatten(), chosen_t)
    else:
        chosen_t, margin_t = choose(tl.flatten(), k)
    return Route(rec.module.rpartition(".")[0], chosen_e, chosen_t, margin_e, margin_t, captured=used)


def _layer_number(path: str) -> int | None:
    """model.layers.K.mlp.gate -> K: the decoder layer vLLM's capture indexes by."""
    parts = path.split(".")
    return next((int(parts[i + 1]) for i, p in enumerate(parts[:-1]) if p == "layers" and parts[i + 1].isdigit()),
                None)


def summary(token_routes: dict, setting_: Setting, moe_layers: bool, top: int = 20,
            missed: dict | None = None) -> dict | None:
    """Per layer the tokens routed differently (with both margins), their share; and per run the share of
    tokens routed differently in at least one layer; the routes not compared, and why. None for a model
    without MoE layers."""
    if not moe_layers:
        return None
    not_compared = [{"layer": layer, "tokens": n, "why": why} for layer in sorted(missed or {}, key=_layer_key)
                    for why, n in missed[layer].items()]
    if not token_routes:
        return {"recomputed": False, "why": setting_.unknown or "no router output paired on both sides",
                "not_compared": not_compared}
    layers: dict[str, list] = {}
    for (rid, pos), per_layer in token_routes.items():
        for layer, r in per_layer.items():
            layers.setdefault(layer, []).append((rid, pos, r))
    rows = []
    for layer in sorted(layers, key=_layer_key):
        entries = layers[layer]
        diff = [(rid, pos, r) for rid, pos, r in entries if r.differs]
        rows.append({"layer": layer, "tokens": len(entries), "routed_differently": len(diff),
                     "share": len(diff) / len(entries) if entries else 0.0,
                     "differing": [{"request": rid, "position": pos, **r.to_dict()}
                                   for rid, pos, r in sorted(diff, key=lambda x: min(x[2].engine_margin,
                                                                                     x[2].trainer_margin))[:top]]})
    anywhere = sum(1 for per_layer in token_routes.values() if any(r.differs for r in per_layer.values()))
    order = [row["layer"] for row in rows]
    # per token routed differently somewhere: the layers (indexes into "layers"), for the report's picture
    where = [[rid, pos, [order.index(layer) for layer, r in per_layer.items() if r.differs]]
             for (rid, pos), per_layer in sorted(token_routes.items(), key=lambda kv: (natural(kv[0][0]), kv[0][1]))
             if any(r.differs for r in per_layer.values())]
    captured_ = sum(1 for per_layer in token_routes.values() for r in per_layer.values() if r.captured)
    return {"recomputed": True, "top_k": setting_.top_k, "engine_choice": "top_k largest router logits" if not
            captured_ else "the routed_experts it captured" + (
                "" if captured_ == sum(len(v) for v in token_routes.values()) else ", else the top_k largest "
                "router logits"), "captured": captured_,
            "tokens": len(token_routes), "routed_differently": anywhere,
            "share": anywhere / len(token_routes), "layers": rows, "where": where[:MAP_MAX],
            "not_compared": not_compared, "replay": replay(token_routes, order)}


def replay(token_routes: dict, order: list[str]) -> dict | None:
    """Whether the actor's routers replayed (some kept experts their own logits rank lower), and under replay
    per layer: the tokens routed differently, and the engine layer whose choices most of them got instead
    (`follows`: a replay attached to another layer's record; None where no layer's match). None without
    replay."""
    imposed = sum(1 for per_layer in token_routes.values() for r in per_layer.values() if r.imposed)
    if not imposed:
        return None
    layers = []
    for layer in order:
        tokens = [per_layer for per_layer in token_routes.values() if layer in per_layer]
        differ = [per_layer for per_layer in tokens if per_layer[layer].differs]
        sample = differ[:FOLLOW_SAMPLE]
        follows = {other: sum(1 for per_layer in sample if other in per_layer and
                              per_layer[other].engine == per_layer[layer].trainer) for other in order}
        best = max(order, key=lambda o: follows[o]) if sample else None
        layers.append({"layer": layer, "tokens": len(tokens), "routed_differently": len(differ),
                       "imposed": sum(1 for per_layer in tokens if per_layer[layer].imposed),
                       "follows": best if best is not None and follows[best] else None,
                       "follows_tokens": follows[best] if best is not None else 0, "follows_of": len(sample)})
    wrong = [l["layer"] for l in layers if l["follows"] is not None]
    return {"imposed": imposed, "layers": layers, "misattached": wrong,
            "bug": any(l["routed_differently"] for l in layers)}


FOLLOW_SAMPLE = 2000  # tokens routed differently per layer matched against the engine's other layers


MAP_MAX = 20_000  # tokens routed differently listed per layer for the picture



def _layer_key(path: str):
    return [int(p) if p.isdigit() else 0 for p in path.split(".")], path


def blame_experts(results, token_routes: dict) -> None:
    """For each token whose fused experts' output parted while their input and the routing agreed: the
    experts it used that no agreeing token of that layer used, set on its gap."""
    bad: dict[str, list] = {}
    good_used: dict[str, set[int]] = {}
    for t in results:
        per_layer = token_routes.get((t.request, t.position)) or {}
        for path in t.agreed_experts:
            r = per_layer.get(path.rpartition(".")[0])
            if r is not None:
                good_used.setdefault(path, set()).update(r.trainer)
        g = t.gap
        if g is not None and g.io == "output" and g.role == "experts":
            r = per_layer.get(g.module.rpartition(".")[0])
            if r is not None and not r.differs:
                bad.setdefault(g.module, []).append((t, r))
    for path, tokens in bad.items():
        used = good_used.get(path, set())
        for t, r in tokens:
            t.gap.experts = sorted(set(r.trainer) - used)
