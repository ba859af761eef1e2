"""Compose verl's PPO config with the user's YAML files and Hydra overrides, the way
`python3 -m verl.trainer.main_ppo [--config-name ...] OVERRIDES` composes it, and hand back a
Document: the composed, resolved config as plain containers, with the file, line and column
that set every value.

- verl's config tree is the judging release's shipped facts (releases/), served to real Hydra
  by facts_source.py: verl need not be installed and is never imported; hydra is imported only
  inside `compose_verl`. Many compositions in one process are cached (Composer).
- The user's files act as the primary config a user writes on top of verl's:
  `defaults: [ppo_trainer, _self_]` plus the files' content (later files win). Overrides are
  applied as on the command line: `+group=option` appends after the files, `key=value` wins
  over everything.
- This package's config groups are on the search path (its Hydra SearchPathPlugin, discovered
  when the package is installed, or registered here when it is not).
- An override that does not compose becomes a finding (rule `override`) at the override, with
  Hydra's reason and a hint with the form that works; the rest is composed without it.
- Interpolations are resolved on the whole composed tree (a role's `${oc.select:global_profiler...}`
  needs the root); one that cannot be resolved before the run becomes a warning (rule
  `interpolation`) and keeps its raw string.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import os
import re
from dataclasses import dataclass, field

from verl_pdbg_conf.core.document import Document, get, walk
from verl_pdbg_conf.core.findings import Finding, Severity, format_path
from verl_pdbg_conf.core.loaders import load_yaml
from verl_pdbg_conf.verl_facts.hydra_session import hydra_session as _hydra_session

CLI = "<cli>"
PRIMARY = "verl_pdbg_conf_user_config"  # ConfigStore name of the primary config built from the files
_GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"


@dataclass(frozen=True)
class Override:
    """One Hydra override and where the user wrote it (by default: the command line, line = its
    1-based position in the override list, column 1)."""

    text: str
    file: str = CLI
    line: int | None = None  # None: filled in with the 1-based position in the list
    column: int = 1


@dataclass
class ComposeResult:
    document: Document | None  # None when nothing composes (verl missing, a broken base config)
    findings: list[Finding] = field(default_factory=list)  # loading, composition, interpolation
    overrides: list[Override] = field(default_factory=list)  # as given, with positions filled in
    applied: list[Override] = field(default_factory=list)  # those that composed
    config_dir: str | None = None  # the main config source: a user directory, or verl-facts://<release>
    release: str | None = None  # the verl release whose config tree was composed
    release_why: str = ""  # how that release was chosen (installed, --verl-version, newest shipped)

    @property
    def ok(self) -> bool:
        return self.document is not None


def verl_config_dir() -> str | None:
    """verl's trainer/config directory, found without importing verl."""
    try:
        spec = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        d = os.path.join(root, "trainer", "config")
        if os.path.isdir(d):
            return os.path.abspath(d)
    return None


def _positioned(overrides) -> list[Override]:
    out = []
    for i, o in enumerate(overrides, 1):
        if isinstance(o, Override):
            out.append(o if o.line is not None else Override(o.text, o.file, i, o.column))
        else:
            out.append(Override(str(o), CLI, i, 1))
    return out


def _at(o: Override, rule: str, severity: Severity, message: str, hint: str = "", path: str = "") -> Finding:
    return Finding(rule, severity, message, o.file, o.line or 1, o.column, path, hint)


# ---------------------------------------------------------------- files

def _plain(data):
    if isinstance(data, dict):
        return {str(k): _plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_plain(v) for v in data]
    if isinstance(data, (str, int, float, bool)) or data is None:
        return data
    return str(data)


def _load_files(files: list[str], config_name: str):
    """Merge the files (later wins, lists replaced) -> data, positions, extra defaults, findings."""
    findings: list[Finding] = []
    merged: dict = {}
    pos: dict = {}  # path -> (line, col, file)
    extra_defaults: list = []
    for f in files:
        doc = load_yaml(f)
        findings += doc.findings
        if not doc.ok:
            continue
        if doc.data is None:
            continue
        if not isinstance(doc.data, dict):
            line, col = doc.where(())
            findings.append(Finding("value-type", Severity.ERROR,
                                    "a verl config file must be a mapping at the top", f, line, col,
                                    hint="write the config as `key: value` lines"))
            continue
        data = _plain(doc.data)
        for entry in data.pop("defaults", None) or []:
            name = entry if isinstance(entry, str) else None
            if name in (config_name, "_self_"):
                continue
            extra_defaults.append(entry)
        table = {}
        for p, lc in list(doc.values.items()) + list(doc.keys.items()):
            if p and p[0] == "defaults":
                continue
            table.setdefault(p, (lc[0], lc[1], f))
        _merge(merged, data, (), pos, table)
    return merged, pos, extra_defaults, findings


def _merge(dst: dict, src: dict, path: tuple, pos: dict, table: dict) -> None:
    for k, v in src.items():
        p = path + (k,)
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            if p in table:
                pos[p] = table[p]
            _merge(dst[k], v, p, pos, table)
            continue
        for q in [q for q in pos if q[:len(p)] == p]:  # replaced: forget what was below
            del pos[q]
        dst[k] = v
        for q, lc in table.items():
            if q[:len(p)] == p:
                pos[q] = lc


# ---------------------------------------------------------------- hydra plumbing

def _ensure_search_path_plugin() -> None:
    """Make this package's config groups visible: its SearchPathPlugin is discovered when the
    package is installed; from a bare source tree, register the plugin class here."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.search_path_plugin import SearchPathPlugin

    plugins = Plugins.instance()
    if any(getattr(p, "VERL_PDBG_CONF", False) for p in plugins.discover(SearchPathPlugin)):
        return
    mod = None
    try:
        import hydra_plugins.verl_pdbg_conf_searchpath.verl_pdbg_conf_searchpath as mod  # noqa: F811
    except ImportError:
        here = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "hydra_plugins",
                            "verl_pdbg_conf_searchpath", "verl_pdbg_conf_searchpath.py")
        if os.path.isfile(here):
            spec = importlib.util.spec_from_file_location("_verl_pdbg_conf_searchpath", here)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
    if mod is not None:
        plugins.register(mod.VerlPdbgConfSearchPathPlugin)


# ---------------------------------------------------------------- errors -> findings

_KEY_MSG = (
    re.compile(r"Could not override '([^']+)'"),
    re.compile(r"An item is already at '([^']+)'"),
    re.compile(r"Could not delete from config\. '([^']+)' does not exist"),
)
_MISSING_MSG = re.compile(r"Could not find '([^']+)'")
_IN_MSG = re.compile(r"^In '([^']+)':")


def _culprit(e: Exception, candidates: list) -> int | None:
    """Index (in candidates: (Override, hydra Override) pairs) of the override Hydra names."""
    msg = str(e)
    for rx in _KEY_MSG:
        m = rx.search(msg)
        if m:
            for i, (_, h) in enumerate(candidates):
                if h.key_or_group == m.group(1) or h.get_key_element() == m.group(1):
                    return i
    m = _MISSING_MSG.search(msg)
    if m:
        group, _, opt = m.group(1).rpartition("/")
        for i, (_, h) in enumerate(candidates):
            if h.key_or_group == group and str(h.value()) == opt:
                return i
        m2 = _IN_MSG.search(msg)  # a default inside a selected option is missing: blame the selection
        if m2:
            group, _, opt = m2.group(1).rpartition("/")
            for i, (_, h) in enumerate(candidates):
                if h.key_or_group == group and str(h.value()) == opt:
                    return i
    for i, (o, h) in enumerate(candidates):
        if f"'{h.key_or_group}'" in msg:
            return i
    return None


def _reason(e: Exception) -> str:
    """Hydra's reason, without its search-path dump and with the OmegaConf cause's first line."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else type(e).__name__
    cause = e.__cause__
    if cause is not None and str(cause).strip():
        first = str(cause).strip().splitlines()[0]
        if first not in text:
            text += f" ({first})"
    return text


def _did_you_mean(word: str, choices) -> str | None:
    choices = [str(c) for c in choices]
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not close:
        lower = {c.lower(): c for c in choices}
        close = [lower[word.lower()]] if word.lower() in lower else []
    return close[0] if close else None


def _node_keys(cfg, dotted: str):
    """Keys of the mapping at `dotted` in cfg (unresolved), or None."""
    from omegaconf import DictConfig, OmegaConf

    node = cfg if not dotted else OmegaConf.select(cfg, dotted, throw_on_resolution_failure=False)
    if isinstance(node, DictConfig):
        return [str(k) for k in node.keys()]
    return None


def _override_finding(o: Override, h, e: Exception, base_cfg_fn, config_name: str = "ppo_trainer",
                      earlier: list | None = None, release: str | None = None) -> Finding:
    """Finding for an override that does not compose, with the form that works as hint."""
    from hydra.errors import MissingConfigException

    text = o.text
    reason = _reason(e)
    msg = f"override `{text}` does not compose: {reason}"
    hint = ""
    raw = str(e)
    value_text = text.split("=", 1)[1] if "=" in text else ""
    key = h.key_or_group if h is not None else ""
    if "An item is already at" in raw:
        bare = text.lstrip("+")
        hint = (f"`{key}` already exists in {_tree_name(release)}: set it with `{bare}` "
                f"(or `++{bare}` to add or override)")
    elif "No match in the defaults list" in raw:
        hint = f"`{key}` is not in {config_name}'s defaults list: append the option with `+{text.lstrip('+')}`"
    elif ("Multiple values for" in raw or "appears more than once" in raw) and h is not None and any(
            eh.key_or_group == key for _, eh in (earlier or [])):
        first = next(eo for eo, eh in earlier if eh.key_or_group == key)
        hint = (f"`{key}` is already selected by override {first.line} (`{first.text}`): select it once, "
                f"or replace that choice with `{key}={h.value()}`")
    elif isinstance(e, MissingConfigException) and h is not None and getattr(e, "options", None) \
            and _MISSING_MSG.search(raw) and h.key_or_group == _MISSING_MSG.search(raw).group(1).rpartition("/")[0]:
        opts = [x for x in e.options]
        best = _did_you_mean(str(h.value()), opts)
        if best:
            hint = f"did you mean `{text.replace('=' + str(h.value()), '=' + best, 1)}`?"
        else:
            hint = f"options in '{key}': {', '.join(opts)}"
    elif _KEY_MSG[0].search(raw) or _KEY_MSG[2].search(raw):
        cause = e.__cause__
        missing = getattr(cause, "key", None)
        full = getattr(cause, "full_key", None) or key
        parts = key.split(".")
        if missing is None:  # delete of a key that does not exist: the last part is the missing one
            missing = parts[-1]
            full = key
        missing = str(missing)
        full_parts = str(full).split(".")
        parent = ".".join(full_parts[:-1])
        keys = _node_keys(base_cfg_fn(), parent)
        if keys is not None:
            best = _did_you_mean(missing, keys)
            where = parent or "the top level"
            if best:
                fixed = parts[:]
                idx = len(full_parts) - 1
                if idx < len(fixed) and fixed[idx] == missing:
                    fixed[idx] = best
                fixed_key = ".".join(fixed)
                prefix = text[:len(text) - len(text.lstrip("+~"))]
                suggestion = prefix + fixed_key + (f"={value_text}" if "=" in text else "")
                hint = f"did you mean `{suggestion}`? ('{missing}' is not a key of {where})"
            else:
                shown = ", ".join(sorted(keys)[:12]) + (", ..." if len(keys) > 12 else "")
                hint = (f"'{missing}' is not a key of {where} in {_tree_name(release)} (keys there: {shown})"
                        + ("" if text.startswith(("+", "~")) else
                           f"; `+{text}` would add it, but verl ignores keys it does not know"))
    elif h is None:
        hint = f"fix the override syntax, quoting values with brackets or commas for the shell: key='[1,2]' ({_GRAMMAR})"
    return _at(o, "override", Severity.ERROR, msg, hint, key)


def _tree_name(release: str | None) -> str:
    return f"verl {release}'s config" if release else "verl's config"


# ---------------------------------------------------------------- resolution

def _to_plain(cfg, findings_out: list, origin_fn) -> object:
    """The whole tree as plain containers, every interpolation resolved against the root;
    an unresolvable one keeps its raw string and yields an `interpolation` warning."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    try:  # one pass when everything resolves (the usual case); value by value only on failure
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception:
        pass

    def conv(node, path):
        if isinstance(node, DictConfig):
            if node._is_none():
                return None
            out = {}
            for k in node.keys():
                out[k] = child(node, k, path + (k,))
            return out
        if isinstance(node, ListConfig):
            if node._is_none():
                return None
            return [child(node, i, path + (i,)) for i in range(len(node))]
        return node

    def child(parent, k, path):
        n = parent._get_node(k)
        if n is None:
            return None
        if n._is_missing() and not n._is_interpolation():
            return "???"
        if n._is_interpolation():
            raw = n._value()
            try:
                v = parent[k]
                if OmegaConf.is_config(v):
                    v = OmegaConf.to_container(v, resolve=True)
                return v
            except Exception as e:  # unset env var, missing key, unknown resolver
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                file, line, col = origin_fn(path)
                findings_out.append(Finding(
                    "interpolation", Severity.WARNING,
                    f"{raw} cannot be resolved before the run: {reason}", file, line, col, format_path(path),
                    hint="verl resolves it in its TaskRunner (a Ray actor): make sure it resolves there, or write "
                         "the value itself"))
                return str(raw)
        if isinstance(n, (DictConfig, ListConfig)):
            return conv(n, path)
        return parent[k]

    return conv(cfg, ())


# ---------------------------------------------------------------- positions

_PURE_REF = re.compile(r"^\$\{(?:oc\.select:)?([A-Za-z_][\w\-]*(?:\.[\w\-]+)*)(?:,[^{}]*)?\}$")


_ABSENT = object()


def _get(data, path):
    return get(data, path, _ABSENT)
_BASE_CACHE: dict = {}  # (config dir, config name, files' data) -> composed DictConfig without overrides


def _key_path(key: str) -> tuple:
    return tuple(key.split(".")) if key else ()


def _positions(raw_final, raw_base, key_overrides, group_overrides, file_pos, default_file, own_prefixes=()):
    """Path -> (line, col, file) for every node of the composed tree, and the paths this package's
    own config groups set (under `own_prefixes`, changed by a group override, set by no user).

    key_overrides: [(Override, key path)] applied, in order; group_overrides: [Override];
    raw_base: the unresolved composition without overrides (None when no group override);
    file_pos: positions from the user's files."""
    default = (1, 1, default_file)
    direct: dict = {}
    own: set = set()
    by_key = {kp: (i, o) for i, (o, kp) in enumerate(key_overrides) if kp}  # the last one per key wins
    for path, value in walk(raw_final):
        spath = tuple(str(p) for p in path)
        hits = [by_key[spath[:n]] for n in range(1, len(spath) + 1) if spath[:n] in by_key]
        hit = max(hits, key=lambda x: x[0])[1] if hits else None
        if hit is not None:
            direct[path] = (hit.line or 1, hit.column, hit.file)
            continue
        if group_overrides and raw_base is not None:
            before = _get(raw_base, path)
            changed = before is _ABSENT or (not isinstance(value, (dict, list)) and before != value) \
                or (isinstance(value, list) and before != value)
            if changed:
                g = group_overrides[-1]
                direct[path] = (g.line or 1, g.column, g.file)
                if any(spath[:len(p)] == p for p in own_prefixes):
                    own.add(path)
                continue
        if path in file_pos:
            direct[path] = file_pos[path]
    out = {}

    def origin(path, seen=()):
        if path in direct:
            return direct[path]
        value = _get(raw_final, path)
        if isinstance(value, str) and path not in seen:
            m = _PURE_REF.match(value.strip())
            if m:
                target = _split_dotted(m.group(1))
                if _get(raw_final, target) is not _ABSENT and target != path:
                    o = origin(target, seen + (path,))
                    if o is not default:
                        return o
        return default

    for path, _ in walk(raw_final):
        out[path] = origin(path)
    return out, own


def own_group_prefixes(key: str, option) -> list[tuple]:
    """The config paths a config group this package ships sets when `key=option` selects it
    (`+profiler=precision_debugger_l1`): its keys, and where its defaults entries put theirs
    (`/verl_pdbg_conf/config_path@global_profiler...`). [] for any other group."""
    if not (isinstance(option, str) and re.fullmatch(r"[\w\-]+", option) and re.fullmatch(r"\w+", key)):
        return []
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", key, option + ".yaml")
    if not os.path.isfile(path):
        return []
    doc = load_yaml(path)
    if not doc.ok or not isinstance(doc.data, dict):
        return []
    out = []
    for entry in doc.data.get("defaults") or []:
        name = next(iter(entry), "") if isinstance(entry, dict) else str(entry)
        if "@" in name:
            out.append(_key_path(name.split("@", 1)[1]))
    body = {k: v for k, v in doc.data.items() if k != "defaults"}
    out += [tuple(str(part) for part in p) for p, v in walk(body) if p and not isinstance(v, dict)]
    return out


def _split_dotted(dotted: str) -> tuple:
    out = []
    for part in dotted.split("."):
        out.append(int(part) if part.isdigit() else part)
    return tuple(out)


# ---------------------------------------------------------------- the entry point

def compose_verl(files: list[str], overrides: list, config_name: str = "ppo_trainer",
                 config_dir: str | None = None, release: str | None = None) -> ComposeResult:
    """Compose `config_name` with the YAML `files` merged on top (later files win) and the Hydra
    `overrides` (Override objects or strings; a string's position is its 1-based index in the
    list, file `<cli>`), as `python3 -m verl.trainer.main_ppo` would.

    `release` (a shipped release; default: the installed verl when its facts ship, else the
    newest shipped) picks verl's config tree, served from the shipped facts: verl need not be
    installed. `config_dir=None` composes verl's own trainer/config; a user directory is the
    primary config directory with verl's tree on the search path, where the primary config's
    `hydra.searchpath` names verl's tree (pkg://verl.trainer.config, .../verl/trainer/config)
    or, when it names none, after its entries.

    Returns the composed, resolved config as a Document whose positions say which override, file
    line or verl default (`<verl:ppo_trainer>`) set each value, and the findings: files that do not
    load, overrides that do not compose (rule `override`), interpolations that cannot be resolved
    before the run (rule `interpolation`)."""
    from verl_pdbg_conf.verl_facts import catalog, releases

    overrides = _positioned(overrides)
    result = ComposeResult(None, [], overrides, [], None)
    default_file = f"<verl:{config_name}>"
    if release is not None and not catalog.known(release):
        result.findings.append(Finding(
            "file-not-found", Severity.ERROR, f"no facts of verl {release} ship with this package", default_file,
            1, 1, hint=f"one of {', '.join(releases.shipped())}"))
        return result
    result.release, result.release_why = releases.judging(release)

    data, file_pos, extra_defaults, load_findings = _load_files(list(files), config_name)
    result.findings += load_findings
    main, searchpath = _config_dirs(result.release, config_dir, config_name, overrides)
    result.config_dir = main
    pairs = _parsed_overrides(overrides, result.findings)
    primary = _primary(files, config_name, data, extra_defaults, result.findings)

    with _hydra_session(main):
        files_key = (repr(data), repr(extra_defaults)) if files else None
        composer = Composer(main, searchpath, files_key)
        base_key = (main, searchpath, config_name, files_key)

        def base_cfg():
            return _base_cfg(composer, primary, base_key)

        failed_at = (files[0] if files else default_file,
                     "fix the files given with --verl" if files else f"check {config_name} in {main}")
        cfg, remaining = _compose_dropping(composer.compose, primary, pairs, base_cfg, config_name, failed_at,
                                           result)
        if cfg is None:
            return result
        result.applied = [o for o, _ in remaining]
        key_overrides, group_overrides, own_prefixes = _split_overrides(remaining, composer)
        raw_base = None
        if group_overrides:
            from omegaconf import OmegaConf

            b = base_cfg()
            raw_base = OmegaConf.to_container(b, resolve=False) if b is not None else None

    result.document = _document(cfg, raw_base, key_overrides, group_overrides, file_pos, default_file,
                                result.findings, own_prefixes)
    return result


def _config_dirs(release: str, config_dir: str | None, config_name: str, overrides: list) -> tuple:
    """(primary config directory, search path override or None), verl's shipped trees registered as a config
    source: verl's own tree, or the user's directory with verl's tree on its search path."""
    from verl_pdbg_conf.verl_facts import facts_source
    from verl_pdbg_conf.verl_facts.structured import register_configs

    _ensure_search_path_plugin()
    facts_source.ensure_registered()
    register_configs()
    verl_main = f"{facts_source.SCHEME}://{release}"
    if config_dir is None:
        return verl_main, None
    main = os.path.abspath(config_dir)
    return main, _searchpath_override(main, config_name, verl_main, overrides)


def _parsed_overrides(overrides: list, findings: list) -> list:
    """(Override, hydra Override) of each override that parses; a finding for each that does not."""
    pairs = []
    for o in overrides:
        try:
            parsed = _parse_override(o.text)
        except Exception as e:
            findings.append(_override_finding(o, None, e, lambda: None))
            continue
        pairs.append((o, parsed))
    return pairs


def _primary(files: list, config_name: str, data: dict, extra_defaults: list, findings: list) -> str:
    """The primary config's name: verl's own, or with files, one stored from them on top of it."""
    if not files:
        return config_name
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    node = {"defaults": [config_name, *extra_defaults, "_self_"], **data}
    try:
        ConfigStore.instance().store(name=PRIMARY, node=OmegaConf.create(node), provider="verl-pdbg-conf")
        return PRIMARY
    except Exception as e:
        findings.append(Finding("parse-error", Severity.ERROR,
                                f"the files cannot be merged into one config: {_reason(e)}", files[0], 1, 1))
        return config_name


def _base_cfg(composer: "Composer", primary: str, key: tuple):
    """The composition without overrides (cached: composing verl's tree costs about a second)."""
    if key not in _BASE_CACHE:
        try:
            _BASE_CACHE[key] = composer.compose(primary, overrides=[])
        except Exception:
            _BASE_CACHE[key] = None
        while len(_BASE_CACHE) > 8:
            _BASE_CACHE.pop(next(iter(_BASE_CACHE)))
    return _BASE_CACHE[key]


def _compose_dropping(compose, primary: str, pairs: list, base_cfg, config_name: str, failed_at: tuple,
                      result: ComposeResult) -> tuple:
    """Compose with the overrides, dropping each one that does not compose (named by Hydra's message, or
    found by bisection) with its finding: -> (config or None, the overrides applied)."""
    remaining = list(pairs)
    while True:
        try:
            return compose(primary, overrides=[o.text for o, _ in remaining]), remaining
        except Exception as e:
            if not remaining:
                where, hint = failed_at
                result.findings.append(Finding("override", Severity.ERROR, f"{primary} does not compose: "
                                               f"{_reason(e)}", where, 1, 1, hint=hint))
                return None, remaining
            i = _culprit(e, remaining)
            if i is None:
                i, e = _bisect(compose, primary, remaining, e)
            o, h = remaining.pop(i)
            result.findings.append(_override_finding(o, h, e, base_cfg, config_name, remaining[:i],
                                                     result.release))


def _split_overrides(remaining: list, composer: "Composer") -> tuple[list, list]:
    """The applied overrides that set keys ((Override, key path)) and those that choose config groups;
    Hydra's own and deletions are neither."""
    key_overrides, group_overrides, own = [], [], []
    for o, h in remaining:
        if h.key_or_group == "hydra" or h.key_or_group.startswith("hydra.") or h.is_delete():
            continue
        if _is_group_override(h, composer):
            group_overrides.append(o)
            own += own_group_prefixes(h.key_or_group, h.value())
        else:
            key_overrides.append((o, _key_path(h.key_or_group)))
    return key_overrides, group_overrides, own


def _document(cfg, raw_base, key_overrides: list, group_overrides: list, file_pos: dict, default_file: str,
              findings: list, own_prefixes=()) -> Document:
    """The resolved config as a Document whose positions say which override, file line or verl default
    set each value; interpolations that cannot be resolved go to `findings`."""
    from omegaconf import OmegaConf

    raw_final = OmegaConf.to_container(cfg, resolve=False)
    positions, own = _positions(raw_final, raw_base, key_overrides, group_overrides, file_pos, default_file,
                                own_prefixes)

    def origin(path):
        p = positions.get(tuple(path), (1, 1, default_file))
        return p[2], p[0], p[1]

    interp: list[Finding] = []
    plain = _to_plain(cfg, interp, origin)
    findings += _root_failures(interp)
    doc = Document(default_file, plain, kind="yaml", own=frozenset(own))
    for path, _ in walk(plain):
        p = positions.get(path)
        if p is None:  # a path only the resolved value has (an interpolation to a mapping)
            q = path
            while q and q not in positions:
                q = q[:-1]
            p = positions.get(q, (1, 1, default_file))
        doc.values[path] = p
        if path:
            doc.keys[path] = p
    return doc


def compose_tree(release: str, config_name: str = "ppo_trainer", overrides=()):
    """verl's own `config_name` of `release` (a catalog name), unresolved, composed exactly as
    compose_verl composes it with no files (same set-up, same cached Composer)."""
    main, _ = _config_dirs(release, None, config_name, [])
    with _hydra_session(main):
        return Composer(main, None, None).compose(config_name, list(overrides))


# ---------------------------------------------------------------- verl's tree beside a user directory

_VERL_TREE = re.compile(r"(^|/)verl/trainer/config$")


def names_verl_tree(entry: str) -> bool:
    """Whether a hydra.searchpath entry means verl's trainer/config (pkg://verl.trainer.config,
    file://verl/trainer/config relative to the launch directory, an absolute .../verl/trainer/config)."""
    scheme, sep, rest = str(entry).partition("://")
    if not sep:
        scheme, rest = "file", str(entry)
    if scheme == "pkg":
        rest = rest.replace(".", "/")
    rest = os.path.normpath(rest).replace(os.sep, "/") if rest else ""
    return bool(_VERL_TREE.search(rest))


def _quote(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _searchpath_override(user_dir: str, config_name: str, verl_main: str, overrides: list) -> str:
    """The `hydra.searchpath=[...]` override that puts verl's tree (the shipped facts) where the
    user's primary config (or a `hydra.searchpath=` override, which wins in Hydra) names it, or
    after its entries; verl itself is never imported (pkg://verl... would import it)."""
    entries = None
    for o in overrides:
        key, sep, value = o.text.partition("=")
        if sep and key.strip() == "hydra.searchpath":
            try:
                from hydra.core.override_parser.overrides_parser import OverridesParser

                v = OverridesParser.create().parse_overrides([o.text])[0].value()
                entries = list(v) if isinstance(v, list) else None
            except Exception:
                entries = None
            break
    if entries is None:
        from omegaconf import OmegaConf

        name = config_name if config_name.endswith(".yaml") else config_name + ".yaml"
        try:
            sp = OmegaConf.select(OmegaConf.load(os.path.join(user_dir, name)), "hydra.searchpath")
            entries = [str(e) for e in sp] if sp is not None else []
        except Exception:  # Hydra reports an unreadable primary config itself
            entries = []
    out, placed = [], False
    for e in entries:
        if names_verl_tree(e):
            if not placed:
                out.append(verl_main)
                placed = True
            continue
        out.append(e)
    if not placed:
        out.append(verl_main)
    return "hydra.searchpath=[" + ",".join(_quote(e) for e in out) + "]"


# ---------------------------------------------------------------- cached composition

_COMPOSE_CACHE: dict = {}  # (main, searchpath, files, config name, structural overrides) -> cfg | error
_CACHE_SIZE = 64


@functools.lru_cache(maxsize=4096)
def _parse_override(text: str):
    """Hydra's parse of one override (its Override objects are not changed by composing); a batch
    of launch scripts repeats the same overrides."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides([text])[0]


def _memoize_interpolation_parser() -> None:
    """OmegaConf parses an interpolation string with its ANTLR grammar every time it resolves
    one (about 2 ms each; a composed verl config has over a hundred). The parse is a pure
    function of the string (the tree's tokens keep their own input), so memoize it; a string
    that does not parse raises as before and is not cached."""
    import omegaconf.base as base

    if not hasattr(base.parse, "cache_info"):
        base.parse = functools.lru_cache(maxsize=4096)(base.parse)


class Composer:
    """Hydra's compose, cached for many compositions in one process.

    Hydra composes in two phases: the defaults list (config group selections, `hydra.*`) builds a
    config, then the remaining overrides are applied to it one by one
    (`ConfigLoaderImpl._apply_overrides_to_config`). The first phase is cached per
    (search path, primary config, group overrides); the second runs Hydra's own function on a
    copy. Which override belongs to which phase is Hydra's own test (`repo.group_exists`), on the
    same repository. tests/hydra/test_release_facts.py checks the result and the errors against
    plain `hydra.compose`."""

    def __init__(self, main: str, searchpath: str | None, files_key):
        self.main, self.searchpath, self.files_key = main, searchpath, files_key
        self._repo = None
        _memoize_interpolation_parser()

    def _group_exists(self, key: str) -> bool:
        if self._repo is None:
            import copy

            from hydra._internal.config_repository import ConfigRepository
            from hydra.core.global_hydra import GlobalHydra
            from hydra.core.override_parser.overrides_parser import OverridesParser

            csp = copy.deepcopy(GlobalHydra.instance().config_loader().get_search_path())
            if self.searchpath is not None:  # as ConfigLoaderImpl._process_config_searchpath does
                schema = csp.get_path().pop(-1)
                for sp in OverridesParser.create().parse_overrides([self.searchpath])[0].value():
                    csp.append(provider="hydra.searchpath in command-line", path=sp)
                csp.append(schema.provider, schema.path)
            self._repo = ConfigRepository(config_search_path=csp)
        return self._repo.group_exists(key)

    def compose(self, name: str, overrides: list[str]):
        import pickle
        import warnings

        from hydra import compose
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        texts = ([self.searchpath] if self.searchpath else []) + list(overrides)
        try:
            parsed = [_parse_override(t) for t in texts]
        except Exception:
            parsed = None
        structural, plain = [], []
        for h in parsed or ():
            key = h.key_or_group
            if (h.is_sweep_override() or key == "hydra" or key.startswith(("hydra.", "hydra/"))
                    or h.package is not None or (self._group_exists(key) and not isinstance(h.value(), dict))):
                structural.append(h)
            else:
                plain.append(h)
        if parsed is None:  # let Hydra say what is wrong
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return compose(name, overrides=texts)
        ckey = (self.main, self.files_key, name, tuple(h.input_line for h in structural))
        hit = _COMPOSE_CACHE.get(ckey)
        on_disk = self.files_key is None and self.searchpath is None and self.main.startswith("verl-facts://")
        if on_disk:
            from verl_pdbg_conf.verl_facts import disk_cache
        if hit is None and on_disk:
            blob = disk_cache.get(ckey)
            hit = (blob, None) if blob is not None else None
        if hit is None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    base = compose(name, overrides=[h.input_line for h in structural])
                # a pickled copy: loading it is about 3x faster than deepcopy, and as exact
                # (OmegaConf pickles nodes with their types and flags)
                hit = (pickle.dumps(base, protocol=pickle.HIGHEST_PROTOCOL), None)
                if on_disk:
                    disk_cache.put(ckey, hit[0])
            except Exception as e:
                hit = (None, e)
            _COMPOSE_CACHE[ckey] = hit
            while len(_COMPOSE_CACHE) > _CACHE_SIZE:
                _COMPOSE_CACHE.pop(next(iter(_COMPOSE_CACHE)))
        blob, error = hit
        if error is not None:
            raise error
        cfg = pickle.loads(blob)
        from omegaconf.errors import OmegaConfBaseException

        try:
            ConfigLoaderImpl._apply_overrides_to_config(plain, cfg)
        except OmegaConfBaseException as e:  # as ConfigLoaderImpl.load_configuration wraps it
            from hydra.errors import ConfigCompositionException

            raise ConfigCompositionException().with_traceback(e.__traceback__) from e
        return cfg


def _root_failures(findings: list[Finding]) -> list[Finding]:
    """One warning per cause: a role's `${oc.select:global_profiler...}` that fails because the
    global value fails is not reported again."""
    by_reason: dict = {}
    for f in findings:
        by_reason.setdefault(f.message.split(" cannot be resolved before the run: ", 1)[-1], []).append(f)
    out = []
    for group in by_reason.values():
        roots = [f for f in group if not f.message.startswith("${oc.select:")]
        out += roots or group[:1]
    return out


def _is_group_override(h, composer: "Composer") -> bool:
    """A config-group selection (`+profiler=x`, `critic=megatron_critic`) rather than a value:
    Hydra's own test, on the composition's search path."""
    key = h.key_or_group
    if "/" in key or h.package is not None:
        return True
    return composer._group_exists(key) and not isinstance(h.value(), dict)


def _bisect(compose, primary, remaining, first_error):
    """The first override whose addition breaks composition (when Hydra's message names none)."""
    lo, hi = 0, len(remaining)  # prefix of length hi fails; find smallest failing prefix
    err = first_error
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            compose(primary, overrides=[o.text for o, _ in remaining[:mid]])
            lo = mid
        except Exception as e:
            hi, err = mid, e
    return hi - 1, err
