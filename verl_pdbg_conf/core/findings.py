"""Findings as data: what every check returns and every reporter renders."""

from __future__ import annotations

import enum
from verl_pdbg_conf.core.record import Record, factory


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2}[self.value]


class Finding(Record, frozen=True):
    rule: str
    severity: Severity
    message: str
    file: str = ""
    line: int = 1  # 1-based
    column: int = 1  # 1-based
    path: str = ""  # dotted config path, list items as [i]
    hint: str = ""

    def to_dict(self) -> dict:
        d = self.asdict()
        d["severity"] = self.severity.value
        return d

    def sort_key(self):
        return (self.file, self.line, self.column, self.severity.rank, self.rule, self.path)


class Report(Record):
    findings: list[Finding] = factory(list)
    files: list[str] = factory(list)
    verl_release: tuple[str, str] | None = None  # (release, how it was chosen) that judged, for the output
    verl_sources: list = factory(list)  # the source.VerlSource of each input judged, in order
    msprobe_release: tuple[str, str] | None = None  # the same for msprobe

    def extend(self, other: "Report") -> None:
        self.findings.extend(other.findings)
        self.files.extend(f for f in other.files if f not in self.files)
        self.verl_sources.extend(other.verl_sources)

    def verls(self) -> list:
        """The distinct verls that judged, in order."""
        return list(dict.fromkeys(self.verl_sources))

    def sorted(self) -> list[Finding]:
        return sorted(set(self.findings), key=Finding.sort_key)

    def count(self, severity: Severity) -> int:
        return sum(1 for f in self.sorted() if f.severity is severity)

    @property
    def errors(self) -> int:
        return self.count(Severity.ERROR)

    @property
    def warnings(self) -> int:
        return self.count(Severity.WARNING)


def format_path(parts) -> str:
    """('a', 'b', 1, 'c') -> 'a.b[1].c'."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out
