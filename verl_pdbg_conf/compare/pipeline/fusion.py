"""Fused modules against their parts: where one run computes in one module what the other computes in
several (Megatron's linear_qkv for q_proj, k_proj and v_proj; linear_fc1 for gate_proj and up_proj), the
parts' records are put together into one record, named as the first part's, so it pairs with the fused
module's. What concatenates combines exactly (concat.py): the outputs, the parameters and their gradients,
the gradients of the outputs. The input is the first part's (all parts read the same tensor), or the fused
norm's input where the other run fuses a norm in front. The gradient of the input is the sum of the parts',
which statistics cannot give: left out, and compared where it arrives (the norm before the projection).

An MoE router's outputs as Megatron's TopKRouter gives them: a Hugging Face router returns its logits
[T, E], the chosen experts' weights [T, k] and their indices [T, k]; Megatron's the weights scattered into
zeros [T, E] and the map of chosen experts [T, E] (bool). The scatter's statistics follow from the weights'
exactly (Max and Min with the zeros', Mean times k/E, the same Norm); the map's Max and Min are True and
False wherever k < E. The logits have no Megatron output: left out (compared inside, where a run dumps them).
In the backward, the gradients of the outputs are of other tensors: left out; the input's gradient stays.

A module whose Megatron counterpart holds another module's weight (Qwen2-MoE's shared expert: Megatron's
`shared_experts` applies the gate transformers runs as `shared_expert_gate`, mbridge's `gate_weight`) is
compared by its input only; its output and gradients are of other tensors (the gate's product).

A group of `rows` is the other kind of part: one run calls a module once per expert on that expert's rows
(transformers 4.x's `mlp.experts.J.act_fn`), the other once on all experts' rows (5.x's fused
`mlp.experts.act_fn`). Every tensor of such parts, inputs and their gradients too, is its share of the rows:
all of them concatenate along the first axis (trees.py finds these groups)."""

from __future__ import annotations

from dataclasses import dataclass

from verl_pdbg_conf.compare.pipeline.concat import axis_of, concat_rows


@dataclass(frozen=True)
class Group:
    parts: tuple  # module paths, in the order their outputs concatenate
    norm_in: str = ""  # the module whose input is the fused module's input
    rows: bool = False  # each part holds other rows of every tensor (an expert's tokens): joined on axis 0


def _call(r) -> str:
    """A module record's call number ("" for parameters_grad, which has none)."""
    last = r.name.rsplit(".", 1)[-1]
    return last if last.isdigit() else ""


class Fuser:
    """Runs over one side's records; `left_out` counts the input gradients left out."""

    def __init__(self, groups: list[Group], routers: set | frozenset = frozenset(), gated: set | frozenset = frozenset()):
        self.routers = frozenset(routers)  # Hugging Face routers' module paths
        self.gated = frozenset(gated)  # Hugging Face modules whose Megatron counterpart gates its output
        self.of: dict[str, tuple[Group, int]] = {}
        self.norms: dict[str, Group] = {}
        for g in groups:
            for i, p in enumerate(g.parts):
                self.of[p] = (g, i)
            if g.norm_in:
                self.norms[g.norm_in] = g
        self.left_out = 0

    def __call__(self, records):
        pending: dict[tuple, dict[int, object]] = {}
        norm_rec: dict[Group, object] = {}
        for r in records:
            if r.module is None:
                yield r
                continue
            if r.module in self.routers:
                yield _as_megatron_router(r)
                continue
            if r.module in self.gated and r.direction in ("forward", "backward"):
                # only the input (and parameters) compare: the output, its gradient and the input's gradient
                # (which flows through the gate too) are of other tensors
                r.rows = [x for x in r.rows if x.state in ("parameters",) or
                          (x.state == "input" and r.direction == "forward")]
                r.extra["gated"] = True
                yield r
                continue
            if r.module in self.norms and r.direction == "forward":
                norm_rec[self.norms[r.module]] = r
            hit = self.of.get(r.module)
            if hit is None:
                yield r
                continue
            g, i = hit
            key = (g, r.direction, _call(r), r.minibatch)
            got = pending.setdefault(key, {})
            got[i] = r
            if len(got) < len(g.parts):
                continue
            del pending[key]
            yield self._combine(g, [got[k] for k in range(len(g.parts))], norm_rec.get(g))
        for got in pending.values():  # parts that never completed: left as they are
            yield from sorted(got.values(), key=lambda r: r.order)

    def _combine(self, g: Group, parts: list, norm):
        first = parts[0]
        rows = []
        for j, row in enumerate(first.rows):
            tail = row.name[len(first.name):]
            same = [next((x for x in p.rows if x.name[len(p.name):] == tail), None) for p in parts]
            if g.rows:
                c = concat_rows(same, 0) if None not in same else None
                if c is not None:
                    rows.append(c)
                continue
            if row.state == "input" and first.direction == "forward":
                if norm is not None:
                    row = next((x for x in norm.rows if x.state == "input" and x.name[len(norm.name):] == tail), None)
                    row = None if row is None else _renamed(row, first, tail)
                if row is not None:
                    rows.append(row)
                continue
            if row.state == "output" and first.direction == "backward":
                self.left_out += 1  # the gradient of the shared input: the sum of the parts'
                continue
            if None in same:
                continue
            c = concat_rows(same, axis_of(row))
            if c is not None:
                rows.append(c)
        first.rows = rows
        first.extra["parts"] = list(g.parts)
        first.order = parts[-1].order
        return first


def _as_megatron_router(r):
    """A Hugging Face router's record with Megatron's TopKRouter's outputs (see the module's docstring)."""
    from dataclasses import replace

    if r.direction == "forward":
        outs = [x for x in r.rows if x.state == "output"]
        if len(outs) != 3 or not all(isinstance(x.shape, list) and len(x.shape) == 2 for x in outs):
            return r
        logits, weights, _ids = outs
        (t, e), k = logits.shape, weights.shape[1]
        mx, mn, mean, norm = weights.stats
        num = all(type(v) in (int, float) for v in (mx, mn, mean))
        scattered = replace(weights, name=logits.name, key=logits.key, shape=[t, e],
                            stats=(max(mx, 0.0), min(mn, 0.0), mean * k / e, norm) if num and k < e else weights.stats)
        chosen = replace(_ids, name=weights.name, key=weights.key, shape=[t, e], dtype="torch.bool",
                         stats=(True, k >= e, None, None))
        rows = [x for x in r.rows if x.state != "output"] + [scattered, chosen]
    else:  # the gradients of its outputs (its backward's inputs) are of other tensors
        rows = [x for x in r.rows if x.state != "input"]
    r.rows = rows
    r.extra["router"] = True
    return r


def _renamed(row, rec, tail: str):
    from dataclasses import replace

    return replace(row, name=rec.name + tail, key=rec.key + tail, record=rec.name)
