"""Coverage: how much of each run a pair actually compared. "same" means compared and equal, so a verdict
carries, per side, the share of records and of modules compared, and the regions left uncompared, one per
module kind.

A record is compared when it has a counterpart, when it lies in a gap compared at its boundary (a fused
op against its decomposition), or when it runs in the body of a paired module (eager attention's ops
inside self_attn against sdpa's one op; LoRA's branch inside q_proj: compared at the module's input and
output). A module is compared when paired, and accounted for when it only wraps paired modules (FSDP1's
wrapper levels) or when the module that encloses it is paired (LoRA's lora_A, an MLP's act_fn a fused
kernel replaces), or when it belongs to a family one module per index that the other run calls as one
module (trees.py: it runs where that module runs). The rest is uncompared: records outside any paired
module (a collective of FSDP's, an optimizer step the other run does not take) and modules under unpaired
ones. A record holding a value that could not be read (records.Record.unread) is never compared, and keeps
the pair from "same" whatever share the rest reaches."""

from __future__ import annotations

from dataclasses import dataclass

from verl_pdbg_conf.compare.nodes import module_kind, module_path
from verl_pdbg_conf.compare.options import DEFAULT_MIN_COVERAGE

MAX_REGIONS = 32


class CoverageBug(AssertionError):
    """Coverage counts that do not add up: a fault of the compare (its pair is `error`, compare-failed), never
    of the dumps."""


@dataclass(frozen=True)
class Counts:
    """One side's coverage in one unit (a run's records, the rollout's tokens), for both compares: each one is
    compared, not compared or unreadable, counted apart; the sum is checked here, where it is built."""
    unit: str  # records | tokens
    total: int
    compared: int
    not_compared: int
    unreadable: int = 0

    def __post_init__(self):
        parts = (self.compared, self.not_compared, self.unreadable)
        if min(parts) < 0 or sum(parts) != self.total:
            raise CoverageBug(f"coverage of {self.total} {self.unit} does not add up: {self.compared} compared + "
                              f"{self.not_compared} not compared + {self.unreadable} unreadable")

    @property
    def share(self) -> float:
        return self.compared / self.total if self.total else 1.0

    def as_dict(self) -> dict:
        return {"unit": self.unit, "total": self.total, "compared": self.compared,
                "not_compared": self.not_compared, "unreadable": self.unreadable}


def kind(path: str) -> str:
    """model.layers.3.mlp -> model.layers.*.mlp; the root "" -> (outside any module)."""
    return module_kind(path) if path else "(outside any module)"


def _where(r) -> str:
    """The module path a record ran in, by its own run's names ("" outside any module)."""
    scope = r.extra.get("own_scope", r.scope)
    return (module_path(scope) if scope else "") or ""


class Tally:
    """One run's records, counted for coverage: paired, compared at a boundary, per module."""

    def __init__(self):
        self.records = 0
        self.paired = 0
        self.boundary = 0  # in gaps compared at their boundary
        self.modules: dict[str, list] = {}  # module path -> [paired, its records without a counterpart]
        self.loose: dict[str, int] = {}  # scope path -> unpaired records there (not in a compared gap)
        self.bracketed: dict[str, int] = {}  # module path -> its calls in gaps compared at their boundary
        self.unreadable = 0  # records with a value that could not be read (records.Record.unread)
        self.unread_in: dict[str, int] = {}  # module path -> its calls among them (counted there, not as calls)
        self.local: dict[str, int] = {}  # why -> records holding their ranks' own tensors (Row.local)
        # a module of a family one per index, and the one module the other run calls instead -> that module
        self.family: dict[str, str] = {}

    def record(self, r, paired: bool) -> None:
        parts = r.extra.get("parts") or ()  # a fused module's parts, put together into this one record
        self.records += max(1, len(parts))
        if r.unread:
            self.unreadable += max(1, len(parts))
            paired = False
        for why in r.extra.get("local") or ():
            self.local[why] = self.local.get(why, 0) + 1
        if r.module is not None:
            for path in (*parts[1:], r.extra.get("own_module", r.module)):
                m = self.modules.setdefault(path, [False, 0])
                m[0] |= paired
                m[1] += not paired
                if r.unread:
                    self.unread_in[path] = self.unread_in.get(path, 0) + 1
        if paired:
            self.paired += max(1, len(parts))
        elif r.module is None and not r.unread:
            where = _where(r)
            self.loose[where] = self.loose.get(where, 0) + 1

    def settle(self) -> dict:
        """The side's coverage as data, its Counts under "counts"."""
        paired = {p for p, (ok, _u) in self.modules.items() if ok}
        with_paired_inside = set()
        for p in paired:
            parts = p.split(".")
            for i in range(len(parts)):
                with_paired_inside.add(".".join(parts[:i]))

        def parent_paired(p: str) -> bool:
            """The nearest recorded module enclosing p is paired: p ran inside its compared boundary."""
            parts = p.split(".") if p else []
            for i in range(len(parts) - 1, -1, -1):
                a = ".".join(parts[:i])
                if a in self.modules:
                    return a in paired
            return False

        status = {}
        for p, (ok, unpaired) in self.modules.items():
            # a module of an indexed family runs where the other run's one module does: inside its enclosing one
            if not ok and p in self.family and parent_paired(self.family[p]):
                status[p] = "inside"
                continue
            status[p] = "paired" if ok else "wrapper" if p in with_paired_inside else \
                "inside" if parent_paired(p) or self.bracketed.get(p, 0) >= unpaired else "uncompared"
        # each record once: compared (paired, in a gap compared at its boundary, or inside a compared module),
        # not compared, or unreadable (counted there alone, wherever it ran)
        enclosed = not_compared = 0
        regions = {}
        for p, (ok, unpaired) in self.modules.items():
            calls = unpaired - self.unread_in.get(p, 0)  # its unpaired calls that could be read
            if status[p] in ("wrapper", "inside"):
                enclosed += calls
            else:
                not_compared += calls
                if ok and calls:  # calls of a paired module with none in the other run (a recomputed forward)
                    k = f"{kind(p)} (its calls)"
                    regions[k] = regions.get(k, 0) + calls
        for where, n in self.loose.items():
            if n <= 0:
                continue
            if where and (status.get(where) in ("paired", "inside") or (where not in self.modules and
                                                                         parent_paired(where))):
                enclosed += n
            else:
                regions[kind(where)] = regions.get(kind(where), 0) + n
                not_compared += n
        modules_off = {}
        for p, s in status.items():
            if s == "uncompared":
                modules_off[kind(p)] = modules_off.get(kind(p), 0) + 1
        counts = Counts("records", self.records, self.paired + self.boundary + enclosed, not_compared,
                        self.unreadable)
        return {
            "records": self.records, "compared_records": counts.compared,
            "unreadable_records": self.unreadable,
            "rank_own_records": dict(sorted(self.local.items())),
            "paired_records": self.paired,
            "share": counts.share,
            "modules": len(self.modules), "paired_modules": len(paired),
            "accounted_modules": sum(1 for s in status.values() if s in ("wrapper", "inside")),
            "uncompared_modules": dict(sorted(modules_off.items())[:MAX_REGIONS]),
            "uncompared_records": dict(sorted(regions.items(), key=lambda kv: -kv[1])[:MAX_REGIONS]),
            "counts": counts,
        }


class Coverage:
    """Both sides' counts, kept as the pipeline pairs records."""

    def __init__(self):
        self.target, self.golden = Tally(), Tally()

    def pair(self, t, g, compared: bool = True) -> None:
        """t and its counterpart g (or None); `compared` False where judging held them apart (tensors of other
        element counts): both count as records without a counterpart."""
        # a call whose tensors are shards or partial results (parallel/merge.py) kept its replicated tensors only:
        # it is compared at its module's boundary, as a record with no counterpart is; one holding its ranks'
        # own (a partial sum, a rank-local index) against the whole is not compared, and counted as such
        whole = compared and g is not None and not t.extra.get("sharded") and not g.extra.get("sharded") \
            and not t.unread and not g.unread and _alike_local(t, g)
        self.target.record(t, whole)
        if g is not None:
            self.golden.record(g, whole)

    def golden_only(self, records) -> None:
        for g in records:
            self.golden.record(g, False)

    def late(self, records) -> None:
        """Golden module records counted as golden-only, then paired after all (pair() counts them again)."""
        for g in records:
            parts = g.extra.get("parts") or ()
            self.golden.records -= max(1, len(parts))
            if g.unread:
                self.golden.unreadable -= max(1, len(parts))
            for why in g.extra.get("local") or ():
                self.golden.local[why] -= 1
            for path in (g.extra.get("own_module", g.module), *parts[1:]):
                self.golden.modules[path][1] -= 1
                if g.unread:
                    self.golden.unread_in[path] -= 1
        records.clear()

    def boundary(self, gap) -> None:
        """A gap compared at its boundary: its records count as compared, and a module with no counterpart
        whose calls all lie in such gaps (Megatron's core_attention against transformers' attention ops)
        is accounted for."""
        for side, records in ((self.target, gap.target), (self.golden, gap.golden)):
            for r in records:
                if r.module is not None:
                    path = r.extra.get("own_module", r.module)
                    side.bracketed[path] = side.bracketed.get(path, 0) + 1
                elif not r.unread:  # counted loose when it was met: now compared at the gap's boundary
                    where = _where(r)
                    if side.loose.get(where):
                        side.loose[where] -= 1
                        side.boundary += 1

    def finish(self, minimum: float = DEFAULT_MIN_COVERAGE) -> dict:
        t, g = self.target.settle(), self.golden.settle()
        tc, gc = t.pop("counts"), g.pop("counts")
        # a value that could not be read was not compared, whatever share the rest reaches
        full = all(s["share"] >= minimum and not s["uncompared_modules"] and not s["unreadable_records"]
                   for s in (t, g))
        return {"target": t, "golden": g, "minimum": minimum, "full": full, "counts": counts_of(tc, gc)}


def counts_of(target: Counts, golden: Counts) -> dict:
    """coverage.counts of a pair, the same in both compares' documents."""
    return {"target": target.as_dict(), "golden": golden.as_dict()}


def _side_text(name: str, s: dict) -> str:
    mods = f", {s['paired_modules']}/{s['modules']} modules paired" if s["modules"] else ""
    return f"{name} {100 * s['share']:.3g}% of {s['records']} records compared{mods}"


def coverage_text(cov: dict) -> str:
    """One line: each side's share and the regions left uncompared, once per module kind."""
    said = [_side_text("target", cov["target"]), _side_text("golden", cov["golden"])]
    for name in ("target", "golden"):
        s = cov[name]
        if s.get("unreadable_records"):
            n = s["unreadable_records"]
            said.append(f"{n} record{'s' * (n != 1)} of the {name} could not be read (dump-value): not compared")
        for why, n in (s.get("rank_own_records") or {}).items():
            said.append(f"{n} record{'s' * (n != 1)} of the {name} hold{'s' * (n == 1)} a {why} of each rank's own "
                        "(compared only with the same of a run split alike)")
        regions = [f"{k} ({n} module{'s' * (n != 1)})" for k, n in s["uncompared_modules"].items()]
        if not regions:
            regions = [f"{k} ({n} record{'s' * (n != 1)})" for k, n in list(s["uncompared_records"].items())[:6]]
        if regions:
            said.append(f"not compared in {name}: {', '.join(regions[:8])}"
                        + (f" and {len(regions) - 8} more" if len(regions) > 8 else ""))
    return "; ".join(said)


def short(cov: dict | None) -> str:
    """target/golden record shares, for a table cell: 100%/97.2%."""
    if not cov:
        return "-"
    return "/".join(f"{100 * cov[k]['share']:.3g}%" for k in ("target", "golden"))


def _alike_local(t, g) -> bool:
    """Neither record holds its ranks' own tensors, or both hold the same kinds (runs split alike)."""
    return set(t.extra.get("local") or ()) == set(g.extra.get("local") or ())
