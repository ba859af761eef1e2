"""Which verl will run, and the facts to judge it by.

The order is Python's, for `python3 -m verl.trainer.main_ppo`:

1. `--verl-source DIR`: a directory holding the `verl` package, named by the user;
2. the copy the launch imports: a `verl/` package in the launch directory (a script's
   repository root, or where its `cd` goes), then in the script's PYTHONPATH entries;
   for a conf file, a `verl/` in its repository;
3. the installed verl, located from its dist-info (an editable install's `direct_url.json`
   names the checkout) or its package directory, never imported;
4. no verl anywhere: the newest shipped release, saying so.

A tree is judged by a shipped release's facts only when it IS that release: the digest of the
files extraction reads equals the release's (from the files, or for an installed wheel from
pip's RECORD); a fork that calls itself 0.8.0 is not 0.8.0. Any other tree is extracted live
(releases/extract.py, lenient: never raises), cached on disk by that digest
(disk_cache.py), and registered in the catalog under `live-<digest>`."""

from __future__ import annotations

import json
import os

from verl_pdbg_conf.core.record import Record
from verl_pdbg_conf.verl_facts import catalog, releases

# kinds
VERL_SOURCE, REPOSITORY, INSTALLED, EDITABLE, RELEASE, NEWEST, REQUESTED = (
    "--verl-source", "repository copy", "installed build", "installed editable", "shipped release",
    "newest shipped", "--verl-version")


class VerlSource(Record, frozen=True):
    version: str  # what the tree calls itself (verl/version/version, or its dist-info)
    kind: str  # one of the kinds above
    path: str | None  # the directory that holds the `verl` package (None: no tree, shipped facts only)
    facts: str  # catalog name of the facts that judge: a shipped release, or live-<digest>
    why: str = ""  # for a shipped-release fallback: why no tree was used

    @property
    def where(self) -> str:
        """The parenthesis of `judged as verl X (...)`."""
        if self.kind in (NEWEST, REQUESTED) or self.path is None:
            return self.why or self.kind
        shown = _shown(os.path.join(self.path, "verl"))
        if self.kind == RELEASE:
            return "installed"
        if self.kind == VERL_SOURCE:
            return f"--verl-source {shown}"
        return f"{self.kind} at {shown}"

    @property
    def label(self) -> str:
        return f"verl {self.version} ({self.where})"

    def as_json(self) -> dict:
        return {"version": self.version, "kind": self.kind, "path": self.path, "facts": self.facts}


def _shown(path: str) -> str:
    """./verl for a path under the current directory, else the absolute path."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else "./" + rel.replace(os.sep, "/")


# ---------------------------------------------------------------- finding the tree

def _holds_verl(d: str) -> bool:
    """Whether `import verl` from directory d finds a regular package there."""
    return os.path.isfile(os.path.join(d, "verl", "__init__.py"))


def repository_root(start: str) -> list[str]:
    """`start` and its parents up to its repository's root (`.git`), at most 6 levels."""
    out = [os.path.abspath(start)]
    while len(out) <= 6 and not os.path.exists(os.path.join(out[-1], ".git")):
        up = os.path.dirname(out[-1])
        if up == out[-1]:
            break
        out.append(up)
    return out


def for_launch(script: str, cwd: str | None = None, pythonpath=(), verl_source: str | None = None,
               requested: str | None = None) -> VerlSource:
    """The verl a launch in `script` imports. `cwd`: the directory it runs in after a `cd` in the
    script (relative to the repository root; "" or None: its repository root); `pythonpath`:
    entries the script puts on PYTHONPATH."""
    if verl_source or requested:
        return _explicit(verl_source, requested)
    bases = repository_root(os.path.dirname(os.path.abspath(script)))
    root = next((b for b in bases if _holds_verl(b)), bases[-1])  # where the launch runs from
    dirs = []
    if cwd:
        d = cwd if os.path.isabs(cwd) else os.path.join(root, cwd)
        dirs.append(d if os.path.isdir(d) else root)  # a cd to a directory not here: its repository root
    else:
        dirs.append(root)
    launch = dirs[0]
    for entry in pythonpath or ():
        if entry and "$" not in entry:
            dirs.append(entry if os.path.isabs(entry) else os.path.join(launch, entry))
    dirs.append(root)  # launched from elsewhere than its repository (the validator's own cwd): scripts run from there
    for d in dirs:
        if _holds_verl(d):
            return from_tree(os.path.normpath(d), REPOSITORY)
    return installed_or_newest()


def for_invocation(inv, options) -> VerlSource:
    """The verl a launch script's invocation imports. `cwd` and `pythonpath` are what the launch
    script reader found (absent: the launch runs from the script's repository root)."""
    if options.verl is not None:
        return options.verl
    return for_launch(inv.file, getattr(inv, "cwd", None), getattr(inv, "pythonpath", None) or [],
                      options.verl_source, _requested(options))


def _requested(options) -> str | None:
    v = options.verl_version
    return v if v in releases.shipped() else None


def for_file(path: str, verl_source: str | None = None, requested: str | None = None) -> VerlSource:
    """The verl a conf file of a repository is run with: a `verl/` in its repository, else the
    installed one."""
    if verl_source or requested:
        return _explicit(verl_source, requested)
    for b in repository_root(os.path.dirname(os.path.abspath(path))):
        if _holds_verl(b):
            return from_tree(b, REPOSITORY)
    return installed_or_newest()


def for_cwd(verl_source: str | None = None, requested: str | None = None) -> VerlSource:
    """`--verl` composing from the current directory: a `verl/` there, else the installed one."""
    if verl_source or requested:
        return _explicit(verl_source, requested)
    if _holds_verl(os.getcwd()):
        return from_tree(os.getcwd(), REPOSITORY)
    return installed_or_newest()


def _explicit(verl_source: str | None, requested: str | None) -> VerlSource:
    if verl_source:
        d = os.path.abspath(verl_source)
        if os.path.basename(d) == "verl" and not _holds_verl(d) and os.path.isfile(os.path.join(d, "__init__.py")):
            d = os.path.dirname(d)  # the package itself was named
        return from_tree(d, VERL_SOURCE)
    return VerlSource(requested, REQUESTED, None, requested, "--verl-version")


# ---------------------------------------------------------------- installed verl

_INSTALLED: list = []


def installed_or_newest() -> VerlSource:
    if not _INSTALLED:
        try:
            found = _installed()
        except Exception as e:  # broken metadata: judge by a release, and say why
            found = _newest(f"the installed verl's metadata could not be read ({type(e).__name__}: {e})")
        _INSTALLED.append(found or _newest("verl is not installed"))
    return _INSTALLED[0]


def _newest(why: str) -> VerlSource:
    v = releases.newest()
    return VerlSource(v, NEWEST, None, v, f"newest shipped; {why}")


def _installed() -> VerlSource | None:
    found = releases.dist_info()
    if found is not None:
        return _from_dist_info(*found)
    import importlib.util

    try:  # a checkout on sys.path without metadata (PYTHONPATH): found, not imported
        spec = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        spec = None
    locs = list(spec.submodule_search_locations or []) if spec else []
    if locs and os.path.isdir(locs[0]):
        return from_tree(os.path.dirname(locs[0]), INSTALLED)
    return None


def _from_dist_info(info: str, version: str) -> VerlSource | None:
    try:
        url = json.loads(_read(os.path.join(info, "direct_url.json")) or "{}")
    except ValueError:
        url = {}
    if (url.get("dir_info") or {}).get("editable") and str(url.get("url", "")).startswith("file://"):
        from urllib.parse import unquote, urlparse

        root = unquote(urlparse(url["url"]).path)
        if _holds_verl(root):
            return from_tree(root, EDITABLE, version)
        return _newest(f"the editable verl {version} at {root} is not found here")
    site = os.path.dirname(info)
    if not _holds_verl(site):
        return _newest(f"the installed verl {version} has no package directory beside its metadata")
    if version in releases.shipped():
        record = _read(os.path.join(info, "RECORD"))
        if record is not None and _record_digest(record) == releases.load(version).get("digest"):
            return VerlSource(version, RELEASE, site, version)
    return from_tree(site, INSTALLED, version)


def _record_digest(record: str) -> str:
    """The digest of the files extraction reads, from pip's RECORD (`path,sha256=...,size`)."""
    from verl_pdbg_conf.verl_facts.releases.digest import digest

    hashes = {}
    for line in record.splitlines():
        path, _, rest = line.partition(",")
        h = rest.partition(",")[0]
        hashes[path] = h[len("sha256="):] if h.startswith("sha256=") else h
    return digest(hashes)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


# ---------------------------------------------------------------- facts of a tree

_TREES: dict = {}  # (root, kind, version) -> VerlSource: one read per tree and process


def from_tree(root: str, kind: str, version: str | None = None) -> VerlSource:
    """The source for the `verl/` under root: a shipped release's facts when its files are that
    release's, else its own facts (from the disk cache, or extracted now)."""
    key = (os.path.abspath(root), kind, version)
    if key not in _TREES:
        try:
            _TREES[key] = _from_tree(os.path.abspath(root), kind, version)
        except Exception as e:  # a tree this reader cannot take at all: say so, judge by a release
            why = f"the verl at {_shown(os.path.join(root, 'verl'))} could not be read ({type(e).__name__}: {e})"
            _TREES[key] = _newest(why)
    return _TREES[key]


def _shipped_digests() -> dict:
    return {releases.load(v).get("digest"): v for v in releases.shipped()}


def _from_tree(root: str, kind: str, version: str | None) -> VerlSource:
    from verl_pdbg_conf.verl_facts.releases.extract import Tree

    tree = Tree.from_dir(root, version)
    same = _shipped_digests().get(tree.digest)
    if same is not None:
        return VerlSource(tree.version, kind, root, same)
    return VerlSource(tree.version, kind, root, live_facts(tree))


def live_facts(tree) -> str:
    """Register the tree's facts (cached on disk by its digest) and return their catalog name."""
    from verl_pdbg_conf.verl_facts import disk_cache
    from verl_pdbg_conf.verl_facts.releases.extract import extract

    name = f"live-{tree.digest[:20]}"
    if catalog.known(name):
        return name
    facts = None
    blob = disk_cache.get(("facts", tree.digest), kind="facts")
    if blob is not None:
        try:
            facts = json.loads(blob)
        except ValueError:
            facts = None
    if facts is None or facts.get("digest") != tree.digest:
        def compose(partial, config_name, overrides):
            # composed under the tree's own name, as the validator composes it next: the same
            # cached composition (in memory and on disk), so a script pays for it once
            from verl_pdbg_conf.verl_facts.compose import compose_tree

            catalog.register(name, {**partial, "stages": {}})
            return compose_tree(name, config_name, overrides)

        facts = extract(tree, strict=False, compose=compose)
        disk_cache.put(("facts", tree.digest), json.dumps(facts).encode(), kind="facts")
    facts["name"] = name
    catalog.register(name, facts)
    return name
