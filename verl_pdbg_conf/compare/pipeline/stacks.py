"""Where an L1 record ran, from stack.json: its calling line (the innermost frame outside torch and
msprobe) and the layer of the model it ran in, `model.layers.K`'s K (or an nn.Sequential's index).

msprobe writes one stack.json entry per distinct call stack, listing the calls made from it in order. A
line inside a decoder layer runs the same number of times in every layer, so within one forward pass
the calls of one entry fall m = r * L times (L layers, r per layer): its i-th call there is layer
(i mod m) // r. L is the count most entries inside a pass agree on. A pass is one call of the model,
counted at its first embedding line (a trainer runs lines of its own around the model once per stage call
or per micro-batch: verl's `loss_mask.sum()` before its micro-batches), else at the dump's first op.
A call whose own entry cannot say (a kernel swapped in one layer runs from another line) takes the layer
of the call before it, when its stack lies under the layer loop (ends with the frames every layered entry
shares). A forward-named call made during backward (a gradient hook) runs the layers last to first."""

from __future__ import annotations

import os

from verl_pdbg_conf.compare.dumpread import DumpError, check_items, iter_items, split_record
from verl_pdbg_conf.compare.nodes import FRAME, LIBRARY_DIRS

MODEL_OPENER = "Functional.embedding"  # a forward pass of a language model begins at its token embedding


def parse_frames(frames) -> tuple:
    """(file name, line, func, inside torch/msprobe/the runtime) of each frame that reads as one."""
    out = []
    for fr in frames:
        m = FRAME.search(str(fr))
        if m:
            out.append((os.path.basename(m.group("file")), m.group("line"), m.group("func"),
                        any(lib in m.group("file") for lib in LIBRARY_DIRS)))
    return tuple(out)


def site_of(parsed: tuple, skip=frozenset()) -> str:
    """The innermost frame (parse_frames) outside torch, msprobe, this package's runtime and the files in
    `skip`, as file:line in func."""
    for name, line, func, lib in parsed:
        if not lib and name not in skip:
            return f"{name}:{line} in {func}"
    return ""


def skip_foreign(a: "Stacks", b: "Stacks") -> None:
    """Calling lines read past the files one run's stacks hold and the other's never do (a wrapper's own
    code: PEFT's LoRA layer calling the base linear), so the same model line is each call's site."""
    fa, fb = a.files(), b.files()
    a.skip(fa - fb)
    b.skip(fb - fa)


def call_number(name: str) -> int | None:
    """The call counter in a record name: Functional.linear.3.forward -> 3, Module.x.Y.forward.2 -> 2."""
    parts = name.split(".")
    for p in (parts[-1], parts[-2] if len(parts) > 1 else ""):
        if p.isdigit():
            return int(p)
    return None


def layer_count(per_pass: list[int]) -> int | None:
    """The number of layers: the per-pass call count most repeated lines share (most lines inside a layer
    run once per layer); on a tie the one dividing more counts (a line run r times per layer counts
    r x L), then the larger. An optimizer's line, run once per parameter, is one line against many."""
    repeated = [m for m in per_pass if m > 1]
    if not repeated:
        return None
    return max(set(repeated), key=lambda c: (repeated.count(c), sum(1 for m in repeated if m % c == 0), c))


class Stacks:
    """stack.json of one dump, parsed once; place(record) sets its site and layer."""

    def __init__(self, path: str):
        self.entry: dict[str, int] = {}  # call name -> entry id
        self.sites: list[str] = []
        self.parsed: list[tuple] = []  # parse_frames of each entry
        self.frames: list[tuple] = []
        self.layers: dict[str, int] = {}  # forward call name -> layer (entries that can say)
        self.under: tuple = ()  # the outermost frames every layered entry shares: the layer loop and above
        self.n_layers: int | None = None
        self._ready = False
        self._calls: dict[tuple, list] = {}
        self._last: tuple | None = None  # (pass, layer) of the last layered call
        self._placed: dict[str, int] = {}  # forward calls given a layer from the call before them
        own: dict[tuple, int] = {}  # frames outside torch -> the first entry that has them
        if check_items(path, "stack.json"):
            return  # not stack.json's shape throughout: none of it is used (the caller says so)
        try:
            for _key, value in iter_items(path):
                if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], list)):
                    continue
                frames = tuple(str(f) for f in value[1]) if isinstance(value[1], list) else ()
                eid = len(self.sites)
                parsed = parse_frames(frames)
                self.parsed.append(parsed)
                self.sites.append(site_of(parsed))
                self.frames.append(frames)
                # stacks that differ only inside torch (a hooked module call takes another path through
                # _call_impl) are one line of the model: counted together for its layers
                same = own.setdefault(tuple(f for f in parsed if not f[3]), eid)
                for n in value[0]:
                    if isinstance(n, str):
                        self.entry[n] = eid
                        op, _, direction = split_record(n)
                        c = call_number(n)
                        if direction == "forward" and c is not None:
                            self._calls.setdefault((same, op), []).append((c, n))
        except (OSError, DumpError, UnicodeDecodeError):
            pass

    def files(self) -> set:
        """The files of the frames outside torch, msprobe and the runtime (where a wrapper's code shows)."""
        return {f[0] for parsed in self.parsed for f in parsed if not f[3]}

    def skip(self, files) -> None:
        if files:
            self.sites = [site_of(parsed, frozenset(files)) for parsed in self.parsed]

    def _finish(self, opener: str | None) -> None:
        """Per-pass counts once the opening op is known (the first record read)."""
        self._ready = True
        embeddings = [(eid, v) for (eid, op), v in self._calls.items() if op == MODEL_OPENER]
        if embeddings:  # the model's line called first (its token embedding, not a position embedding's),
            first = self.sites[min(embeddings, key=lambda e: min(e[1]))[0]]  # from whichever line the model is
            passes = sum(len(v) for eid, v in embeddings if self.sites[eid] == first)
        else:
            passes = sum(len(v) for (_eid, op), v in self._calls.items() if op == opener) or 1
        per = {k: len(v) // passes for k, v in self._calls.items() if len(v) % passes == 0}
        self.n_layers = layer_count(list(per.values()))
        if not self.n_layers:
            return
        layered = set()
        for k, m in per.items():
            if m % self.n_layers:
                continue
            r = m // self.n_layers
            for i, (_c, n) in enumerate(sorted(self._calls[k])):
                self.layers[n] = (i % m) // r
            layered.add(k[0])
        suffix = None
        for eid in layered:
            fr = self.frames[eid]
            if suffix is None:
                suffix = fr
                continue
            n = 0
            while n < len(suffix) and n < len(fr) and suffix[-1 - n] == fr[-1 - n]:
                n += 1
            suffix = suffix[len(suffix) - n:]
        self.under = suffix or ()
        self._calls = {}

    def place(self, r, opener: str | None = None) -> None:
        if not self._ready:
            self._finish(opener)
        fwd = r.name if r.direction != "backward" else r.name[:-len("backward")] + "forward"
        eid = self.entry.get(fwd)
        if eid is not None:
            r.site = self.sites[eid]
        layer = self.layers.get(fwd)
        if layer is None:
            layer = self._placed.get(fwd)
        if layer is None and r.direction == "forward" and eid is not None and self._last is not None \
                and self._last[0] == r.passes and self._inside(eid):
            layer = self._last[1]
            self._placed[fwd] = layer
        if layer is not None and r.direction == "forward":
            if r.after_backward and self.n_layers:  # a gradient hook's call: the layers run last to first
                layer = self.n_layers - 1 - layer
            else:
                self._last = (r.passes, layer)
        r.layer = layer

    def _inside(self, eid: int) -> bool:
        u, fr = self.under, self.frames[eid]
        return bool(u) and len(fr) > len(u) and fr[len(fr) - len(u):] == u
