"""Each index of an indexed family in a scope of its own, on both sides, so that one expert's calls pair with the
same expert's (trees.py: one run holds a family one module per index, P.J, the other one module P).

- The run with one module per index: every call inside P.J (and its submodules) is index J's.
- The run with one module: where P runs its indices one at a time (transformers 5's experts with
  experts_implementation="eager": `for expert_idx in expert_hit`), each iteration's first call takes the
  loop's index, a 0-d integer tensor whose statistics are its value: the calls inside P from there on, its
  submodules' too, are that index's, up to the next one or P's end. Where P runs every index's rows at once
  (grouped_mm), no call takes an index: nothing is split, and which index differs cannot be said.

A call of index J is put in the scope `<golden's P, or its module of index J>.J`, the same string on both sides
(the target's named as the golden's), so that pairing (pairing.py) matches index J's calls only among index
J's, by their signatures. Backward calls pair through their forward calls, as everywhere."""

from __future__ import annotations

from dataclasses import dataclass

from verl_pdbg_conf.compare import metrics as M
from verl_pdbg_conf.compare.nodes import module_path
from verl_pdbg_conf.compare.records import layer_of_path

CLASS = "Index"  # the class part of an index's scope (Module.<path>.<J>.Index.forward.0)


@dataclass(frozen=True)
class Family:
    golden_root: str  # the family's module in the golden's naming (its one module, or its per-index modules' parent)
    golden_split: bool  # the golden holds the family one module per index
    golden_prefix: str  # the golden's path that an index follows (golden_root, or its container of indices)


def _index_after(path: str, root: str) -> tuple[str, int] | None:
    """(the path an index follows, the index) of a module inside root's per-index modules, or None."""
    if not path.startswith(root + "."):
        return None
    comps = path[len(root) + 1:].split(".")
    for i, c in enumerate(comps):
        if c.isdigit():
            return ".".join([root, *comps[:i]]), int(c)
    return None


def families(family: dict[str, dict[str, str]], roots: dict[str, str]) -> dict[str, Family]:
    """Per target family root, its golden counterpart: `family` is trees.TreeAlignment.family (side -> module -> its
    family's root, in that side's naming), `roots` target root -> golden root."""
    out = {}
    for troot, groot in roots.items():
        prefix = next((hit[0] for p, r in family["golden"].items() if r == groot
                       for hit in [_index_after(p, groot)] if hit), None)
        out[troot] = Family(groot, prefix is not None, prefix or groot)
    return out


class Scopes:
    """One side's index scopes: its per-index modules' (path -> (scope, index, where)) or its one module's."""

    def __init__(self, side: str, family: dict[str, str], fams: dict[str, Family], own_modules: dict):
        by_own_root = fams if side == "target" else {f.golden_root: f for f in fams.values()}
        self.split: dict[str, tuple[str, int, str]] = {}
        self.fused: dict[str, Family] = {}
        self.looped: set[str] = set()  # one modules seen running their indices one at a time
        for path, root in family.items():
            f = by_own_root.get(root)
            hit = _index_after(path, root) if f is not None else None
            if hit is not None:
                self.split[path] = _scope(f, hit[1])
        split_roots = {family[p] for p in self.split}
        for path, root in family.items():
            f = by_own_root.get(root)
            if f is not None and path == root and root in own_modules and root not in split_roots:
                self.fused[root] = f

    def __bool__(self) -> bool:
        return bool(self.split or self.fused)

    def _fused_root(self, path: str) -> str | None:
        for root in self.fused:
            if path == root or path.startswith(root + "."):
                return root
        return None

    def __call__(self, records):
        """The records, each of an index put in that index's scope (record.extra["index"] = (where, index))."""
        current: dict[str, int] = {}  # one module's path -> the index its running iteration is of
        for r in records:
            if r.module is not None:
                if r.module in self.fused and r.direction == "forward":
                    current.pop(r.module, None)  # its forward ended: so did its loop
                yield r
                continue
            own = r.extra.get("own_scope", r.scope)
            path = module_path(own) if own else None
            if not path or r.direction != "forward":
                yield r
                continue
            hit = self.split.get(path)
            if hit is None:
                root = self._fused_root(path)
                if root is not None:
                    j = _loop_index(r) if path == root else None
                    if j is not None:
                        current[root] = j
                        self.looped.add(root)
                    if root in current:
                        hit = _scope(self.fused[root], current[root])
            if hit is not None:
                scope, j, where = hit
                r.extra.setdefault("own_scope", r.scope)
                r.scope = scope
                r.layer = layer_of_path(where)  # the module tree's layer, on both sides alike
                r.extra["index"] = (where, j)
            yield r


def _scope(f: Family, j: int) -> tuple[str, int, str]:
    """(the scope of index j, j, the golden's module to name for it: its own of index j, else its one module)."""
    path = f"{f.golden_prefix}.{j}"
    return f"Module.{path}.{CLASS}.forward.0", j, path if f.golden_split else f.golden_root


def _loop_index(r) -> int | None:
    """The value of a 0-d integer tensor the call takes (a loop over indices hands each one to its first call)."""
    for row in r.inputs:
        if row.shape == [] and M.exact_dtype(row.dtype) and "bool" not in str(row.dtype):
            mx, mn = row.stats[0], row.stats[1]
            if type(mx) is int and mx == mn and mx >= 0:
                return mx
    return None


def index_end(records) -> object | None:
    """The call an index's run of calls ends with: its last call that is not a module's and writes no other
    tensor in place (an accumulation into the one module's result, index_add_), or None."""
    for r in reversed(records):
        in_place = r.base.endswith("_") and not r.base.endswith("__")  # index_add_, not __mul__
        if r.module is None and r.direction == "forward" and not in_place and r.outputs:
            return r
    return None
