"""The full YAML path: PyYAML (libyaml where it is built) typing scalars as Hydra's OmegaConf
loader does, bounded in depth and size, every failure a finding. Imported only for what
fast_yaml does not read, since importing PyYAML alone costs more than a whole plain run."""

from __future__ import annotations

import re

from verl_pdbg_conf.core.document import Document
from verl_pdbg_conf.core.findings import Finding, Severity
from verl_pdbg_conf.core.reading import DEPTH_HINT, MAX_DEPTH, MAX_NODES, Budget, err

# Python refuses to turn an int of more than 4300 decimal digits into text; a hex or base-60
# YAML integer escapes that limit when it is built, and then breaks every message that shows it.
_MAX_INT_BITS = 10_000


def load(doc: Document, text: str) -> Document:
    """`text` read the full PyYAML way into `doc` (what fast_yaml refuses)."""
    file = doc.file
    import yaml

    loader_cls = _conf_loader(yaml)
    try:
        _precheck_events(yaml, loader_cls, text)
        if len(text) <= _PYYAML_SCAN_MAX and re.search(_PYYAML_REFUSES, text):
            for _ in yaml.scan(text, Loader=yaml.SafeLoader):  # Hydra scans with PyYAML: refused there, refused here
                pass
        loader = loader_cls(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        msg = " ".join(str(x) for x in (e.context, e.problem) if x)
        doc.ok = False
        line, col = _in_text(text, mark.line + 1, mark.column + 1) if mark else (1, 1)
        if "maximum nesting depth" in msg:
            # PyYAML 6.0.4's libyaml scans a run of '[' ahead and stops at its own limit (1000 levels)
            # before our event walk sees level MAX_DEPTH: the same finding, at the place libyaml stopped.
            doc.findings.append(err(file, "parse-error", f"YAML nests more than {MAX_DEPTH} levels deep", line, col,
                                     hint=DEPTH_HINT))
            return doc
        tab = "'\\t'" in msg or "\t" in msg
        doc.findings.append(err(file, "parse-error", f"YAML does not parse: {msg}", line, col,
                                 hint="replace the tab with spaces: the YAML reader Hydra uses allows no tab here"
                                 if tab else "fix the YAML syntax at this position"))
        return doc
    except (yaml.YAMLError, RecursionError, ValueError) as e:
        doc.ok = False
        doc.findings.append(err(file, "parse-error", f"YAML does not parse: {e}"))
        return doc
    except Budget as e:
        doc.ok = False
        doc.findings.append(err(file, "parse-error", str(e), e.line, e.col,
                                 hint=DEPTH_HINT))
        return doc
    if node is None:
        doc.data = None
        return doc
    builder = _YamlBuilder(doc)
    try:
        doc.data = builder.build(node, ())
    except Budget as e:
        doc.ok = False
        doc.data = None
        doc.findings.append(err(file, "parse-error", str(e), e.line, e.col,
                                 hint="expand fewer aliases or nest less deeply"))
    return doc


# OmegaConf's float pattern: it also reads `1e-5` (no dot) as a float, which YAML 1.1 does not.
_OMEGACONF_FLOAT = r"""^(?:
     [-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
    |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$"""
_LOADER = None
# Where libyaml accepts what PyYAML's scanner (Hydra's) refuses: a tab after `key:`, an anchor or a
# comma, and `|#` / `>#` (a comment right after a block scalar indicator). Such a text is scanned
# with PyYAML too, up to a size: PyYAML scans long lines at about 0.5 MB/s.
_PYYAML_REFUSES = r"\t|[|>][-+0-9]*#"
_PYYAML_SCAN_MAX = 256 * 1024


def _conf_loader(yaml):
    """libyaml's safe loader, typing plain scalars the way Hydra's OmegaConf loader does (what verl
    reads a conf with): `2024-01-01` stays a string (no timestamps) and `1e-5` is a float."""
    global _LOADER
    if _LOADER is None:
        base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        cls = type("ConfLoader", (base,), {})
        cls.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(_OMEGACONF_FLOAT, re.X),
                                  list("-+0123456789."))
        cls.yaml_implicit_resolvers = {k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
                                       for k, v in cls.yaml_implicit_resolvers.items()}
        _LOADER = cls
    return _LOADER


_STR = "tag:yaml.org,2002:str"
_YAML_BREAK = "\r\n|[\r\n\x85\u2028\u2029]"


def _in_text(text: str, line: int, col: int) -> tuple[int, int]:
    """libyaml marks the end of a stream that lacks a final line break one line past the end
    (`a: [` fails at 2:1): move such a mark to the end of the last line, as PyYAML reports it."""
    starts = [0] + [m.end() for m in re.finditer(_YAML_BREAK, text)]
    if line <= len(starts):
        return line, col
    return len(starts), len(text) - starts[-1] + 1


def _precheck_events(yaml, loader_cls, text: str) -> None:
    """Walk the parser's events (an iterative state machine) before composing: libyaml's
    composer recurses in C and overflows the stack (a segfault, not an exception) on about
    40 000 nested collections, which `- ` * 40000 (80 KB) or `[` * 50000 reaches. Stop at
    MAX_DEPTH levels or MAX_NODES events, so composing is bounded in depth and time too."""
    start = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
    end = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    node = start + (yaml.ScalarEvent, yaml.AliasEvent)
    parser = loader_cls(text)
    depth = count = 0
    try:
        while parser.check_event():
            ev = parser.get_event()
            if isinstance(ev, node):
                count += 1
                if count > MAX_NODES:
                    m = ev.start_mark
                    raise Budget(f"YAML holds more than {MAX_NODES} keys and values: too large for a config",
                                  m.line + 1, m.column + 1)
            if isinstance(ev, start):
                depth += 1
                if depth > MAX_DEPTH:
                    m = ev.start_mark
                    raise Budget(f"YAML nests more than {MAX_DEPTH} levels deep", m.line + 1, m.column + 1)
            elif isinstance(ev, end):
                depth -= 1
    finally:
        parser.dispose()


class _YamlBuilder:
    def __init__(self, doc: Document):
        import yaml

        self.yaml = yaml
        self.doc = doc
        self.count = 0
        self.constructor = yaml.constructor.SafeConstructor()

    def build(self, node, path, depth=0, stack=()):
        yaml = self.yaml
        self.count += 1
        m = node.start_mark
        if self.count > MAX_NODES:
            raise Budget(f"YAML expands to more than {MAX_NODES} values (an alias bomb?)", m.line + 1, m.column + 1)
        if depth > MAX_DEPTH or id(node) in stack:
            raise Budget("YAML nests too deeply or refers to itself through an alias", m.line + 1, m.column + 1)
        self.doc.values.setdefault(path, (m.line + 1, m.column + 1))
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        stack = stack + (id(node),)
        if isinstance(node, yaml.SequenceNode):
            self.check_tag(node, "tag:yaml.org,2002:seq", path)
            return [self.build(n, path + (i,), depth + 1, stack) for i, n in enumerate(node.value)]
        self.check_tag(node, "tag:yaml.org,2002:map", path)
        out: dict = {}
        explicit: dict = {}  # key -> tag of the keys written in this mapping (a merged `<<:` key is overridable)
        for k_node, v_node in node.value:
            if k_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`
                merged = self.build(v_node, path, depth + 1, stack)
                for src in merged if isinstance(merged, list) else [merged]:
                    if isinstance(src, dict):
                        for k, v in src.items():
                            out.setdefault(k, v)
                continue
            if not isinstance(k_node, yaml.ScalarNode):
                self.doc.findings.append(self.at(k_node, "yaml-key", Severity.ERROR,
                                                 "a mapping key must be a plain scalar", path))
                continue
            key = self.scalar(k_node, path)
            key = key if isinstance(key, (str, int)) and not isinstance(key, bool) else str(key)
            kp = path + (key,)
            if key in explicit:
                first = self.doc.keys.get(kp, (0, 0))[0]
                if explicit[key] == k_node.tag == _STR:
                    # Hydra loads confs with OmegaConf's YAML loader, which refuses a duplicate string key.
                    self.doc.findings.append(self.at(
                        k_node, "duplicate-key", Severity.ERROR,
                        f"key '{key}' appears twice (first at line {first}): Hydra refuses to load the file "
                        "('found duplicate key')", kp, hint="remove one of them"))
                else:  # OmegaConf checks string keys only: `1: a` then `1: b` loads, the last one wins
                    self.doc.findings.append(self.at(
                        k_node, "duplicate-key", Severity.WARNING,
                        f"key '{key}' appears twice (first at line {first}); the last one wins", kp,
                        hint="remove one of them"))
            explicit[key] = k_node.tag
            km = k_node.start_mark
            if key in out:  # given again (or merged): the last value wins, and so do its positions
                self.doc.forget(kp)
            self.doc.values.pop(kp, None)
            self.doc.keys[kp] = (km.line + 1, km.column + 1)
            out[key] = self.build(v_node, kp, depth + 1, stack)
        return out

    def scalar(self, node, path):
        if node.tag == "tag:yaml.org,2002:str":  # most scalars; what the constructor would return
            return node.value
        try:
            value = self.constructor.construct_object(node, deep=True)
            if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:  # 0x..., 0o..., base 60
                raise ValueError(f"an integer of {value.bit_length()} bits: too large to print in decimal")
            return value
        except Exception as e:  # noqa: BLE001 - any constructor failure (`!!bool maybe` is a KeyError)
            problem = getattr(e, "problem", None) or str(e)
            self.doc.findings.append(self.at(node, "yaml-tag", Severity.ERROR,
                                             f"value cannot be read safely: {problem}", path,
                                             hint="remove the tag; configs hold plain strings, numbers, "
                                                  "booleans, lists and mappings"))
            return node.value

    def check_tag(self, node, expected, path):
        if node.tag != expected:
            self.doc.findings.append(self.at(node, "yaml-tag", Severity.ERROR,
                                             f"tag {node.tag} is not allowed in a config", path,
                                             hint="remove the tag"))

    def at(self, node, rule, severity, message, path, hint=""):
        from verl_pdbg_conf.core.findings import format_path

        m = node.start_mark
        return Finding(rule, severity, message, self.doc.file, m.line + 1, m.column + 1, format_path(path), hint)
