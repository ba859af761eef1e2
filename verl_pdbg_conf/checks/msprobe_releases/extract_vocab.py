"""Read one mindstudio-probe release's config.json vocabulary off its own source, by AST (no
import, no venv): which keys each part of config.json is read with (the top level, the `load`
section, each task's section) and the checks that release runs on them at construction.

    python -m verl_pdbg_conf.checks.msprobe_releases.extract_vocab --wheel mindstudio_probe-X.whl
    python -m verl_pdbg_conf.checks.msprobe_releases.extract_vocab --source DIR   # DIR/msprobe/...

writes `msprobe-<version>.vocab.json` beside this script.

Where: the PyTorch module that defines `TaskDict` (task name -> config class) and
`parse_json_config`, which builds `CommonConfig(json_config)` and the active task's class from
`json_config[task]`. Each class is walked from its `__init__`, following the methods, base
classes, package functions and classes it calls with the config (e.g. `LoadConfig(json_config)`),
so a check is kept only where construction reaches it. A read is `x.get("k", default)`,
`x["k"]` or `"k" in x` on the part's dict. A check is an `if` whose body raises (or calls
msprobe's `error_log_with_exp`) and whose test names a value read from config.json; it is
stored as that test's source with the release's constants put in, the read values named
`_k_<key>` (`_item` for one element of a list the check loops over), with the `if` tests it sits
under (`when`) and the message it raises with. Nothing here is typed from reading msprobe."""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
import tempfile
import warnings
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
FORMAT = 1
MAX_DEPTH = 8
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Unknown(Exception):
    """A value that is not a constant of the release's source."""


class Source:
    """The `msprobe` package under `root`, parsed on demand."""

    def __init__(self, root: str):
        self.root = root
        self._mods: dict[str, ast.Module | None] = {}
        self._classes: dict[tuple, dict] = {}

    def module(self, name: str) -> ast.Module | None:
        if name not in self._mods:
            base = os.path.join(self.root, *name.split("."))
            tree = None
            for path in (base + ".py", os.path.join(base, "__init__.py")):
                if os.path.isfile(path):
                    with open(path, encoding="utf-8") as f, warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # the release's own invalid escapes
                        tree = ast.parse(f.read(), path)
                    break
            self._mods[name] = tree
        return self._mods[name]

    def lookup(self, mod: str, name: str, seen=None):
        """(module, node) of `name` as module `mod` sees it: a class, function or assignment."""
        seen = seen or set()
        if (mod, name) in seen:
            return None
        seen.add((mod, name))
        tree = self.module(mod)
        if tree is None:
            return None
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
                return mod, node
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return mod, node
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    if (a.asname or a.name) == name:
                        return self.lookup(node.module, a.name, seen)
        return None

    def class_ns(self, mod: str, cls: ast.ClassDef) -> dict:
        """A class's constant attributes, evaluated in order (Const.TASK_LIST and the like)."""
        key = (mod, cls.name, cls.lineno)
        if key not in self._classes:
            ns: dict = {}
            self._classes[key] = ns
            for node in cls.body:
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        if isinstance(t, ast.Name):
                            try:
                                ns[t.id] = self.const(node.value, mod, ns)
                            except (Unknown, RecursionError):
                                pass
        return self._classes[key]

    def const(self, node: ast.AST, mod: str, ns: dict | None = None):
        """The constant value of `node` in module `mod` (names in `ns` first); raises Unknown."""
        ns = ns or {}
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = [self.const(e, mod, ns) for e in node.elts]
            return items if not isinstance(node, ast.Tuple) else tuple(items)
        if isinstance(node, ast.Dict):
            if None in node.keys:
                raise Unknown
            return {self.const(k, mod, ns): self.const(v, mod, ns) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self.const(node.operand, mod, ns)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult, ast.Sub)):
            a, b = self.const(node.left, mod, ns), self.const(node.right, mod, ns)
            try:
                return a + b if isinstance(node.op, ast.Add) else a * b if isinstance(node.op, ast.Mult) else a - b
            except TypeError as e:
                raise Unknown from e
        if isinstance(node, ast.Name):
            if node.id in ns:
                return ns[node.id]
            found = self.lookup(mod, node.id)
            if found and isinstance(found[1], ast.Assign):
                return self.const(found[1].value, found[0])
            raise Unknown
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found = self.lookup(mod, node.value.id)
            if found and isinstance(found[1], ast.ClassDef):
                attrs = self.class_ns(*found)
                if node.attr in attrs:
                    return attrs[node.attr]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            inner = self.const(node.value, mod, ns)  # an enum member's .value
            if node.attr == "value" and isinstance(inner, (str, int)):
                return inner
        raise Unknown

    def bases(self, mod: str, cls: ast.ClassDef) -> list[tuple[str, ast.ClassDef]]:
        """The class and its package base classes, in method resolution order (single inheritance)."""
        out = [(mod, cls)]
        for b in cls.bases:
            if isinstance(b, ast.Name):
                found = self.lookup(mod, b.id)
                if found and isinstance(found[1], ast.ClassDef):
                    out += self.bases(*found)
        return out


def _method(chain, name):
    for mod, cls in chain:
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return mod, node
    return None


def _raises(body: list[ast.stmt]) -> ast.AST | None:
    """The raise (or msprobe's logging raise) directly in `body`."""
    for st in body:
        if isinstance(st, ast.Raise):
            return st
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            f = st.value.func
            if isinstance(f, ast.Attribute) and f.attr == "error_log_with_exp":
                return st
    return None


def _message(node: ast.AST) -> str:
    for sub in ast.walk(node):
        if isinstance(sub, ast.JoinedStr):
            return ast.unparse(sub)[2:-1]
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.strip():
            return sub.value
    return ""


class Walker:
    """Walks construction code from one entry point, collecting reads and checks per part."""

    def __init__(self, src: Source):
        self.src = src
        self.parts: dict[str, dict] = {}
        self.checks: list[dict] = []
        self._seen: set = set()
        self.objs: dict[int, dict] = {}  # each config object's attributes that hold read values
        self.helpers: dict[str, dict] = {}  # one-expression package functions a check calls (is_int)

    def part(self, name: str) -> dict:
        return self.parts.setdefault(name, {"keys": {}})

    # -------------------------------------------------------- reads
    def read_of(self, node, env, mod):
        """(part, key, default-node) when `node` reads one key of a bound part's dict."""
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            return self.read_of(node.values[0], env, mod)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            owner = self.binding(node.func.value, env)
            if owner and owner[0] == "part" and node.args and isinstance(node.args[0], ast.Constant):
                return owner[1], node.args[0].value, node.args[1] if len(node.args) > 1 else None
        if isinstance(node, ast.Subscript):
            owner = self.binding(node.value, env)
            if owner and owner[0] == "part" and isinstance(node.slice, ast.Constant):
                return owner[1], node.slice.value, None
        return None

    def note_read(self, part, key, default, mod, ns):
        if not isinstance(key, str):
            return
        keys = self.part(part)["keys"]
        if key in keys:
            return
        entry = {"default": None}
        if default is not None:
            try:
                entry["default"] = self.src.const(default, mod, ns)
            except Unknown:
                entry = {"default_source": ast.unparse(default)}
        keys[key] = entry

    def binding(self, node, env):
        if isinstance(node, ast.Name):
            return env.get(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            return self.objs.get(env.get("__obj__"), {}).get(node.attr)
        return None

    # -------------------------------------------------------- the walk
    def call(self, mod, fn: ast.FunctionDef, env_args: dict, chain, depth=0, when=()):
        key = (id(fn), repr(sorted(env_args.items())), when)
        if depth > MAX_DEPTH or key in self._seen:
            return
        self._seen.add(key)
        self.block(fn.body, dict(env_args), mod, chain, depth, list(when))

    def block(self, body, env, mod, chain, depth, when):
        when = list(when)
        for st in body:
            self.stmt(st, env, mod, chain, depth, when)
            if isinstance(st, ast.If) and not st.orelse and any(isinstance(x, ast.Return) for x in st.body):
                test = self.render(st.test, env, mod, chain)  # an early return: the rest runs only without it
                when.append(f"not ({test[0]})" if test else "")

    def stmt(self, st, env, mod, chain, depth, when):
        ns = self.src.class_ns(*chain[0]) if chain else {}
        for sub in ast.walk(st):  # reads anywhere in the statement ("k" in x included)
            r = self.read_of(sub, env, mod)
            if r:
                self.note_read(r[0], r[1], r[2], mod, ns)
            if isinstance(sub, ast.Compare) and len(sub.ops) == 1 and isinstance(sub.ops[0], (ast.In, ast.NotIn)):
                owner = self.binding(sub.comparators[0], env)
                if owner and owner[0] == "part" and isinstance(sub.left, ast.Constant):
                    self.note_read(owner[1], sub.left.value, None, mod, ns)
        if isinstance(st, ast.If):
            self.if_(st, env, mod, chain, depth, when)
            return
        elif isinstance(st, ast.For):
            it = self.binding(st.iter, env) or self._value_binding(st.iter, env, mod)
            inner = dict(env)
            if it and it[0] == "key" and isinstance(st.target, ast.Name):
                inner[st.target.id] = ("item", it[1], it[2])
            elif it:
                for n in ast.walk(st.target):
                    if isinstance(n, ast.Name):
                        inner[n.id] = ("derived", it[1], it[2])
            self.block(st.body, inner, mod, chain, depth, when)
            return
        elif isinstance(st, (ast.With, ast.Try)):
            self.block(st.body, env, mod, chain, depth, when)
            return
        for sub in ast.walk(st):
            if isinstance(sub, ast.Call):
                self.follow(sub, env, mod, chain, depth, when)
        if isinstance(st, ast.Assign):  # after the calls in its value: `x = check(x)` checks the read x
            self.assign(st, env, mod)

    def _value_binding(self, node, env, mod):
        """What a value expression carries: a read key, an element, or something derived from one."""
        r = self.read_of(node, env, mod)
        if r:
            return ("key", r[0], r[1])
        b = self.binding(node, env)
        if b:
            return b
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "items":
            b = self.binding(node.func.value, env)
            if b and b[0] in ("key", "item", "derived"):
                return ("derived", b[1], b[2])
        return None

    def assign(self, st: ast.Assign, env, mod):
        val = st.value
        r = self.read_of(val, env, mod)
        b = None
        if r:
            is_dict = isinstance(val, ast.BoolOp) and isinstance(val.values[-1], ast.Dict)
            sub = r[1] if r[0] == "" else f"{r[0]}.{r[1]}"
            b = ("part", sub, None) if is_dict else ("key", r[0], r[1])
        elif isinstance(val, (ast.Name, ast.Attribute)):
            b = self.binding(val, env)
        for t in st.targets:
            if isinstance(t, ast.Name):
                store, name = env, t.id
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                store, name = self.objs.setdefault(env.get("__obj__"), {}), t.attr
            else:
                continue
            if b:
                store[name] = b
            else:
                store.pop(name, None)

    def if_(self, st: ast.If, env, mod, chain, depth, when):
        test = self.render(st.test, env, mod, chain)
        raising = _raises(st.body)
        if raising is not None and test is not None:
            src, keys, each, derived = test
            self.checks.append({"part": keys[0][0], "keys": sorted({k for _, k in keys}), "each": each,
                                "test": src, "when": [w for w in when if w], "decidable": not derived,
                                "message": _message(raising)})
        for sub in ast.walk(st.test):
            if isinstance(sub, ast.Call):
                self.follow(sub, env, mod, chain, depth, when)
        cond = test[0] if test else None
        self.block(st.body, env, mod, chain, depth, when + [cond] if cond else when + [""])
        if st.orelse:
            self.block(st.orelse, env, mod, chain, depth, when + [f"not ({cond})"] if cond else when + [""])

    def render(self, test, env, mod, chain):
        """(source, [(part, key)], each, derived) of a test naming config values, constants put in."""
        ns = self.src.class_ns(*chain[0]) if chain else {}
        found, each, derived = [], None, False

        class Sub(ast.NodeTransformer):
            def visit_Name(s, node):
                b = env.get(node.id)
                return s.bound(node, b) or node

            def visit_Attribute(s, node):
                if isinstance(node.value, ast.Name) and node.value.id == "self":
                    b = self.binding(node, env)
                    if b:
                        return s.bound(node, b)
                try:
                    v = self.src.const(node, mod, ns)
                    return ast.Constant(v) if not isinstance(v, (list, tuple, dict, set)) else ast.parse(repr(v)).body[0].value
                except Unknown:
                    return s.generic_visit(node)

            def bound(s, node, b):
                nonlocal each, derived
                if not b or b[0] == "part" or not isinstance(b[2], str) or not _IDENT.match(b[2]):
                    return None
                found.append((b[1], b[2]))
                if b[0] == "item":
                    each = b[2]
                    return ast.Name("_item")
                if b[0] == "derived":
                    derived = True
                    each = b[2]
                    return ast.Name("_derived")
                return ast.Name(f"_k_{b[2]}")

        new = Sub().visit(ast.parse(ast.unparse(test), mode="eval").body)
        if not found:
            return None
        for sub in ast.walk(new):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
                self.helper(sub.func.id, mod)
        return ast.unparse(new), found, each, derived

    def helper(self, name: str, mod: str):
        """Keep a package function a check calls when its body is one `return <expression>`."""
        found = self.src.lookup(mod, name)
        if name in self.helpers or not found or not isinstance(found[1], ast.FunctionDef):
            return
        body = [st for st in found[1].body if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))]
        if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
            self.helpers[name] = {"params": [a.arg for a in found[1].args.args], "expr": ast.unparse(body[0].value)}

    def target(self, f: ast.AST, mod: str, chain):
        """(module, function, class chain or None, same object) that a call of `f` runs, or None:
        a method of this object (self./cls./super()), of a package class, a package function, or
        a package class's __init__."""
        is_self = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("self", "cls")
        is_super = (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call)
                    and isinstance(f.value.func, ast.Name) and f.value.func.id == "super")
        if is_self or is_super:
            names = chain if is_self else chain[1:]
            m = _method(names, f.attr)
            return (m[0], m[1], names, True) if m else None
        found, name = None, "__init__"
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            own = chain is not None and f.value.id == chain[0][1].name
            found, name = (chain[0] if own else self.src.lookup(mod, f.value.id)), f.attr
        elif isinstance(f, ast.Name):
            found = self.src.lookup(mod, f.id)
            if found and isinstance(found[1], ast.FunctionDef):
                return found[0], found[1], None, False
        if found and isinstance(found[1], ast.ClassDef):
            sub_chain = self.src.bases(*found)
            m = _method(sub_chain, name)
            return (m[0], m[1], sub_chain, False) if m else None
        return None

    def follow(self, call: ast.Call, env, mod, chain, depth, when):
        """Walk into what `call` runs when it passes config values (or the part's dict) along."""
        target = self.target(call.func, mod, chain)
        if target is None:
            return
        mod2, fn, chain2, same_obj = target
        args = [self._value_binding(a, env, mod) for a in call.args]
        kw = {k.arg: self._value_binding(k.value, env, mod) for k in call.keywords if k.arg}
        params = [a.arg for a in fn.args.args]
        if params and params[0] in ("self", "cls") and chain2 is not None:
            params = params[1:]
        new_env = {p: b for p, b in zip(params, args) if b}
        new_env.update({k: b for k, b in kw.items() if b and k in params})
        if not new_env and not same_obj:
            return  # nothing read from config.json goes in
        if same_obj:
            new_env["__obj__"] = env.get("__obj__")
        elif chain2 is not None:  # a new object of a package class
            new_env["__obj__"] = len(self.objs) + 1
            self.objs[new_env["__obj__"]] = {}
        self.call(mod2, fn, new_env, chain2, depth + 1, tuple(when))


def find_config_module(src: Source) -> str:
    """The PyTorch module that defines TaskDict and parse_json_config."""
    found = []
    for d, _, names in os.walk(os.path.join(src.root, "msprobe", "pytorch")):
        for n in names:
            if n.endswith(".py"):
                path = os.path.join(d, n)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                if "TaskDict" in text and "def parse_json_config" in text:
                    found.append(os.path.relpath(path, src.root)[:-3].replace(os.sep, "."))
    if len(found) != 1:
        raise SystemExit(f"expected one PyTorch module with TaskDict and parse_json_config, found {found}")
    return found[0]


def _task_dict(src: Source, mod: str) -> dict[str, str]:
    found = src.lookup(mod, "TaskDict")
    if not found or not isinstance(found[1].value, ast.Dict):
        raise SystemExit(f"{mod}: TaskDict is not a dict literal")
    out = {}
    for k, v in zip(found[1].value.keys, found[1].value.values):
        if isinstance(v, ast.Name):
            out[src.const(k, mod)] = v.id
    return out


def _walk_class(src: Source, mod: str, name: str, part: str) -> Walker:
    w = Walker(src)
    found = src.lookup(mod, name)
    if not found or not isinstance(found[1], ast.ClassDef):
        raise SystemExit(f"{mod}: class {name} not found")
    chain = src.bases(*found)
    init = _method(chain, "__init__")
    w.part(part)
    if init is None:
        return w
    params = [a.arg for a in init[1].args.args][1:]
    w.objs[0] = {}
    w.call(init[0], init[1], dict({params[0]: ("part", part, None)} if params else {}, __obj__=0), chain)
    return w


def vocabulary(root: str, version: str) -> dict:
    """The vocabulary of the msprobe package under `root` (the directory holding `msprobe/`)."""
    src = Source(root)
    mod = find_config_module(src)
    tasks = _task_dict(src, mod)
    parts, checks, helpers = {}, [], {}
    top = _walk_class(src, mod, "CommonConfig", "")
    helpers.update(top.helpers)
    for p, v in top.parts.items():
        parts[p] = dict(v, **({"class": "CommonConfig"} if p == "" else {}))
    checks += top.checks
    for task, cls in sorted(tasks.items()):
        w = _walk_class(src, mod, cls, task)
        parts[task] = dict(w.parts.get(task, {"keys": {}}), **{"class": cls, "task": True})
        for p, v in w.parts.items():
            if p != task:
                parts.setdefault(p, v)
        checks += w.checks
        helpers.update(w.helpers)
    for p in parts.values():
        p["keys"] = dict(sorted(p["keys"].items()))
    seen, uniq = set(), []
    for c in checks:
        k = json.dumps(c, sort_keys=True)
        if k not in seen:
            seen.add(k)
            uniq.append(c)
    return {"format": FORMAT, "version": version, "module": mod, "tasks": dict(sorted(tasks.items())),
            "parts": dict(sorted(parts.items())), "checks": uniq, "helpers": dict(sorted(helpers.items())),
            "enums": _enums(uniq)}


_ONE_OF = re.compile(r"_k_(\w+) not in (\[[^\]]*\])")


def _enums(checks: list[dict]) -> dict[str, list]:
    """{path: the string values a `x not in [...]` check allows}: the value shapes of those keys."""
    out: dict[str, list] = {}
    for c in checks:
        for key, values in _ONE_OF.findall(c["test"]):
            try:
                vals = ast.literal_eval(values)
            except (ValueError, SyntaxError):
                continue
            out.setdefault(f"{c['part']}.{key}" if c["part"] else key, [v for v in vals if isinstance(v, str)])
    return dict(sorted(out.items()))


# ---------------------------------------------------------------- files

_WHEEL = re.compile(r"^mindstudio_probe-([^-]+)-")


def from_wheel(wheel: str) -> dict:
    m = _WHEEL.match(os.path.basename(wheel))
    if not m:
        raise SystemExit(f"{wheel}: not a mindstudio-probe wheel")
    with tempfile.TemporaryDirectory(prefix="msprobe-wheel-") as tmp:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp, [n for n in z.namelist() if n.startswith("msprobe/") and n.endswith(".py")])
        return vocabulary(tmp, m.group(1))


def path_for(version: str, out_dir: str = HERE) -> str:
    return os.path.join(out_dir, f"msprobe-{version}.vocab.json")


def write(vocab: dict, out_dir: str = HERE) -> str:
    out = path_for(vocab["version"], out_dir)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(vocab, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m verl_pdbg_conf.checks.msprobe_releases.extract_vocab",
                                description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--wheel", nargs="+", help="mindstudio_probe-X-*.whl files (pip download --no-deps)")
    g.add_argument("--source", help="a directory holding the msprobe package (with --version)")
    p.add_argument("--version", help="the release of --source")
    p.add_argument("--out-dir", default=HERE)
    args = p.parse_args(argv)
    vocabs = [from_wheel(w) for w in args.wheel] if args.wheel else [vocabulary(args.source, args.version)]
    for v in vocabs:
        n = sum(len(p["keys"]) for p in v["parts"].values())
        print(f"{write(v, args.out_dir)}: {len(v['parts'])} parts, {n} keys, {len(v['checks'])} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
