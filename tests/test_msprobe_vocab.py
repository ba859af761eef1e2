"""Each msprobe release's config.json vocabulary: read by AST off the release's real wheel
(extract_vocab.py; the wheel downloaded once per session and cached), shipped one file per
release, covered by the case matrix, and judging that release's files alone: a key it does not
read is ignored whatever its value, a key it checks is judged by its own check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl_pdbg_conf.checks import msprobe_releases as mr
from verl_pdbg_conf.checks.msprobe import check_msprobe
from verl_pdbg_conf.checks.msprobe_releases import extract_vocab
from verl_pdbg_conf.checks.msprobe_releases.cases import matrix, set_paths, union_vocabulary, vocabularies
from verl_pdbg_conf.checks.msprobe_releases.vocab import failing_check, reads
from verl_pdbg_conf.context import MsprobeContext
from verl_pdbg_conf.core.findings import Severity
from verl_pdbg_conf.core.loaders import load_json

from release_venvs import cache_root


def _wheel_dir() -> Path:
    d = cache_root().parent / "wheels"
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="session")
def wheels():
    """A function: version -> the release's wheel, downloaded with pip once and kept in the cache."""
    got: dict[str, Path] = {}

    def get(version: str) -> Path:
        if version not in got:
            d = _wheel_dir()
            found = sorted(d.glob(f"mindstudio_probe-{version}-*.whl"))
            if not found:
                r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary",
                                    ":all:", f"mindstudio-probe=={version}", "-d", str(d)],
                                   capture_output=True, text=True, timeout=600)
                found = sorted(d.glob(f"mindstudio_probe-{version}-*.whl"))
                if r.returncode != 0 or not found:
                    pytest.skip(f"mindstudio-probe {version} could not be downloaded (registry unreachable?): "
                                f"{r.stderr.strip()[-300:]}")
            got[version] = found[0]
        return got[version]

    return get


# ---------------------------------------------------------------- the extractor on real wheels

@pytest.mark.parametrize("version", mr.shipped())
def test_shipped_vocabulary_is_what_the_wheel_says(wheels, version):
    fresh = extract_vocab.from_wheel(str(wheels(version)))
    assert fresh == mr.vocabulary(version), \
        f"regenerate: python -m verl_pdbg_conf.checks.msprobe_releases.extract_vocab --wheel <{version} wheel>"


def test_extractor_reads_the_8x_tensor_section_and_its_checks(wheels):
    v = extract_vocab.from_wheel(str(wheels("8.1.2")))
    assert v["version"] == "8.1.2" and v["module"] == "msprobe.pytorch.pt_config"
    assert set(v["tasks"]) == {"tensor", "statistics", "overflow_check", "free_benchmark", "run_ut", "grad_probe",
                               "structure"}
    top = v["parts"][""]["keys"]
    assert "enable_dataloader" in top and "load" not in top and "extra_info" not in top
    tensor = v["parts"]["tensor"]["keys"]
    assert {"file_format", "online_run_ut", "host", "port", "scope", "list"} <= set(tensor)
    assert "slice" not in tensor and "bench_path" not in tensor
    assert tensor["port"] == {"default": -1} and tensor["tls_path"] == {"default": "./"}
    checks = [c for c in v["checks"] if c["part"] == "tensor"]
    fmt = [c for c in checks if c["keys"] == ["file_format"]]
    assert fmt and "['npy', 'bin']" in fmt[0]["test"] and fmt[0]["message"] == "file_format is invalid"
    port = [c for c in checks if c["keys"] == ["port"]]
    assert port and "_k_online_run_ut" in port[0]["when"]  # only checked with online_run_ut set
    assert "not (_k_nfs_path)" in port[0]["when"]  # ... and no nfs_path (an early return before it)
    # checks only where construction reaches them: structure's class runs none of BaseConfig's
    assert not [c for c in v["checks"] if c["part"] == "structure"]


def test_extractor_follows_the_26_2_load_section_and_slice(wheels):
    v = extract_vocab.from_wheel(str(wheels("26.2.0")))
    assert set(v["parts"]["load"]["keys"]) == {"path", "modules", "step", "rank", "dump_after_load"}
    assert "load" in v["parts"][""]["keys"] and "slice" in v["parts"]["statistics"]["keys"]
    msgs = {c["message"] for c in v["checks"] if c["part"] == "statistics" and c["keys"] == ["slice"]}
    assert any("dim cannot be negative" in m for m in msgs)


def test_extractor_cli_writes_one_file_per_release(wheels, tmp_path):
    out = subprocess.run([sys.executable, "-m", "verl_pdbg_conf.checks.msprobe_releases.extract_vocab", "--wheel",
                          str(wheels("26.0.0")), "--out-dir", str(tmp_path)], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "msprobe-26.0.0.vocab.json").read_text())
    assert "check_mode" in data["parts"]["diff_check"]["keys"]


# ---------------------------------------------------------------- the matrix covers every key

def test_every_key_any_release_reads_has_cases():
    keys, _, tasks = union_vocabulary(vocabularies())
    cases = matrix()
    covered = set().union(*(set_paths(c["config"]) for c in cases))
    missing = [f"{part}.{k}" if part else k for part, names in keys.items() for k in names
               if (not part or part == "load" or part in tasks) and (f"{part}.{k}" if part else k) not in covered]
    assert not missing, f"keys some release reads with no case: {sorted(missing)}"
    alone = {c["config"]["task"] for c in cases if set(c["config"]) == {"task"}}
    assert tasks - {"statistics"} <= alone  # every task some release has, on its own


def test_every_release_ships_a_vocabulary_loaded_alone():
    for version in mr.shipped():
        v = mr.vocabulary(version)
        assert v and v["version"] == version and v["parts"][""]["keys"]
    assert mr.vocabulary("1.0.0") is None


# ---------------------------------------------------------------- the checks evaluated

@pytest.mark.parametrize("version,config,path,fires", [
    ("8.1.2", {"task": "tensor", "tensor": {"file_format": "pt"}}, "tensor.file_format", True),
    ("8.1.2", {"task": "tensor", "tensor": {"file_format": "npy"}}, "tensor.file_format", False),
    ("8.1.2", {"task": "tensor", "tensor": {"port": 99999}}, "tensor.port", False),  # only with online_run_ut
    ("8.1.2", {"task": "tensor", "tensor": {"port": 99999, "online_run_ut": True}}, "tensor.port", True),
    ("26.0.0", {"task": "diff_check", "diff_check": {"check_mode": "bogus"}}, "diff_check.check_mode", True),
    ("26.2.0", {"statistics": {"data_mode": ["all", "input"]}}, "statistics.data_mode", True),
    ("26.2.0", {"statistics": {"data_mode": 5}}, "statistics.data_mode", True),  # len(5) raises in msprobe too
    ("26.2.0", {"statistics": {"data_mode": ["input"]}}, "statistics.data_mode", False),
    ("8.3.3", {"statistics": {"summary_mode": "xor"}}, "statistics.summary_mode", True),
    ("26.0.0", {"statistics": {"summary_mode": "xor"}}, "statistics.summary_mode", False),
])
def test_a_release_check_fires_as_its_code_would(version, config, path, fires):
    check, _ = failing_check(mr.vocabulary(version), config, path)
    assert (check is not None) is fires, check


@pytest.mark.parametrize("version,config,path,read", [
    ("8.1.2", {"load": {}}, "load", False),
    ("26.1.0.post1", {"load": {}}, "load", False),
    ("26.2.0", {"load": {}}, "load.path", True),
    ("26.1.0.post1", {"statistics": {}}, "statistics.slice", False),
    ("26.2.0", {"statistics": {}}, "statistics.slice", True),
    ("26.2.0", {"task": "tensor"}, "statistics.scope", False),  # only the active task's section is read
    ("8.2.1", {"task": "tensor"}, "tensor.online_run_ut", False),
    ("8.1.2", {"task": "tensor"}, "tensor.online_run_ut", True),
])
def test_what_a_release_reads(version, config, path, read):
    assert reads(mr.vocabulary(version), config, path) is read


# ---------------------------------------------------------------- verdicts per release

def _judge(tmp_path, version, config):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(config, indent=1))
    return [f for f in check_msprobe(load_json(str(p)), MsprobeContext(msprobe=version)) if f.rule != "msprobe-verl-pair"]


LOAD = {"load": {"path": "/", "modules": ["Module.0.Linear.forward.0"]}}
SLICE = {"statistics": {"slice": [{"dim": -1, "size": 4, "begin": 0, "end": 2}]}}
PT = {"task": "tensor", "tensor": {"file_format": "pt"}}
RUN_UT = {"task": "tensor", "tensor": {"online_run_ut": True, "host": "127.0.0.1", "port": 8080}}
MODE = {"task": "diff_check", "diff_check": {"check_mode": "bogus"}}


@pytest.mark.parametrize("version,config,error,says", [
    *[(v, LOAD, False, f"msprobe {v} does not read 'load'") for v in ("8.1.2", "8.2.1", "8.3.3", "26.0.0",
                                                                      "26.1.0.post1")],
    ("26.2.0", LOAD, True, "load-only mode"),
    *[(v, SLICE, False, f"msprobe {v} does not read 'statistics.slice'") for v in ("8.1.2", "8.3.3", "26.0.0",
                                                                                   "26.1.0.post1")],
    ("26.2.0", SLICE, True, "dim"),
    *[(v, PT, True, f"msprobe {v} raises at construction") for v in ("8.1.2", "8.2.1", "8.3.3", "26.0.0")],
    *[(v, PT, False, f"msprobe {v} does not read 'tensor.file_format'") for v in ("26.1.0.post1", "26.2.0")],
    ("26.0.0", MODE, True, "check_mode is invalid"),
    *[(v, MODE, False, f"msprobe {v} does not read 'diff_check.check_mode'") for v in ("26.1.0.post1", "26.2.0")],
    ("8.1.2", RUN_UT, True, "msprobe 8.1.2 raises at construction"),
    *[(v, RUN_UT, False, f"msprobe {v} does not read 'tensor.online_run_ut'") for v in ("8.2.1", "8.3.3", "26.2.0")],
])
def test_verdict_by_the_judging_release_alone(tmp_path, version, config, error, says):
    found = _judge(tmp_path, version, config)
    errs = [f for f in found if f.severity is Severity.ERROR]
    assert bool(errs) is error, found
    assert any(says in f.message for f in (errs if error else found)), [f.message for f in found]
    if error and config in (PT, MODE):
        assert "is invalid" in errs[0].message and "raises at construction" in errs[0].message
    if not error:
        assert all(f.severity is not Severity.ERROR for f in found)


def test_a_key_the_release_reads_and_accepts_is_not_called_unknown(tmp_path):
    found = _judge(tmp_path, "8.3.3", {"task": "tensor", "tensor": {"file_format": "npy"}})
    assert [f.severity for f in found if f.path == "tensor.file_format"] == [Severity.WARNING]
    assert "read by msprobe 8.3.3" in next(f.message for f in found if f.path == "tensor.file_format")


def test_a_check_the_release_passes_does_not_lift_an_error(tmp_path):
    """26.2's config classes check scope only as list[str]; construction then refuses a window of
    three entries (measured: tests/examples/msprobe/releases/cases/scope_three_entries.json)."""
    scope = ["Functional.linear.0.forward", "Functional.relu.0.forward", "Functional.linear.1.forward"]
    assert failing_check(mr.vocabulary("26.2.0"), {"statistics": {"scope": scope}}, "statistics.scope")[0] is None
    found = _judge(tmp_path, "26.2.0", {"statistics": {"scope": scope}})
    assert any(f.severity is Severity.ERROR and f.path == "statistics.scope" for f in found), found
