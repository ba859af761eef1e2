"""config.json judged by the msprobe release that will run: which release judges (option,
installed metadata, newest shipped), the per-release example matrix (each example's outcome
measured on the real release by extract.py --examples), the pair with verl, and the shipped
facts against a fresh measurement of the installed release."""

from __future__ import annotations

import datetime
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl_pdbg_conf.checks import msprobe_releases as mr
from verl_pdbg_conf.checks.msprobe import check_msprobe
from verl_pdbg_conf.checks.msprobe_releases import verl_pair, verl_pair_extract
from verl_pdbg_conf.checks.msprobe_releases.cases import matrix
from verl_pdbg_conf.context import MsprobeContext
from verl_pdbg_conf.core.findings import Severity
from verl_pdbg_conf.core.loaders import load_json

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "tests" / "examples" / "msprobe" / "releases"
OUTCOMES = sorted((EXAMPLES / "outcomes").glob("msprobe-*.json"))
MATRIX = [(json.loads(p.read_text())["version"], name, o)
          for p in OUTCOMES for name, o in sorted(json.loads(p.read_text())["outcomes"].items())]


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "verl_pdbg_conf.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=120)


def errors(path, version):
    return [f for f in check_msprobe(load_json(str(path)), MsprobeContext(msprobe=version))
            if f.severity is Severity.ERROR]


# ---------------------------------------------------------------- which release judges

def test_every_release_users_have_ships():
    assert {"8.1.2", "8.2.1", "8.3.3", "26.0.0", "26.1.0.post1", "26.2.0"} <= set(mr.shipped())
    assert mr.newest() == "26.2.0" and mr.shipped()[0] == "8.1.2"  # ordered by number, not as text


def test_option_wins():
    assert mr.judging("8.3.3") == ("8.3.3", "--msprobe-version")


def _site(tmp_path, version):
    d = tmp_path / f"mindstudio_probe-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mindstudio-probe\nVersion: {version}\n\nbody\n")
    return str(tmp_path)


def test_installed_release_read_from_metadata(tmp_path):
    assert mr.judging(None, dirs=[_site(tmp_path, "26.1.0.post1")]) == ("26.1.0.post1", "installed")


def test_installed_release_without_facts_falls_back_saying_so(tmp_path):
    assert mr.judging(None, dirs=[_site(tmp_path, "7.0.0")]) == (
        mr.newest(), "newest shipped; the installed mindstudio-probe 7.0.0 has no shipped facts")


def test_nothing_installed(tmp_path):
    assert mr.judging(None, dirs=[str(tmp_path)]) == (mr.newest(), "newest shipped; mindstudio-probe is not installed")


def test_cli_names_the_release_in_text_and_json(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"task": "statistics"}')
    out = run_cli(str(cfg), "--msprobe-version", "8.3.3")
    assert out.stdout.strip().splitlines()[-2:][0] == "judged as msprobe 8.3.3 (--msprobe-version)", out.stdout
    assert out.stdout.strip().splitlines()[-1].startswith("judged as verl ")
    doc = json.loads(run_cli(str(cfg), "--msprobe-version", "26.1.0.post1", "--format", "json").stdout)
    assert doc["msprobe"] == {"version": "26.1.0.post1", "source": "--msprobe-version"}


def test_cli_reads_the_installed_release_without_importing_it(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"task": "diff_check"}')
    site = _site(tmp_path / "site", "8.3.3")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([site, str(REPO)]))
    out = run_cli(str(cfg), "--format", "json", env=env)
    doc = json.loads(out.stdout)
    assert doc["msprobe"] == {"version": "8.3.3", "source": "installed"}
    assert any("msprobe 8.3.3 raises at construction" in d["message"] for d in doc["diagnostics"]), doc


def test_cli_refuses_a_release_without_facts(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text("{}")
    out = run_cli(str(cfg), "--msprobe-version", "1.0.0")
    assert out.returncode == 2 and "26.2.0" in out.stderr


# ---------------------------------------------------------------- the example matrix per release

def test_matrix_covers_every_release_and_enough_examples():
    assert {v for v, _, _ in MATRIX} == set(mr.shipped())
    names = {n for _, n, _ in MATRIX}
    assert len(names) >= 33 and names == {p.stem for p in (EXAMPLES / "cases").glob("*.json")}
    assert {o["outcome"] for _, _, o in MATRIX} >= {"dumped", "raised", "nothing"}


# Deliberate differences from "an error iff that release dumps nothing", each checked for what
# the validator says instead:
DELIBERATE = {
    # msprobe dumps, but to verl's stage directory: the dump_path the user reads stays empty
    "dump_path_set": ("dumped", "msprobe-dump-path", Severity.ERROR),
    # nan_check raises here for want of torch_npu; on Ascend NPU it runs
    "task_nan_check": ("npu", "msprobe-task", Severity.WARNING),
    # the L2 kernel dump writes nothing without an NPU; on Ascend it dumps
    "level_l2_cpu": ("nothing", "msprobe-level", Severity.WARNING),
}


def _deliberate(name, outcome) -> bool:
    if name not in DELIBERATE:
        return False
    when = DELIBERATE[name][0]
    return outcome["outcome"] == when or (when == "npu" and "npu" in outcome.get("message", "").lower())


@pytest.mark.parametrize("version,name,outcome", MATRIX, ids=[f"{v}-{n}" for v, n, _ in MATRIX])
def test_verdict_follows_what_the_release_did(version, name, outcome):
    path = EXAMPLES / "cases" / f"{name}.json"
    if _deliberate(name, outcome):
        _, rule, severity = DELIBERATE[name]
        found = check_msprobe(load_json(str(path)), MsprobeContext(msprobe=version))
        assert any(f.rule == rule and f.severity is severity for f in found), found
        assert (severity is Severity.ERROR) == any(f.severity is Severity.ERROR for f in found)
        return
    errs = errors(path, version)
    if outcome["outcome"] == "dumped":
        assert errs == [], f"msprobe {version} dumped, yet: " + "; ".join(f.message for f in errs)
    else:
        assert errs, f"msprobe {version}: {outcome}, and no error"


@pytest.mark.parametrize("version,key,value,says", [
    ("8.3.3", "summary_mode", "xor", "msprobe 8.3.3 raises at construction"),
    ("8.1.2", "task", "diff_check", "msprobe 8.1.2 raises at construction"),
])
def test_messages_say_what_the_release_does(tmp_path, version, key, value, says):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"task": value} if key == "task" else {"statistics": {key: value}}))
    errs = errors(cfg, version)
    assert len(errs) == 1 and says in errs[0].message and "verl swallows it and nothing is dumped" in errs[0].message


def test_error_of_newer_rules_is_a_warning_where_the_release_dumps(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"dump_enable": false}')
    assert errors(cfg, "26.2.0") and not errors(cfg, "8.3.3")
    warned = [f for f in check_msprobe(load_json(str(cfg)), MsprobeContext(msprobe="8.3.3"))
              if f.path == "dump_enable"]
    assert warned and "msprobe 8.3.3 does not read 'dump_enable'" in warned[0].message


# ---------------------------------------------------------------- the facts themselves

@pytest.mark.parametrize("version", mr.shipped())
def test_shipped_facts_are_the_current_matrix(version):
    facts = mr.load(version)
    assert facts["version"] == version and facts["dist"] == "mindstudio-probe"
    assert [c["id"] for c in facts["cases"]] == [c["id"] for c in matrix()], \
        "the case matrix changed: measure the new cases on every release (extract.py --missing, docs/msprobe-releases.md)"
    # the validator reads each case's key from the facts (it never builds the matrix)
    assert [c.get("key") for c in mr.load_part(version, "cases")] == [c["key"] for c in matrix()], \
        "the matrix's keys changed: python -m verl_pdbg_conf.checks.msprobe_releases.extract --rekey"
    assert facts["requires_dist"] and facts["api"]["PrecisionDebugger.__init__(config_path)"]


@pytest.fixture
def fresh_release_caches():
    from verl_pdbg_conf.checks.msprobe_releases import case_index, release_files

    def clear():
        for f in (release_files.load_part, case_index._index, case_index._annotated):
            f.cache_clear()
    clear()
    yield release_files, case_index
    clear()


def test_facts_without_stored_keys_judge_by_the_matrixs_keys(monkeypatch, fresh_release_caches):
    """Facts written without the keys (an older extractor) match the same cases at the same keys:
    the matrix is built for them, and only then."""
    release_files, case_index = fresh_release_caches
    stored = release_files._stored("26.2.0")
    bare = dict(stored, cases=[{k: v for k, v in c.items() if k != "key"} for c in stored["cases"]])
    monkeypatch.setattr(release_files, "_stored", lambda version: bare)
    config = {"task": "tensor", "tensor": {"list": ["Functional.linear"]}, "not_a_key": 1}
    keys = {c["id"]: c["key"] for c in matrix()}
    got = case_index.cases_for("26.2.0", config)
    assert got and all(c["key"] == keys[c["id"]] for c in got)
    assert {"tensor.list", "tensor", "?", "task"} <= {c["key"] for c in got}
    assert not any(c["key"].startswith("statistics") for c in got)  # keys the config lacks: not matched


def _regenerate(python, out_dir):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run([python, "-m", "verl_pdbg_conf.checks.msprobe_releases.extract", "--out-dir", str(out_dir),
                    "-q"], check=True, env=env, cwd=REPO, timeout=3600)


# The installed release's facts regenerated in CI: one third of the matrix, a different third each
# day (all of it is `extract.py` without --part; a release's venv below runs it whole), and every
# other part of the facts (API, requirements) whole.
PART = (datetime.date.today().toordinal() % 3, 3)


@pytest.mark.slow
def test_regenerated_installed_release_equals_shipped(tmp_path):
    pytest.importorskip("msprobe")
    pytest.importorskip("torch")
    version = mr.installed_version()
    if version not in mr.shipped():
        pytest.skip(f"the installed mindstudio-probe {version} has no shipped facts")
    k, n = PART
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-m", "verl_pdbg_conf.checks.msprobe_releases.extract", "--out-dir",
                    str(tmp_path), "--part", f"{k}/{n}", "-q"], check=True, env=env, cwd=REPO, timeout=3600)
    fresh = json.loads((tmp_path / f"msprobe-{version}.part-{k}-of-{n}.json").read_text())
    shipped = json.loads(gzip.decompress((Path(mr.HERE) / f"msprobe-{version}.json.gz").read_bytes()))
    assert {x: v for x, v in fresh.items() if x != "cases"} == \
        {x: v for x, v in shipped.items() if x != "cases"}, "the facts besides the cases differ"
    want = shipped["cases"][k::n]
    assert [c["id"] for c in fresh["cases"]] == [c["id"] for c in want]
    diff = [(x["id"], x.get("outcome"), y.get("outcome")) for x, y in zip(fresh["cases"], want)
            if x != y]
    assert not diff, f"regenerated cases {k}::{n} differ from the shipped file: {diff[:10]}"


VENVS = os.environ.get("VERL_PDBG_CONF_MSPROBE_VENVS")  # a directory of msprobe-X.Y.Z venvs (torch + that release)


@pytest.mark.slow
@pytest.mark.skipif(not VENVS, reason="set VERL_PDBG_CONF_MSPROBE_VENVS to a directory of msprobe-<version> venvs")
@pytest.mark.parametrize("version", mr.shipped())
def test_regenerated_release_in_its_venv_equals_shipped(version, tmp_path):
    py = os.path.join(VENVS, f"msprobe-{version}", "bin", "python")
    if not os.path.exists(py):
        pytest.skip(f"no venv for msprobe {version}")
    _regenerate(py, tmp_path)
    assert (tmp_path / f"msprobe-{version}.json.gz").read_bytes() == \
        (Path(mr.HERE) / f"msprobe-{version}.json.gz").read_bytes()


# ---------------------------------------------------------------- verl and msprobe as a pair

def test_specifiers_that_share_no_version():
    x = verl_pair_extract
    assert x.conflicts(["numpy>=2.0.0"], ["numpy<2"]) == [("numpy", ">=2.0.0", "<2")]
    assert x.conflicts(["numpy>=1.23"], ["numpy<2,>=1.20"]) == []
    assert x.conflicts(["pandas"], ["pandas<2.1"]) == []
    assert x.conflicts(["protobuf<=4.0"], ["protobuf>=4.0"]) == []
    assert x.conflicts(["protobuf<4.0"], ["protobuf>=4.0"]) != []
    assert x.conflicts(["x==1.4"], ["x~=1.5.0"]) != []
    assert x.conflicts(["numpy<2; extra == 'test'"], ["numpy>=2"]) == []  # conditional: not compared
    assert x.python_conflict("<3.13,>=3.10", ">=3.8") is False
    assert x.python_conflict("<3.10", ">=3.11") is True


def test_shipped_pairs_table_is_its_sources_worked_out():
    """verl-msprobe-pairs.json, what the validator looks pairs up in, is exactly what
    verl-requires.json and every shipped msprobe release's facts give: it cannot drift from them."""
    fresh = verl_pair_extract.pairs_table(verl_pair_extract.verl_releases(),
                                          {v: {p: mr.load_part(v, p) for p in verl_pair_extract.MSPROBE_PARTS}
                                           for v in mr.shipped()})
    assert set(fresh) == set(verl_pair_extract.verl_releases())
    assert all(set(row) == set(mr.shipped()) for row in fresh.values())
    assert verl_pair.table() == fresh, ("verl-msprobe-pairs.json is stale; regenerate it with "
                                        "python -m verl_pdbg_conf.checks.msprobe_releases.verl_pair_extract --pairs")
    assert Path(verl_pair.PAIRS).read_text(encoding="utf-8") == verl_pair_extract.dumps(fresh)


def test_pair_findings_from_both_wheels_metadata():
    assert verl_pair.pair_problems("0.9.1", "26.2.0") == []
    problems = verl_pair.pair_problems("0.9.1", "8.3.3")
    assert len(problems) == 1 and "cannot be installed together" in problems[0] and "numpy" in problems[0]
    assert verl_pair.pair_problems("0.8.0", "8.3.3") == []  # verl 0.8.0 pins numpy<2 too
    assert verl_pair_extract.pair_problems("0.9.1", mr.load("8.3.3")) == problems


def test_release_not_in_the_table_has_no_problems():
    assert verl_pair.pair_problems("0.7.0", "8.3.3") == []
    assert verl_pair.pair_problems("0.9.1", "1.0.0") == []
    assert verl_pair_extract.pair_problems("0.7.0", mr.load("8.3.3")) == []


def test_msprobe_without_the_backend_call_is_a_finding():
    facts = dict(mr.load("26.2.0"))
    facts["api"] = dict(facts["api"], **{"service.reset_status": False, "service._reset_status": False})
    problems = verl_pair_extract.pair_problems("0.9.1", facts)
    assert any("service._reset_status or service.reset_status" in p for p in problems)


def test_pairs_flag_rewrites_only_the_table(tmp_path):
    requires = tmp_path / "verl-requires.json"
    requires.write_text(Path(verl_pair_extract.DATA).read_text(encoding="utf-8"), encoding="utf-8")
    assert verl_pair_extract.main(["--pairs", "--out", str(requires)]) == 0
    assert (tmp_path / "verl-msprobe-pairs.json").read_text(encoding="utf-8") == \
        Path(verl_pair.PAIRS).read_text(encoding="utf-8")
    assert requires.read_text(encoding="utf-8") == Path(verl_pair_extract.DATA).read_text(encoding="utf-8")


def test_pair_finding_in_the_report(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text("{}")
    doc = json.loads(run_cli(str(cfg), "--verl-version", "0.9.1", "--msprobe-version", "8.3.3", "-f", "json").stdout)
    pair = [d for d in doc["diagnostics"] if d["rule"] == "msprobe-verl-pair"]
    assert len(pair) == 1 and pair[0]["severity"] == "error" and "numpy" in pair[0]["message"]


def test_verl_requirements_regenerated_from_installed_verl():
    pytest.importorskip("verl")
    fresh = verl_pair_extract.from_installed()
    version = fresh.pop("version")
    assert verl_pair_extract.verl_releases()[version] == fresh
