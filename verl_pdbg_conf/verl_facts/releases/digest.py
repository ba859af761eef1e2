"""Which files of a verl tree extraction reads, and their digest: a copy whose digest is a
shipped release's IS that release. Kept apart from extract.py so that checking an installed
verl against its pip RECORD (source.py, on every validator run) imports only this."""

from __future__ import annotations

CONFIG_ROOT = "verl/trainer/config/"
# What extraction reads of a verl tree: everything else of it cannot change the facts, so the
# digest of these files (content of .py/.yaml and the version file, names of the rest of the
# config tree) identifies a tree's facts.
READS = ("verl/trainer/", "verl/workers/", "verl/utils/profiler/", "verl/version/")
VERSION_FILE = "verl/version/version"


def reads(path: str) -> bool:
    return path.startswith(READS) and "/__pycache__/" not in path and not path.endswith((".pyc", "/"))


def has_content(path: str) -> bool:
    return path.endswith((".py", ".yaml")) or path == VERSION_FILE


def file_hash(data: bytes) -> str:
    """As a wheel's RECORD writes it: urlsafe base64 of the sha256, without padding."""
    import base64
    import hashlib

    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _sha256():
    """hashlib.sha256() without importing hashlib, which loads OpenSSL (some 2 ms of every
    validator run, for one digest of a RECORD): CPython's own sha256 gives the same digest."""
    try:
        from _sha2 import sha256  # CPython 3.12 and later
    except ImportError:
        try:
            from _sha256 import sha256  # CPython 3.11
        except ImportError:
            from hashlib import sha256
    return sha256()


def digest(hashes: dict[str, str]) -> str:
    """The digest of a tree from {path: file_hash} of the files extraction reads."""
    h = _sha256()
    for path in sorted(p for p in hashes if reads(p)):
        if has_content(path):
            h.update(f"{path}\t{hashes[path]}\n".encode())
        elif path.startswith(CONFIG_ROOT):
            h.update(f"{path}\t-\n".encode())
    return h.hexdigest()
