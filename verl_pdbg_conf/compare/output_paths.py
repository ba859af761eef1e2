"""Output paths checked before any dump is read, for every command: nothing is written under TARGET or
GOLDEN, a directory option is not a file, a file option is not a directory, and either can be written
where it points. A refusal is a UsageError naming the option and the path (exit code 2)."""

from __future__ import annotations

import os

from verl_pdbg_conf.compare.verdict import UsageError


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
    for option, path in dirs.items():
        if not path:
            continue
        if os.path.exists(path):
            if not os.path.isdir(path):
                raise UsageError(f"{option} {path} is a file: give a directory (it is created if missing)")
            if not _writable_dir(path):
                raise UsageError(f"{option} {path}: this directory is not writable")
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
        if not _writable_dir(folder) or (os.path.exists(path) and not os.access(path, os.W_OK)):
            raise UsageError(f"{option} {path} is not writable")
