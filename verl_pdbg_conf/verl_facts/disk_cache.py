"""The composed config of verl's own tree, and the facts extracted from a verl copy found on
disk (source.py), kept on disk between processes.

A lint of one launch script is one process (a pre-commit hook, an editor), and building verl's
config from its defaults list is most of its time (~0.2 s). That config depends only on the
shipped facts, this package's code and conf/ groups, Hydra and OmegaConf, and the primary config
name and group selections: all are in the key, so a changed input is a miss, never a stale hit.
Only compositions of verl's facts alone are kept (never a user's directory or files). Extracted
facts are keyed by the digest of the files extraction read, with the same inputs (the
extractor's code, Hydra's and OmegaConf's versions), so an edited copy is a miss.

Where: $VERL_PDBG_CONF_CACHE, else $XDG_CACHE_HOME/verl-pdbg-conf, else ~/.cache/verl-pdbg-conf;
VERL_PDBG_CONF_CACHE=off disables it. Every failure (read-only home, a corrupt entry) is a miss."""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import tempfile

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_VERSION = b"1"


def directory() -> str | None:
    env = os.environ.get("VERL_PDBG_CONF_CACHE")
    if env is not None and env.strip().lower() in ("off", "0", "no", "false", ""):
        return None
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "verl-pdbg-conf")


@functools.lru_cache(maxsize=1)
def _inputs() -> bytes:
    """What a composition of the facts depends on besides its own key: the code that composes,
    the shipped facts and config groups (by size and mtime), Hydra, OmegaConf, Python."""
    import hydra
    import omegaconf

    parts = [_VERSION, sys.version.encode(), hydra.__version__.encode(), omegaconf.__version__.encode()]
    roots = [os.path.join(_PKG, "verl_facts"), os.path.join(_PKG, "conf"),
             os.path.join(os.path.dirname(_PKG), "hydra_plugins")]
    for root in roots:
        for d, dirs, files in os.walk(root):
            dirs.sort()
            for f in sorted(files):
                if f.endswith((".py", ".yaml", ".json", ".gz")):
                    st = os.stat(os.path.join(d, f))
                    parts.append(f"{os.path.relpath(os.path.join(d, f), _PKG)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return b"\n".join(parts)


def _path(key, kind: str = "compose") -> str | None:
    d = directory()
    if d is None:
        return None
    h = hashlib.sha256(_inputs() + b"\n" + repr(key).encode()).hexdigest()
    return os.path.join(d, f"{kind}-{h[:40]}.pickle")


def get(key, kind: str = "compose") -> bytes | None:
    try:
        p = _path(key, kind)
        if p is None:
            return None
        with open(p, "rb") as fh:
            st = os.fstat(fh.fileno())
            # The entry is unpickled: only a file this user wrote and nobody else can change.
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                return None
            return fh.read()
    except Exception:
        return None


def put(key, blob: bytes, kind: str = "compose") -> None:
    try:
        p = _path(key, kind)
        if p is None:
            return
        os.makedirs(os.path.dirname(p), mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(p), prefix=".compose-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, p)  # atomic: a concurrent reader sees the old file or the whole new one
    except Exception:
        try:
            os.unlink(tmp)  # noqa: F821 - only when mkstemp succeeded
        except Exception:
            pass
