"""The pre-commit hook, run the way pre-commit runs it: the entry and args from the real
.pre-commit-hooks.yaml, from the repository root, with many file names in one process, over the
positive and negative example folders (positive: exit 0, negative: exit 1). Then, when
pre-commit can build the hook's environment here, through `pre-commit try-repo` itself."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
EX = REPO / "tests" / "examples"
HOOKS = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
EXPECT_LINE = re.compile(r"^# expect: (\S+) (\d+) (\d+)$", re.M)  # a negative launch script's planted mistake
(HOOK,) = [h for h in HOOKS if h["id"] == "verl-pdbg-validate"]

# Example folders, with the `args:` a user's .pre-commit-config.yaml would give the hook for them
# (relative config_path values resolve against --base-dir).
FOLDERS = {
    "verl": (["--base-dir", "tests/examples/verl"], "*.yaml"),
    "scripts": (["--base-dir", "tests/examples/scripts"], "*.sh"),
    "msprobe": ([], "*.json"),  # msprobe config.json files; *.expect.json are their test sidecars
}


def hook_argv(user_args: list[str]) -> list[str]:
    """pre-commit runs `entry + args + filenames`. For `language: python` the entry is the
    package's console script; it is run here from this working tree (the installed script may
    be an older copy), as `python -m verl_pdbg_conf`, which calls the same function."""
    entry = shlex.split(HOOK["entry"])
    assert entry == ["verl-pdbg-validate"]
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^verl-pdbg-validate = "verl_pdbg_conf\.cli:main"$', pyproject, re.M)
    return [sys.executable, "-m", "verl_pdbg_conf", *HOOK.get("args", []), *user_args]


def run_hook(files: list[Path], user_args: list[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_ACTIONS"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    names = [str(f.relative_to(REPO)) for f in files]  # pre-commit passes repo-relative names
    return subprocess.run(hook_argv(user_args) + names, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)


def examples(kind: str, side: str) -> list[Path]:
    if not (EX / kind / side).is_dir():
        pytest.skip(f"no tests/examples/{kind}/{side}")
    files = sorted(f for f in (EX / kind / side).glob(FOLDERS[kind][1]) if not f.name.endswith(".expect.json"))
    assert len(files) >= 3
    return files


def test_hook_definition():
    assert HOOK["language"] == "python"
    assert HOOK["require_serial"] is False and HOOK.get("pass_filenames", True) is True
    assert set(HOOK["types_or"]) == {"yaml", "json", "shell"}


FILE_CASES = [
    ("conf/profiler/precision_debugger_l1.yaml", True),
    ("configs/ppo_precision_debugger.yaml", True),
    ("exp/qwen_pdbg.yml", True),
    ("exp/profile.yaml", True),
    ("msprobe_config.json", True),
    ("configs/dump_config.json", True),
    ("precision/precision_debugger.json", True),
    ("examples/grpo_trainer/run_qwen2-7b.sh", True),
    ("scripts/train.bash", True),
    (".github/workflows/ci.yaml", False),
    ("package.json", False),
    ("conf/ppo_trainer.yaml", False),
    ("data/statistics.json", False),
]


@pytest.mark.parametrize("path,taken", FILE_CASES)
def test_default_files_pattern(path, taken):
    assert bool(re.search(HOOK["files"], path)) is taken  # pre-commit matches with re.search


@pytest.mark.parametrize("kind", sorted(FOLDERS))
def test_positive_folder_passes_in_one_process(kind):
    proc = run_hook(examples(kind, "positive"), FOLDERS[kind][0])
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("kind", sorted(FOLDERS))
def test_negative_folder_fails_and_every_file_is_read(kind):
    files = examples(kind, "negative")
    proc = run_hook(files, FOLDERS[kind][0])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    proc = run_hook(files, FOLDERS[kind][0] + ["--format", "json"])
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    seen = {Path(d["file"]).name for d in doc["diagnostics"]}
    if kind == "scripts":  # every negative launch script is an error on its own
        errors = {Path(d["file"]).name for d in doc["diagnostics"] if d["severity"] == "error"}
        assert errors >= {f.name for f in files}
    elif kind == "msprobe":
        assert seen >= {f.name for f in files}
    else:  # each conf names its expected finding, in itself or in the file it points at
        for f in files:
            expect = re.findall(r"^# expect: \S+ \S+ \d+(?: (\S+))?$", f.read_text(), re.M)
            assert {e or f.name for e in expect} & seen, f.name


def test_usage_error_is_exit_2():
    proc = run_hook([EX / "verl" / "positive" / "guide_minimal.yaml"], ["--no-such-flag"])
    assert proc.returncode == 2


# ------------------------------------------------------------------ pre-commit itself

@pytest.mark.slow
def test_pre_commit_try_repo(tmp_path):
    """pre-commit builds the hook's own virtualenv from this repository (it needs a package index
    for the dependencies) and runs it on a throwaway repository's files."""
    pre_commit = shutil.which("pre-commit")
    if pre_commit is None:
        pytest.skip("pre-commit is not installed (pip install pre-commit)")
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("the repository has no commit for try-repo to use")
    work = tmp_path / "work"
    shutil.copytree(EX / "verl" / "configs", work / "configs")  # config_path values resolve from the root
    good = [work / "positive" / "profiler" / f.name for f in examples("verl", "positive")[:3]]
    bad = [work / "negative" / "profiler" / n for n in ("stage-unknown__typo.yaml", "steps-none__null.yaml")]
    for dst, src in zip(good + bad, examples("verl", "positive")[:3]
                        + [EX / "verl" / "negative" / d.name for d in bad]):
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(git + ["init", "-q"], cwd=work, check=True)
    subprocess.run(git + ["add", "-A"], cwd=work, check=True)
    subprocess.run(git + ["commit", "-qm", "examples"], cwd=work, check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "PYTHONPATH")}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "cache")

    def try_repo(files):
        return subprocess.run([pre_commit, "try-repo", str(REPO), HOOK["id"], "--files",
                               *[str(f.relative_to(work)) for f in files]],
                              cwd=work, env=env, capture_output=True, text=True, timeout=1200)

    both = try_repo(good + bad)
    out = both.stdout + both.stderr
    if "An unexpected error has occurred" in out or "An error has occurred" in out:
        pytest.skip("pre-commit could not build the hook environment here:\n" + out[-1500:])
    assert both.returncode == 1, out
    for f in bad:
        assert f"{f.relative_to(work)}:" in out
    assert not [ln for ln in out.splitlines() if any(f"{g.relative_to(work)}:" in ln and " error " in ln
                                                     for g in good)]


@pytest.mark.slow
def test_pre_commit_try_repo_launch_scripts_without_verl(tmp_path):
    """Launch scripts through `pre-commit try-repo` with no additional_dependencies: the hook's
    own environment has this package and its base dependencies only (no verl, no torch), so the
    scripts are composed against the shipped verl facts. Good scripts pass; each planted mistake
    is reported at its line and column."""
    pre_commit = shutil.which("pre-commit")
    if pre_commit is None:
        pytest.skip("pre-commit is not installed (pip install pre-commit)")
    work = tmp_path / "work"
    src = EX / "scripts"
    shutil.copytree(src, work / "tests" / "examples" / "scripts")  # same layout: scripts name paths in it
    shutil.copytree(src / "configs", work / "configs")  # config_path values resolve from the launch dir
    good = sorted((work / "tests" / "examples" / "scripts" / "positive").glob("*.sh"))
    bad = {f: EXPECT_LINE.findall(f.read_text())
           for f in sorted((work / "tests" / "examples" / "scripts" / "negative").glob("*.sh"))}
    assert len(good) >= 8 and len(bad) >= 10 and all(bad.values())
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(git + ["init", "-q"], cwd=work, check=True)
    subprocess.run(git + ["add", "-A"], cwd=work, check=True)
    subprocess.run(git + ["commit", "-qm", "scripts"], cwd=work, check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "cache")

    def try_repo(files):
        return subprocess.run([pre_commit, "try-repo", str(REPO), HOOK["id"], "--verbose", "--files",
                               *[str(f.relative_to(work)) for f in files]],
                              cwd=work, env=env, capture_output=True, text=True, timeout=1200)

    ok = try_repo(good)
    out = ok.stdout + ok.stderr
    if "An unexpected error has occurred" in out or "An error has occurred" in out:
        pytest.skip("pre-commit could not build the hook environment here:\n" + out[-1500:])
    assert ok.returncode == 0, out
    assert "judged as verl" in out and "not installed" in out  # no verl in the hook's environment
    hook_envs = tmp_path / "cache"
    assert not list(hook_envs.glob("repo*/py_env-*/lib/python*/site-packages/verl/__init__.py"))
    proc = try_repo(list(bad))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    for f, expects in bad.items():
        for rule, line, col in expects:
            assert f"{f.relative_to(work)}:{line}:{col}: error {rule} " in out, (f.name, rule, line, col, out[-3000:])
    assert "Traceback" not in out


# ------------------------------------------------------------------ the README's snippet, as written

def readme_hook() -> dict:
    """The pre-commit snippet README.md shows, parsed as pre-commit parses it."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if ".pre-commit-config.yaml" in b]
    (repo,) = yaml.safe_load(block)["repos"]
    (hook,) = repo["hooks"]
    assert repo["repo"] == "local"  # no remote to name: the project has no public repository yet
    return hook


@pytest.mark.parametrize("path,taken", FILE_CASES)
def test_readme_snippet_takes_the_files_the_hook_takes(path, taken):
    assert bool(re.search(readme_hook()["files"], path)) is taken


def test_readme_snippet_runs_in_pre_commit_as_written(tmp_path):
    """`pre-commit run` in a fresh repository whose .pre-commit-config.yaml is the README's snippet,
    verbatim, with verl-pdbg-validate on PATH as `pip install .` puts it there (a shim running this
    working tree). No package index needed: the hook is `language: system`."""
    pre_commit = shutil.which("pre-commit") or shutil.which("pre-commit", path=os.path.dirname(sys.executable))
    if pre_commit is None:
        pytest.skip("pre-commit is not installed (pip install pre-commit)")
    text = (REPO / "README.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if ".pre-commit-config.yaml" in b]
    work = tmp_path / "work"
    shutil.copytree(EX / "verl" / "configs", work / "configs")
    good = examples("verl", "positive")[:3]
    bad = [EX / "verl" / "negative" / n for n in ("stage-unknown__typo.yaml", "steps-none__null.yaml")]
    (work / "profiler").mkdir()
    for f in good:
        shutil.copy(f, work / "profiler" / f.name)
    (work / ".pre-commit-config.yaml").write_text(block)
    (work / "notes.json").write_text('{"not": "an msprobe config"}')  # not taken by the files pattern
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "verl-pdbg-validate"
    shim.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m verl_pdbg_conf \"$@\"\n")
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS",)}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PRE_COMMIT_HOME=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p))
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(git + ["init", "-q"], cwd=work, check=True)

    def run(files):
        subprocess.run(git + ["add", "-A"], cwd=work, check=True)
        names = [f"profiler/{f.name}" for f in files] + ["notes.json"]
        return subprocess.run([pre_commit, "run", "--verbose", "--files", *names], cwd=work, env=env,
                              capture_output=True, text=True, timeout=600)

    ok = run(good)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "verl-pdbg-validate" in ok.stdout and "Passed" in ok.stdout and "notes.json" not in ok.stdout
    for f in bad:
        shutil.copy(f, work / "profiler" / f.name)
    failed = run(good + bad)
    out = failed.stdout + failed.stderr
    assert failed.returncode == 1, out
    assert "profiler/stage-unknown__typo.yaml:" in out and "profiler/steps-none__null.yaml:" in out
    assert "Traceback" not in out
