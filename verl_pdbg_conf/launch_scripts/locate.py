"""Where the files a launch script names are: next to the script, or in its repository.

A script names paths relative to the launch directory (`source env/common.sh`, `python3
main_ppo_split.py`) or through variables built from its own location (`$(dirname "$0")/config`,
`PROJECT_DIR=$(pwd)` then `$PROJECT_DIR/examples/x/config`). Neither is known before the run;
the known end of such a path is looked up under the script's directory and its parents up to
its repository's root."""

from __future__ import annotations

import os
from dataclasses import dataclass

from verl_pdbg_conf.launch_scripts.shell_words import Word

_UP = 6  # directories above a script searched for what it names (its repository)


@dataclass
class Script:
    """The script being read and where the files it names are looked for."""

    path: str
    depth: int = 0

    @property
    def dir(self) -> str:
        return os.path.dirname(os.path.abspath(self.path))

    def bases(self) -> list[str]:
        """The script's directory and its parents up to its repository's root (`.git`), at most
        _UP levels: where a path written relative to the launch directory or to a variable
        derived from the script's location (`$(dirname $0)`, `$PROJECT_DIR=$(pwd)`) lives."""
        return _bases(self.dir)


_BASES: dict[str, list[str]] = {}


def _bases(d: str) -> list[str]:
    if d not in _BASES:
        out = [d]
        while len(out) <= _UP and not os.path.exists(os.path.join(out[-1], ".git")):
            up = os.path.dirname(out[-1])
            if up == out[-1]:
                break
            out.append(up)
        _BASES[d] = out
    return _BASES[d]


def known_suffix(w: Word) -> str:
    """The known text after the last unknown part of a word (`$PROJECT_DIR/examples/config` ->
    `/examples/config`); the whole text when the word is known."""
    if w.known:
        return w.text
    tail = []
    for text, known, _ in reversed(w.parts):
        if not known:
            break
        tail.append(text)
    return "".join(reversed(tail))


def locate(w: Word, script: Script, want=os.path.exists, text: str | None = None) -> tuple[str | None, bool]:
    """The existing path a word names (`text`: the part of the word that is the path), and
    whether it was found by searching: absolute as written; relative, or an unknown prefix with
    a known `/...` tail, under the script's directory or a parent of it up to its repository's
    root (where `$(dirname $0)/x`, `$PROJECT_DIR/x` or a launch from the repository root put it)."""
    known = w.known
    text = known_suffix(w) if text is None or not known else text
    if known and os.path.isabs(text):
        return (text, False) if want(text) else (None, False)
    if not known and not text.startswith("/"):
        return None, False
    rel = text.lstrip("/")
    if not rel:
        return None, False
    for b in script.bases():
        cand = os.path.normpath(os.path.join(b, rel))
        if want(cand):
            return cand, not known or b != script.dir
    return None, False
