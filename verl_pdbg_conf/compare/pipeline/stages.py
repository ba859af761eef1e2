"""Pipeline-parallel stages put back together into one model. Each stage of a Megatron pipeline holds some
of the layers, numbered from 0 on every stage, and runs its share of the forward and, later, of the
backward. Each stage's layer numbers are shifted by the layers the stages before it hold (counted in each
stage's own module tree; Megatron may give the first or last stage fewer). The stages' record streams are
chained as the model runs: every stage's forward in stage order, then the rest (backward, optimizer step)
in reverse stage order. Past a stage's first backward the order is as written (more micro-batches run
one forward, one backward on the last stages)."""

from __future__ import annotations

import re
from dataclasses import replace

from verl_pdbg_conf.compare.megatron.table import tables
from verl_pdbg_conf.compare.nodes import module_path
from verl_pdbg_conf.compare.records import layer_of_path
from verl_pdbg_conf.compare.pipeline.trees import Tree


def layer_pattern() -> re.Pattern | None:
    """Megatron's layer container (mbridge's `decoder.layers.{layer}.`), anywhere in a path."""
    template = tables().get("layer_template", "")
    if "{layer}" not in template:
        return None
    head = re.escape(template.split("{layer}")[0])
    return re.compile(r"(^|\.)(" + head + r")(\d+)(?=\.|$)")


class Relayer:
    """Shifts the layer numbers in one stage's names by `offset`."""

    def __init__(self, offset: int, pattern: re.Pattern):
        self.offset, self.pattern = offset, pattern

    def sub(self, text: str) -> str:
        if not text or not self.offset:
            return text
        return self.pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{int(m.group(3)) + self.offset}", text)

    def record(self, r):
        if not self.offset:
            return r
        r.name, r.key, r.op = self.sub(r.name), self.sub(r.key), self.sub(r.op)
        r.scope = self.sub(r.scope)
        if r.module is not None:
            r.module = self.sub(r.module)
            r.layer = layer_of_path(r.module)
        elif r.scope:
            r.layer = layer_of_path(module_path(r.scope))
        elif r.layer is not None:  # L1: a layer read off the call stacks, counted from the stage's first
            r.layer += self.offset
        r.rows = [replace(x, name=self.sub(x.name), key=self.sub(x.key), record=self.sub(x.record)) for x in r.rows]
        return r

    def tree(self, tree: Tree) -> Tree:
        out = Tree()
        out.modules = {self.sub(p): c for p, c in tree.modules.items()}
        out.parent = {self.sub(k): (self.sub(v) if v else v) for k, v in tree.parent.items()}
        return out


def layers_held(tree: Tree | None, pattern: re.Pattern) -> int:
    """How many layers a stage holds: its highest local layer number plus one."""
    top = -1
    for path in (tree.modules if tree else ()):
        for m in pattern.finditer(path):
            top = max(top, int(m.group(3)))
    return top + 1


def offsets(trees: list, pattern: re.Pattern) -> list[int] | None:
    """Each stage's first layer's number in the model, or None where a stage's tree cannot be read."""
    if any(t is None for t in trees):
        return None
    out, n = [], 0
    for t in trees:
        out.append(n)
        n += layers_held(t, pattern)
    return out


def merged_tree(trees: list, relayers: list) -> Tree:
    out = Tree()
    for tree, rl in zip(trees, relayers):
        t = rl.tree(tree)
        for p, c in t.modules.items():
            out.modules.setdefault(p, c)
        out.parent.update(t.parent)
    return out


def spanning(trees: list, relayers: list) -> dict[str, tuple[int, int]]:
    """Modules several stages hold (the decoder block, wrappers): path -> (first stage, last stage). Each stage
    runs only its part of them: the model's call is the first stage's input and the last stage's output."""
    seen: dict[str, list[int]] = {}
    for n, (tree, rl) in enumerate(zip(trees, relayers)):
        for path in tree.modules:
            seen.setdefault(rl.sub(path), []).append(n)
    return {p: (st[0], st[-1]) for p, st in seen.items() if len(st) > 1}


def _joined(early, late):
    """One call of a module several stages ran in part: its inputs as the stage that ran first in this
    phase saw them, its outputs as the one that ran last did (forward: the first stage's input, the last
    stage's output; backward: the last stage's gradients of the outputs, the first stage's of the inputs)."""
    ins, outs = early, late
    late.rows = [r for r in ins.rows if r.state in ("input", "parameters")] + \
        [r for r in outs.rows if r.state not in ("input", "parameters")]
    late.rows = [replace(r, name=late.name + r.name[len(ins.name if r.state in ("input", "parameters") else
                                                             outs.name):], record=late.name) for r in late.rows]
    return late


class _Spans:
    """Holds a spanning module's call from the stage that runs it first (in the order of the phase) until the
    stage that runs it last, then gives the call put together."""

    def __init__(self, spans: dict):
        self.spans = spans
        self.held: dict[str, object] = {}
        self.dropped = 0

    def __call__(self, stream, stage: int, backward: bool):
        for r in stream:
            span = self.spans.get(r.module) if r.module is not None else None
            if span is None or r.direction == "parameters_grad":
                yield r
                continue
            first, last = span if not backward else (span[1], span[0])
            if stage == first:
                self.held[r.name] = r
            elif stage == last and r.name in self.held:
                yield _joined(self.held.pop(r.name), r)
            else:
                self.dropped += 1  # a middle stage's part: covered by the joined call


def _split(stream):
    """(the forward records before the stage's first backward, the rest as an iterator)."""
    head = []
    for r in stream:
        if r.direction != "forward" or r.after_backward:
            def rest(first=r):
                yield first
                yield from stream
            return head, rest()
        head.append(r)
    return head, iter(())


def chain(streams: list, relayers: list, spans: dict | None = None):
    """The stages' records as one model's: forwards in stage order, the rest in reverse stage order; the calls
    of modules several stages hold joined (spanning())."""
    join = _Spans(spans or {})
    rests = []
    for n, (stream, rl) in enumerate(zip(streams, relayers)):
        head, rest = _split(map(rl.record, stream))
        yield from join(head, n, False)
        rests.append(rest)
    for n in range(len(rests) - 1, -1, -1):
        yield from join(rests[n], n, True)
