"""Output paths checked before any dump is read, for every command: nothing is written under TARGET or
GOLDEN, a directory option is not a file, a file option is not a directory, either can be written
where it points, no file this tool did not write is replaced, and nothing goes to a kernel's pseudo file
system (/proc, /sys, /dev). A refusal is a UsageError naming the option and the path (exit code 2).

The tool recognises its own earlier output by a marker: MARKER_KEY in each JSON file it writes, the
HTML_MARKER comment at the top of each page."""

from __future__ import annotations

import json
import os

from verl_pdbg_conf.compare.verdict import UsageError

TOOL = "verl-pdbg-compare"
MARKER_KEY = "written_by"  # in every summary.json this tool writes: {"written_by": TOOL, ...}
HTML_MARKER = f"<!-- written by {TOOL} -->"  # the first line of every page this tool writes
SUMMARY = "summary.json"  # -o's top file: its marker makes a directory an earlier -o of this tool
# Kernel file systems: writing there fails (or does something else than keep a report), so it is the
# user's path that is wrong, refused like any other. /dev counts whatever is mounted there (tmpfs in
# containers), but for /dev/shm, an ordinary tmpfs.
PSEUDO_FS = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
                       "securityfs", "configfs", "pstore", "bpf", "mqueue", "hugetlbfs", "fusectl",
                       "binfmt_misc", "efivarfs", "autofs", "rpc_pipefs", "nsfs"})
PSEUDO_ROOTS = ("/proc", "/sys", "/dev")


def html_page(text: str) -> str:
    """A page as this tool writes it: the marker first, so that a later run may replace it."""
    return f"{HTML_MARKER}\n{text}"


def marked_json(doc: dict) -> dict:
    return {MARKER_KEY: TOOL, **doc}


def _is_own_file(path: str) -> bool:
    """path is a page or summary this tool wrote (its marker), judged from its first bytes only."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    if head.startswith(HTML_MARKER.encode()):
        return True
    if path.endswith(".json"):
        try:
            with open(path, encoding="utf-8") as fh:
                return json.load(fh).get(MARKER_KEY) == TOOL
        except (OSError, ValueError, AttributeError):
            return False
    return False


def _mount_types() -> list[tuple[str, str]]:
    """(mount point, file system type) of this machine, longest mount point first; none off Linux."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as fh:
            rows = [line.split()[1:3] for line in fh if len(line.split()) >= 3]
    except OSError:
        return []
    return sorted(((m.replace("\\040", " "), t) for m, t in rows), key=lambda r: -len(r[0]))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def pseudo_fs(path: str) -> str | None:
    """The kernel file system `path` would be written to ('proc', 'sysfs', ...), or None."""
    real = os.path.realpath(path)
    for mount, kind in _mount_types():
        if _under(real, mount):
            if kind in PSEUDO_FS:
                return kind
            break
    if _under(real, "/dev/shm"):
        return None
    return next((r[1:] for r in PSEUDO_ROOTS if _under(real, r)), None)


def _inside(path: str, root: str) -> bool:
    """path is root or under it; for a dump.json root, under its directory (stack.json, construct.json).
    Symlinks and `..` resolved on both sides."""
    path, root = os.path.realpath(path), os.path.realpath(root)
    if os.path.isfile(root):
        root = os.path.dirname(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def refuse_inside(outputs: dict[str, str | None], inputs: tuple[str, ...]) -> None:
    """UsageError if an output path (option -> path) is inside an input: nothing is ever written under
    TARGET or GOLDEN, whatever the option. Checked before anything runs."""
    for option, path in outputs.items():
        if not path:
            continue
        for root in inputs:
            if _inside(path, root):
                real = os.path.realpath(path)
                shown = path if real == os.path.abspath(path) else f"{path} (that is {real})"
                where = f"the directory of {root}" if os.path.isfile(root) else root
                raise UsageError(f"{option} {shown} is inside {where}: nothing is written under TARGET or GOLDEN; "
                                 "choose a path outside both")


def _writable_dir(d: str) -> bool:
    return os.access(d, os.W_OK | os.X_OK)


def check_outputs(dirs: dict[str, str | None], files: dict[str, str | None], inputs: tuple[str, ...]) -> None:
    """`dirs` (option -> a directory to create or fill, like -o) and `files` (option -> a file to write,
    like --html): outside the inputs, of the right kind, writable. UsageError naming the first that is not."""
    refuse_inside({**dirs, **files}, inputs)
    for option, path in {**dirs, **files}.items():
        kind = pseudo_fs(path) if path else None
        if kind:
            raise UsageError(f"{option} {path} is on the kernel's {kind} file system, where no report can be kept: "
                             "give a path in an ordinary folder")
    for option, path in dirs.items():
        if not path:
            continue
        if os.path.exists(path):
            if not os.path.isdir(path):
                raise UsageError(f"{option} {path} is a file: give a directory (it is created if missing)")
            if not _writable_dir(path):
                raise UsageError(f"{option} {path}: this directory is not writable")
            top = os.path.join(path, SUMMARY)
            if os.listdir(path) and not _is_own_file(top):
                raise UsageError(f"{option} {path} holds files {TOOL} did not write: give a new or empty directory "
                                 "(an earlier -o of this tool may be given again)")
            continue
        up = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(up):
            up = os.path.dirname(up)
        if not os.path.isdir(up):
            raise UsageError(f"{option} {path} cannot be created: {up} is a file")
        if not _writable_dir(up):
            raise UsageError(f"{option} {path} cannot be created: {up} is not writable")
    for option, path in files.items():
        if not path:
            continue
        if os.path.isdir(path):
            raise UsageError(f"{option} {path} is a directory: give a file name")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise UsageError(f"{option} {path}: its folder {folder} does not exist" if not os.path.exists(folder)
                             else f"{option} {path}: {folder} is not a directory")
        if os.path.exists(path) and not os.path.isfile(path):
            raise UsageError(f"{option} {path} is not a regular file: give a file name")
        if not _writable_dir(folder) or (os.path.exists(path) and not os.access(path, os.W_OK)):
            raise UsageError(f"{option} {path} is not writable")
        if os.path.exists(path) and not _is_own_file(path):
            raise UsageError(f"{option} {path} already holds a file {TOOL} did not write: it is not replaced; "
                             "give a new file name (or remove that file first)")
