"""File-system cases for the validator: what config_path, save_path and the files named on the
command line can point at (a directory, a FIFO, a symlink loop, a file this user cannot read, a
path with spaces or non-ASCII characters, an existing file where a directory is needed, a
directory this user cannot write), and that validating never blocks or changes anything.

Permission cases: root ignores file modes, and CI runs as root. Those cases are not mocked:
they run the validator in a forked child that has dropped to the `nobody` user (uid 65534),
so the kernel really refuses the access. Without fork or setuid they are skipped, saying why.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from unprivileged import open_dir  # noqa: F401 - a fixture
from unprivileged import as_unprivileged as _as_unprivileged
from verl_pdbg_conf.cli import main
from verl_pdbg_conf.context import Options
from verl_pdbg_conf.core.findings import Severity
from verl_pdbg_conf.validate import validate_files

ROOT = Path(__file__).resolve().parents[1]
GOOD_JSON = ROOT / "tests" / "examples" / "verl" / "configs" / "statistics_l1.json"
CONFIG_PATH_LINE, SAVE_PATH_LINE = 7, 4


def conf(config_path: str = "config.json", save_path: str = "outputs/profile") -> str:
    return (
        "global_profiler:\n"
        "  tool: precision_debugger\n"
        "  steps: [1]\n"
        f"  save_path: {json.dumps(save_path)}\n"
        "  global_tool_config:\n"
        "    precision_debugger:\n"
        f"      config_path: {json.dumps(config_path)}\n"
        "actor_rollout_ref:\n"
        "  actor:\n"
        "    profiler:\n"
        "      enable: True\n"
    )


@pytest.fixture
def launch_dir(open_dir):
    """A launch directory anyone can traverse (unprivileged.open_dir), holding a valid msprobe config.json."""
    shutil.copy(GOOD_JSON, open_dir / "config.json")
    (open_dir / "config.json").chmod(0o644)
    return open_dir


def write_conf(d: Path, text: str, name: str = "conf.yaml") -> Path:
    p = d / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    p.chmod(0o644)
    return p


def validate(conf_path: Path, base_dir: Path):
    return validate_files([str(conf_path)], Options(base_dir=str(base_dir))).sorted()


def only(findings, rule, line=None):
    hits = [f for f in findings if f.rule == rule and (line is None or f.line == line)]
    assert hits, f"no {rule} at line {line} in\n" + "\n".join(f"  {f.rule} {f.line}:{f.column} {f.message}"
                                                              for f in findings)
    return hits


def tree_state(d: Path) -> dict:
    return {str(p.relative_to(d)): (p.is_dir(), p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(d.rglob("*")) if not stat.S_ISFIFO(p.lstat().st_mode)}


# ------------------------------------------------------------------ running unprivileged

def as_unprivileged(fn):
    """unprivileged.as_unprivileged, with the validator imported first (the child cannot read /root's
    site-packages)."""
    validate_files([str(GOOD_JSON)])
    return _as_unprivileged(fn)


# ------------------------------------------------------------------ config_path

def test_config_path_naming_a_directory(launch_dir):
    (launch_dir / "cfgdir.json").mkdir()
    f = only(validate(write_conf(launch_dir, conf("cfgdir.json")), launch_dir), "config-path-invalid",
             CONFIG_PATH_LINE)
    assert "directory" in f[0].message


def test_config_path_naming_a_fifo_does_not_block(launch_dir):
    os.mkfifo(launch_dir / "fifo.json")
    c = write_conf(launch_dir, conf("fifo.json"))
    # In a subprocess with a timeout: a validator that opened the FIFO would wait for a writer forever.
    r = subprocess.run([sys.executable, "-m", "verl_pdbg_conf", str(c), "--format", "json"], cwd=launch_dir,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stderr
    d = [x for x in json.loads(r.stdout)["diagnostics"] if x["rule"] == "config-path-invalid"]
    assert d and d[0]["line"] == CONFIG_PATH_LINE and "FIFO" in d[0]["message"]


def test_config_path_symlink_loop(launch_dir):
    os.symlink("loop_b.json", launch_dir / "loop_a.json")
    os.symlink("loop_a.json", launch_dir / "loop_b.json")
    f = only(validate(write_conf(launch_dir, conf("loop_a.json")), launch_dir), "config-path-invalid",
             CONFIG_PATH_LINE)
    assert "symbolic links" in f[0].message


def test_config_path_dangling_symlink(launch_dir):
    os.symlink("nowhere.json", launch_dir / "dangling.json")
    only(validate(write_conf(launch_dir, conf("dangling.json")), launch_dir), "config-path-invalid", CONFIG_PATH_LINE)


def test_config_path_char_device(launch_dir):
    f = only(validate(write_conf(launch_dir, conf("/dev/null")), launch_dir), "config-path-invalid", CONFIG_PATH_LINE)
    assert "regular" in f[0].message


def test_config_path_without_read_permission(launch_dir):
    (launch_dir / "config.json").chmod(0o000)
    c = write_conf(launch_dir, conf("config.json"))

    def run():
        return [(f.rule, f.line, f.message) for f in validate(c, launch_dir)]

    findings = as_unprivileged(run)
    hits = [f for f in findings if f[0] == "config-path-invalid" and f[1] == CONFIG_PATH_LINE]
    assert hits and "Permission denied" in hits[0][2], findings


def test_config_path_too_large_is_not_read(launch_dir):
    big = launch_dir / "big.json"
    with open(big, "wb") as fh:  # sparse: 17 MB long, nothing written
        fh.truncate(17 * 1024 * 1024)
    f = only(validate(write_conf(launch_dir, conf("big.json")), launch_dir), "config-path-invalid", CONFIG_PATH_LINE)
    assert "byte limit" in f[0].message


def test_config_path_with_a_nul_character(launch_dir):
    # Reproduces a traceback the fuzz campaign found: os.stat raises ValueError on a NUL.
    only(validate(write_conf(launch_dir, conf("config\x00.json")), launch_dir), "config-path-invalid",
         CONFIG_PATH_LINE)


@pytest.mark.parametrize("dirname", ["with space", "naïve"])
def test_config_path_with_characters_msprobe_refuses(launch_dir, dirname):
    """msprobe's FileOpen checks the real path of config.json against ^[a-zA-Z0-9_.:/-]+$ and
    raises FileCheckException at PrecisionDebugger(...) (verified with msprobe 26.2.0)."""
    (launch_dir / dirname).mkdir()
    shutil.copy(GOOD_JSON, launch_dir / dirname / "config.json")
    findings = validate(write_conf(launch_dir, conf(f"{dirname}/config.json")), launch_dir)
    assert [f for f in findings if f.severity is Severity.ERROR and f.line == CONFIG_PATH_LINE]


# ------------------------------------------------------------------ files named on the command line

def test_conf_in_a_directory_with_spaces_and_non_ascii(launch_dir):
    c = write_conf(launch_dir / "my runs" / "çonfs ü", conf(str(launch_dir / "config.json"),
                                                          save_path="/tmp/verl-pdbg-fs-profile"))
    findings = validate(c, launch_dir)
    assert not [f for f in findings if f.severity is Severity.ERROR], findings
    assert all(f.file in (str(c), str(launch_dir / "config.json")) for f in findings)


def test_cli_named_file_missing_exits_2(launch_dir, capsys):
    assert main([str(launch_dir / "no such.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    r = subprocess.run([sys.executable, "-m", "verl_pdbg_conf", str(launch_dir / "missing.yaml"), "--format", "json"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_cli_named_directory_fifo_and_symlink_loop(launch_dir):
    (launch_dir / "d.yaml").mkdir()
    os.mkfifo(launch_dir / "f.yaml")
    os.symlink("l2.yaml", launch_dir / "l1.yaml")
    os.symlink("l1.yaml", launch_dir / "l2.yaml")
    r = subprocess.run([sys.executable, "-m", "verl_pdbg_conf", "f.yaml", "l1.yaml", "--format", "json"],
                       cwd=launch_dir, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    rules = {x["file"]: x["rule"] for x in json.loads(r.stdout)["diagnostics"]}
    assert rules == {"f.yaml": "file-not-regular", "l1.yaml": "file-unreadable"}
    # a directory is no input at all: one line and exit 2, as the help says (config_path naming one stays
    # the finding file-is-directory)
    r = subprocess.run([sys.executable, "-m", "verl_pdbg_conf", "d.yaml", "f.yaml"], cwd=launch_dir,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.strip().splitlines() == [
        "verl-pdbg-validate: error: d.yaml is a directory: give the files in it to check (a verl conf (.yaml), an "
        "msprobe config.json or a launch script (.sh, or a shell shebang)), e.g. d.yaml/*.yaml"], r.stderr


def test_cli_named_file_without_read_permission(launch_dir):
    c = write_conf(launch_dir, conf())
    c.chmod(0o000)

    def run():
        return [(f.rule, f.message) for f in validate(c, launch_dir)]

    findings = as_unprivileged(run)
    assert findings and findings[0][0] == "file-unreadable" and "Permission denied" in findings[0][1]


def test_validating_changes_nothing_on_disk(launch_dir):
    os.mkfifo(launch_dir / "fifo.json")
    (launch_dir / "file").write_text("x")
    confs = [write_conf(launch_dir, conf(cp, sp), f"c{i}.yaml") for i, (cp, sp) in enumerate([
        ("config.json", "outputs/profile"), ("fifo.json", "new/deep/dir"), ("config.json", "file/sub"),
        ("config.json", str(launch_dir / "abs" / "profile"))])]
    before = tree_state(launch_dir)
    validate_files([str(c) for c in confs], Options(base_dir=str(launch_dir)))
    assert tree_state(launch_dir) == before
    assert not (launch_dir / "outputs").exists() and not (launch_dir / "new").exists()


# ------------------------------------------------------------------ save_path

@pytest.mark.parametrize("save_path", ["/data/my runs/profile", "/data/profilé", "outputs/prof ile", "~/profile"])
def test_save_path_with_characters_msprobe_refuses(launch_dir, save_path):
    f = only(validate(write_conf(launch_dir, conf(save_path=save_path)), launch_dir), "save-path", SAVE_PATH_LINE)
    assert f[0].severity is Severity.ERROR and "characters msprobe refuses" in f[0].message


@pytest.mark.parametrize("dirname", ["launch dir", "lançer"])
def test_relative_save_path_under_a_launch_dir_msprobe_refuses(launch_dir, dirname):
    base = launch_dir / dirname
    base.mkdir()
    shutil.copy(GOOD_JSON, base / "config.json")
    f = only(validate(write_conf(base, conf(save_path="outputs/profile")), base), "save-path", SAVE_PATH_LINE)
    assert f[0].severity is Severity.WARNING and "launch directory" in f[0].message
    # the same conf launched from a clean directory is fine
    assert not [x for x in validate(write_conf(launch_dir, conf(save_path="outputs/profile")), launch_dir)
                if x.rule == "save-path"]


def test_save_path_through_a_symlink_to_a_path_msprobe_refuses(launch_dir):
    (launch_dir / "real dir").mkdir()
    os.symlink(launch_dir / "real dir", launch_dir / "link")
    f = only(validate(write_conf(launch_dir, conf(save_path=str(launch_dir / "link" / "p"))), launch_dir),
             "save-path", SAVE_PATH_LINE)
    assert f[0].severity is Severity.WARNING and "symbolic link" in f[0].message


def test_save_path_naming_an_existing_file(launch_dir):
    (launch_dir / "profile").write_text("not a directory")
    f = only(validate(write_conf(launch_dir, conf(save_path="profile")), launch_dir), "save-path", SAVE_PATH_LINE)
    assert f[0].severity is Severity.ERROR and "names an existing file" in f[0].message


def test_save_path_under_an_existing_file(launch_dir):
    (launch_dir / "profile").write_text("not a directory")
    f = only(validate(write_conf(launch_dir, conf(save_path=str(launch_dir / "profile" / "run1"))), launch_dir),
             "save-path", SAVE_PATH_LINE)
    assert f[0].severity is Severity.ERROR and "cannot be created" in f[0].message


def test_save_path_symlink_loop(launch_dir):
    os.symlink("sp_b", launch_dir / "sp_a")
    os.symlink("sp_a", launch_dir / "sp_b")
    f = only(validate(write_conf(launch_dir, conf(save_path="sp_a/x")), launch_dir), "save-path", SAVE_PATH_LINE)
    assert f[0].severity is Severity.ERROR


def test_save_path_too_long(launch_dir):
    f = only(validate(write_conf(launch_dir, conf(save_path="/tmp/" + "a" * 300)), launch_dir), "save-path",
             SAVE_PATH_LINE)
    assert "too long" in f[0].message


def test_save_path_existing_writable_directory_is_fine(launch_dir):
    (launch_dir / "profile").mkdir()
    findings = validate(write_conf(launch_dir, conf(save_path="profile")), launch_dir)
    assert not [f for f in findings if f.rule == "save-path"], findings


def test_save_path_directory_not_writable(launch_dir):
    d = launch_dir / "readonly"
    d.mkdir()
    d.chmod(0o555)
    c = write_conf(launch_dir, conf(save_path=str(d)))

    def run():
        return [(f.rule, f.severity.value, f.line, f.message) for f in validate(c, launch_dir)]

    findings = as_unprivileged(run)
    hits = [f for f in findings if f[0] == "save-path"]
    assert hits and hits[0][1] == "error" and hits[0][2] == SAVE_PATH_LINE and "cannot write" in hits[0][3], findings


def test_save_path_missing_under_a_directory_not_writable(launch_dir):
    d = launch_dir / "readonly"
    d.mkdir()
    d.chmod(0o555)
    c = write_conf(launch_dir, conf(save_path=str(d / "new" / "profile")))

    def run():
        return [(f.rule, f.severity.value, f.message) for f in validate(c, launch_dir)]

    findings = as_unprivileged(run)
    hits = [f for f in findings if f[0] == "save-path"]
    assert hits and hits[0][1] == "warning" and "cannot be created on this machine" in hits[0][2], findings
