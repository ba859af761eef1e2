"""Every option of verl-pdbg-compare in every mode (two runs, --ranks, --rollout), through the command on the
examples: honoured where options.MODES_OF says the mode honours it (the report shows its effect), refused with
exit 2 and one line saying why everywhere else, never silently ignored."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from compare_cli import run
from verl_pdbg_conf.compare.cli import build_parser
from verl_pdbg_conf.compare.options import MODES, MODES_OF, RANKS, ROLLOUT, RUNS
from verl_pdbg_conf.compare.verdict import ExitCode

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
COMPARE = EXAMPLES / "compare"

# --ray and --ray-resource are honoured on a real Ray cluster: tests/test_compare_ray.py
ON_A_CLUSTER = {"--ray", "--ray-resource"}


@pytest.fixture(scope="module")
def ranked(tmp_path_factory) -> Path:
    """One run of two ranks built from the examples: rank0 the target's dumps, rank1 the golden's."""
    root = tmp_path_factory.mktemp("ranked")
    for stage in (COMPARE / "target" / "step_1").iterdir():
        for rank, run in (("rank0", "target"), ("rank1", "golden")):
            shutil.copytree(COMPARE / run / "step_1" / stage.name / "step0" / "rank0",
                            root / "step_1" / stage.name / "step0" / rank)
    return root


def mode_argv(mode: str, ranked: Path) -> list:
    return {RUNS: [COMPARE / "target", COMPARE / "golden"], RANKS: [ranked, "--ranks"],
            ROLLOUT: ["--rollout", EXAMPLES / "rollout"]}[mode]


def _conf(tmp: Path) -> Path:
    conf = tmp / "tp2.yaml"
    conf.write_text("actor_rollout_ref:\n  actor:\n    megatron:\n      tensor_model_parallel_size: 2\n")
    return conf


def _said(doc: dict, text: str) -> bool:
    return any(text in d["message"] for d in doc["diagnostics"])


# flag -> (its arguments given a scratch directory, what the report shows where it is honoured)
GIVEN = {
    "-o": (lambda t: ["-o", t / "o"], lambda doc, t: (t / "o" / "summary.json").is_file()),
    "--msprobe-csv": (lambda t: ["--msprobe-csv"], lambda doc, t: doc["msprobe_csv"] == "diverged"),
    "--dtype-aware": (lambda t: ["--dtype-aware"], lambda doc, t: doc["dtype_aware"] is True),
    "--metric": (lambda t: ["--metric", "MaxRelativeErr"],
                 lambda doc, t: doc["metric"] == "MaxRelativeErr"
                 and all(p["first_divergence"]["metric"] == "MaxRelativeErr" for p in doc["pairs"]
                         if p["first_divergence"])),
    "--threshold": (lambda t: ["--threshold", "0.5"],
                    lambda doc, t: doc["threshold"] == 0.5 and not any(p["status"] == "diverged"
                                                                        for p in doc["pairs"])),
    "--min-coverage": (lambda t: ["--min-coverage", "0.5"], lambda doc, t: doc["min_coverage"] == 0.5),
    "--target-conf": (lambda t: ["--target-conf", _conf(t)],
                      lambda doc, t: _said(doc, f"target: tensor-parallel size 2 from conf {_conf(t)}")),
    "--golden-conf": (lambda t: ["--golden-conf", _conf(t)],
                      lambda doc, t: _said(doc, f"golden: tensor-parallel size 2 from conf {_conf(t)}")),
    "--ignore-dtype": (lambda t: ["--ignore-dtype"], lambda doc, t: doc["ignore_dtype"] is True),
    "--ignore": (lambda t: ["--ignore", "Tensor.add_.*"],
                 lambda doc, t: doc["ignore_patterns"][-1] == "Tensor.add_.*"),
    "--no-default-ignores": (lambda t: ["--no-default-ignores"], lambda doc, t: doc["ignore_patterns"] == []),
    "--top": (lambda t: ["--top", "1"],
              lambda doc, t: all(len(p["tokens"] if doc.get("mode") == "rollout" else p["top"]) == 1
                                 for p in doc["pairs"])),
    "-j": (lambda t: ["-j", "1"], lambda doc, t: doc["exit_code"] == ExitCode.DIVERGED),
    "--html": (lambda t: ["--html", t / "r.html"],
               lambda doc, t: "<!doctype html>" in (t / "r.html").read_text()[:200].lower()),
    "--ray": (lambda t: ["--ray", "auto"], None),
    "--ray-resource": (lambda t: ["--ray-resource", "dumps"], None),
}


def test_every_option_has_a_row_and_every_row_an_option():
    flags = {a.option_strings[0] for a in build_parser()._actions
             if a.option_strings and a.dest not in ("help", "rollout", "ranks")}
    assert flags == set(MODES_OF) == set(GIVEN) | {"-f"}
    assert all(row.modes <= set(MODES) and (row.why or row.modes == set(MODES)) for row in MODES_OF.values())


CASES = [(flag, mode) for flag in GIVEN for mode in MODES]


@pytest.mark.parametrize("flag,mode", CASES, ids=[f"{f}-{m}" for f, m in CASES])
def test_option_in_mode(flag, mode, ranked, tmp_path, capsys):
    args, shows = GIVEN[flag]
    honoured = mode in MODES_OF[flag].modes
    if honoured and flag in ON_A_CLUSTER:
        pytest.skip("needs a Ray cluster: tests/test_compare_ray.py")
    code, out = run([*mode_argv(mode, ranked), *args(tmp_path), "--format", "json"])
    err = capsys.readouterr().err
    if not honoured:
        assert code == ExitCode.USAGE and out == "", (code, err)
        assert err.count("\n") == 1 and f"not with {flag}: {MODES_OF[flag].why}" in err, err
        return
    assert code != ExitCode.USAGE and "not with" not in err, err
    assert shows(json.loads(out), tmp_path)


@pytest.mark.parametrize("mode", MODES)
def test_format_in_every_mode(mode, ranked, capsys):
    code, out = run([*mode_argv(mode, ranked), "-f", "text"])
    assert code == ExitCode.DIVERGED and out.split()[0] in ("target", "run", "step"), out[:200]
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_each_bad_number_has_its_own_message(capsys):
    """--threshold, --top and -j each say what they take (they once shared one line)."""
    from verl_pdbg_conf.compare.cli import main

    said = {}
    for flag, value in (("--threshold", "-1"), ("--top", "-2"), ("-j", "0")):
        assert main([str(EXAMPLES / "compare" / "target"), str(EXAMPLES / "compare" / "golden"), flag, value]) == 2
        said[flag] = capsys.readouterr().err.strip()
    assert said == {"--threshold": "verl-pdbg-compare: error: --threshold -1.0: a fraction >= 0",
                    "--top": "verl-pdbg-compare: error: --top -2: a count of nodes >= 0 (0 lists none)",
                    "-j": "verl-pdbg-compare: error: -j/--jobs 0: a number of worker processes >= 1"}
