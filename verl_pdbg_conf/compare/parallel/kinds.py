"""The kinds of parallelism a Megatron (or any torch.distributed) run divides its model by, one class each:
how its size is read from verl's config (`key` under the actor's `megatron` section) or from the dumps
(`from_dumps`), and how the record streams of one of its groups become one (`merge`, with merge.py's
rules), with the group's module tree and what is said of it (`note`); where its ranks sit in Megatron's
rank order (`within`, `outer`) so layout.py groups a run's ranks by any kind alike. A replica (replica.py)
lists its levels innermost first; pipeline/sides.py applies them in that order, each kind merging `size`
neighbouring units (a rank's dump, or a group merged at the level below) into one. A new kind is one class
here and its entry in KINDS, in Megatron's rank order (docs/compare-megatron.md#a-new-kind-of-parallelism)."""

from __future__ import annotations

from verl_pdbg_conf.compare.megatron.table import LOCAL_EXPERT_NUMBER, in_experts, local_expert
from verl_pdbg_conf.compare.nodes import module_path
from verl_pdbg_conf.compare.parallel import probe
from verl_pdbg_conf.compare.parallel.merge import PARTIAL_SUM, RANK_INDEX, DataMerge, ExpertMerge, ShardMerge
from verl_pdbg_conf.compare.pipeline import stages as S


class Unit:
    """One model's records so far: a rank's, or a group's merged. `tree()` reads its module tree on demand."""

    def __init__(self, stream, tree, path: str):
        self.stream, self.tree, self.path = stream, tree, path


def _once(fn):
    done = []

    def get():
        if not done:
            done.append(fn())
        return done[0]
    return get


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


class Kind:
    name = ""  # replica.Level.kind
    said = ""  # how findings name it
    key = ""  # verl's size key under the actor's `megatron` section ("" where the config gives none)
    batch = False  # each of its ranks runs its own share of the batch
    within = True  # its groups are inside a replica (layout.py groups them); data parallelism's are the replicas
    combined = True  # merge() puts its groups together (context parallelism's shards are not yet)
    outer = False  # its ranks are outside the replica index in Megatron's rank order (the pipeline's stages)
    renumbers = ""  # what merge() renumbers to the model's numbering: a rank left out of its group is marked

    def planned(self, size: int) -> str:
        """How the layout finding names it at `size`."""
        return f"{self.said} size {size}"

    def from_dumps(self, paths: list[str]) -> tuple[int, str]:
        """(size, why) read off the ranks' dumps, in rank order; (1, why not) where nothing says so."""
        return 1, ""

    def merge(self, side, members: list, level) -> Unit:
        raise NotImplementedError

    def note(self, name: str, merges: list, size: int) -> str:
        return ""


class TensorParallel(Kind):
    name, said, key = "tensor", "tensor-parallel", "tensor_model_parallel_size"

    def from_dumps(self, paths):
        """Neighbouring ranks that start on the same input (the first module call's) and hold some tensor in
        parts, or all-reduce differing inputs to one output in the forward pass."""
        if len(paths) < 2:
            return 1, "one rank"
        heads = [probe.head(p) for p in paths]
        if any(not h for h in heads):
            return 1, "a rank's dump could not be read"
        first = [probe.first_input(h) for h in heads]
        for tp in range(len(paths), 1, -1):
            if len(paths) % tp:
                continue
            groups = [list(range(s, s + tp)) for s in range(0, len(paths), tp)]
            if not all(len({first[i] for i in g}) == 1 for g in groups):
                continue
            said = f"ranks {', '.join('+'.join(str(i) for i in g) for g in groups)}"
            if all(probe.sharded([heads[i] for i in g]) for g in groups) and all(f is not None for f in first):
                return tp, f"{said} start on the same input and hold tensors in parts"
            if all(probe.reduced_alike([heads[i] for i in g]) for g in groups):
                return tp, f"{said} all-reduce partial results in the forward pass to the same tensor"
        return 1, ("no group of neighbouring ranks starts on the same input and holds tensors in parts, or "
                   "all-reduces partial results in the forward pass")

    def merge(self, side, members, level):
        m = ShardMerge(scoped=side.level in ("mix", "L0"))
        side.merges.append((self, m))
        return Unit(m([u.stream for u in members]), members[0].tree, members[0].path)

    def note(self, name, merges, size):
        said = (f"{name}: each tensor-parallel group of {size} ranks combined (replicated tensors once, shards "
                "concatenated)")
        partial = sum(m.partial for m in merges)
        if partial:
            said += f"; {partial} calls' partial results left out, compared at their modules' boundaries"
        failed = next((m.failed for m in merges if m.failed), "")
        if failed:
            said += f"; stopped combining where {failed}: past it, one rank's shards only"
        return said


class ContextParallel(Kind):
    """Context parallelism splits each sequence between ranks; its shards are not combined (layout.py warns)."""
    name, said, key, combined = "context", "context-parallel", "context_parallel_size", False


class DataParallel(Kind):
    name, said, key, batch, within = "data", "data-parallel", "", True, False

    def from_dumps(self, paths):
        """Ranks that run the same calls on the same parameters, each on inputs of its own (its share of the
        batch: the first module call's token ids differ)."""
        if len(paths) < 2:
            return 1, "one rank"
        heads = [probe.head(p) for p in paths]
        if any(not h for h in heads) or not probe.same_calls(heads):
            return 1, "the ranks' dumps do not run the same calls"
        first = [probe.first_input(h) for h in heads]
        calls_only = all(f is None for f in first)  # API calls only (L1): no module, no parameter recorded
        if calls_only:
            first = [probe.calls_input(h) for h in heads]
        if None in first or len(set(first)) != len(first):
            return 1, "some ranks start on the same input"
        alike = probe.parameters_alike(heads)
        if not alike and not (calls_only and alike is None):
            return 1, "the ranks' parameters differ"
        ranks = '+'.join(map(str, range(len(paths))))
        if calls_only:
            return len(paths), f"ranks {ranks} make the same API calls, each on inputs of its own"
        return len(paths), (f"ranks {ranks} run the same calls on the same parameters, each on its own share of "
                            "the batch")

    def merge(self, side, members, level):
        m = DataMerge()
        side.merges.append((self, m))
        return Unit(m([u.stream for u in members]), members[0].tree, members[0].path)

    def note(self, name, merges, size):
        said = (f"{name}: each data-parallel group of {size} ranks combined (each rank's share of the batch "
                "concatenated, tensors held alike once)")
        return said + _local(merges) + _stopped(merges)


class ExpertParallel(Kind):
    name, said, key, batch = "expert", "expert-parallel", "expert_model_parallel_size", True
    renumbers = "rank r's local expert j as global expert r x (experts per rank) + j"

    def from_dumps(self, paths):
        """Ranks running the same module calls whose parameters agree outside an MoE layer's experts
        (mbridge's tables say which modules hold them) and differ inside them hold different experts; each is
        a data-parallel rank otherwise (its own share of the batch, or the same). The group is the smallest
        period of neighbouring ranks after which the experts' parameters repeat (Megatron puts expert-parallel
        ranks next to each other at tensor-parallel size 1)."""
        if len(paths) < 2:
            return 1, ""
        first = probe.module_paths(probe.head(paths[0]))
        if not any(local_expert(p) is not None for p, _ in first):
            return 1, ""  # no expert of Megatron's in the first rank's first records (most runs end here)
        heads = [first] + [probe.module_paths(probe.head(p)) for p in paths[1:]]
        n = min(len(h) for h in heads)
        experts = []  # per rank: its experts' parameter statistics
        for i in range(n):
            path = heads[0][i][0]
            if any(h[i][0] != path for h in heads):
                return 1, ""
            params = [[(r.shape, r.stats) for r in h[i][1] if r.state == "parameters"] for h in heads]
            if not in_experts(path):
                if any(p != params[0] for p in params):
                    return 1, ""
            elif local_expert(path) is not None:
                experts.append(params)
        if not experts:
            return 1, ""
        per_rank = [tuple(repr(e[r]) for e in experts) for r in range(len(paths))]
        for ep in range(2, len(paths) + 1):
            if len(paths) % ep or len(set(per_rank[:ep])) != ep:
                continue
            if all(per_rank[r] == per_rank[r % ep] for r in range(len(paths))):
                return ep, (f"groups of {ep} neighbouring ranks run the same calls, their parameters alike but "
                            "their experts'")
        return 1, ""

    def merge(self, side, members, level):
        experts = _local_count(members[0].path)
        # rank r's local expert j renamed global r x experts + j
        relayers = [S.Relayer(i * experts, LOCAL_EXPERT_NUMBER) for i in range(len(members))]
        m = ExpertMerge(relayers, _is_expert)
        side.merges.append((self, m))

        def tree():
            trees = [u.tree() for u in members]
            return None if None in trees else S.merged_tree(trees, relayers)
        return Unit(m([u.stream for u in members]), _once(tree), members[0].path)

    def note(self, name, merges, size):
        said = (f"{name}: each expert-parallel group of {size} ranks combined (each rank's experts under their "
                "global index, the batch's shares concatenated, tensors held alike once)")
        return said + _local(merges) + _stopped(merges)


class PipelineParallel(Kind):
    name, said, key, outer = "pipeline", "pipeline", "pipeline_model_parallel_size", True

    def from_dumps(self, paths, tp: int = 1):
        """Read off the ranks' module trees, in rank order: Megatron puts the stages outermost, so the first
        stage's replicas come first, each holding the modules only the first stage holds (the embedding), and
        the last stage's last (the output layer)."""
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

    def merge(self, side, members, level):
        chain = StageChain(members)
        side.merges.append((self, chain))
        return Unit(chain.records(), chain.tree, members[0].path)

    def note(self, name, merges, size):
        chain = merges[0]
        if chain.offsets is None:
            return (f"{name}: {size} pipeline stages not put together ({chain.failed}): "
                    "the first stage only")
        return (f"{name}: {size} pipeline stages put together as one model, their layers numbered from "
                f"{', '.join(map(str, chain.offsets))}; forwards in stage order, backwards in reverse")


class StageChain:
    """A replica's pipeline stages as one model (stages.py): each stage's layers numbered on from the stages
    before it, counted in each stage's module tree; where a tree cannot be read, the first stage only."""

    def __init__(self, members: list):
        self.members = members
        self.failed = ""
        pattern = S.layer_pattern()
        self.trees = [u.tree() for u in members]
        self.offsets = S.offsets(self.trees, pattern) if pattern else None
        if self.offsets is None:
            self.failed = "a stage's module tree (construct.json) cannot be read: its layers cannot be numbered"
        else:
            self.relayers = [S.Relayer(o, pattern) for o in self.offsets]

    def records(self):
        if self.offsets is None:
            return self.members[0].stream
        return S.chain([u.stream for u in self.members], self.relayers, S.spanning(self.trees, self.relayers))

    def tree(self):
        if self.offsets is None:
            return self.members[0].tree()
        return S.merged_tree(self.trees, self.relayers)


TENSOR, CONTEXT, EXPERT, DATA, PIPELINE = (TensorParallel(), ContextParallel(), ExpertParallel(), DataParallel(),
                                           PipelineParallel())
KINDS = {k.name: k for k in (TENSOR, CONTEXT, EXPERT, DATA, PIPELINE)}  # Megatron's rank order, innermost first


def _local(merges: list) -> str:
    got: dict = {}
    for m in merges:
        for why, n in m.local.items():
            got[why] = got.get(why, 0) + n
    said = [f"{_plural(got[PARTIAL_SUM], 'partial sum')} (a rank's loss, its gradients before the all-reduce)"
            if got.get(PARTIAL_SUM) else "",
            f"{_plural(got[RANK_INDEX], 'rank-local index')} (built by each rank for its own rows)"
            if got.get(RANK_INDEX) else ""]
    said = [s for s in said if s]
    return ("; kept as the ranks' own, compared only with the same of a run split alike: " + ", ".join(said)
            if said else "")


def _stopped(merges: list) -> str:
    failed = next((m.failed for m in merges if m.failed), "")
    return f"; stopped combining where {failed}: past it, one rank's records only" if failed else ""


def _is_expert(r) -> bool:
    """A record of one expert's module (or of a call inside one)."""
    return local_expert(r.module if r.module is not None else module_path(r.scope) if r.scope else None) is not None


def _local_count(path: str) -> int:
    """The experts a rank holds, read off its first records' module paths (0: none seen)."""
    local = {local_expert(p) for p, _ in probe.module_paths(probe.head(path))} - {None}
    return max(local) + 1 if local else 0
