"""Megatron's modules against a Hugging Face model's, by mbridge's own tables (mbridge-<version>.json, written
by extract.py). A parameter mapping says which module becomes which: `linear_proj.weight <- o_proj.weight`
pairs two modules; `linear_qkv.weight <- q_proj, k_proj, v_proj` makes one Megatron module the
concatenation of three (a fused projection); `linear_qkv.layer_norm_weight <- input_layernorm.weight` is a
norm TransformerEngine fuses in front of a projection, which megatron-core's local spec keeps as its own
module (its `sharded_state_dict_keys_map`). Enclosing modules pair where their children say so
(decoder.layers.3 <- model.layers.3), by majority, one to one."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

from verl_pdbg_conf.compare.facts import newest

HERE = os.path.dirname(os.path.abspath(__file__))
ROUTER = "router"  # megatron-core's MoELayer's TopKRouter attribute
EXPERT = "{expert}"  # the tables' expert placeholder (extract.py)
# megatron-core's SequentialMLP (the experts where there is no grouped gemm) holds expert J of its rank as
# `local_experts.J`; its sharded_state_dict puts that at global expert (expert-parallel rank x local experts
# + J), the index mbridge's tables give after `weight` (`mlp.experts.linear_fc1.weight{expert}`).
SEQUENTIAL_EXPERTS = "local_experts"


@dataclass(frozen=True)
class Link:
    mcore: str  # a Megatron module path
    hf: tuple  # the Hugging Face module paths it holds, in the order their outputs concatenate
    norm_in: str = ""  # a norm fused in front (TransformerEngine): this module's input is that norm's input

    @property
    def fused(self) -> bool:
        return len(self.hf) > 1 or bool(self.norm_in)


@functools.lru_cache(maxsize=1)
def tables() -> dict:
    """The newest extracted tables ({} where none is installed)."""
    return newest(HERE, "mbridge")


def _module(param: str) -> tuple[str, str]:
    head, _, tail = param.rpartition(".")
    return head, tail


@dataclass(frozen=True)
class _Rule:
    mcore: str  # module template with {layer}
    hf: tuple
    norm: bool  # a fused norm's parameter: the Megatron module holds the norm in front of it
    folded: bool = False  # the Megatron module holds another module's weight (a gate on its output)


def rules(model: dict, local_keys: dict, layer_template: str) -> list[_Rule]:
    """Module rules of one model type's parameter table, with the local spec's own norm modules."""
    out: dict[tuple, _Rule] = {}
    for mcore, hfs in model.get("params", []):
        module, param = _module(mcore)
        parts = tuple(dict.fromkeys(_module(h)[0] for h in hfs))
        if param == "weight" + EXPERT:  # one expert's weight (grouped): SequentialMLP's module of that expert
            head, _, last = module.rpartition(".")
            module = f"{head}.{SEQUENTIAL_EXPERTS}.{EXPERT}.{last}"
            out.setdefault((module, False), _Rule(module, parts, False))
            continue
        if param in ("weight", "bias"):
            out.setdefault((module, False), _Rule(module, parts, False))
            continue
        if not param.startswith("layer_norm_") and all(_module(h)[1] == "weight" for h in hfs):
            # Qwen2-MoE's shared_experts.gate_weight <- shared_expert_gate.weight: Megatron's shared experts
            # apply in their own output the gate transformers runs as a module of its own
            out.setdefault((module, "folded"), _Rule(module, parts, False, True))
            continue
        for local, te in local_keys.items():  # TransformerEngine's fused name -> the local spec's module
            te_full = layer_template + te
            if mcore.startswith(te_full) and local.endswith(".") and param.startswith("layer_norm_"):
                out.setdefault((layer_template + local[:-1], False), _Rule(layer_template + local[:-1], parts, False))
        if param.startswith("layer_norm_"):
            out.setdefault((module, True), _Rule(module, parts, True))
    return list(out.values())


def _pattern(template: str) -> re.Pattern:
    return re.compile(r"(?:^|\.)" + re.escape(template).replace(re.escape("{layer}"), r"(?P<layer>\d+)")
                      .replace(re.escape(EXPERT), r"(?P<expert>\d+)") + "$")


def _filled(template: str, m: re.Match) -> str:
    """A template with the numbers a match of another template found ({layer}, {expert})."""
    for name, value in m.groupdict().items():
        template = template.replace("{" + name + "}", value)
    return template


def _parent(path: str) -> str:
    return path.rpartition(".")[0]


class _Names:
    """A run's module paths as a table's templates see them: the components no template uses (wrappers:
    DDP's `module`, verl's model-chunk index `0.`, FSDP1's `_fsdp_wrapped_module`, PEFT's `base_model`)
    left out, and each path found again by any whole-component suffix of that (one path per suffix)."""

    def __init__(self, templates, paths):
        self.vocab, self.indexed = set(), set()
        for t in templates:
            parts = t.split(".")
            for i, p in enumerate(parts):
                if p in ("{layer}", EXPERT):
                    if i:
                        self.indexed.add(parts[i - 1])
                else:
                    self.vocab.add(p)
        self.normal: dict[str, str] = {}
        self.by_suffix: dict[str, str | None] = {}
        for path in paths:
            n = self.norm(path)
            if n is None:
                continue
            self.normal[path] = n
            comps = n.split(".")
            for i in range(len(comps)):
                suffix = ".".join(comps[i:])
                seen = self.by_suffix.get(suffix, path)
                self.by_suffix[suffix] = path if seen == path else None

    def norm(self, path: str) -> str | None:
        """The path without the components no template uses; None where its own last one is such (a
        module the tables say nothing of, inside one they do)."""
        out, last = [], False
        for c in path.split("."):
            last = (c.isdigit() and bool(out) and out[-1] in self.indexed) or (not c.isdigit() and c in self.vocab)
            if last:
                out.append(c)
        return ".".join(out) if out and last else None

    def find(self, name: str) -> str | None:
        return self.by_suffix.get(name)


class Correspondence:
    """Which Hugging Face modules each Megatron module of a run corresponds to: `links` (Megatron path ->
    Link) and `parents` (enclosing modules, Megatron path -> Hugging Face path). `model` is the mbridge model
    type whose table matched the most modules."""

    def __init__(self, mcore_paths, hf_paths):
        self.model = ""
        self.links: dict[str, Link] = {}
        self.parents: dict[str, str] = {}
        self.folded: dict[str, str] = {}  # Megatron module -> the Hugging Face module whose weight it holds
        # Megatron's experts module (one module per expert inside) -> the Hugging Face module holding them as one
        self.experts: dict[str, str] = {}
        mc, hf = list(mcore_paths), list(hf_paths)
        every = _all_rules()
        if not every or _megatron_words().isdisjoint({c for p in mc for c in p.split(".")}):
            return  # no name only Megatron uses: not a Megatron run (two transformers runs end here, at once)
        mcn = _Names([r.mcore for rs in every.values() for r in rs], mc)
        hfn = _Names([h for rs in every.values() for r in rs for h in r.hf], hf)
        best = None
        for name, rs in every.items():
            found = _links(rs, mcn, hfn)
            score = (len(found), -len(rs))  # the most modules matched; of equals, the table with the fewest rules
            if found and (best is None or score > best[2]):
                best = (name, found, score)
        if best is None:
            return
        self.model, self.links, _score = best
        self.parents = _parents(self.links, set(mc), set(hf))
        self.folded = _folded(every[self.model], mcn, hfn)
        self.experts = _fused_experts(every[self.model], mcn, hfn)

    def __bool__(self) -> bool:
        return bool(self.links)

    def mcore_to_hf(self) -> dict[str, str]:
        """Megatron path -> the Hugging Face path its records pair with (a fused link: its first part)."""
        out = dict(self.parents)
        out.update({m: link.hf[0] for m, link in self.links.items()})
        return out

    def fused(self) -> list[Link]:
        return [link for link in self.links.values() if link.fused]

    def routers(self) -> list[Link]:
        """The MoE layers' routers: megatron-core's MoELayer holds its TopKRouter as `router` (mbridge maps
        its weight to the Hugging Face model's gate)."""
        return [link for m, link in self.links.items() if m.rpartition(".")[2] == ROUTER and len(link.hf) == 1]


@functools.lru_cache(maxsize=1)
def _all_rules() -> dict[str, list[_Rule]]:
    doc = tables()
    return {name: rules(model, doc.get("local_spec_keys", {}), doc.get("layer_template", ""))
            for name, model in sorted(doc.get("models", {}).items())}


@functools.lru_cache(maxsize=1)
def _megatron_words() -> frozenset:
    """Path components Megatron's names use and no Hugging Face name does (decoder, linear_qkv, ...)."""
    def words(templates):
        return {w for t in templates for w in t.split(".") if w not in ("{layer}", EXPERT)}

    every = _all_rules().values()
    return frozenset(words(r.mcore for rs in every for r in rs) - words(h for rs in every for r in rs for h in r.hf))


def _folded(rs: list[_Rule], mc: "_Names", hf: "_Names") -> dict[str, str]:
    out: dict[str, str] = {}
    rules_ = [(r, _pattern(r.mcore)) for r in rs if r.folded]
    for path, n in mc.normal.items():
        for rule, pat in rules_:
            m = pat.search(n)
            other = hf.find(_filled(rule.hf[0], m)) if m else None
            if other is not None:
                out[path] = other
    return out


def _fused_experts(rs: list[_Rule], mc: "_Names", hf: "_Names") -> dict[str, str]:
    """Where the table names one module per expert on both sides (`...experts.local_experts.{expert}.linear_fc1`
    <- `...experts.{expert}.gate_proj`) and the Hugging Face run holds none of them but their container as
    one module (transformers 5's fused experts, an expert an index): Megatron's module holding its experts
    (SequentialMLP) -> that one module."""
    out: dict[str, str] = {}
    marks = "." + SEQUENTIAL_EXPERTS + "." + EXPERT
    for rule, pat in [(r, _pattern(r.mcore)) for r in rs if marks in r.mcore and "." + EXPERT + "." in r.hf[0]]:
        for path, n in mc.normal.items():
            m = pat.search(n)
            if m is None or hf.find(_filled(rule.hf[0], m)) is not None:
                continue
            fused = hf.find(_filled(rule.hf[0].partition("." + EXPERT + ".")[0], m))
            mine = mc.find(_filled(rule.mcore.partition(marks)[0], m))
            if fused is not None and mine is not None:
                out[mine] = fused
    return out


def _links(rs: list[_Rule], mc: "_Names", hf: "_Names") -> dict[str, Link]:
    whole = [(r, _pattern(r.mcore)) for r in rs if not r.norm and not r.folded]
    norms = [(r, _pattern(r.mcore)) for r in rs if r.norm and not r.folded]
    out: dict[str, Link] = {}
    for path, n in mc.normal.items():
        for rule, pat in whole:
            m = pat.search(n)
            if m is None:
                continue
            parts = tuple(hf.find(_filled(h, m)) for h in rule.hf)
            if None not in parts:
                out[path] = Link(path, parts)
                break
    for path, n in mc.normal.items():  # a norm fused in front of a projection, where the run has no module of its own
        for rule, pat in norms:
            m = pat.search(n)
            if m is None or path not in out:
                continue
            norm = hf.find(_filled(rule.hf[0], m))
            if norm is not None and not any(link.hf == (norm,) for link in out.values()):
                out[path] = Link(path, out[path].hf, norm)
    return out


def _parents(links: dict[str, Link], mc: set, hf: set) -> dict[str, str]:
    """Enclosing modules paired where their children's links agree: the most votes, one to one."""
    votes: dict[tuple, int] = {}
    for m, link in links.items():
        a, b = _parent(m), _parent(link.hf[0])
        while a and b:
            votes[(a, b)] = votes.get((a, b), 0) + 1
            a, b = _parent(a), _parent(b)
    out: dict[str, str] = {}
    taken: set = set(link.hf[0] for link in links.values())
    for (a, b), _n in sorted(votes.items(), key=lambda kv: (-kv[1], kv[0])):
        if a in out or b in taken or a in links or a not in mc or b not in hf:
            continue
        out[a] = b
        taken.add(b)
    return out



@functools.lru_cache(maxsize=1)
def expert_containers() -> tuple:
    """Patterns of the Megatron modules holding an MoE layer's experts (`decoder.layers.N.mlp.experts`), from
    the tables' rows naming one expert's weight; matched anywhere in a path."""
    doc = tables()
    mark = doc.get("expert_placeholder", EXPERT)
    out = set()
    for model in doc.get("models", {}).values():
        for mcore, _hf in model.get("params", []):
            if mcore.endswith("weight" + mark):
                out.add(_module(_module(mcore)[0])[0])
    return tuple(re.compile(r"(?:^|\.)" + re.escape(t).replace(re.escape("{layer}"), r"\d+") + r"(?:\.|$)")
                 for t in sorted(out))


# the local expert's number as stages.Relayer shifts a number: (separator)(container.)(number)
LOCAL_EXPERT_NUMBER = re.compile(r"(^|\.)(" + SEQUENTIAL_EXPERTS + r"\.)(\d+)(?=\.|$)")


def in_experts(path: str) -> bool:
    return any(p.search(path) for p in expert_containers())


def local_expert(path: str | None) -> int | None:
    """The local index J of an expert's module path inside an experts module (`...mlp.experts.local_experts.J...`)."""
    if not path or not in_experts(path):
        return None
    m = LOCAL_EXPERT_NUMBER.search(path)
    return int(m.group(3)) if m else None
