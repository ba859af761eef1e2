"""Which config a launch script's Python command composes, as Hydra decides it.

The entry point: verl's `verl.trainer.main_ppo`, or a copy of it whose source is found next to
the script (its `@hydra.main(config_path=..., config_name=...)` read from the file, verl not
imported). Then `--config-name/-cn`, `--config-path/-cp`, `--config-dir/-cd` with Hydra's
semantics: a relative config path is relative to the directory of the module that declares
`@hydra.main` (verl/trainer/ for main_ppo), so `config` is verl's own tree. When the config
cannot be known, the choice says so with ONE note, and the overrides are not judged."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from verl_pdbg_conf.core.findings import Severity
from verl_pdbg_conf.launch_scripts.locate import Script, locate
from verl_pdbg_conf.launch_scripts.shell_words import Word

E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO

# verl's entry point this tool composes, with the config it loads (`@hydra.main(config_path="config",
# config_name="ppo_trainer")` in verl/trainer/main_ppo.py).
ENTRY_POINTS = {"verl.trainer.main_ppo": "ppo_trainer"}
_HYDRA_MAIN = re.compile(r"@hydra\.main\(([^)]*)\)")
# A trainer entry point by its name (a copy of main_ppo under another name: recipes' main_dapo,
# main_grpo...): when its source is not found it gets the one "not judged" warning; any other
# Python command (data preparation, model conversion, generation) is not a training launch.
_MAIN_PPO_LIKE = re.compile(r"(?:^|[./])main_\w*(?:ppo|dapo|grpo|gspo|rl|train)\w*(?:\.py)?$|^recipe[./]\S*main\w*")


@dataclass
class Entry:
    """What `python ...` runs: verl's main_ppo, or a copy of it (a project's or a recipe's own
    `main_ppo.py` with its own `@hydra.main`)."""

    module: str  # as the script names it
    config_name: str  # @hydra.main's config_name
    config_path: str | None  # @hydra.main's config_path
    base: str | None  # directory a relative --config-path resolves against (None: verl's verl/trainer)
    verl: bool = True  # verl's own main_ppo
    source: str | None = None  # the copy's file, when found


@dataclass
class Note:
    """A finding about the config choice, at a word of the script."""

    word: Word
    severity: Severity
    message: str
    hint: str


@dataclass
class ConfigChoice:
    config_name: str
    config_dir: str | None  # the primary config's directory; None: verl's own tree (the judging release's)
    anchor: Word  # where a finding about the primary config itself points (-cn, else -cp, else python)
    unjudged: bool = False  # the config cannot be known: the overrides are not judged
    notes: list[Note] = field(default_factory=list)


def find_entry(target: str, script: Script, cwd: str | None = None, pythonpath: list[str] | None = None) -> Entry | None:
    """verl's main_ppo; a copy of it (`-m recipe.x.main_ppo`, `-m verl.trainer.main_ppo_async`,
    `python3 main_ppo_split.py`) whose source declares `@hydra.main`, found as Python finds it from
    the launch directory `cwd` (then `pythonpath`), else next to the script or in its repository
    (a project installed from its checkout); a main_ppo-named module whose source is not found
    (its config cannot be known); else None (data preparation, model conversion...: not a
    training launch)."""
    if target in ENTRY_POINTS or target.endswith("verl/trainer/main_ppo.py"):
        # a repository's own verl may name another primary config in its main_ppo's @hydra.main
        src = _module_source("verl.trainer.main_ppo", True, script, cwd, pythonpath or [])
        name = _hydra_main_args(src).get("config_name") if src else None
        return Entry("verl.trainer.main_ppo", name or ENTRY_POINTS["verl.trainer.main_ppo"], "config", None)
    like = _MAIN_PPO_LIKE.search(target)
    if (target.startswith("verl.") or re.search(r"(?:^|/)verl/\w+/", target)) and not like:
        return None  # verl's other entry points (main_generation, SFT trainers): other configs, not profiled runs
    is_module = not (target.endswith(".py") or "/" in target)
    src = _module_source(target, is_module, script, cwd, pythonpath or [])
    args = _hydra_main_args(src) if src is not None else None
    if args is not None:
        return Entry(target, args.get("config_name", ""), args.get("config_path"),
                     os.path.dirname(os.path.abspath(src)), verl=False, source=src)
    if like:
        return Entry(target, "", None, None, verl=False)
    return None


def _hydra_main_args(src: str) -> dict | None:
    """config_path/config_name of the `@hydra.main` in src, None when it has none."""
    try:
        with open(src, encoding="utf-8", errors="replace") as fh:
            m = _HYDRA_MAIN.search(fh.read(1 << 20))
    except OSError:
        return None
    if m is None:
        return None
    return dict(re.findall(r"(config_path|config_name)\s*=\s*[\"']([^\"']*)[\"']", m.group(1)))


def _module_source(target: str, is_module: bool, script: Script, cwd: str | None,
                   pythonpath: list[str]) -> str | None:
    """The file `python -m target` (or `python target`) runs: as Python resolves it from the
    launch directory (sys.path[0] for -m) and PYTHONPATH; else found next to the script or in
    its repository, where a launch from the repository root or an editable install finds it."""
    rel = target.replace(".", "/") + ".py" if is_module else target
    if os.path.isabs(rel):
        return rel if os.path.isfile(rel) else None
    roots = ([cwd] if cwd else []) + (list(pythonpath) if is_module else [])
    for root in roots:
        for cand in (rel, rel[:-3] + "/__main__.py") if is_module else (rel,):
            path = os.path.join(root, cand)
            if os.path.isfile(path):
                return path
    src, _ = locate(Word(rel, 0, 0), script, os.path.isfile)
    return src


def _verl_trainer_dir(script: Script) -> str | None:
    """verl/trainer of the verl that `python -m verl.trainer.main_ppo` imports: a verl checkout
    containing the script (run from its root, `-m` puts it first on sys.path), else the
    installed one (found without importing verl)."""
    for b in script.bases():
        d = os.path.join(b, "verl", "trainer")
        if os.path.isfile(os.path.join(d, "main_ppo.py")):
            return d
    from verl_pdbg_conf.verl_facts.compose import verl_config_dir

    cfg = verl_config_dir()
    return os.path.dirname(cfg) if cfg else None


def _has_config(d: str, name: str) -> bool:
    return bool(name) and os.path.isfile(os.path.join(d, name + ".yaml"))


_VERL_PKG = ("pkg://verl.trainer.config", "pkg://verl/trainer/config")


class _Unjudged(Exception):
    """The config cannot be known here: at `word` (None: the command), why, a hint, how severe."""

    def __init__(self, word: Word | None, message: str, hint: str, severity: Severity = W):
        super().__init__(message)
        self.word, self.message, self.hint, self.severity = word, message, hint, severity


def choose_config(entry: Entry, flags: dict, script: Script, anchor: Word, resolve=None) -> ConfigChoice:
    """Which primary config Hydra loads for this invocation, as Hydra decides it: a relative
    --config-path against the directory of the module declaring @hydra.main (verl/trainer/ for
    verl's main_ppo, so `config` and `./config` are verl's own tree); an absolute one as it is;
    one built from the script's directory or the launch directory (`$(dirname "$0")/x`, `$PWD/x`,
    `resolve`) as that directory (unless only the known end names a config); one built from another variable when its known tail is found
    next to the script or in its repository and holds the config. When that cannot be known: ONE
    warning, and the overrides are not judged (composing them against some other config would
    only make noise)."""
    choice = ConfigChoice(entry.config_name, None, anchor)
    try:
        if not entry.verl and entry.source is None:
            raise _Unjudged(None, f"`{entry.module}` is not verl's main_ppo and its source is not found next to "
                                  "the script or in its repository, so the config it composes cannot be known",
                            "lint the script inside the project that holds that module")
        choice.config_name = name = _config_name(entry, flags)
        where, flag_word = _primary_dir(entry, flags, script, name, anchor, resolve, choice.notes)
        where, flag_word = _with_config_dir(flags, script, name, where, flag_word)
        choice.config_dir = _checked_dir(entry, where, name, flag_word)
    except _Unjudged as u:
        choice.unjudged = True
        choice.notes.append(Note(u.word or anchor, u.severity, u.message + "; the overrides are not judged", u.hint))
        return choice
    choice.anchor = flags["name"][0] if "name" in flags else flag_word
    return choice


def _config_name(entry: Entry, flags: dict) -> str:
    """--config-name, else @hydra.main's config_name."""
    if "name" not in flags:
        return entry.config_name
    w, v, flag, _ = flags["name"]
    if not w.known:
        raise _Unjudged(w, f"{flag} is {w.raw}, which cannot be known here ({w.unknown})",
                        "write the config name literally to have the overrides checked")
    return v[:-5] if v.endswith((".yaml", ".yml")) else v


def _primary_dir(entry: Entry, flags: dict, script: Script, name: str, anchor: Word, resolve, notes: list):
    """(the primary config directory, "verl" for verl's own tree; the word that chose it)."""
    if "path" in flags:
        return _config_path_dir(entry, flags["path"], script, name, resolve, notes), flags["path"][0]
    if not entry.verl:
        return _hydra_main_dir(entry), anchor
    return "verl", anchor


def _config_path_dir(entry: Entry, path_flag: tuple, script: Script, name: str, resolve, notes: list) -> str:
    """The directory --config-path names, as Hydra resolves it."""
    w, v, flag, value_word = path_flag
    # `$(dirname "$0")/cfg`, `$PWD/cfg` from the launch directory: known here. Where it holds no
    # config, the one found by the path's known end (launched from elsewhere) is taken instead;
    # failing that, Hydra fails on this directory.
    definite = resolve(value_word) if resolve is not None and not w.known else None
    if not w.known:
        def holds(d: str) -> bool:
            return os.path.isdir(d) and _has_config(d, name)

        found = None if definite is not None and holds(definite) else locate(w, script, holds)[0]
        if definite is not None:
            return found or definite
        if found is None:
            near, _ = locate(w, script, os.path.isdir)
            seen = f"; {near} is found at its end but holds no {name}.yaml" if near else \
                f", and no directory holding {name}.yaml is found at its end next to the script"
            raise _Unjudged(w, f"{flag} is {w.raw}, which cannot be known here ({w.unknown}){seen}",
                            "write the config directory literally (or relative to the script) to have "
                            "the overrides checked")
        notes.append(Note(w, I, f"`{w.raw}` is taken as {found}: the known end of its value, found "
                          "next to the script or in its repository", ""))
        return found
    if v.startswith("pkg://"):
        if v.rstrip("/") not in _VERL_PKG:
            raise _Unjudged(w, f"{flag} {v}: a package's configs that this check does not have", "")
        return "verl"
    if os.path.isabs(v):
        if not os.path.isdir(v):
            raise _Unjudged(w, f"{flag} {v} does not exist on this machine", "lint where that directory exists")
        return os.path.normpath(v)
    if not entry.verl:
        return os.path.normpath(os.path.join(entry.base, v))
    if os.path.normpath(v) == "config":
        return "verl"
    trainer = _verl_trainer_dir(script)
    d = os.path.normpath(os.path.join(trainer, v)) if trainer else None
    if d is None or not os.path.isdir(d):
        # the repository's own verl is the one that runs: Hydra's failure is certain
        own = trainer is not None and any(trainer == os.path.join(b, "verl", "trainer") for b in script.bases())
        raise _Unjudged(w, f"{flag} {v} is resolved by Hydra against verl/trainer/ (the directory of the module "
                           "declaring @hydra.main), where it does not exist"
                        + (f" in the repository's own verl: Hydra fails with `Primary config directory not found: "
                           f"{d}`" if own else " here"),
                        "give an absolute path, or `config` for verl's own configs", E if own else W)
    return d


def _hydra_main_dir(entry: Entry) -> str:
    """The directory a copy of main_ppo's @hydra.main config_path names."""
    cp = entry.config_path
    if cp is None:
        raise _Unjudged(None, f"{entry.module}'s @hydra.main names no config_path", "")
    if cp.rstrip("/") in _VERL_PKG:
        return "verl"
    if cp.startswith("pkg://"):
        raise _Unjudged(None, f"{entry.module}'s @hydra.main config_path {cp}: a package this check does not have",
                        "")
    return os.path.normpath(os.path.join(entry.base, cp))


def _with_config_dir(flags: dict, script: Script, name: str, where: str, flag_word: Word) -> tuple:
    """--config-dir: its directory is searched too, and holds the primary config where the primary directory
    does not."""
    if "dir" not in flags:
        return where, flag_word
    w, v, flag, _ = flags["dir"]
    found = locate(w, script, os.path.isdir, text=v)[0] if w.known else None
    if found is None:
        raise _Unjudged(w, f"{flag} {w.raw}: the additional config directory is not found here "
                           f"({w.unknown or 'relative to the launch directory'})", "lint where that directory exists")
    if (where == "verl" or not _has_config(where, name)) and _has_config(found, name):
        return found, w
    return where, flag_word


def _checked_dir(entry: Entry, where: str, name: str, flag_word: Word) -> str | None:
    """The primary config directory where Hydra finds the config (None: verl's own tree), or why it fails."""
    if where == "verl":
        return None
    if not os.path.isdir(where):
        raise _Unjudged(flag_word, f"the config directory {where} does not exist",
                        "Hydra fails with `Primary config directory not found`", E)
    if not _has_config(where, name):
        raise _Unjudged(flag_word, f"{where} holds no {name}.yaml: Hydra fails with `Cannot find primary "
                                   f"config '{name}'`", "check --config-path and --config-name", E)
    if entry.verl and os.path.basename(where) == "config" and \
            os.path.isfile(os.path.join(os.path.dirname(where), "main_ppo.py")) and \
            os.path.basename(os.path.dirname(where)) == "trainer":
        return None  # a verl checkout's own tree: the judging release's
    return where
