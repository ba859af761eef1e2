"""Start-up stays light: validating a conf and its config.json (and planning it) in a fresh process
imports none of torch, msprobe, verl, hydra or ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EX = REPO / "tests" / "examples" / "verl"
HEAVY = ("torch", "msprobe", "verl", "hydra", "ray")

PROBE = """
import json, sys
from verl_pdbg_conf.cli import main
code = main(sys.argv[1:])
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(%r))
sys.stderr.write('\\nIMPORTS ' + json.dumps({'code': code, 'heavy': heavy}) + '\\n')
""" % (HEAVY,)


def probe(*argv: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    env.pop("GITHUB_ACTIONS", None)
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=EX, env=env, capture_output=True, text=True,
                          timeout=120)
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("IMPORTS ")]
    assert line, proc.stdout + proc.stderr
    return json.loads(line[-1][len("IMPORTS "):])


@pytest.mark.parametrize("argv", [
    ("positive/guide_minimal.yaml", "configs/statistics_l1.json"),
    ("positive/interpolated.yaml",),
    ("--plan", "positive/guide_minimal.yaml"),
    ("--format", "sarif", "negative/stage-unknown__typo.yaml"),
], ids=["conf+config.json", "interpolations", "plan", "sarif"])
def test_no_heavy_imports(argv):
    got = probe(*argv)
    assert got["code"] in (0, 1)
    assert got["heavy"] == [], f"imported {got['heavy']}"


def test_plain_conf_is_read_without_yaml():
    """A conf in core/fast_yaml.py's subset and its valid config.json are judged without importing
    PyYAML (issue 22: `import yaml` alone cost about 17 ms of a run from source), as `python -X
    importtime -m verl_pdbg_conf` shows it."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    env.pop("GITHUB_ACTIONS", None)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "verl_pdbg_conf", "positive/guide_minimal.yaml",
                           "configs/statistics_l1.json"], cwd=EX, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mods = {ln.rsplit("|", 1)[-1].strip() for ln in proc.stderr.splitlines() if ln.startswith("import time:")}
    assert "verl_pdbg_conf.core.fast_yaml" in mods, proc.stderr[-2000:]
    assert sorted(m for m in mods if m.split(".")[0] in ("yaml", "_yaml")) == []
    # nor dataclasses (core/record.py: it imports inspect, ast and dis), nor the PyYAML path, nor the
    # extractors that write the facts the validator reads
    never = {"dataclasses", "inspect", "ast", "verl_pdbg_conf.core.yaml_full",
             "verl_pdbg_conf.checks.msprobe_releases.verl_pair_extract"}
    assert sorted(mods & never) == []


def _import_graph() -> dict:
    """module -> the package's modules it imports, at the top or inside a function."""
    import ast

    pkg = REPO / "verl_pdbg_conf"
    mods = {}
    for p in pkg.rglob("*.py"):
        name = ".".join(p.relative_to(REPO).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    graph = {}
    for name, p in mods.items():
        deps = set()
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("verl_pdbg_conf"):
                deps |= {f"{n.module}.{a.name}" if f"{n.module}.{a.name}" in mods else n.module for a in n.names}
            elif isinstance(n, ast.Import):
                deps |= {a.name for a in n.names if a.name.startswith("verl_pdbg_conf")}
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def test_imports_run_one_way():
    """No circle among the package's modules (composition, the facts source, the extractor and
    where verl comes from included), counting imports inside functions too."""
    graph = _import_graph()
    assert {"verl_pdbg_conf.verl_facts.source", "verl_pdbg_conf.verl_facts.compose"} <= set(graph)
    state: dict = {}

    def visit(n, path):
        state[n] = "open"
        for d in sorted(graph[n]):
            assert state.get(d) != "open", "import circle: " + " -> ".join(path + [n, d])
            if d not in state:
                visit(d, path + [n])
        state[n] = "done"

    for n in sorted(graph):
        if n not in state:
            visit(n, [])


FACTS_PROBE = """
import json, sys
from verl_pdbg_conf.checks.msprobe_releases import release_files
from verl_pdbg_conf.verl_facts import releases
read = set()
stored, verl_load = release_files._stored, releases.load
release_files._stored = lambda v: read.add(("msprobe", v)) or stored(v)
releases.load = lambda v: read.add(("verl", v)) or verl_load(v)
from verl_pdbg_conf.cli import main
code = main(sys.argv[1:])
from verl_pdbg_conf.checks.msprobe_releases import case_index
mods = sorted(m for m in sys.modules if m.startswith("verl_pdbg_conf"))
sys.stderr.write('\\nFACTS ' + json.dumps({"code": code, "read": sorted(read), "modules": mods,
                                           "matched": case_index._annotated.cache_info().currsize,
                                           "cases": len(stored(sorted(read)[0][1])["cases"])}) + '\\n')
"""


def test_one_conf_reads_only_the_judging_releases_facts():
    """Per-release facts load on demand: one conf and its config.json read the judging msprobe
    release's facts and the judging verl release's, no other release's; the case matrix
    (cases.py), the extractors and the launch-script reader are never imported (the verl/msprobe
    pair, 0.9.0 with 8.3.3 a finding, is a look-up in verl_pair.py's table: none of
    verl_pair_extract.py's requirement parsing), and only the cases whose keys the config.json has
    are matched."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    env.pop("GITHUB_ACTIONS", None)
    proc = subprocess.run([sys.executable, "-c", FACTS_PROBE, "positive/guide_minimal.yaml", "--msprobe-version",
                           "8.3.3", "--verl-version", "0.9.0"], cwd=EX, env=env, capture_output=True, text=True,
                          timeout=120)
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("FACTS ")]
    assert line, proc.stdout + proc.stderr
    got = json.loads(line[-1][len("FACTS "):])
    assert got["code"] in (0, 1)
    assert got["read"] == [["msprobe", "8.3.3"], ["verl", "0.9.0"]]
    pkg = "verl_pdbg_conf."
    never = {pkg + m for m in ("checks.msprobe_releases.cases", "checks.msprobe_releases.extract",
                               "checks.msprobe_releases.verl_pair_extract",
                               "verl_facts.releases.extract", "verl_facts.compose", "launch_scripts.launch_script",
                               "core.schema_errors")}
    assert never.isdisjoint(got["modules"]), sorted(never & set(got["modules"]))
    assert {pkg + "checks.msprobe_releases.verdict", pkg + "checks.msprobe_releases.case_index",
            pkg + "checks.msprobe_releases.verl_pair"} <= set(got["modules"])
    assert 0 < got["matched"] < got["cases"]
