"""The record model of both compares: a dump.json as a stream of Records (one API or module call with its
tensor rows, dumpread.Row), each with what pairing needs: its op, direction, call number, mini-batch and
forward pass, its scope (the enclosing module at mix, from construct.json) and, at L1, its calling line and
layer (pipeline/stacks.py). The rollout compare reads its module calls as the same Records (rollout/dumps.py),
their tensors by state (Record.inputs, outputs) and files (Record.file_of)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from verl_pdbg_conf.compare.dumpread import DumpError, DumpReader, KeyCounter, check_items, iter_items, rows_of, \
    split_record
from verl_pdbg_conf.compare.nodes import module_path

WINDOW = 1 << 16  # construct.json entries read ahead of the dump


@dataclass(slots=True)
class Record:
    name: str  # Functional.linear.3.forward, Module.model.layers.0.mlp.Qwen2MLP.forward.0
    key: str  # msprobe's pairing name (backward calls renumbered)
    op: str  # Functional.linear, Module.model.layers.0.mlp.Qwen2MLP
    direction: str  # forward | backward | parameters_grad
    rows: list  # dumpread.Row, in msprobe's order
    order: int = 0  # position in the dump
    minibatch: int = 0
    passes: int = 0  # forward passes begun so far (the opening op run again)
    after_backward: bool = False  # a backward record came before it in this mini-batch
    module: str | None = None  # module path of a module record
    scope: str = ""  # the enclosing module call (mix) or "" where unknown
    site: str = ""  # L1: the innermost calling line outside torch (stacks.py)
    layer: int | None = None  # model.layers.K's K (module path, or the call stack at L1)
    extra: dict = field(default_factory=dict)  # what later units attach (a split's note)
    unread: list = field(default_factory=list)  # why rows of it cannot be read: the record is not compared
    tensor_dir: str = ""  # the folder of its tensor files (the tensor task's dump_tensor_data)

    @property
    def base(self) -> str:
        """The op's own name: scaled_dot_product_attention, __add__, rms_norm; a module's class."""
        return self.op.rsplit(".", 1)[-1]

    @property
    def is_module(self) -> bool:
        return self.name.startswith(("Module.", "Cell."))

    def tensors(self, state: str) -> list:
        """Its tensor rows of one state (input: positional, then keyword; output) in order; an unreadable
        one keeps its place."""
        return [r for r in self.rows if r.state == state and (r.bad or type(r.shape) is list)]

    @property
    def inputs(self) -> list:
        return self.tensors("input")

    @property
    def outputs(self) -> list:
        return self.tensors("output")

    def file_of(self, row) -> str | None:
        """The tensor file of one of its rows, None where msprobe kept statistics only or it cannot be read."""
        if row.bad or not row.data_name or row.data_name == "-1":
            return None
        return os.path.join(self.tensor_dir, row.data_name)


def layer_of_path(path: str | None) -> int | None:
    """model.layers.3.mlp -> 3, blocks.2.fc -> 2: the first index that follows a name. A leading index is a
    model chunk's (verl's Megatron `0.module.decoder.layers.3`) unless only indices follow it (an
    nn.Sequential's `2.0`)."""
    if not path:
        return None
    parts = path.split(".")
    for i, part in enumerate(parts):
        if part.isdigit() and i and not parts[i - 1].isdigit():
            return int(part)
    if parts[0].isdigit() and all(p.isdigit() for p in parts):
        return int(parts[0])
    return None


class Construct:
    """construct.json (mix level: each call's enclosing module) read as a stream beside the dump, in the
    same order; entries not asked for yet wait in a bounded window."""

    def __init__(self, path: str):
        # a file that is not construct.json's shape throughout is not used at all (dumpread.check_items)
        self._items = iter_items(path) if os.path.isfile(path) and not check_items(path) else iter(())
        self._ahead: dict = {}

    def get(self, name: str):
        if name in self._ahead:
            return self._ahead.pop(name)
        try:
            for key, parent in self._items:
                if key == name:
                    return parent
                self._ahead[key] = parent
                if len(self._ahead) > WINDOW:
                    del self._ahead[next(iter(self._ahead))]
        except (OSError, DumpError, UnicodeDecodeError):
            self._items = iter(())
        return None


def _part(row: str, record: str) -> str:
    """A row's name within its record (output.0), or what it is."""
    if row == record:
        return "the record"
    return row[len(record) + 1:] if row.startswith(record + ".") else row


class Reader:
    """Records of one dump in its order. Counts mini-batches on the way: one starts when the op that opened
    the dump (the embedding, the root module) runs forward again after a backward, so an optimizer step
    stays with the mini-batch whose gradients it applies."""

    def __init__(self, path: str, level: str = "", stacks=None, construct: bool = True, unread: list | None = None,
                 stream: DumpReader | None = None):
        self.path = path
        self.tensor_dir = os.path.join(os.path.dirname(path), "dump_tensor_data")
        self.reader = stream or DumpReader(path)  # stream: one whose header was read already (DumpReader.head)
        self.keys = KeyCounter()
        self.construct = Construct(os.path.join(os.path.dirname(path), "construct.json")) \
            if level in ("mix", "L0") and construct else None
        self.unread = unread if unread is not None else []  # (dump.json, record, why) of each unreadable record
        self.stacks = stacks  # stacks.Stacks or None
        self.minibatch = 0
        self.passes = 0
        self.records = 0
        self.back = False
        self.opener = None

    def __iter__(self):
        try:
            for name, rec in self.reader.records():
                self.records += 1
                split = split_record(name)
                op, call_dir, direction = split
                if not op:
                    continue  # msprobe skips names with no forward/backward/parameters_grad part
                key, _ = self.keys.record_prefix(name, split)
                if direction == "forward":
                    if self.opener is None:
                        self.opener = op
                    elif op == self.opener:
                        self.passes += 1
                        if self.back:
                            self.minibatch += 1
                            self.back = False
                else:
                    self.back = True
                r = Record(name, key, op, direction, rows_of(name, rec, direction), self.records - 1, self.minibatch,
                           self.passes, self.back, tensor_dir=self.tensor_dir)
                bad = [f"{_part(row.name, name)} {row.bad}" for row in r.rows if row.bad]
                if bad:
                    r.unread = bad
                    self.unread.append((self.path, name, bad))
                if key is not name:
                    for row in r.rows:
                        if row.name.startswith(name):
                            row.key = key + row.name[len(name):]
                r.module = module_path(name)
                if r.module is not None:
                    r.layer = layer_of_path(r.module)
                elif self.construct is not None:
                    parent = self.construct.get(name)
                    # a module call; msprobe also writes "optimizer", which one run may mark and the other not
                    if isinstance(parent, str) and parent.startswith(("Module.", "Cell.")):
                        r.scope = parent
                        r.layer = layer_of_path(module_path(parent))
                if self.stacks is not None and r.module is None:
                    self.stacks.place(r, self.opener)
                yield r
        except DumpError as e:
            e.path = self.path
            raise
