"""A compare that never lies (issue 34), on the real runs of examples/compare copied per test: a fault stays
in its pair (status `error`, reason compare-failed, the other pairs compared and reported, exit code 4,
never 1), in this process, in worker processes and in the rollout compare; output paths and --msprobe-csv
are refused (exit code 2, the path named) before any dump is read; each status gives its exit code."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
from pathlib import Path

import pytest

from compare_cli import run, run_json
from unprivileged import as_unprivileged, open_dir  # noqa: F401 - a fixture
from verl_pdbg_conf.compare import cli, engine, modes
from verl_pdbg_conf.compare.rollout import steps as rollout_steps
from verl_pdbg_conf.compare.verdict import ExitCode, Reason, Status, Verdict, exit_code
from verl_pdbg_conf.compare.options import CompareOptions

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "compare"
FAULTY = "actor_compute_log_prob"  # the stage whose pairs the injected fault hits


@pytest.fixture
def runs4(tmp_path) -> tuple[Path, Path]:
    """target and golden with four pairs: step_1's two stages diverged (layer 1's weight scaled), step_2's
    two the golden run's own step_1 on both sides (same)."""
    target, golden = tmp_path / "target", tmp_path / "golden"
    shutil.copytree(EXAMPLE / "target", target)
    shutil.copytree(EXAMPLE / "golden", golden)
    for side in (target, golden):
        shutil.copytree(EXAMPLE / "golden" / "step_1", side / "step_2")
    return target, golden


def faulty_job(job):
    """Fault injection, at module level so a worker process can run it: one stage's pairs raise."""
    if FAULTY in job.target:
        raise RuntimeError("injected fault")
    return engine.compare_pair(job)


def _by_pair(doc: dict) -> dict:
    return {(p["step"], p["stage"]): p for p in doc["pairs"]}


def _assert_fault_stays_in_its_pair(code: int, doc: dict, said: str = "RuntimeError: injected fault") -> None:
    pairs = _by_pair(doc)
    assert len(pairs) == 4 and code == ExitCode.ERROR == doc["exit_code"], (code, doc["exit_code"])
    for (step, stage), p in pairs.items():
        if stage == FAULTY:
            assert (p["status"], p["reason"], p["first_divergence"]) == ("error", "compare-failed", None), p
            (f,) = [f for f in p["findings"] if f["rule"] == "compare-failed"]
            assert said in f["message"] and f["severity"] == "error" and f["file"].endswith("dump.json"), f
        else:  # the healthy pairs keep their verdicts
            assert p["status"] == ("diverged" if step == 1 else "same") and p["reason"] is None, p
    assert pairs[(1, "actor_update")]["first_divergence"]["module"].startswith("model.layers.1.")


def test_healthy_runs_give_their_verdicts(runs4):
    """The control: without the fault, step_1 diverged and step_2 same (exit 1)."""
    code, doc = run_json(*runs4, "-j", "1")
    assert code == ExitCode.DIVERGED and [p["status"] for p in doc["pairs"]] == ["diverged"] * 2 + ["same"] * 2


def test_a_fault_in_one_pair_in_this_process(runs4, monkeypatch):
    """compare_runs looks its job up when called: patching modes.compare_pair reaches the pairs (-j 1)."""
    monkeypatch.setattr(modes, "compare_pair", faulty_job)
    code, doc = run_json(*runs4, "-j", "1")
    _assert_fault_stays_in_its_pair(code, doc)


def test_a_fault_inside_the_engine_is_returned_by_compare_pair(runs4, monkeypatch):
    """An exception deep in the engine: compare_pair itself returns it as the pair's failure, as a worker
    process or a Ray task must (they hand back only what compare_pair returns)."""
    real = engine.run_pipeline

    def pipeline(job, *a):
        if FAULTY in job.target:
            raise KeyError("no such record")
        return real(job, *a)

    monkeypatch.setattr(engine, "run_pipeline", pipeline)
    job = engine.PairJob(str(next(runs4[0].rglob(f"{FAULTY}/step0/rank0/dump.json"))),
                         str(next(runs4[1].rglob(f"{FAULTY}/step0/rank0/dump.json"))))
    out = engine.compare_pair(job)
    assert (out.analysis, out.rule, out.path) == (None, Reason.FAILED, job.target)
    assert out.error == "the compare failed: KeyError: 'no such record'"
    code, doc = run_json(*runs4, "-j", "1")
    _assert_fault_stays_in_its_pair(code, doc, "KeyError: 'no such record'")


def test_a_fault_in_worker_processes(runs4):
    """-j 2: the job raises in a worker process; the pool and the other pairs go on."""
    cmp = modes.compare_runs(str(runs4[0]), str(runs4[1]), CompareOptions(jobs=2), job_fn=faulty_job)
    _assert_fault_stays_in_its_pair(cmp.exit_code, modes.as_dict(cmp))


def test_a_job_that_returns_nonsense_fails_its_pair_alone(runs4):
    cmp = modes.compare_runs(str(runs4[0]), str(runs4[1]), CompareOptions(jobs=1),
                            job_fn=lambda job: None if FAULTY in job.target else engine.compare_pair(job))
    _assert_fault_stays_in_its_pair(cmp.exit_code, modes.as_dict(cmp), "AttributeError")


def test_text_report_and_exit_code_of_a_fault(runs4, monkeypatch):
    monkeypatch.setattr(modes, "compare_pair", faulty_job)
    code, text = run([*runs4, "-j", "1"])
    assert code == ExitCode.ERROR and "Traceback" not in text
    assert "2 diverged, 2 same" not in text and "2 failed (an error of the compare itself, exit code 4)" in text


def test_nothing_escapes_main(runs4, monkeypatch, capsys):
    """An exception outside any pair (here in the pairing): exit code 4 and one line, not Python's 1."""
    def broken(*a, **k):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(modes, "pair_up", broken)
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    code, out = run([*runs4])
    err = capsys.readouterr().err
    assert code == ExitCode.ERROR and out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and "ZeroDivisionError: division by zero" in err
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    assert run([*runs4])[0] == ExitCode.ERROR and "Traceback" in capsys.readouterr().err


def test_rollout_fault_stays_in_its_step(tmp_path, monkeypatch):
    """The rollout compare, step by step: one step's exception is that step's error, caught by the executor's
    guard as a run pair's is; the other is judged (here: nothing dumped, dump-missing). -j 1: in this process,
    where the fault is injected."""
    for step in ("step_1", "step_2"):
        for stage in (rollout_steps.ROLLOUT, rollout_steps.ACTOR):
            (tmp_path / step / stage).mkdir(parents=True)
    real = rollout_steps.compare_step

    def pair(key, *a):
        if key == "step_1":
            raise IndexError("list index out of range")
        return real(key, *a)

    monkeypatch.setattr(rollout_steps, "compare_step", pair)
    code, doc = run_json("--rollout", tmp_path, "-j", "1")
    one, two = doc["pairs"]
    assert code == ExitCode.ERROR == doc["exit_code"]
    assert (one["step"], one["status"], one["reason"]) == (1, "error", "compare-failed")
    (said,) = one["findings"]
    assert said["rule"] == "compare-failed" and said["severity"] == "error"
    assert said["message"] == "step_1: the compare failed: IndexError: list index out of range"
    assert (two["step"], two["status"], two["reason"]) == (2, "error", "dump-missing")
    monkeypatch.setattr(rollout_steps, "compare_step", real)
    assert run_json("--rollout", tmp_path)[0] == ExitCode.INCOMPLETE  # nothing comparable: not a usage error


# ----------------------------------------------------------------------------- outputs, before any dump is read

@pytest.fixture
def nothing_read(monkeypatch):
    """Fault injection: every way to the dumps raises, so a refusal must come before all of them."""
    def boom(*a, **k):
        raise AssertionError("a dump was read")

    for mod, name in ((modes, "collect"), (modes, "execute"), (cli, "compare_runs"), (cli, "compare_ranks"),
                      (rollout_steps, "compare_rollout")):
        monkeypatch.setattr(mod, name, boom)


def _refused(argv, capsys, *said) -> str:
    code, out = run(argv)
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE and out == "" and "Traceback" not in err, (code, err)
    for s in said:
        assert s in err, err
    return err


def test_o_at_an_existing_file(runs4, tmp_path, capsys, nothing_read):
    f = tmp_path / "a_file"
    f.write_text("kept")
    _refused([*runs4, "-o", f], capsys, f"-o {f} is a file")
    _refused([runs4[0], "--ranks", "-o", f], capsys, f"-o {f} is a file")
    _refused([*runs4, "-o", f / "below"], capsys, f"-o {f / 'below'} cannot be created: {f} is a file")
    assert f.read_text() == "kept"


def test_html_at_a_directory_or_in_a_missing_folder(runs4, tmp_path, capsys, nothing_read):
    _refused([*runs4, "--html", tmp_path], capsys, f"--html {tmp_path} is a directory")
    missing = tmp_path / "no" / "r.html"
    _refused([*runs4, "--html", missing], capsys, f"--html {missing}: its folder {missing.parent} does not exist")
    _refused([*runs4, "--html", runs4[1] / "r.html"], capsys, f"--html {runs4[1] / 'r.html'} is inside")
    assert not (runs4[1] / "r.html").exists()


def test_rollout_outputs(runs4, tmp_path, capsys, nothing_read):
    _refused(["--rollout", runs4[0], "--html", tmp_path], capsys, f"--html {tmp_path} is a directory")
    missing = tmp_path / "no" / "r.html"
    _refused(["--rollout", runs4[0], "--html", missing], capsys, "does not exist")
    _refused(["--rollout", runs4[0], "--html", runs4[0] / "r.html"], capsys, "is inside")
    _refused(["--rollout", runs4[0], "-o", runs4[0] / "o"], capsys, "is inside")
    f = tmp_path / "a_file"
    f.write_text("kept")
    _refused(["--rollout", runs4[0], "-o", f], capsys, f"-o {f} is a file")
    assert f.read_text() == "kept"


def test_unwritable_output(open_dir, nothing_read):
    """A folder this user cannot write: refused before any dump is read. Run as a normal user (a forked
    child dropped to nobody where the suite runs as root, as CI does), so the kernel really refuses."""
    runs4 = [open_dir / "target", open_dir / "golden"]
    for side, src in zip(runs4, ("target", "golden")):
        shutil.copytree(EXAMPLE / src, side)
    ro = open_dir / "ro"
    ro.mkdir(mode=0o555)
    import matplotlib  # noqa: F401 - imported before privileges drop: the child may not read the venv (--html needs it)

    def refused(argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code, out = run(argv)
        return int(code), out, err.getvalue()

    for argv, said in (([*runs4, "-o", ro], f"-o {ro}: this directory is not writable"),
                       ([*runs4, "-o", ro / "new"], f"-o {ro / 'new'} cannot be created: {ro} is not writable"),
                       ([*runs4, "--html", ro / "r.html"], f"--html {ro / 'r.html'} is not writable")):
        code, out, err = as_unprivileged(lambda: refused(argv))
        assert code == ExitCode.USAGE and out == "" and said in err and "Traceback" not in err, (code, err)
    assert list(ro.iterdir()) == []


def test_msprobe_csv_without_msprobe(runs4, tmp_path, capsys, monkeypatch, nothing_read):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "msprobe" else real(name, *a))
    _refused([*runs4, "--msprobe-csv"], capsys, "msprobe is not installed", "pip install mindstudio-probe==26.2.0")
    _refused([*runs4, "--msprobe-csv", "all", "-o", tmp_path / "o"], capsys, "pip install mindstudio-probe")
    assert not (tmp_path / "o").exists()


def test_good_outputs_are_written(runs4, tmp_path):
    out, page = tmp_path / "new" / "out", tmp_path / "r.html"
    code, doc = run_json(*runs4, "-o", out, "--html", page, "-j", "1")
    assert code == ExitCode.DIVERGED and json.loads((out / "summary.json").read_text())["exit_code"] == code
    assert page.read_text().startswith("<!DOCTYPE html>") or "<html" in page.read_text()[:200]


def test_a_file_the_tool_did_not_write_is_never_replaced(runs4, tmp_path, capsys, nothing_read):
    """--html at an existing file, -o at a folder holding files: refused before any dump is read, untouched."""
    mine = tmp_path / "conf.yaml"
    mine.write_text("kept: 1\n")
    _refused([*runs4, "--html", mine], capsys, f"--html {mine} already holds a file verl-pdbg-compare did not write")
    _refused(["--rollout", runs4[0], "--html", mine], capsys, "did not write")
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("kept")
    _refused([*runs4, "-o", full], capsys, f"-o {full} holds files verl-pdbg-compare did not write")
    (full / "summary.json").write_text('{"exit_code": 0}')  # a summary.json of someone else's
    _refused([*runs4, "-o", full], capsys, "did not write")
    assert mine.read_text() == "kept: 1\n" and (full / "notes.txt").read_text() == "kept"


@pytest.mark.parametrize("option,path", [("-o", "/proc/x"), ("-o", "/sys/kernel/x"), ("--html", "/proc/version"),
                                         ("--html", "/dev/null"), ("-o", "/proc/self/fd/x")])
def test_kernel_file_systems_are_a_users_path(runs4, capsys, nothing_read, option, path):
    """Not exit 4 ("the compare failed"): the path is the user's to change."""
    _refused([*runs4, option, path], capsys, f"{option} {path} is on the kernel's")


def test_the_tools_own_outputs_are_replaced_and_said(runs4, tmp_path, capsys):
    out, page = tmp_path / "out", tmp_path / "r.html"
    for _ in range(2):  # the second run replaces the first one's files: they carry the tool's marker
        code, doc = run_json(*runs4, "-o", out, "--html", page, "-j", "1")
        assert code == ExitCode.DIVERGED, capsys.readouterr().err
        assert f"HTML report written to {page}" in capsys.readouterr().err
    top = json.loads((out / "summary.json").read_text())
    assert top["written_by"] == "verl-pdbg-compare" and top["exit_code"] == code
    assert page.read_text().startswith("<!-- written by verl-pdbg-compare -->")


def test_what_is_no_run_is_said_before_any_dump_is_read(runs4, tmp_path, capsys, nothing_read):
    """A YAML or a binary is no dump (exit 2, not 3 "incomplete"); one folder twice is said; a path where
    --ranks takes a number is refused."""
    yaml, binary = tmp_path / "a.yaml", tmp_path / "b.bin"
    yaml.write_text("actor_rollout_ref:\n  model: x\n")
    binary.write_bytes(b"\x7fELF\0\0" * 100)
    _refused([yaml, yaml.with_name("a.yaml")], capsys, f"{yaml} is not an msprobe dump")
    _refused([binary, runs4[1]], capsys, f"{binary} is not an msprobe dump")
    _refused([runs4[0], runs4[0]], capsys, "TARGET and GOLDEN are the same path")
    _refused([runs4[0], runs4[0] / ".." / runs4[0].name], capsys, "the same path")
    _refused(["--ranks", runs4[0]], capsys, "REF is a rank number", "RUN --ranks [REF]")
    _refused(["--ray", *runs4], capsys, f"--ray took {runs4[0]} as its value, and that is a path")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="--rollout says torch is missing first")
def test_rollout_on_a_file(tmp_path, capsys):
    yaml = tmp_path / "a.yaml"
    yaml.write_text("x: 1\n")
    _refused(["--rollout", yaml], capsys, f"{yaml} is a file, not an msprobe save_path")


# ----------------------------------------------------------------------------- exit codes of each status

def test_exit_code_of_each_status():
    v = Verdict
    same, div = v(Status.SAME), v(Status.DIVERGED)
    assert exit_code([same, same]) == ExitCode.SAME == 0
    assert exit_code([same, div]) == ExitCode.DIVERGED == 1
    for bad in (v(Status.PARTIAL, Reason.COVERAGE), v(Status.MISMATCH, Reason.MISMATCH),
                v(Status.ERROR, Reason.DUMP_CORRUPT), v(Status.ERROR, Reason.DUMP_MISSING)):
        assert exit_code([same, bad]) == ExitCode.INCOMPLETE == 3
        assert exit_code([bad]) == ExitCode.INCOMPLETE  # nothing compared at all: still not a usage error
        assert exit_code([div, bad]) == ExitCode.DIVERGED
    assert exit_code([]) == exit_code([same], one_sided=True) == ExitCode.INCOMPLETE
    failed = v(Status.ERROR, Reason.FAILED)
    assert exit_code([same, failed]) == exit_code([div, failed]) == ExitCode.ERROR == 4  # never 1 on a crash
    assert len({int(c) for c in ExitCode}) == len(ExitCode) == 5


def test_exit_codes_on_real_dumps(runs4, tmp_path):
    target, golden = runs4
    shutil.copytree(golden, tmp_path / "again")  # the same run twice (one folder twice is refused)
    assert run_json(tmp_path / "again", golden, "-j", "1")[0] == ExitCode.SAME
    assert run_json(target, golden, "-j", "1")[0] == ExitCode.DIVERGED
    dump = target / "step_1" / FAULTY / "step0" / "rank0" / "dump.json"
    dump.write_text(dump.read_text()[:1000])  # truncated: dump-corrupt, the rest still compared
    code, doc = run_json(target / "step_1" / FAULTY, golden / "step_1" / FAULTY)
    (p,) = doc["pairs"]
    assert code == ExitCode.INCOMPLETE and (p["status"], p["reason"]) == ("error", "dump-corrupt")
    code, doc = run_json(target, golden, "-j", "1")
    assert code == ExitCode.DIVERGED and _by_pair(doc)[(1, FAULTY)]["reason"] == "dump-corrupt"
    assert run([golden, "--ranks", "3"]) == (ExitCode.USAGE, "")  # no rank3 to compare against: usage
