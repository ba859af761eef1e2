"""Extract one verl release's facts from its real package, without importing verl, and write
them beside this script as `verl-<version>.json.gz`.

    pip download --no-deps verl==0.9.1 -d /tmp/w
    python -m verl_pdbg_conf.verl_facts.releases.extract --wheel /tmp/w/verl-0.9.1-py3-none-any.whl
    python -m verl_pdbg_conf.verl_facts.releases.extract --installed

What is extracted (nothing is typed by hand, no file of verl is stored):

- `configs`: every config main_ppo can compose from `verl/trainer/config` (the primary configs
  and every config group option; not the `_generated_*` reference dumps), each as
  `{"package": <its # @package header or null>, "defaults": <its defaults list, when it has
  one>, "body": <the rest>}`, loaded exactly as Hydra loads a YAML file (OmegaConf's YAML
  loader, Hydra's header parser), so values and interpolation strings are what Hydra sees;
  `groups`: every directory of the tree (Hydra lists them as config groups).
- `stages`: read from verl's code by AST: the `DistProfiler.annotate(role=...)` of every worker
  method, the stage->role table, model attribute candidates and skipped stages of the
  precision_debugger backend, whether it binds the first Megatron chunk of a list, the
  profiler tools, which role profiler gates the hybrid worker, which trainer call reaches an
  annotation that is not a stage name (the critic's `train_batch` -> `critic_update`), whether
  profile_continuous_steps keeps the first step's tag, the role profiler sections of the
  composed ppo_trainer, and routing replay (`routing_replay`: the config path of the actor's
  replay mode each strategy's workers read, the rollout engines that return routed experts, the
  legal modes).
"""

from __future__ import annotations

import argparse
import ast
import functools
import gzip
import io
import json
import os
import re
import sys
import zipfile

from verl_pdbg_conf.verl_facts.encoding import decode, encode, same_typed
from verl_pdbg_conf.verl_facts.releases.digest import (  # noqa: F401 - also this module's names
    CONFIG_ROOT, READS, VERSION_FILE, digest, file_hash, has_content as _has_content, reads)

HERE = os.path.dirname(os.path.abspath(__file__))
FORMAT = 1


def _init_version(root: str) -> str:
    """A literal `__version__ = "..."` in verl/__init__.py (copies without verl/version/), else
    "unknown"."""
    try:
        with open(os.path.join(root, "verl", "__init__.py"), encoding="utf-8", errors="replace") as f:
            m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read(1 << 16), re.M)
    except OSError:
        m = None
    return m.group(1) if m else "unknown"


# ---------------------------------------------------------------- reading a release

class Tree:
    """verl's files that extraction reads (READS), from a wheel or a directory, by path
    (`verl/...`); other files are kept by name only (their directories are config groups)."""

    def __init__(self, files: dict[str, bytes], version: str, source: str):
        self.files, self.version, self.source = files, version, source
        self.digest = digest({p: file_hash(b) for p, b in files.items()})
        self._ast: dict = {}

    @classmethod
    def from_wheel(cls, path: str) -> "Tree":
        files, version = {}, None
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if reads(name):
                    files[name] = z.read(name) if _has_content(name) else b""
                elif re.match(r"verl-[^/]+\.dist-info/METADATA$", name):
                    m = re.search(rb"^Version: *(\S+)", z.read(name), re.M)
                    version = m.group(1).decode() if m else None
        if version is None:
            raise SystemExit(f"{path}: no verl dist-info METADATA with a Version")
        return cls(files, version, os.path.basename(path))

    @classmethod
    def from_dir(cls, root: str, version: str | None = None, source: str = "") -> "Tree":
        """The `verl/` package under `root` (a repository, a checkout, site-packages); its
        version from `verl/version/version` unless given."""
        files = {}
        for prefix in READS:
            top = os.path.join(root, prefix)
            for d, dirs, names in os.walk(top):
                dirs[:] = sorted(x for x in dirs if x != "__pycache__")
                rel = os.path.relpath(d, root).replace(os.sep, "/")
                for n in names:
                    path = f"{rel}/{n}"
                    if not reads(path):
                        continue
                    if _has_content(path):
                        try:
                            with open(os.path.join(d, n), "rb") as f:
                                files[path] = f.read()
                        except OSError:
                            continue
                    else:
                        files[path] = b""
        if version is None:
            raw = files.get(VERSION_FILE, b"").decode("utf-8", "replace").strip()
            version = raw.splitlines()[0].strip() if raw else _init_version(root)
        return cls(files, version, source or root)

    @classmethod
    def from_installed(cls) -> "Tree":
        import importlib.metadata
        import importlib.util

        spec = importlib.util.find_spec("verl")  # finds the package without importing it
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("verl is not installed")
        root = list(spec.submodule_search_locations)[0]
        return cls.from_dir(os.path.dirname(root), importlib.metadata.version("verl"), "installed")

    def read(self, path: str) -> str | None:
        b = self.files.get(path)
        return None if b is None else b.decode("utf-8", "replace")

    def parse(self, path: str):
        """The file's AST, or None when it is missing or not Python this interpreter parses."""
        if path not in self._ast:
            src = self.read(path)
            try:
                self._ast[path] = None if src is None else ast.parse(src)
            except Exception:  # not Python this interpreter parses (Python 2, a merge conflict), too deep
                self._ast[path] = None
        return self._ast[path]

    def glob_py(self, prefix: str):
        return sorted(p for p in self.files if p.startswith(prefix) and p.endswith(".py"))


# ---------------------------------------------------------------- configs

@functools.lru_cache(maxsize=2)
def _yaml_loader(fast: bool):
    """OmegaConf's YAML loader; `fast`: the same resolvers, constructors and duplicate-key check
    on libyaml's parser (values identical on every verl tree the tests fetch, 10x faster)."""
    import yaml
    from omegaconf._utils import get_yaml_loader

    slow = get_yaml_loader()
    if not fast or not getattr(yaml, "__with_libyaml__", False):
        return slow

    class FastLoader(yaml.CSafeLoader):
        def construct_mapping(self, node, deep=False):
            keys = set()
            for key_node, _ in node.value:  # as OmegaConf's loader: a duplicate key is an error
                if key_node.tag != yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                    continue
                if key_node.value in keys:
                    raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                            f"found duplicate key {key_node.value}",
                                                            key_node.start_mark)
                keys.add(key_node.value)
            return yaml.constructor.SafeConstructor.construct_mapping(self, node, deep=deep)

    FastLoader.yaml_implicit_resolvers = slow.yaml_implicit_resolvers
    FastLoader.yaml_constructors = slow.yaml_constructors
    return FastLoader


def load_config_text(text: str, fast: bool = False) -> dict:
    """One YAML config as Hydra's FileConfigSource loads it: the header by Hydra's own parser
    (first 512 characters), the body by OmegaConf's YAML loader; the defaults list apart.
    `fast`: libyaml's parser first (a live copy), OmegaConf's own when it refuses the text."""
    import yaml
    from hydra.plugins.config_source import ConfigSource

    header = ConfigSource._get_header_dict(text[:512])
    try:
        body = yaml.load(io.StringIO(text), Loader=_yaml_loader(fast))
    except yaml.YAMLError:
        if not fast:
            raise
        body = yaml.load(io.StringIO(text), Loader=_yaml_loader(False))
    entry: dict = {"package": header.get("package")}
    extra = {k: v for k, v in header.items() if k != "package"}
    if extra:
        entry["header"] = extra
    if isinstance(body, dict) and "defaults" in body:
        keys = list(body)
        entry["defaults"] = body.pop("defaults")
        entry["defaults_at"] = keys.index("defaults")  # where the key was: the body's order is kept
    entry["body"] = body
    return entry


class ExtractionError(Exception):
    """A release's file that extraction cannot store faithfully (strict extraction only)."""


def extract_configs(tree: Tree, problems: list | None = None) -> tuple[dict, list]:
    """Configs and groups. `problems` given: a config that does not load (a fork's broken YAML)
    is left out and noted there, as Hydra would fail on it only when it is composed."""
    configs, groups = {}, set()
    for path in sorted(tree.files):
        if not path.startswith(CONFIG_ROOT):
            continue
        rel = path[len(CONFIG_ROOT):]
        parent = os.path.dirname(rel)
        while parent and "__pycache__" not in parent.split("/"):  # Hydra lists a directory as a group
            groups.add(parent)
            parent = os.path.dirname(parent)
        if not rel.endswith(".yaml") or os.path.basename(rel).startswith("_generated_"):
            continue
        name = rel[:-len(".yaml")]
        try:
            entry = load_config_text(tree.read(path), fast=problems is not None)
            stored = json.loads(json.dumps(encode(entry)))
            if not same_typed(decode(stored), entry):  # the stored form must give back exactly what Hydra read
                raise ExtractionError(f"{path}: does not survive the typed JSON encoding")
        except Exception as e:
            if problems is None:
                raise
            problems.append(f"{path}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        configs[name] = stored
    return configs, sorted(groups)


# ---------------------------------------------------------------- stages (AST)

def _literal_assigns(mod, names) -> dict:
    out = {}
    for node in mod.body if mod is not None else ():
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in names:
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def _files_with(tree: Tree, prefix: str, text: bytes):
    """The .py files under prefix whose source contains `text` (only those are parsed)."""
    return [p for p in tree.glob_py(prefix) if text in tree.files[p]]


def _annotations(tree: Tree) -> list[dict]:
    """Every `@DistProfiler.annotate(..., role=NAME)` on a method in verl/workers."""
    out = []
    for path in _files_with(tree, "verl/workers/", b"DistProfiler.annotate"):
        mod = tree.parse(path)
        for cls in [n for n in ast.walk(mod) if isinstance(n, ast.ClassDef)] if mod else ():
            for fn in cls.body:
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for dec in fn.decorator_list:
                    if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute)
                            and dec.func.attr == "annotate" and isinstance(dec.func.value, ast.Name)
                            and dec.func.value.id == "DistProfiler"):
                        role = next((k.value.value for k in dec.keywords
                                     if k.arg == "role" and isinstance(k.value, ast.Constant)), None)
                        if role is not None:
                            out.append({"stage": role, "file": path, "class": cls.name, "method": fn.name,
                                        "line": fn.lineno})
    return out


def _self_calls(tree: Tree, file: str, cls_name: str) -> dict:
    """method -> the `self.m(...)` it calls, for one class (memoized per tree)."""
    key = ("self-calls", file, cls_name)
    if key not in tree._ast:
        mod = tree.parse(file)
        cls = next(n for n in ast.walk(mod) if isinstance(n, ast.ClassDef) and n.name == cls_name)
        calls = {}
        for fn in cls.body:
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                calls[fn.name] = {c.func.attr for c in ast.walk(fn) if isinstance(c, ast.Call)
                                  and isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name)
                                  and c.func.value.id == "self"}
        tree._ast[key] = calls
    return tree._ast[key]


def _callers_in_class(tree: Tree, ann: dict) -> set[str]:
    """The annotated method and every method of its class that reaches it through `self.m(...)`."""
    calls = _self_calls(tree, ann["file"], ann["class"])
    reach = {ann["method"]}
    while True:
        more = {m for m, cs in calls.items() if cs & reach} - reach
        if not more:
            return reach
        reach |= more


def _tokens(name: str) -> set[str]:
    return {t for t in name.lower().split("_") if t}


def _trainer_calls(tree: Tree):
    """(worker group attribute, method, enclosing function, file) of every `self.X_wg.m(...)` in
    verl/trainer."""
    for path in _files_with(tree, "verl/trainer/", b"_wg."):
        mod = tree.parse(path)
        for fn in [n for n in ast.walk(mod) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] if mod else ():
            for c in ast.walk(fn):
                if (isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                        and isinstance(c.func.value, ast.Attribute) and c.func.value.attr.endswith("_wg")):
                    yield c.func.value.attr, c.func.attr, fn.name, path


def _aliases(tree: Tree, annotations: list, stage_to_role: dict, skip: set) -> tuple[dict, list]:
    """Annotation names that are not stage names, bound to the documented stage the trainer runs
    them as: a trainer function calls the worker group of one role (`critic_wg`) with a method
    that reaches the annotated one, and exactly one stage of that role has all its name's words
    in the function's name (`_update_critic` -> `critic_update`)."""
    aliases, evidence = {}, []
    todo = [a for a in annotations if a["stage"] not in stage_to_role and a["stage"] not in skip]
    if not stage_to_role or not todo:  # no backend: no stage for an annotation to stand for
        return aliases, evidence
    calls = list(_trainer_calls(tree))
    for ann in todo:
        name = ann["stage"]
        reach = _callers_in_class(tree, ann)
        found = set()
        for wg, method, fn, path in calls:
            if method not in reach:
                continue
            roles = [r for r in set(stage_to_role.values()) if r in _tokens(wg)]
            stages = [s for s, r in stage_to_role.items() if r in roles and _tokens(s) <= _tokens(fn)]
            if len(stages) == 1:
                found.add(stages[0])
                evidence.append({"annotation": name, "stage": stages[0], "call": f"{path}: {fn} -> {wg}.{method}"})
        if len(found) == 1:
            aliases[name] = found.pop()
    return aliases, evidence


def _binds_first_chunk(mod) -> bool:
    """Whether the backend's model resolution accepts a list/tuple of Megatron chunks."""
    for fn in [n for n in ast.walk(mod) if isinstance(n, ast.FunctionDef) and n.name == "_resolve_model"]:
        for c in ast.walk(fn):
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "isinstance":
                names = {n.id for n in ast.walk(c.args[1]) if isinstance(n, ast.Name)}
                if {"list", "tuple"} & names:
                    return True
    return False


PROFILE = "verl/utils/profiler/profile.py"


def _tools(tree: Tree) -> list[str]:
    """`self._tool == "x"` comparisons in DistProfiler (verl/utils/profiler/profile.py), in order."""
    out = []
    mod = tree.parse(PROFILE)
    for c in ast.walk(mod) if mod else ():
        if (isinstance(c, ast.Compare) and isinstance(c.left, ast.Attribute) and c.left.attr == "_tool"
                and isinstance(c.ops[0], ast.Eq) and isinstance(c.comparators[0], ast.Constant)):
            if c.comparators[0].value not in out:
                out.append(c.comparators[0].value)
    return out


def _unknown_tool(tree: Tree) -> str | None:
    """What DistProfiler does with a tool none of its `self._tool == ...` branches names: the
    final `else:` of that if/elif chain in its __init__: "no-op" when it builds a no-op profiler
    (a class named *NoOp*), "raise" when it raises; None when there is no such chain."""
    mod = tree.parse(PROFILE)
    for cls in [n for n in ast.walk(mod) if isinstance(n, ast.ClassDef) and n.name == "DistProfiler"] if mod else ():
        init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        chains = []  # (branches, last if) of every if/elif chain on self._tool
        for node in ast.walk(init) if init else ():
            if isinstance(node, ast.If) and "_tool" in ast.unparse(node.test):
                last, n = node, 1
                while len(last.orelse) == 1 and isinstance(last.orelse[0], ast.If):
                    last, n = last.orelse[0], n + 1
                chains.append((n, last))
        if not chains:
            return None
        last = max(chains, key=lambda c: c[0])[1]  # the dispatch: the longest chain
        text = "\n".join(ast.unparse(n) for n in last.orelse)
        if not text:
            return "nothing"
        if "raise" in text:
            return "raise"
        if "noop" in text.lower().replace("_", ""):
            return "no-op"
        return "other"
    return None


def _hybrid_gate(tree: Tree) -> str | None:
    """The role profiler the actor/rollout/ref worker builds its one profiler from when it holds
    the actor: the first `if self._is_actor:` branch of its __init__, `config.<role>.get("profiler")`."""
    for ann_file in ("verl/workers/engine_workers.py",):
        mod = tree.parse(ann_file)
        for cls in [n for n in ast.walk(mod) if isinstance(n, ast.ClassDef)
                    and n.name == "ActorRolloutRefWorker"] if mod else ():
            init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
            for node in ast.walk(init) if init else ():
                if isinstance(node, ast.If) and "_is_actor" in ast.unparse(node.test):
                    for c in ast.walk(ast.Module(body=node.body, type_ignores=[])):
                        if (isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "get"
                                and c.args and isinstance(c.args[0], ast.Constant) and c.args[0].value == "profiler"
                                and isinstance(c.func.value, ast.Attribute)):
                            return f"actor_rollout_ref.{c.func.value.attr}.profiler"
    return None


def _continuous_keeps_first_tag(tree: Tree) -> bool:
    """With profile_continuous_steps the trainer starts the workers' profilers only at the first
    step of a run of consecutive steps (a `prev_step_profile` gate around `start_profile`), so the
    step tag the backend was given stays the first step's."""
    for path in _files_with(tree, "verl/trainer/ppo/", b"prev_step_profile"):
        mod = tree.parse(path)
        lines = tree.read(path).splitlines()
        for fn in [n for n in ast.walk(mod) if isinstance(n, ast.FunctionDef)] if mod else ():
            needles = (".start_profile(", "profile_continuous_steps", "prev_step_profile")
            source = "\n".join(lines[fn.lineno - 1:fn.end_lineno])  # cheap filter: unparse only candidates
            if all(n in source for n in needles) and all(n in ast.unparse(fn) for n in needles):
                return True
    return False


_REPLAY_READ = re.compile(r"^(?:self\.)?config\.actor\.(?:(\w+)\.)?router_replay(?:\.mode)?$")


def _strategies(test) -> list[str] | None:
    """The strategies an `if` test on the actor's strategy selects (`s == "megatron"`,
    `s in ("fsdp", "fsdp2")`), or None when the test is not such a comparison."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and ast.unparse(test.left).rsplit(".", 1)[-1].endswith(("strategy", "strategy_name"))):
        return None
    right = test.comparators[0]
    if isinstance(test.ops[0], ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
        return [right.value]
    if isinstance(test.ops[0], ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in right.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return None


def _routing_replay(tree: Tree) -> dict:
    """Where the workers read the actor's routing-replay mode, and which rollout engines return the
    experts they routed to.

    `reads`: {actor strategy: config path of the mode it reads}, from the if/elif chain on the
    actor's strategy around each `config.actor.[<section>.]router_replay.mode` read in verl/workers
    (engine_workers.py: `actor.megatron...` for megatron, `actor.veomni...` for veomni); a read in
    `<strategy>_workers.py` outside such a chain is that strategy's (the legacy megatron workers);
    a strategy the chain sets to something else (a fork's FSDP that follows the rollout switch) is
    left out, so nothing is said about it. `rollout_engines`: the rollout names of
    `_ROLLOUT_REGISTRY` whose package reads `enable_rollout_routing_replay`."""
    reads: dict[str, str] = {}
    for path in _files_with(tree, "verl/workers/", b"router_replay"):
        mod = tree.parse(path)
        chained: set[int] = set()
        for node in ast.walk(mod) if mod else ():
            if not isinstance(node, ast.If) or id(node) in chained:
                continue
            branch = node
            while branch is not None:  # an if/elif chain on the actor's strategy
                chained.add(id(branch))
                names = _strategies(branch.test)
                if names is None:
                    break
                for stmt in branch.body:
                    if isinstance(stmt, ast.Assign):
                        m = _REPLAY_READ.match(ast.unparse(stmt.value))
                        for name in names if m else ():
                            reads.setdefault(name, "actor_rollout_ref.actor." + (f"{m.group(1)}." if m.group(1)
                                                                                else "") + "router_replay.mode")
                branch = branch.orelse[0] if len(branch.orelse) == 1 and isinstance(branch.orelse[0], ast.If) \
                    else None
        own = re.match(r"verl/workers/(\w+)_workers\.py$", path)
        if own and own.group(1) not in reads:
            for node in ast.walk(mod) if mod else ():
                m = _REPLAY_READ.match(ast.unparse(node)) if isinstance(node, ast.Attribute) else None
                if m and m.group(1) is None:
                    reads[own.group(1)] = "actor_rollout_ref.actor.router_replay.mode"
                    break
    engines = []
    base = tree.parse("verl/workers/rollout/base.py")
    registry = _literal_assigns(base, ("_ROLLOUT_REGISTRY",)).get("_ROLLOUT_REGISTRY") or {}
    for key, target in registry.items() if isinstance(registry, dict) else ():
        name = key[0] if isinstance(key, tuple) and key else key
        if not (isinstance(name, str) and isinstance(target, str) and target.startswith("verl.workers.rollout.")):
            continue
        package = "/".join(target.split(".")[:4]) + "/"  # verl/workers/rollout/<engine>_rollout/
        if _files_with(tree, package, b"enable_rollout_routing_replay") and name not in engines:
            engines.append(name)
    modes: list[str] = []  # the `valid_modes` its RouterReplayConfig's __post_init__ accepts
    for path in _files_with(tree, "verl/workers/config/", b"valid_modes"):
        for cls in [n for n in ast.walk(tree.parse(path) or ast.Module(body=[], type_ignores=[]))
                    if isinstance(n, ast.ClassDef) and "RouterReplay" in n.name]:
            for node in ast.walk(cls):
                if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "valid_modes":
                    try:
                        found = ast.literal_eval(node.value)
                    except ValueError:
                        continue
                    modes += [m for m in found if isinstance(m, str) and m not in modes]
    return {"reads": reads, "rollout_engines": sorted(engines), "modes": modes}


BACKEND = "verl/utils/profiler/precision_debugger_profile.py"


def extract_stages(tree: Tree, problems: list | None = None) -> dict:
    """The stage facts. Strict (`problems` None): a release without the precision_debugger
    backend is refused. Lenient: every part that cannot be read is left empty and noted, so an
    old or broken copy still gives what it has (`backend: None` says it has no backend)."""
    mod = tree.parse(BACKEND)
    if mod is None and problems is None:
        raise SystemExit(f"verl {tree.version} has no precision_debugger backend ({BACKEND})")

    def part(what, fn, default):
        if problems is None:
            return fn()
        try:
            return fn()
        except Exception as e:  # a fork's code this reader does not understand: that part is unknown
            problems.append(f"{what}: {type(e).__name__}: {e}")
            return default

    lit = part("backend tables", lambda: _literal_assigns(mod, ("_STAGE_TO_ROLE", "_MODEL_ATTRS_BY_ROLE",
                                                                 "_SKIP_STAGES")), {})
    stage_to_role = {k: v for k, v in dict(lit.get("_STAGE_TO_ROLE") or {}).items()
                     if isinstance(k, str) and isinstance(v, str)}
    skip = {s for s in lit.get("_SKIP_STAGES") or () if isinstance(s, str)}
    annotations = part("annotations", lambda: _annotations(tree), [])
    aliases, evidence = part("aliases", lambda: _aliases(tree, annotations, stage_to_role, skip), ({}, []))
    out = {
        "stage_to_role": stage_to_role,
        "model_attrs_by_role": {str(k): [str(x) for x in v]
                                for k, v in dict(lit.get("_MODEL_ATTRS_BY_ROLE") or {}).items()},
        "skip_stages": sorted(skip),
        "binds_first_megatron_chunk": bool(mod) and part("chunks", lambda: _binds_first_chunk(mod), False),
        "annotations": annotations,
        "aliases": aliases,
        "alias_evidence": evidence,
        "tools": part("tools", lambda: _tools(tree), []),
        "hybrid_gate": part("hybrid_gate", lambda: _hybrid_gate(tree), None),
        "continuous_keeps_first_tag": part("continuous", lambda: _continuous_keeps_first_tag(tree), False),
        "backend": BACKEND if mod is not None else None,
        "unknown_tool": part("unknown_tool", lambda: _unknown_tool(tree), None),
        "routing_replay": part("routing_replay", lambda: _routing_replay(tree), None),
    }
    return out


def role_profilers(configs: dict, groups: list, version: str, compose=None) -> tuple[list[str], list[str]]:
    """Paths of the role profiler sections (`profiler` mappings with `enable` and `tool_config`)
    in ppo_trainer as Hydra composes it from the extracted configs, and its top-level keys
    (whether it has a `global_profiler` at all). `compose(facts, config_name, overrides)`:
    how to compose (default: a throwaway Hydra session on the facts)."""
    if compose is None:
        from verl_pdbg_conf.verl_facts.facts_source import compose_with_facts as compose

    cfg = compose({"version": version, "configs": configs, "groups": groups}, "ppo_trainer", [])
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg, resolve=False)
    out = []

    def walk(node, path):
        if isinstance(node, dict):
            if path and path[-1] == "profiler" and "enable" in node and "tool_config" in node:
                out.append(".".join(path))
            for k, v in node.items():
                walk(v, path + (str(k),))

    walk(raw, ())
    return out, [str(k) for k in raw]


# ---------------------------------------------------------------- writing

def extract(tree: Tree, strict: bool = True, compose=None) -> dict:
    """The facts of a tree. strict (a release to ship): every file must be read faithfully and
    the backend must exist. Not strict (a copy found on disk, verl 0.1 to a fork of main): never
    raises; what cannot be read is left out and listed under `problems`. `compose`: see
    role_profilers."""
    problems = None if strict else []
    configs, groups = extract_configs(tree, problems)
    facts = {"format": FORMAT, "version": tree.version, "source": tree.source, "digest": tree.digest,
             "groups": groups, "configs": configs, "stages": extract_stages(tree, problems)}
    try:
        roles, top = role_profilers(configs, groups, tree.version, compose) if "ppo_trainer" in configs or strict \
            else ([], [])
    except Exception as e:
        if strict:
            raise
        problems.append(f"ppo_trainer does not compose: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        roles, top = [], None
    facts["stages"]["role_profilers"] = roles
    facts["stages"]["global_profiler"] = None if top is None else "global_profiler" in top
    if problems:
        facts["problems"] = problems
    return facts


def dumps(facts: dict) -> bytes:
    """Deterministic bytes (sorted nothing: config key order is Hydra's order), gzip without a
    time stamp so that regenerating gives the same file."""
    return gzip_bytes(json.dumps(facts, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def gzip_bytes(raw: bytes) -> bytes:
    """gzip without a time stamp: the same input gives the same file."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(raw)
    return buf.getvalue()


def path_for(version: str, out_dir: str = HERE) -> str:
    return os.path.join(out_dir, f"verl-{version}.json.gz")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m verl_pdbg_conf.verl_facts.releases.extract",
                                description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--wheel", action="append", help="a verl wheel (pip download --no-deps verl==X)")
    src.add_argument("--installed", action="store_true", help="the verl installed in this environment")
    p.add_argument("--out-dir", default=HERE, help="where to write verl-<version>.json.gz (default: beside this script)")
    args = p.parse_args(argv)
    trees = [Tree.from_installed()] if args.installed else [Tree.from_wheel(w) for w in args.wheel]
    for tree in trees:
        facts = extract(tree)
        out = path_for(tree.version, args.out_dir)
        data = dumps(facts)
        with open(out, "wb") as f:
            f.write(data)
        st = facts["stages"]
        print(f"{out}: {len(facts['configs'])} configs, {len(facts['groups'])} groups, "
              f"{len(st['annotations'])} annotations, aliases {st['aliases']}, {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
