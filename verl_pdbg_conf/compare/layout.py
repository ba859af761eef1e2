"""The parallel layout of a Megatron run, so a tensor-parallel group's ranks are compared as one model:
from verl's megatron settings where a config is given (`actor_rollout_ref.actor.megatron.
tensor_model_parallel_size`, pipeline and context sizes), otherwise from the dumps themselves: the ranks of
one tensor-parallel group start on the same input (the first module call's) and hold some tensor in parts.
Megatron's default rank order puts tensor-parallel ranks next to each other. Where the layout cannot be
established the ranks stay rank against rank, and a finding says why: a shard is never paired with a whole
tensor."""

from __future__ import annotations

from dataclasses import dataclass, replace

from verl_pdbg_conf.compare.dumpread import DumpError, DumpReader, rows_of, split_record
from verl_pdbg_conf.compare.pipeline.concat import same_rows

PROBE = 400  # records read from each rank to tell a tensor-parallel group
MEGATRON_KEYS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")
ROLES = ("actor_rollout_ref.actor.megatron", "actor_rollout_ref.ref.megatron", "critic.megatron", "megatron", "")


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    cp: int = 1
    source: str = ""  # "conf FILE" or "dumps"


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
                          f"conf {path}")
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


def group_sides(sides: list, tp: int) -> list:
    """Each tensor-parallel group of a key's rank sides (rank order) as one Side named for its data-parallel
    index, holding every member's dump."""
    ranked = sorted(sides, key=lambda s: _rank(s.rank_dir))
    out = []
    for d, start in enumerate(range(0, len(ranked), tp)):
        members = ranked[start:start + tp]
        out.append(replace(members[0], rank_dir=f"rank{d}", group=tuple(m.path for m in members),
                           members=tuple(m.rank_dir for m in members)))
    return out


def _rank(rank_dir: str) -> int:
    digits = rank_dir[4:] if rank_dir.startswith("rank") else ""
    return int(digits) if digits.isdigit() else 1 << 30


def apply(t_sides: list, g_sides: list, confs: dict | None = None) -> tuple[list, list, list]:
    """Both runs' sides with each tensor-parallel group made one, and the findings saying which layout was
    used and from where. `confs`: side -> verl config path (--target-conf, --golden-conf)."""
    from verl_pdbg_conf.core.findings import Finding, Severity

    confs = confs or {}
    findings = []
    out = {}
    counts = {name: _per_key(sides) for name, sides in (("target", t_sides), ("golden", g_sides))}
    differ = any(len(counts["target"].get(k, [])) != len(counts["golden"].get(k, []))
                 for k in set(counts["target"]) & set(counts["golden"]))
    for name, sides in (("target", t_sides), ("golden", g_sides)):
        by_key = counts[name]
        tp, why, source = 1, "", ""
        if confs.get(name):
            lay = from_conf(confs[name])
            tp, source = lay.tp, lay.source
            if lay.pp > 1 or lay.cp > 1:
                findings.append(Finding("compare-layout", Severity.WARNING,
                                        f"{name}: pipeline size {lay.pp}, context size {lay.cp} ({source}): pipeline "
                                        "stages and context shards are not combined; each rank is compared as it is",
                                        confs[name], 1, 1, "", ""))
        elif differ:
            multi = next((v for v in by_key.values() if len(v) > 1), None)
            if multi is not None:
                tp, why = from_dumps([s.path for s in sorted(multi, key=lambda s: _rank(s.rank_dir))])
                source = "the dumps"
        if tp > 1:
            grouped = []
            for key, members in by_key.items():
                if len(members) % tp:
                    findings.append(Finding("compare-layout", Severity.WARNING,
                                            f"{name} {'/'.join(key)}: {len(members)} ranks, not a multiple of the "
                                            f"tensor-parallel size {tp}: compared rank against rank",
                                            members[0].path, 1, 1, "", ""))
                    grouped += members
                else:
                    grouped += group_sides(members, tp)
            out[name] = grouped + [s for s in sides if not s.rank_dir.startswith("rank")]
            findings.append(Finding("compare-layout", Severity.INFO,
                                    f"{name}: tensor-parallel size {tp} from {source}"
                                    + (f" ({why})" if why else "") + f": each group of {tp} ranks compared as one "
                                    "model (replicated tensors once, shards concatenated)",
                                    sides[0].path if sides else "", 1, 1, "", ""))
        else:
            out[name] = sides
            if differ and not confs.get(name) and why and any(len(v) > 1 for v in by_key.values()):
                findings.append(Finding("compare-layout", Severity.WARNING,
                                        f"{name}: the runs hold different numbers of ranks, and the {name}'s layout "
                                        f"could not be established from its dumps ({why}): rank against rank",
                                        sides[0].path, 1, 1, "",
                                        f"give --{name}-conf with the run's verl config (its megatron sizes)"))
    return out["target"], out["golden"], findings


def _per_key(sides: list) -> dict:
    by: dict = {}
    for s in sides:
        if s.rank_dir.startswith("rank"):
            by.setdefault(s.key, []).append(s)
    return by
