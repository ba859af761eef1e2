"""The parallel layout of a Megatron run, so a replica's ranks are compared as one model: from verl's
megatron settings where a config is given (`actor_rollout_ref.actor.megatron.tensor_model_parallel_size`,
pipeline and context sizes), otherwise from the dumps themselves: the ranks of one tensor-parallel group start
on the same input (the first module call's) and hold some tensor in parts, and pipeline stages hold different
parts of the model. Megatron's default rank order puts tensor-parallel ranks next to each other and stages
outermost. Where the layout cannot be established the ranks stay rank against rank (as data-parallel ranks
would), and a warning says why and asks for the run's config."""

from __future__ import annotations

from dataclasses import dataclass, replace

from verl_pdbg_conf.compare.dumpread import DumpError, DumpReader, rows_of, split_record
from verl_pdbg_conf.compare.megatron.table import in_experts, local_expert
from verl_pdbg_conf.compare.nodes import module_path
from verl_pdbg_conf.compare.pipeline.concat import same_rows

PROBE = 400  # records read from each rank to tell a tensor-parallel group
MEGATRON_KEYS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                 "expert_model_parallel_size")
ROLES = ("actor_rollout_ref.actor.megatron", "actor_rollout_ref.ref.megatron", "critic.megatron", "megatron", "")


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    cp: int = 1
    source: str = ""  # "conf FILE" or "dumps"
    ep: int = 1  # expert parallel: ranks holding different experts, each a data-parallel replica otherwise
    experts: int = 0  # the experts each expert-parallel rank holds (0: not known)


class LayoutError(ValueError):
    pass


def from_conf(path: str) -> Layout:
    """The actor's megatron sizes in a verl config (a composed config.yaml, or a Hydra override file)."""
    from verl_pdbg_conf.core.document import lookup
    from verl_pdbg_conf.core.loaders import load

    doc = load(path)
    if doc.findings and doc.data is None:
        f = doc.findings[0]
        raise LayoutError(f"{path}:{f.line}:{f.column}: {f.message}")
    for role in ROLES:
        sizes = {}
        for key in MEGATRON_KEYS:
            value = lookup(doc.data, f"{role}.{key}" if role else key, None)
            if value is not None:
                sizes[key] = value
        if sizes:
            bad = {k: v for k, v in sizes.items() if type(v) is not int or v < 1}
            if bad:
                k, v = next(iter(bad.items()))
                raise LayoutError(f"{path}: {role + '.' if role else ''}{k} is {v!r}, not a positive integer")
            return Layout(sizes.get(MEGATRON_KEYS[0], 1), sizes.get(MEGATRON_KEYS[1], 1), sizes.get(MEGATRON_KEYS[2], 1),
                          f"conf {path}", sizes.get(MEGATRON_KEYS[3], 1))
    raise LayoutError(f"{path}: no megatron tensor/pipeline/context parallel size in it "
                      f"(looked under {', '.join(r for r in ROLES if r)})")


def _head(path: str) -> list:
    """The first PROBE records of a dump as (name, rows)."""
    out = []
    try:
        for name, rec in DumpReader(path).records():
            out.append((name, rows_of(name, rec, split_record(name)[2])))
            if len(out) >= PROBE:
                break
    except (OSError, DumpError, UnicodeDecodeError):
        return []
    return out


def _first_input(head: list):
    """The inputs of the first module call (the token embedding's ids): its API calls may already hold a
    rank's own shard bounds (a vocabulary shard's start)."""
    for name, rows in head:
        if name.startswith(("Module.", "Cell.")):
            return repr([(r.shape, r.stats, r.dtype) for r in rows if r.state == "input"])
    return None


def _sharded(heads: list[list]) -> bool:
    """Some module record holds a tensor in parts across these ranks (the same call, stats that differ)."""
    n = min(len(h) for h in heads)
    for i in range(n):
        names = {h[i][0] for h in heads}
        if len(names) != 1:
            return False
        name = heads[0][i][0]
        if not name.startswith(("Module.", "Cell.")):
            continue
        for j in range(len(heads[0][i][1])):
            rows = [h[i][1][j] for h in heads if j < len(h[i][1])]
            if len(rows) == len(heads) and not same_rows(rows):
                return True
    return False


def _reduced_alike(heads: list[list]) -> bool:
    """A forward all-reduce whose inputs differ between these ranks and whose outputs agree: the partial
    results of a row-parallel layer summed (data-parallel ranks reduce gradients, after a backward)."""
    n = min(len(h) for h in heads)
    for i in range(n):
        name = heads[0][i][0]
        if any(h[i][0] != name for h in heads):
            return False
        if name.startswith("Distributed.all_reduce.") and name.endswith(".forward"):
            ins = [[r for r in h[i][1] if r.state == "input"] for h in heads]
            outs = [[r for r in h[i][1] if r.state == "output"] for h in heads]
            if ins[0] and outs[0] and not all(same_rows(list(x)) for x in zip(*ins)) and \
                    all(same_rows(list(x)) for x in zip(*outs)):
                return True
    return False


def _module_paths(head: list) -> list:
    """A rank's first module records as (module path, rows)."""
    return [(module_path(name) or "", rows) for name, rows in head if name.startswith(("Module.", "Cell."))]


def experts_from_dumps(paths: list[str]) -> tuple[int, int, str]:
    """(expert-parallel size, local experts per rank, why): ranks running the same module calls whose
    parameters agree outside an MoE layer's experts (mbridge's tables say which modules hold them) and differ
    inside them hold different experts; each is a data-parallel replica otherwise (its own share of the
    batch, or the same). The group is the smallest period of neighbouring ranks after which the experts'
    parameters repeat (Megatron puts expert-parallel ranks next to each other at tensor-parallel size 1);
    (1, 0, "") where nothing says so."""
    if len(paths) < 2:
        return 1, 0, ""
    first = _module_paths(_head(paths[0]))
    if not any(local_expert(p) is not None for p, _ in first):
        return 1, 0, ""  # no expert of Megatron's in the first rank's first records (most runs end here)
    heads = [first] + [_module_paths(_head(p)) for p in paths[1:]]
    n = min(len(h) for h in heads)
    if not n:
        return 1, 0, ""
    experts = []  # per rank: its experts' parameter statistics
    for i in range(n):
        path = heads[0][i][0]
        if any(h[i][0] != path for h in heads):
            return 1, 0, ""
        params = [[(r.shape, r.stats) for r in h[i][1] if r.state == "parameters"] for h in heads]
        if not in_experts(path):
            if any(p != params[0] for p in params):
                return 1, 0, ""
        elif local_expert(path) is not None:
            experts.append(params)
    if not experts:
        return 1, 0, ""
    per_rank = [tuple(repr(e[r]) for e in experts) for r in range(len(paths))]
    for ep in range(2, len(paths) + 1):
        if len(paths) % ep or len(set(per_rank[:ep])) != ep:
            continue
        if all(per_rank[r] == per_rank[r % ep] for r in range(len(paths))):
            local = max(local_expert(p) for p, _ in heads[0][:n] if local_expert(p) is not None) + 1
            return ep, local, (f"groups of {ep} neighbouring ranks run the same calls, their parameters alike "
                               "but their experts'")
    return 1, 0, ""


def from_dumps(paths: list[str]) -> tuple[int, str]:
    """(tensor-parallel size, why) read off the ranks' dumps, in rank order; size 1 where the ranks are
    data-parallel or nothing says otherwise."""
    if len(paths) < 2:
        return 1, "one rank"
    heads = [_head(p) for p in paths]
    if any(not h for h in heads):
        return 1, "a rank's dump could not be read"
    first = [_first_input(h) for h in heads]
    for tp in range(len(paths), 1, -1):
        if len(paths) % tp:
            continue
        groups = [list(range(s, s + tp)) for s in range(0, len(paths), tp)]
        if not all(len({first[i] for i in g}) == 1 for g in groups):
            continue
        said = f"ranks {', '.join('+'.join(str(i) for i in g) for g in groups)}"
        if all(_sharded([heads[i] for i in g]) for g in groups) and all(f is not None for f in first):
            return tp, f"{said} start on the same input and hold tensors in parts"
        if all(_reduced_alike([heads[i] for i in g]) for g in groups):
            return tp, f"{said} all-reduce partial results in the forward pass to the same tensor"
    return 1, ("no group of neighbouring ranks starts on the same input and holds tensors in parts, or "
               "all-reduces partial results in the forward pass")


def stages_from_dumps(paths: list[str], tp: int) -> tuple[int, str]:
    """(pipeline-parallel size, why) read off the ranks' module trees, in rank order: Megatron puts the stages
    outermost, so the first stage's replicas come first, each holding the modules only the first stage
    holds (the embedding), and the last stage's last (the output layer)."""
    from verl_pdbg_conf.compare.pipeline.trees import Tree

    groups = [paths[i:i + tp] for i in range(0, len(paths), tp)]
    trees = [Tree.read(g[0]) for g in groups]
    if len(groups) < 2 or any(t is None for t in trees):
        return 1, ""
    kinds = [frozenset(t.modules) for t in trees]
    dp = next((i for i, k in enumerate(kinds) if k != kinds[0]), len(kinds))
    if dp == len(kinds) or len(kinds) % dp:
        return 1, ""
    pp = len(kinds) // dp
    blocks = [kinds[s * dp:(s + 1) * dp] for s in range(pp)]
    if any(len(set(b)) != 1 for b in blocks) or blocks[0][0] == blocks[-1][0]:
        return 1, ""
    return pp, f"{pp} groups of ranks hold different parts of the model ({dp} replica{'s' * (dp != 1)} each)"


def group_sides(sides: list, tp: int, pp: int = 1) -> list:
    """Each Megatron replica of a key's rank sides as one RankDump named for its data-parallel index, holding
    its ranks' dumps stage by stage (ranks: tensor-parallel fastest, stages outermost)."""
    ranked = sorted(sides, key=lambda s: _rank(s.rank_dir))
    dp = len(ranked) // (tp * pp)
    out = []
    for d in range(dp):
        members = [ranked[tp * (d + dp * st) + t] for st in range(pp) for t in range(tp)]
        out.append(replace(members[0], rank_dir=f"rank{d}", group=tuple(m.path for m in members),
                           members=tuple(m.rank_dir for m in members), tp=tp))
    return out


def _rank(rank_dir: str) -> int:
    digits = rank_dir[4:] if rank_dir.startswith("rank") else ""
    return int(digits) if digits.isdigit() else 1 << 30


def _finding(sev: str, message: str, path: str, hint: str = ""):
    from verl_pdbg_conf.core.findings import Finding, Severity

    return Finding("compare-layout", Severity.WARNING if sev == "warning" else Severity.INFO, message, path, 1, 1,
                   "", hint)


def _decide(name: str, by_key: dict, conf: str | None, differ: bool) -> tuple[Layout, str, list]:
    """One run's layout: from its verl config, else from its dumps where the runs hold different numbers of
    ranks; (layout, why, findings)."""
    if conf:
        lay = from_conf(conf)
        said = [] if lay.cp == 1 else [_finding("warning", f"{name}: context-parallel size {lay.cp} ({lay.source}): "
                                                "context shards are not combined", conf)]
        return lay, "", said
    multi = next((v for v in by_key.values() if len(v) > 1), None)
    if multi is None:
        return Layout(), "", []
    paths = [s.path for s in sorted(multi, key=lambda s: _rank(s.rank_dir))]
    ep, local, why = experts_from_dumps(paths)
    if ep > 1:
        return Layout(1, 1, 1, "the dumps", ep, local), why, []
    if not differ:
        return Layout(), "", []
    tp, why = from_dumps(paths)
    pp, why_pp = stages_from_dumps(paths, tp)
    why = "; ".join(w for w in (why if tp > 1 else "", why_pp) if w) or why
    return Layout(tp, pp, 1, "the dumps"), why, []


def _grouped(name: str, sides: list, by_key: dict, lay: Layout) -> tuple[list, list]:
    out, said = [], []
    size = lay.tp * lay.pp
    for key, members in by_key.items():
        if len(members) % size:
            said.append(_finding("warning", f"{name} {'/'.join(key)}: {len(members)} ranks, not a multiple of "
                                 f"{size} (tensor-parallel {lay.tp} x pipeline {lay.pp}): compared rank against rank",
                                 members[0].path))
            out += members
        else:
            out += group_sides(members, lay.tp, lay.pp)
    return out + [s for s in sides if not s.rank_dir.startswith("rank")], said


def apply(t_sides: list, g_sides: list, confs: dict | None = None) -> tuple[list, list, list]:
    """Both runs' sides with each Megatron replica (tensor-parallel groups, pipeline stages) made one, and
    the findings saying which layout was used and from where. `confs`: side -> verl config path."""
    confs = confs or {}
    findings, out = [], {}
    counts = {name: _per_key(sides) for name, sides in (("target", t_sides), ("golden", g_sides))}
    differ = any(len(counts["target"].get(k, [])) != len(counts["golden"].get(k, []))
                 for k in set(counts["target"]) & set(counts["golden"]))
    for name, sides in (("target", t_sides), ("golden", g_sides)):
        lay, why, said = _decide(name, counts[name], confs.get(name), differ)
        findings += said
        if lay.ep > 1 and lay.tp * lay.pp > 1:
            findings.append(_finding("warning", f"{name}: expert-parallel size {lay.ep} with tensor-parallel {lay.tp} "
                                     f"x pipeline {lay.pp} ({lay.source}): the experts' shards are not combined",
                                     sides[0].path if sides else ""))
        elif lay.ep > 1:  # each expert-parallel group as one model
            out[name] = _expert_groups(sides, counts[name], lay)
            findings.append(_finding("info", f"{name}: expert-parallel size {lay.ep} from {lay.source}"
                                     + (f" ({why})" if why else "") + ": each group's ranks compared as one model, "
                                     "rank r's local expert j as global expert r x (experts per rank) + j",
                                     sides[0].path if sides else ""))
            continue
        if lay.tp * lay.pp > 1:
            out[name], said = _grouped(name, sides, counts[name], lay)
            findings += said
            parts = [f"tensor-parallel size {lay.tp}"] + ([f"pipeline size {lay.pp}"] if lay.pp > 1 else [])
            findings.append(_finding("info", f"{name}: {', '.join(parts)} from {lay.source}"
                                     + (f" ({why})" if why else "") + f": each replica's {lay.tp * lay.pp} ranks "
                                     "compared as one model", sides[0].path if sides else ""))
            continue
        out[name] = sides
        if differ and lay.ep == 1 and not confs.get(name) and why and any(len(v) > 1 for v in counts[name].values()):
            findings.append(_finding("warning", f"{name}: the runs hold different numbers of ranks, and the {name}'s "
                                     f"layout could not be established from its dumps ({why}): rank against rank",
                                     sides[0].path, f"give --{name}-conf with the run's verl config (its megatron "
                                     "sizes)"))
    return out["target"], out["golden"], findings


def _local_count(path: str) -> int:
    """The experts a rank holds, read off its first records' module paths (0: none seen)."""
    local = {local_expert(p) for p, _ in _module_paths(_head(path))} - {None}
    return max(local) + 1 if local else 0


def _expert_groups(sides: list, by_key: dict, lay: Layout) -> list:
    """Each expert-parallel group of a key's ranks as one RankDump (one stage of `ep` ranks, in rank order)."""
    out = []
    for members in by_key.values():
        ranked = sorted(members, key=lambda s: _rank(s.rank_dir))
        if len(ranked) % lay.ep:
            out += [replace(s, experts=-1) for s in ranked]
            continue
        for d in range(len(ranked) // lay.ep):
            group = ranked[d * lay.ep:(d + 1) * lay.ep]
            out.append(replace(group[0], rank_dir=f"rank{d}", group=tuple(m.path for m in group),
                               members=tuple(m.rank_dir for m in group), tp=lay.ep,
                               experts=lay.experts or _local_count(group[0].path)))
    return out + [s for s in sides if not s.rank_dir.startswith("rank")]


def _per_key(sides: list) -> dict:
    by: dict = {}
    for s in sides:
        if s.rank_dir.startswith("rank"):
            by.setdefault(s.key, []).append(s)
    return by
