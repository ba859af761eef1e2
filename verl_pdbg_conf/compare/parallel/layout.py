"""The parallel layout of each run, so a replica's ranks are compared as one model: from verl's megatron
settings where a config is given (`actor_rollout_ref.actor.megatron.tensor_model_parallel_size`, the
pipeline, context and expert sizes: each kind's `key`), otherwise from the dumps themselves (each kind's
`from_dumps`). Megatron's default rank order puts tensor-parallel ranks next to each other, then
expert-parallel, then data-parallel ones, and stages outermost. Where the two runs then hold different
numbers of replicas of a (step, stage), each run's data-parallel replicas, each with its share of the
batch, are put together as one model on the whole batch (as a config's sizes imply, or as the dumps
show: the same calls on the same parameters, inputs of each rank's own). Where the layout cannot be
established the ranks stay rank against rank, and a warning says why and asks for the run's config."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import prod

from verl_pdbg_conf.compare.parallel.kinds import CONTEXT, DATA, EXPERT, KINDS, PIPELINE, TENSOR
from verl_pdbg_conf.compare.parallel.replica import Level, Replica

ROLES = ("actor_rollout_ref.actor.megatron", "actor_rollout_ref.ref.megatron", "critic.megatron", "megatron", "")
SIZED = tuple(k for k in KINDS.values() if k.key)  # the kinds a verl config sizes


@dataclass(frozen=True)
class Layout:
    """A run's sizes by kind (KINDS' names; 1 where not given) and where they come from."""
    sizes: dict = field(default_factory=dict)
    source: str = ""  # "conf FILE" or "the dumps"

    def size(self, kind) -> int:
        return self.sizes.get(kind.name, 1)

    @property
    def tp(self) -> int:
        return self.size(TENSOR)

    @property
    def ep(self) -> int:
        return self.size(EXPERT)


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
        for kind in SIZED:
            value = lookup(doc.data, f"{role}.{kind.key}" if role else kind.key, None)
            if value is not None:
                if type(value) is not int or value < 1:
                    raise LayoutError(f"{path}: {role + '.' if role else ''}{kind.key} is {value!r}, not a positive "
                                      "integer")
                sizes[kind.name] = value
        if sizes:
            return Layout(sizes, f"conf {path}")
    raise LayoutError(f"{path}: no megatron tensor/pipeline/context parallel size in it "
                      f"(looked under {', '.join(r for r in ROLES if r)})")


def _rank(rank_dir: str) -> int:
    digits = rank_dir[4:] if rank_dir.startswith("rank") else ""
    return int(digits) if digits.isdigit() else 1 << 30


def _ranked(sides: list) -> list:
    return sorted(sides, key=lambda s: _rank(s.rank_dir))


def one_model(members: list, levels: tuple, name: str = "rank0"):
    """`members` (RankDumps in Megatron's rank order) as one RankDump named `name`, put together by `levels`."""
    return replace(members[0], rank_dir=name, members=tuple(m.rank_dir for m in members),
                   replica=Replica(tuple(m.path for m in members), tuple(levels)))


def replica_levels(lay: Layout) -> tuple[Level, ...]:
    """The levels a replica's ranks are put together by, innermost first (KINDS' order): every kind the layout
    sizes above 1 whose groups lie within a replica and are combined."""
    return tuple(Level(k.name, lay.size(k)) for k in KINDS.values() if k.within and k.combined and lay.size(k) > 1)


def group_sides(sides: list, lay: Layout) -> list:
    """Each replica of a key's rank sides as one RankDump named for its data-parallel index, holding its ranks'
    dumps in Megatron's rank order: the inner kinds' ranks fastest (tensor-parallel, expert-parallel), then
    the replica index, then the outer kinds' (the pipeline's stages)."""
    levels = replica_levels(lay)
    inner = prod(lv.size for lv in levels if not KINDS[lv.kind].outer)
    outer = prod(lv.size for lv in levels if KINDS[lv.kind].outer)
    ranked = _ranked(sides)
    dp = len(ranked) // (inner * outer)
    return [one_model([ranked[inner * (d + dp * o) + i] for o in range(outer) for i in range(inner)], levels,
                      f"rank{d}") for d in range(dp)]


def _finding(sev: str, message: str, path: str, hint: str = ""):
    from verl_pdbg_conf.compare.verdict import finding
    from verl_pdbg_conf.core.findings import Severity

    return finding("compare-layout", Severity.WARNING if sev == "warning" else Severity.INFO, message, path, hint)


def _decide(name: str, by_key: dict, conf: str | None, differ: bool) -> tuple[Layout, str, list]:
    """One run's layout within a replica: from its verl config, else from its dumps (experts always, the rest
    where the runs hold different numbers of ranks); (layout, why, findings)."""
    if conf:
        lay = from_conf(conf)
        cp = lay.size(CONTEXT)
        said = [] if cp == 1 else [_finding("warning", f"{name}: context-parallel size {cp} ({lay.source}): "
                                                "context shards are not combined", conf)]
        return lay, "", said
    multi = next((v for v in by_key.values() if len(v) > 1), None)
    if multi is None:
        return Layout(), "", []
    paths = [s.path for s in _ranked(multi)]
    ep, why = EXPERT.from_dumps(paths)
    if ep > 1:
        return Layout({EXPERT.name: ep}, "the dumps"), why, []
    if not differ:
        return Layout(), "", []
    tp, why = TENSOR.from_dumps(paths)
    pp, why_pp = PIPELINE.from_dumps(paths, tp)
    why = "; ".join(w for w in (why if tp > 1 else "", why_pp) if w) or why
    return Layout({TENSOR.name: tp, PIPELINE.name: pp}, "the dumps"), why, []


def _replicas(name: str, sides: list, by_key: dict, lay: Layout) -> tuple[list, list]:
    """A run's rank sides grouped into replicas by its layout (its other sides as they are), and findings."""
    out, said = [], []
    levels = replica_levels(lay)
    step = prod(lv.size for lv in levels)
    lone = next((lv.kind for lv in levels if KINDS[lv.kind].renumbers), "")
    for key, members in by_key.items():
        ranked = _ranked(members)
        if len(ranked) % step:
            what = " x ".join(f"{KINDS[lv.kind].said} {lv.size}" for lv in levels)
            said.append(_finding("warning", f"{name} {'/'.join(key)}: {len(ranked)} ranks, not a multiple of "
                                 f"{step} ({what}): compared rank against rank", ranked[0].path))
            # a rank left out of a group that renumbers (an expert's local index): its numbers are not the model's
            out += [replace(s, replica=Replica(lone=lone)) if lone else s for s in ranked]
        else:
            out += group_sides(ranked, lay)
    return out + [s for s in sides if not s.rank_dir.startswith("rank")], said


def _data_parallel(name: str, sides: list, other: dict, conf: str | None) -> tuple[list, str, str]:
    """Where this run holds more than one replica of a key and the other run another number, its replicas put
    together as one model on the whole batch (each its share): as a verl config implies (verl's Megatron
    and FSDP engines always split the batch), or as the dumps show. Returns the sides, what was put together
    and why ("" where nothing was), and why not where a key's replicas stay apart ("")."""
    out = [s for s in sides if not s.rank_dir.startswith("rank")]
    done, why_not = "", ""
    mine = _per_key(sides)
    # a run's data-parallel size is the most replicas a (step, stage) of it holds; one holding fewer lost some
    size = max(map(len, mine.values()), default=0)
    if size == max(map(len, other.values()), default=0):
        return sides, "", ""
    for key, reps in mine.items():
        if len(reps) < 2 or len(reps) != size or len(other.get(key, [])) in (0, len(reps)):
            out += reps
            continue
        reps = _ranked(reps)
        dp, why = (len(reps), f"conf {conf}") if conf else DATA.from_dumps([r.path for r in reps])
        if dp < 2:
            why_not = why_not or why
            out += reps
            continue
        done = done or f"data-parallel size {dp} from {'the dumps (' + why + ')' if not conf else why}"
        out.append(_joined(reps))
    return out, done, why_not


def _joined(reps: list):
    """A key's replicas (each one RankDump, in rank order) as one model: every rank in Megatron's rank order,
    the data-parallel level added before the pipeline's."""
    inner = reps[0].replica.levels
    pipeline = tuple(lv for lv in inner if lv.kind == PIPELINE.name)
    levels = tuple(lv for lv in inner if lv.kind != PIPELINE.name) + (Level(DATA.name, len(reps)),) + pipeline
    members = [_as_rank(r, i) for r in reps for i in range(len(r.replica.group) or 1)]
    return one_model(sorted(members, key=lambda s: _rank(s.rank_dir)), levels)


def _as_rank(rep, i: int):
    """Rank i of a replica as a RankDump of its own (a lone rank: itself)."""
    if not rep.replica.group:
        return rep
    return replace(rep, rank_dir=rep.members[i], path=rep.replica.group[i], members=(), replica=Replica())


def apply(t_sides: list, g_sides: list, confs: dict | None = None) -> tuple[list, list, list]:
    """Both runs' sides with each Megatron replica (tensor-parallel groups, pipeline stages, expert-parallel
    groups) made one, and a run's data-parallel replicas made one where the other run holds another number
    of them; and the findings saying which layout was used and from where. `confs`: side -> verl config."""
    confs = confs or {}
    findings, out = [], {}
    counts = {name: _per_key(sides) for name, sides in (("target", t_sides), ("golden", g_sides))}
    differ = any(len(counts["target"].get(k, [])) != len(counts["golden"].get(k, []))
                 for k in set(counts["target"]) & set(counts["golden"]))
    whys, alone = {}, set()  # alone: runs whose ranks stay rank against rank (said why)
    for name, sides in (("target", t_sides), ("golden", g_sides)):
        lay, why, said = _decide(name, counts[name], confs.get(name), differ)
        whys[name] = why
        if lay.size(CONTEXT) > 1:
            alone.add(name)
        findings += said
        path = sides[0].path if sides else ""
        pp = lay.size(PIPELINE)
        if lay.ep > 1 and lay.tp * pp > 1:
            findings.append(_finding("warning", f"{name}: expert-parallel size {lay.ep} with tensor-parallel {lay.tp} "
                                     f"x pipeline {pp} ({lay.source}): the experts' shards are not combined",
                                     path))
            out[name] = sides
            alone.add(name)
            continue
        if replica_levels(lay):
            out[name], said = _replicas(name, sides, counts[name], lay)
            findings += said
            findings.append(_finding("info", _layout_said(name, lay, why), path))
            continue
        out[name] = sides
    for name, other in (("target", "golden"), ("golden", "target")):
        if name in alone:
            continue  # its ranks hold parts of each sequence, or shards not combined (said): no replicas to join
        out[name], done, why_not = _data_parallel(name, out[name], _per_key(out[other]), confs.get(name))
        if done:
            findings.append(_finding("info", f"{name}: {done}: its replicas, each with its share of the batch, "
                                     "compared as one model on the whole batch", out[name][0].path))
        if why_not:
            why = "; ".join(w for w in (whys[name], why_not) if w)
            findings.append(_finding("warning", f"{name}: the runs hold different numbers of ranks, and the {name}'s "
                                     f"layout could not be established from its dumps ({why}): rank against rank",
                                     out[name][0].path, f"give --{name}-conf with the run's verl config (its "
                                     "megatron sizes)"))
    return out["target"], out["golden"], findings


def _layout_said(name: str, lay: Layout, why: str) -> str:
    levels = replica_levels(lay)
    kinds = [KINDS[lv.kind] for lv in levels]
    return (f"{name}: {', '.join(k.planned(lv.size) for k, lv in zip(kinds, levels))} from {lay.source}"
            + (f" ({why})" if why else "")
            + f": each replica's {prod(lv.size for lv in levels)} ranks compared as one model"
            + "".join(f", {k.renumbers}" for k in kinds if k.renumbers))


def _per_key(sides: list) -> dict:
    by: dict = {}
    for s in sides:
        if s.rank_dir.startswith("rank"):
            by.setdefault(s.key, []).append(s)
    return by
