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
  profile_continuous_steps keeps the first step's tag, and the role profiler sections of the
  composed ppo_trainer.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import io
import json
import math
import os
import re
import sys
import zipfile

CONFIG_ROOT = "verl/trainer/config/"
HERE = os.path.dirname(os.path.abspath(__file__))
FORMAT = 1
# Tags of the typed JSON encoding: a mapping with keys that are not all strings, a float JSON
# cannot write. Everything else is JSON as is (bool, int and float stay distinct).
MAP_TAG, FLOAT_TAG = "\u0000map", "\u0000float"


# ---------------------------------------------------------------- reading a release

class Tree:
    """verl's files from a wheel or from the installed package, by path (`verl/...`)."""

    def __init__(self, files: dict[str, bytes], version: str, source: str):
        self.files, self.version, self.source = files, version, source

    @classmethod
    def from_wheel(cls, path: str) -> "Tree":
        files, version = {}, None
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if name.startswith("verl/") and not name.endswith("/"):  # every path: its directory is a group
                    files[name] = z.read(name) if name.endswith((".py", ".yaml")) else b""
                elif re.match(r"verl-[^/]+\.dist-info/METADATA$", name):
                    m = re.search(rb"^Version: *(\S+)", z.read(name), re.M)
                    version = m.group(1).decode() if m else None
        if version is None:
            raise SystemExit(f"{path}: no verl dist-info METADATA with a Version")
        return cls(files, version, os.path.basename(path))

    @classmethod
    def from_installed(cls) -> "Tree":
        import importlib.metadata
        import importlib.util

        spec = importlib.util.find_spec("verl")  # finds the package without importing it
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("verl is not installed")
        root = list(spec.submodule_search_locations)[0]
        files = {}
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            rel = os.path.relpath(d, os.path.dirname(root)).replace(os.sep, "/")
            for n in names:
                if n.endswith((".py", ".yaml")):
                    with open(os.path.join(d, n), "rb") as f:
                        files[f"{rel}/{n}"] = f.read()
                else:
                    files[f"{rel}/{n}"] = b""
        return cls(files, importlib.metadata.version("verl"), "installed")

    def read(self, path: str) -> str | None:
        b = self.files.get(path)
        return None if b is None else b.decode("utf-8")

    def glob_py(self, prefix: str):
        return sorted(p for p in self.files if p.startswith(prefix) and p.endswith(".py"))


# ---------------------------------------------------------------- configs

def encode(x):
    """Typed data -> JSON-able data; `decode(encode(x))` is x, types included."""
    if isinstance(x, dict):
        if all(isinstance(k, str) for k in x) and MAP_TAG not in x and FLOAT_TAG not in x:
            return {k: encode(v) for k, v in x.items()}
        return {MAP_TAG: [[encode(k), encode(v)] for k, v in x.items()]}
    if isinstance(x, list):
        return [encode(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return {FLOAT_TAG: repr(x)}
    if x is None or isinstance(x, (str, bool, int, float)):
        return x
    raise TypeError(f"cannot store a {type(x).__name__} ({x!r}) as release facts")


def decode(x):
    if isinstance(x, dict):
        if MAP_TAG in x and len(x) == 1:
            return {decode(k): decode(v) for k, v in x[MAP_TAG]}
        if FLOAT_TAG in x and len(x) == 1:
            return float(x[FLOAT_TAG])
        return {k: decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [decode(v) for v in x]
    return x


def same_typed(a, b) -> bool:
    """Equality that tells 1, 1.0 and True apart (and nan from nan: equal)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_typed(k, k2) and same_typed(a[k], b[k2]) for k, k2 in zip(a, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same_typed(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def load_config_text(text: str) -> dict:
    """One YAML config as Hydra's FileConfigSource loads it: the header by Hydra's own parser
    (first 512 characters), the body by OmegaConf's YAML loader; the defaults list apart."""
    import yaml
    from hydra.plugins.config_source import ConfigSource
    from omegaconf._utils import get_yaml_loader

    header = ConfigSource._get_header_dict(text[:512])
    body = yaml.load(io.StringIO(text), Loader=get_yaml_loader())
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


def extract_configs(tree: Tree) -> tuple[dict, list]:
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
        entry = load_config_text(tree.read(path))
        stored = json.loads(json.dumps(encode(entry)))
        if not same_typed(decode(stored), entry):  # the stored form must give back exactly what Hydra read
            raise SystemExit(f"{path}: does not survive the typed JSON encoding")
        configs[name] = stored
    return configs, sorted(groups)


# ---------------------------------------------------------------- stages (AST)

def _literal_assigns(src: str, names) -> dict:
    out = {}
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in names:
            out[node.targets[0].id] = ast.literal_eval(node.value)
    return out


def _annotations(tree: Tree) -> list[dict]:
    """Every `@DistProfiler.annotate(..., role=NAME)` on a method in verl/workers."""
    out = []
    for path in tree.glob_py("verl/workers/"):
        mod = ast.parse(tree.read(path))
        for cls in [n for n in ast.walk(mod) if isinstance(n, ast.ClassDef)]:
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


def _callers_in_class(tree: Tree, ann: dict) -> set[str]:
    """The annotated method and every method of its class that reaches it through `self.m(...)`."""
    mod = ast.parse(tree.read(ann["file"]))
    cls = next(n for n in ast.walk(mod) if isinstance(n, ast.ClassDef) and n.name == ann["class"])
    calls = {}
    for fn in cls.body:
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            calls[fn.name] = {c.func.attr for c in ast.walk(fn) if isinstance(c, ast.Call)
                              and isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name)
                              and c.func.value.id == "self"}
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
    for path in tree.glob_py("verl/trainer/"):
        mod = ast.parse(tree.read(path))
        for fn in [n for n in ast.walk(mod) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
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
    calls = list(_trainer_calls(tree))
    for ann in annotations:
        name = ann["stage"]
        if name in stage_to_role or name in skip:
            continue
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


def _binds_first_chunk(src: str) -> bool:
    """Whether the backend's model resolution accepts a list/tuple of Megatron chunks."""
    for fn in [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef) and n.name == "_resolve_model"]:
        for c in ast.walk(fn):
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "isinstance":
                names = {n.id for n in ast.walk(c.args[1]) if isinstance(n, ast.Name)}
                if {"list", "tuple"} & names:
                    return True
    return False


def _tools(tree: Tree) -> list[str]:
    """`self._tool == "x"` comparisons in DistProfiler (verl/utils/profiler/profile.py), in order."""
    out = []
    src = tree.read("verl/utils/profiler/profile.py") or ""
    for c in ast.walk(ast.parse(src)):
        if (isinstance(c, ast.Compare) and isinstance(c.left, ast.Attribute) and c.left.attr == "_tool"
                and isinstance(c.ops[0], ast.Eq) and isinstance(c.comparators[0], ast.Constant)):
            if c.comparators[0].value not in out:
                out.append(c.comparators[0].value)
    return out


def _hybrid_gate(tree: Tree) -> str | None:
    """The role profiler the actor/rollout/ref worker builds its one profiler from when it holds
    the actor: the first `if self._is_actor:` branch of its __init__, `config.<role>.get("profiler")`."""
    for ann_file in ("verl/workers/engine_workers.py",):
        src = tree.read(ann_file)
        if src is None:
            continue
        for cls in [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ClassDef)
                    and n.name == "ActorRolloutRefWorker"]:
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
    for path in tree.glob_py("verl/trainer/ppo/"):
        for fn in [n for n in ast.walk(ast.parse(tree.read(path))) if isinstance(n, ast.FunctionDef)]:
            text = ast.unparse(fn)
            if ".start_profile(" in text and "profile_continuous_steps" in text and "prev_step_profile" in text:
                return True
    return False


def extract_stages(tree: Tree) -> dict:
    src = tree.read("verl/utils/profiler/precision_debugger_profile.py")
    if src is None:
        raise SystemExit(f"verl {tree.version} has no precision_debugger backend "
                         "(verl/utils/profiler/precision_debugger_profile.py)")
    lit = _literal_assigns(src, ("_STAGE_TO_ROLE", "_MODEL_ATTRS_BY_ROLE", "_SKIP_STAGES"))
    annotations = _annotations(tree)
    aliases, evidence = _aliases(tree, annotations, lit["_STAGE_TO_ROLE"], lit["_SKIP_STAGES"])
    return {
        "stage_to_role": lit["_STAGE_TO_ROLE"],
        "model_attrs_by_role": {k: list(v) for k, v in lit["_MODEL_ATTRS_BY_ROLE"].items()},
        "skip_stages": sorted(lit["_SKIP_STAGES"]),
        "binds_first_megatron_chunk": _binds_first_chunk(src),
        "annotations": annotations,
        "aliases": aliases,
        "alias_evidence": evidence,
        "tools": _tools(tree),
        "hybrid_gate": _hybrid_gate(tree),
        "continuous_keeps_first_tag": _continuous_keeps_first_tag(tree),
    }


def role_profilers(configs: dict, groups: list, version: str) -> list[str]:
    """Paths of the role profiler sections (`profiler` mappings with `enable` and `tool_config`)
    in ppo_trainer as Hydra composes it from the extracted configs."""
    from verl_pdbg_conf.verl_facts.facts_source import compose_with_facts

    cfg = compose_with_facts({"version": version, "configs": configs, "groups": groups}, "ppo_trainer", [])
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
    return out


# ---------------------------------------------------------------- writing

def extract(tree: Tree) -> dict:
    configs, groups = extract_configs(tree)
    facts = {"format": FORMAT, "version": tree.version, "source": tree.source, "groups": groups,
             "configs": configs, "stages": extract_stages(tree)}
    facts["stages"]["role_profilers"] = role_profilers(configs, groups, tree.version)
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
