"""Module trees: each dump's module calls (construct.json, at mix and L0) and their alignment across
wrappers. FSDP1 (`_fsdp_wrapped_module`), DDP (`module.`), torch.compile (`_orig_mod.`), activation
checkpointing (`_checkpoint_wrapped_module`) and PEFT (`base_model.model.`, `base_layer`) put the same
modules under other paths; no list of prefixes is kept here. Two modules correspond when, in the same
call order and with the same layer indices, one path is the other with components inserted, leaving out
the components one side never uses, preferring the same class and the fewest inserted components (a
weighted longest common subsequence per index signature). Target records are then renamed as the golden
ones they correspond to, and an API record whose module has no counterpart is scoped to its nearest
ancestor that has one (a LoRA layer's base linear runs inside q_proj as the plain q_proj's linear does).

One run may call a module P once where the other calls P.J for indices J instead and never P (the experts
transformers 5.x fuses into one module and 4.x builds one module per expert): P.J and everything under it is
P's family, run inside P's enclosing module as P is (coverage counts it there), and a submodule P.J.rest of
the same class as the other run's P.rest is one of its parts: their records are put together by rows
(fusion.Group rows) and paired with P.rest's; unless one call of P calls P.rest once per index (transformers'
experts run one at a time), where each index's calls pair with that index's (indices.py)."""

from __future__ import annotations

import os

from verl_pdbg_conf.compare.dumpread import DumpError, check_items, iter_items
from verl_pdbg_conf.compare.pipeline.fusion import Fuser, Group
from verl_pdbg_conf.compare.records import layer_of_path

DIRECTIONS = ("forward", "backward", "parameters_grad")
MAX_CALLS = 1 << 18  # module calls read from one construct.json; a larger one is not aligned


def parse_call(name: str):
    """Module.model.layers.0.mlp.Qwen2MLP.forward.0 -> ("model.layers.0.mlp", "Qwen2MLP", "forward.0")."""
    parts = name.split(".")
    if parts[0] not in ("Module", "Cell"):
        return None
    for i in range(2, len(parts)):
        if parts[i] in DIRECTIONS:
            return ".".join(parts[1:i - 1]), parts[i - 1], ".".join(parts[i:])
    return None


def call_name(prefix: str, path: str, cls: str, rest: str) -> str:
    return ".".join(p for p in (prefix, path, cls, rest) if p)


class Tree:
    """One dump's modules in first-call order (path -> class) and each module call's enclosing call."""

    def __init__(self):
        self.modules: dict[str, str] = {}
        self.parent: dict[str, str | None] = {}  # module call -> its enclosing module call

    def add(self, call: str, parent) -> None:
        parsed = parse_call(call)
        if parsed is None:
            return
        self.modules.setdefault(parsed[0], parsed[1])
        self.parent[call] = parent if isinstance(parent, str) else None

    @classmethod
    def read(cls, dump_path: str):
        """The tree of the dump's construct.json, or None where there is none to read."""
        path = os.path.join(os.path.dirname(dump_path), "construct.json")
        if not os.path.isfile(path) or check_items(path):
            return None  # none, or not construct.json's shape throughout (dumpread.check_items)
        tree, parents = cls(), []
        try:
            for n, (key, parent) in enumerate(iter_items(path)):
                if n >= MAX_CALLS:
                    return None
                if isinstance(key, str) and key.startswith(("Module.", "Cell.")):
                    tree.add(key, parent)
                if isinstance(parent, str):
                    parents.append(parent)
        except (OSError, DumpError, UnicodeDecodeError):
            return None
        for parent in parents:  # a call known only as a parent, after those listed (listed in call order)
            if parent not in tree.parent:
                tree.add(parent, None)
        return tree


def _words(path: str) -> list[str]:
    return [p for p in path.split(".") if p and not p.isdigit()]


def _indices(path: str) -> tuple:
    return tuple(p for p in path.split(".") if p.isdigit())


def _subsequence(short: list, long: list) -> bool:
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


def _score(t: tuple, g: tuple, t_foreign: set, g_foreign: set):
    """How well target module t = (path, class) corresponds to golden g, or None where it cannot."""
    tw, gw = _words(t[0]), _words(g[0])
    tr = [w for w in tw if w not in t_foreign]
    gr = [w for w in gw if w not in g_foreign]
    short, long = (tr, gr) if len(tr) <= len(gr) else (gr, tr)
    if not _subsequence(short, long):
        return None
    same_class = t[1] == g[1]
    if not same_class and tr != gr:
        return None
    inserted = len(tw) + len(gw) - 2 * len(short)
    return 1000 * same_class + 10 * len(short) - inserted + 1


def _lcs(ts: list, gs: list, t_foreign: set, g_foreign: set) -> list[tuple[int, int]]:
    """The index pairs of the best order-preserving one-to-one correspondence (weighted LCS)."""
    n, m = len(ts), len(gs)
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below = best[i], best[i + 1]
        for j in range(m - 1, -1, -1):
            s = _score(ts[i], gs[j], t_foreign, g_foreign)
            take = below[j + 1] + s if s is not None else -1
            row[j] = max(take, below[j], row[j + 1])
    out, i, j = [], 0, 0
    while i < n and j < m:
        s = _score(ts[i], gs[j], t_foreign, g_foreign)
        if s is not None and best[i][j] == best[i + 1][j + 1] + s:
            out.append((i, j))
            i, j = i + 1, j + 1
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    return out


def indexed_parts(mine: dict[str, str], other: dict[str, str]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Where `other` calls module P and `mine` calls P.J for indices J but never P: (other's P.rest -> mine's
    P.J.rest in index order, where both call that submodule with one class; every module of mine under some
    P.J -> P)."""
    parts: dict[str, list] = {}
    family: dict[str, str] = {}
    for path, cls in mine.items():
        comps = path.split(".")
        for i in range(1, len(comps)):
            p = ".".join(comps[:i])
            if not comps[i].isdigit() or p not in other or p in mine:
                continue
            family[path] = p
            whole = ".".join([p, *comps[i + 1:]])
            if i + 1 < len(comps) and other.get(whole) == cls and whole not in mine:
                parts.setdefault(whole, []).append((int(comps[i]), path))
            break
    return {k: [p for _, p in sorted(v)] for k, v in parts.items()}, family


def _per_index_calls(tree: Tree) -> set[str]:
    """Modules a call of their enclosing module calls more than once (a fused module's part called per index)."""
    seen: dict[tuple, int] = {}
    out = set()
    for call, parent in tree.parent.items():
        parsed = parse_call(call)
        if parsed is None or parent is None or not parsed[2].startswith("forward"):
            continue
        key = (parsed[0], parent)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            out.add(parsed[0])
    return out


MAX_GROUP = 2048  # modules of one index signature aligned by LCS; past this, only equal paths pair


class TreeAlignment:
    """Which golden module each target module corresponds to (path -> (golden path, golden class))."""

    def __init__(self, target: Tree, golden: Tree, seed: dict | None = None, families: dict | None = None,
                 roots: dict | None = None):
        """`seed`: target path -> golden path, pairs another package's table states (Megatron's modules
        against a Hugging Face model's); `families`: side -> (its module -> its family's root), families such a
        table states (Megatron's experts one module per expert against fused ones), `roots` their target root ->
        golden root; the rest align as below."""
        self.target, self.golden = target, golden
        self.to_golden: dict[str, tuple[str, str]] = {}
        for t, g in (seed or {}).items():
            if t in target.modules and g in golden.modules:
                self.to_golden[t] = (g, golden.modules[g])
        seeded = {g for g, _c in self.to_golden.values()}
        for path, cls in target.modules.items():
            if path not in self.to_golden and path not in seeded and golden.modules.get(path) == cls:
                self.to_golden[path] = (path, cls)
        # indexed parts: each side's modules one per index where the other calls one module (see the docstring)
        self.family: dict[str, dict[str, str]] = {}
        self.groups: dict[str, list[Group]] = {}
        self.per_index: set[str] = _per_index_calls(target) | _per_index_calls(golden)
        for side, mine, other in (("target", target.modules, golden.modules), ("golden", golden.modules,
                                                                              target.modules)):
            parts, self.family[side] = indexed_parts(mine, other)
            # where the other run calls the one module's part once per index, its calls pair index by index
            # (indices.py), not as one call on every index's rows
            parts = {whole: ps for whole, ps in parts.items() if whole not in self.per_index}
            self.groups[side] = [Group(tuple(ps), rows=True) for ps in parts.values()]
            for whole, ps in parts.items():
                if side == "target":
                    self.to_golden[ps[0]] = (whole, golden.modules[whole])
                else:
                    self.to_golden[whole] = (ps[0], golden.modules[ps[0]])
        for side, other in (("target", "golden"), ("golden", "target")):
            for root in set(self.family[other].values()):  # the one module, on the side that calls it
                self.family[side].setdefault(root, root)
        for side, members in (families or {}).items():
            self.family[side].update(members)
        self.roots = {r: r for r in self.family["target"].values() if r in set(self.family["golden"].values())}
        self.roots.update(roots or {})
        self.identity = not seed and len(self.to_golden) == len(target.modules) == len(golden.modules) \
            and not any(self.family.values())
        if self.identity:
            return
        matched_g = {g for g, _c in self.to_golden.values()}
        t_rest = [(p, c) for p, c in target.modules.items()
                  if p not in self.to_golden and p not in self.family["target"]]
        g_rest = [(p, c) for p, c in golden.modules.items() if p not in matched_g and p not in self.family["golden"]]
        t_vocab = {w for p in target.modules for w in _words(p)}
        g_vocab = {w for p in golden.modules for w in _words(p)}
        t_foreign, g_foreign = t_vocab - g_vocab, g_vocab - t_vocab
        groups: dict[tuple, tuple[list, list]] = {}
        for side, rest in ((0, t_rest), (1, g_rest)):
            for item in rest:
                groups.setdefault(_indices(item[0]), ([], []))[side].append(item)
        for ts, gs in groups.values():
            if not ts or not gs or len(ts) > MAX_GROUP or len(gs) > MAX_GROUP:
                continue
            for i, j in _lcs(ts, gs, t_foreign, g_foreign):
                self.to_golden[ts[i][0]] = gs[j]

    def fuse(self, titer, giter):
        """Each side's records with its indexed parts put together, the target's before it is renamed."""
        if self.groups["target"]:
            titer = Fuser(self.groups["target"])(titer)
        if self.groups["golden"]:
            giter = Fuser(self.groups["golden"])(giter)
        return titer, giter

    def families_in(self, module: str) -> list[str]:
        """The families (their one module's path) whose one module `module` encloses directly."""
        return sorted({r for side in self.family.values() for r in side.values() if r.rpartition(".")[0] == module})

    def family_note(self) -> str:
        """The indexed families, said once per module kind ("" where there are none)."""
        said = []
        for side, other in (("target", "golden"), ("golden", "target")):
            roots = sorted({r for p, r in self.family[side].items() if p != r})
            if roots:
                kinds = sorted({".".join("*" if c.isdigit() else c for c in r.split(".")) for r in roots})
                fused = sorted({g.parts[0].rsplit(".", 1)[-1] for g in self.groups[side]})
                said.append(f"{', '.join(kinds)}: one module per index in the {side}, one module in the {other}; "
                            "compared at the enclosing module" + (f" and at {', '.join(fused)}, its rows put "
                                                                  "together" if fused else ""))
        return "; ".join(said)

    @property
    def renamed(self) -> int:
        """Target modules paired under other paths (indexed parts aside: family_note says those)."""
        return sum(1 for t, (g, _c) in self.to_golden.items()
                   if t != g and t not in self.family["target"] and g not in self.family["golden"])

    def call(self, name: str) -> str:
        """A target module call's name as the golden module's; its nearest ancestor call that has a
        counterpart where it has none; "" (outside any module golden knows) where no ancestor has one."""
        seen = 0
        while name is not None and seen < 256:
            parsed = parse_call(name)
            if parsed is None:
                return ""
            hit = self.to_golden.get(parsed[0])
            if hit is not None:
                return call_name(name.split(".", 1)[0], hit[0], hit[1], parsed[2])
            name = self.target.parent.get(name)
            seen += 1
        return ""

    def rename(self, r) -> None:
        """Rename a target Record (records.Record) as the golden run names it."""
        if r.module is not None:
            parsed = parse_call(r.name)
            hit = self.to_golden.get(r.module) if parsed else None
            if hit is None:
                return
            prefix = r.name.split(".", 1)[0]
            old, new = call_name(prefix, r.module, parsed[1], ""), call_name(prefix, hit[0], hit[1], "")
            r.extra["own_module"] = r.module
            r.key = new + r.key[len(old):] if r.key.startswith(old) else r.key
            r.op = new + r.op[len(old):] if r.op.startswith(old) else r.op
            r.module = hit[0]
            r.layer = layer_of_path(hit[0])
        elif r.scope:
            scope = self.call(r.scope)
            if scope != r.scope:
                r.extra["own_scope"] = r.scope
                r.scope = scope
                r.layer = layer_of_path(parse_call(scope)[0]) if scope else None
