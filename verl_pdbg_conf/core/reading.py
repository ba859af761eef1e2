"""Reading a config file into text, and the bounds every reader keeps. Never raises on bad
input: every failure becomes a finding at the line and column where it was found."""

from __future__ import annotations

import os
import stat

from verl_pdbg_conf.core.findings import Finding, Severity

MAX_BYTES = 16 * 1024 * 1024  # a config is kilobytes; beyond this it is not one
# Bound on keys and values read (YAML: events parsed, then values built with alias expansion;
# JSON: values). verl's whole composed ppo_trainer config holds about 2 100 keys and values;
# PyYAML composes and builds about 10 000 in a second.
MAX_NODES = 10_000
MAX_DEPTH = 200
DEPTH_HINT = "nest less deeply; a config holds at most a few thousand values"


class Budget(Exception):
    def __init__(self, message: str, line: int = 1, col: int = 1):
        super().__init__(message)
        self.line, self.col = line, col


def err(file: str, rule: str, message: str, line: int = 1, col: int = 1, hint: str = "",
         severity: Severity = Severity.ERROR) -> Finding:
    return Finding(rule, severity, message, file, max(1, line), max(1, col), "", hint)


def read_text(file: str, what: str = "file") -> tuple[str | None, list[Finding]]:
    """The file's text, or None and a finding saying why it cannot be read."""
    try:
        st = os.stat(file)
    except FileNotFoundError:
        return None, [err(file, "file-not-found", f"{what} does not exist")]
    except OSError as e:  # symlink loop, name too long, permission on a parent
        return None, [err(file, "file-unreadable", f"{what} cannot be read: {e.strerror or e}")]
    except ValueError:  # os.stat refuses a path with a NUL character
        return None, [err(file, "file-unreadable", f"{what} cannot be read: its path holds a NUL character")]
    if stat.S_ISDIR(st.st_mode):
        return None, [err(file, "file-is-directory", f"{what} is a directory, not a file")]
    if not stat.S_ISREG(st.st_mode):
        return None, [err(file, "file-not-regular", f"{what} is not a regular file (a FIFO, socket or device)")]
    if st.st_size > MAX_BYTES:
        return None, [err(file, "file-too-large",
                           f"{what} is {st.st_size} bytes, over the {MAX_BYTES} byte limit for a config file")]
    try:
        with open(file, "rb") as fh:
            chunks, size = [], 0
            while size <= MAX_BYTES:  # in chunks: read(MAX_BYTES + 1) allocates 16 MB for any file
                chunk = fh.read(1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            raw = b"".join(chunks)
    except OSError as e:
        return None, [err(file, "file-unreadable", f"{what} cannot be read: {e.strerror or e}",
                           hint="check the file's permissions for the user that runs the job")]
    if size > MAX_BYTES:  # it grew, or it is a /proc-like file that reports size 0
        return None, [err(file, "file-too-large", f"{what} holds over {MAX_BYTES} bytes, the limit for a config file")]
    return decode(file, raw)


def decode(file: str, raw: bytes) -> tuple[str | None, list[Finding]]:
    if b"\x00" in raw[:8192]:
        return None, [err(file, "parse-error", "binary file: it holds NUL bytes, not text")]
    if raw.startswith(b"\xef\xbb\xbf"):
        if file.lower().endswith(".json"):  # msprobe opens config.json as utf-8, and json.load refuses a BOM
            return None, [err(file, "parse-error", "starts with a UTF-8 byte order mark (BOM): msprobe reads "
                               "config.json as UTF-8 and json.load refuses it",
                               hint="save the file as UTF-8 without a BOM")]
        raw = raw[3:]
    try:
        return raw.decode("utf-8"), []
    except UnicodeDecodeError as e:
        head = raw[:e.start]
        line = head.count(b"\n") + 1
        col = e.start - (head.rfind(b"\n") + 1) + 1
        return None, [err(file, "parse-error", f"not UTF-8 text: byte 0x{raw[e.start]:02x} cannot be decoded",
                           line, col, hint="save the file as UTF-8")]
