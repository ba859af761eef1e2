"""Which experts each side chose, token by token, in every mixture-of-experts layer.

The engine chooses inside its fused experts and dumps only the router logits (its GateLinear's output).
Its choice is read from the routed_experts it captured where its token record holds them (vLLM's
enable_return_routed_experts, what verl's R3 turns on), else recomputed from the logits the way its router
does (extract.py probed it against vLLM's own router; the settings are the HF config keys the model's
FusedMoE call reads):
- softmax top-k (Qwen3-MoE, Qwen2-MoE): the top_k largest logits;
- grouped top-k (GLM-4.5, DeepSeek-V3): scores = sigmoid (or softmax) of the float32 logits, plus the
  router's e_score_correction_bias where it has one; the topk_group groups (of n_group) with the largest
  group score (the sum of its 2 largest scores with a bias, its largest without) are kept, and the top_k
  largest scores within them.
The bias is a parameter of the engine's router (vLLM's GateLinear), dumped with its record; the trainer's
(transformers keeps it as a buffer, which msprobe does not dump) is read where its dump holds it, else the
engine's is used for both sides. The trainer's router returns its choice (output 2, the top-k indices);
where it does not, it is recomputed from its logits the same way. Each side's margin is in the score that
chooses: the last expert kept minus the first one dropped (logits for softmax top-k; biased scores within
the kept groups for grouped top-k, and the lower of that and the last kept group's score minus the first
dropped group's): a small margin is a near-tie that rounding can flip.

`blame_experts` then names the expert that parts in a layer whose experts' output diverged while their
input and the routing agreed: the tokens routed to it part, the tokens that did not use it agree.

Routing replay (verl's R3) is read off the dumps, not off a setting: a router that returns experts its own
logits rank below one it dropped (a negative margin for its own choice) took them from outside, and only a
replay does that. Under replay a token routed differently is a replay bug, never a near-tie; `replay` says per
layer which engine layer's choices the actor's follow, which names a replay attached to the wrong layer."""

from __future__ import annotations

from dataclasses import dataclass

from verl_pdbg_conf.compare.records import Record, layer_of_path
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
    bias: str = ""  # whose score-correction bias each side's choice was recomputed with ("" for none)

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
    scoring: str = "softmax"
    grouped: bool = False  # grouped top-k: n_group groups, the best topk_group of them kept
    n_group: int = 1
    topk_group: int = 1
    bias: str = ""  # the score-correction bias as module.parameter under the MoE block ("" for none)

    @property
    def rule(self) -> str:
        """The score the engine's choice is made in, said in words."""
        if not self.grouped:
            return "the router logits"
        score = f"{self.scoring}(logits)" + (f" + {self.bias.rpartition('.')[2]}" if self.bias else "")
        return (f"{score} within the top {self.topk_group} of {self.n_group} expert groups (group score: "
                + ("the sum of its 2 largest)" if self.bias else "its largest)"))


def setting(moe: dict, hf_config: dict, table: dict | None = None) -> Setting:
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
            return hf_config.get(v["config"], v.get("default", default))
        return _Unread(v.get("expression") or v.get("self") or "?")

    routing = (table or T.facts()).get("routing") or {}
    scoring = read("scoring_func", "softmax")
    grouped = read("use_grouped_topk", False)
    if grouped:
        scorings = (routing.get("grouped") or {}).get("scoring") or ()
    else:
        scorings = ("softmax",) if "softmax" in routing else ()
    why = f"the engine's router (scoring {scoring}, grouped top-k {grouped})"
    if isinstance(scoring, _Unread) or isinstance(grouped, _Unread) or scoring not in scorings \
            or read("custom_routing_function"):
        return Setting(None, f"{why} is not one this compare recomputes (softmax top-k"
                             f"{', grouped top-k' if routing.get('grouped') else ''})")
    k = read("top_k")
    k = k if isinstance(k, int) else None
    held = moe.get("e_score_correction_bias")
    if held is not None and "self" not in held and held.get("constant", 0) is not None:
        return Setting(None, f"{why} adds a score-correction bias this compare cannot locate in the dumps")
    bias = held["self"] if held is not None and "self" in held else ""
    if not grouped:
        if bias:
            return Setting(None, f"{why} adds a score-correction bias outside grouped top-k: not recomputed")
        return Setting(k)
    groups, top_groups = read("num_expert_group", 1), read("topk_group", 1)
    if not all(isinstance(x, int) and x > 0 for x in (groups, top_groups)) or top_groups > groups:
        return Setting(None, f"{why}: its groups (n_group {groups}, topk_group {top_groups}) are not read")
    return Setting(k, scoring=scoring, grouped=True, n_group=groups, topk_group=top_groups, bias=bias)


class _Unread(str):
    """A setting the model computes in code: not read from data."""


def choose(logits, k: int, setting_: Setting | None = None, bias=None) -> tuple[tuple[int, ...], float]:
    """The experts the router keeps for one token's logits, sorted, and the margin: softmax top-k keeps the
    top_k largest logits (softmax is monotonic); grouped top-k as vLLM's CPU router does (grouped())."""
    if setting_ is not None and setting_.grouped:
        return grouped(logits, k, setting_, bias)
    vals, idx = logits.topk(min(k + 1, logits.numel()))
    margin = float(vals[k - 1] - vals[k]) if vals.numel() > k else float("inf")
    return tuple(sorted(int(i) for i in idx[:k])), margin


def scores(logits, setting_: Setting, bias=None):
    """The scores grouped top-k chooses by, in float32 as vLLM's CPU router computes them: sigmoid or
    softmax of the logits, plus the score-correction bias."""
    x = logits.flatten().float()
    x = x.sigmoid() if setting_.scoring == "sigmoid" else x.softmax(-1)
    return x + bias.flatten().float() if bias is not None else x


def group_scores(s, setting_: Setting, bias=None):
    """Per group its score: the sum of its 2 largest scores where a bias corrects them, else its largest."""
    g = s.view(setting_.n_group, -1)
    return g.topk(2, dim=-1)[0].sum(-1) if bias is not None else g.max(-1).values


def grouped(logits, k: int, setting_: Setting, bias=None) -> tuple[tuple[int, ...], float]:
    """Grouped top-k (vLLM's cpu_router._grouped_topk on one token): the topk_group groups with the largest
    group scores, then the top_k largest scores within them. The margin is the lower of the two choices'
    margins, both in the score: the last expert kept minus the first dropped within the kept groups, and the
    last group kept minus the first group dropped."""
    import torch

    s = scores(logits, setting_, bias)
    g = group_scores(s, setting_, bias)
    mask = torch.zeros(setting_.n_group, dtype=torch.bool)
    mask[g.topk(setting_.topk_group).indices] = True
    inside = s.masked_fill(~mask.repeat_interleave(s.numel() // setting_.n_group), float("-inf"))
    vals, idx = inside.topk(min(k + 1, int(mask.sum()) * (s.numel() // setting_.n_group)))
    margin = float(vals[k - 1] - vals[k]) if vals.numel() > k else float("inf")
    if setting_.topk_group < setting_.n_group:
        gv = g.sort(descending=True).values
        margin = min(margin, float(gv[setting_.topk_group - 1] - gv[setting_.topk_group]))
    return tuple(sorted(int(i) for i in idx[:k])), margin


def margin_of(logits, chosen: tuple[int, ...], setting_: Setting | None = None, bias=None) -> float:
    """For a choice made elsewhere: the lowest logit kept minus the highest dropped. Under grouped top-k, the
    router's own margin where it is its own choice, else, in the score, where the two part: at the groups
    (the lowest group score among the choice's groups the router dropped minus the router's lowest kept
    group's), or within the kept groups (the lowest score kept minus the highest the router kept instead).
    Either is never positive: the choice is not what these logits choose."""
    import torch

    if setting_ is not None and setting_.grouped:
        own, margin = grouped(logits, len(chosen), setting_, bias)
        if own == tuple(sorted(chosen)):
            return margin
        s = scores(logits, setting_, bias)
        per = s.numel() // setting_.n_group
        g = group_scores(s, setting_, bias)
        mine, theirs = {i // per for i in own}, {i // per for i in chosen}
        if theirs - mine:
            return float(min(g[j] for j in theirs - mine) - min(g[j] for j in mine))
        return float(min(s[i] for i in chosen) - max(s[i] for i in set(own) - set(chosen)))
    mask = torch.zeros(logits.numel(), dtype=torch.bool)
    mask[list(chosen)] = True
    if mask.all():
        return float("inf")
    return float(logits[mask].min() - logits[~mask].max())


def routers(engine, table: dict | None = None) -> dict[int, list[Record]]:
    """Per engine step, its routers' records (empty for a dense model)."""
    return {k: [r for r in d.records if T.class_role(r.base, table).get("router")] for k, d in engine}


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
    bias_e = bias_t = None
    source = ""
    if setting_.grouped:
        n, groups = e.shape[1], setting_.n_group
        if n % groups or n // groups < (2 if setting_.bias else 1) or k > n // groups * setting_.topk_group:
            return (f"the router's {n} experts do not make {groups} groups to keep {setting_.topk_group} of and "
                    f"choose {k} from (the model config's n_group, topk_group)")
        if setting_.bias:
            bias_e, bias_t, source, said = _bias(judge, rec, trec, setting_.bias, n)
            if said:
                return said
    chosen_e, margin_e = choose(e[row].flatten(), k, setting_, bias_e)
    used = False
    if routed is not None:  # the engine's own record of its choice, by decoder layer
        layer = layer_of_path(rec.module)
        if layer is None or layer >= len(routed):
            return "the engine's routed_experts hold no record of this layer (routing records for some layers only)"
        picked = tuple(sorted(set(routed[layer])))
        if len(picked) == len(routed[layer]) == k and picked[-1] < e.shape[1]:
            chosen_e, margin_e, used = picked, margin_of(e[row].flatten(), picked, setting_, bias_e), True
        elif len(picked) == len(routed[layer]):  # distinct, yet not top-k in range: not the engine's choice
            return "the engine's routed_experts are not top-k distinct expert numbers in range"
        elif setting_.unknown:
            return "the engine did not record this row's experts and its choice is not recomputed"
        # else a repeated expert: a row the engine did not record (vLLM leaves it zero), recomputed instead
    if ti is not None:
        chosen_t = tuple(sorted({int(i) for i in ti.flatten()}))
        if len(chosen_t) != k:
            return "the actor's router top-k indices are not top-k distinct expert numbers in range"
        margin_t = margin_of(tl.flatten(), chosen_t, setting_, bias_t)
    else:
        chosen_t, margin_t = choose(tl.flatten(), k, setting_, bias_t)
    return Route(rec.module.rpartition(".")[0], chosen_e, chosen_t, margin_e, margin_t, captured=used, bias=source)


def _bias(judge: Walk, rec: Record, trec: Record, where: str, n: int):
    """Each side's score-correction bias (module.parameter under the MoE block: the router's parameter): its
    own where its dump holds it, else the other side's; or why there is none to use."""
    owner, _, name = where.rpartition(".")
    if owner != rec.module.rpartition(".")[2]:
        return None, None, "", f"the score-correction bias is {where}, not a parameter of the router's record"
    e, t = _parameter(judge.tensors, rec, name), _parameter(judge.tensors, trec, name)
    if e is None and t is None:
        return None, None, "", (f"neither dump holds the router's score-correction bias ({where}; msprobe dumps "
                            "parameters, not buffers)")
    source = "each side's own" if e is not None and t is not None else \
        "the engine's, for both sides (the actor's dump holds none)" if e is not None else \
        "the actor's, for both sides (the engine's dump holds none)"
    e, t = (e if e is not None else t), (t if t is not None else e)
    if e.numel() != n or t.numel() != n:
        return None, None, "", f"the router's score-correction bias ({where}) is not one value per expert"
    return e, t, source, ""


def _parameter(tensors, rec: Record, name: str):
    """A module call's parameter by name, loaded (msprobe dumps a module's parameters with its call)."""
    for r in rec.tensors("parameters"):
        if r.name.rpartition(".")[2] == name:
            return tensors.get(rec.file_of(r))
    return None


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
    rule = f"top_k largest {'router logits' if not setting_.grouped else 'of ' + setting_.rule}"
    biases = sorted({r.bias for per_layer in token_routes.values() for r in per_layer.values() if r.bias})
    return {"recomputed": True, "top_k": setting_.top_k, "engine_choice": rule if not captured_ else
            "the routed_experts it captured" + ("" if captured_ == sum(len(v) for v in token_routes.values())
                                                else ", else the " + rule), "captured": captured_,
            "score": setting_.rule, "margin": _MARGIN[setting_.grouped],
            **({"bias": "; ".join(biases)} if biases else {}),
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


_MARGIN = {False: "the logit of the last expert kept minus that of the first one dropped",
           True: "in the score that chooses: the last expert kept minus the first one dropped within the kept "
                 "groups, or the last group kept minus the first group dropped where that is lower"}
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
