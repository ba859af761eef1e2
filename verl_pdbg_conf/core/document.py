"""A loaded file: its data plus the line and column of every key and value."""

from __future__ import annotations

from verl_pdbg_conf.core.findings import Finding, Severity, format_path
from verl_pdbg_conf.core.record import Record, factory

Path = tuple  # of str keys and int list indices


class Document(Record):
    file: str
    data: object = None
    kind: str = "yaml"  # yaml | json
    values: dict = factory(dict)  # Path -> (line, col) of the value
    keys: dict = factory(dict)  # Path -> (line, col) of the mapping key
    findings: list[Finding] = factory(list)  # produced while loading
    ok: bool = True  # False when the file could not be read or parsed
    # Composed configs: the paths whose value a config group this package ships set (no user
    # file or override changed them), so that a remark on them is not put to the user.
    own: frozenset = frozenset()

    def origin(self, path: Path, key: bool = False) -> tuple[str, int, int]:
        """File, line and column of `path`, or of its nearest ancestor that has one.
        A composed config keeps (line, col, file) triples: values come from several sources."""
        path = tuple(path)
        while True:
            table = (self.keys, self.values) if key else (self.values, self.keys)
            for t in table:
                if path in t:
                    pos = t[path]
                    return (pos[2] if len(pos) > 2 else self.file), pos[0], pos[1]
            if not path:
                return self.file, 1, 1
            path, key = path[:-1], True  # a missing key: point at the section that lacks it

    def where(self, path: Path, key: bool = False) -> tuple[int, int]:
        return self.origin(path, key)[1:]

    def forget(self, path: Path) -> None:
        """Drop the positions at and under `path`: a key given again starts its values afresh."""
        n = len(path)
        for table in (self.values, self.keys):
            for p in [p for p in table if p[:n] == path]:
                del table[p]

    def has(self, path: Path) -> bool:
        return tuple(path) in self.values

    def finding(self, rule: str, severity: Severity, message: str, path: Path = (), hint: str = "",
                key: bool = False, at: Path | None = None) -> Finding:
        file, line, col = self.origin(path if at is None else at, key=key)
        return Finding(rule, severity, message, file, line, col, format_path(path), hint)


def get(data, path: Path, default=None):
    """data[p0][p1]... or default when any step is missing."""
    cur = data
    for p in path:
        if isinstance(cur, dict):
            if p not in cur:
                return default
        elif not (isinstance(cur, list) and isinstance(p, int) and not isinstance(p, bool) and 0 <= p < len(cur)):
            return default
        cur = cur[p]
    return cur


MISSING = object()


def lookup(data, dotted: str, default=MISSING):
    return get(data, tuple(dotted.split(".")), default)


class Unknown(str):
    """A value that cannot be known before the run (an unresolved interpolation, a shell
    variable in a launch script). Checks do not judge it."""

    reason: str = ""

    def __new__(cls, raw: str, reason: str = ""):
        obj = super().__new__(cls, raw)
        obj.reason = reason
        return obj


def is_unknown(value) -> bool:
    return isinstance(value, Unknown)


def walk(data, path: Path = ()):
    """(path, value) of `data` itself and of every value below it, depth first."""
    yield path, data
    if isinstance(data, dict):
        for k, v in data.items():
            yield from walk(v, path + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from walk(v, path + (i,))
