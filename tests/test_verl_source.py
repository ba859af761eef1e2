"""The verl that will run, found as Python finds it, judged by its own facts: real verl releases
from the registry (conftest's verl_trees) as a repository's own `verl/`, forks made from them,
an editable install, and the guide's CLI lines planted into a script beside a copy without the
precision_debugger backend."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from real_verls import OLD_VERLS
from verl_pdbg_conf.context import Options
from verl_pdbg_conf.launch_scripts.launch_script import validate_script
from verl_pdbg_conf.verl_facts import catalog, releases, source
from verl_pdbg_conf.verl_facts.releases.extract import Tree, extract

ROOT = Path(__file__).resolve().parent.parent

# The guide's minimal CLI example, as a user pastes it into a launch script (the six lines are 4-9).
GUIDE = """\
#!/usr/bin/env bash
set -x
python3 -m verl.trainer.main_ppo \\
    global_profiler.tool=precision_debugger \\
    global_profiler.steps='[1,2]' \\
    global_profiler.save_path=outputs/profile \\
    +global_profiler.global_tool_config.precision_debugger.config_path=/path/to/config.json \\
    actor_rollout_ref.actor.profiler.enable=True \\
    actor_rollout_ref.ref.profiler.enable=True
"""


def repo(tmp_path: Path, tree: Path, name: str = "proj", copy: bool = False) -> Path:
    """A repository with `tree`'s verl/ at its root (linked, or copied to be edited)."""
    r = tmp_path / name
    (r / ".git").mkdir(parents=True)
    if copy:
        shutil.copytree(tree / "verl", r / "verl")
    else:
        (r / "verl").symlink_to(tree / "verl", target_is_directory=True)
    return r


def script(r: Path, text: str, rel: str = "examples/run.sh") -> str:
    p = r / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return str(p)


def errors(report):
    return [f for f in report.sorted() if f.severity.value == "error"]


# ---------------------------------------------------------------- finding it

@pytest.mark.parametrize("version", OLD_VERLS)
def test_repository_copy_is_what_judges(verl_tree, tmp_path, version):
    r = repo(tmp_path, verl_tree(version))
    s = source.for_launch(script(r, GUIDE))
    assert (s.kind, s.version, s.path) == (source.REPOSITORY, version, str(r))
    assert s.facts.startswith("live-") and catalog.version(s.facts) == version
    assert s.label == f"verl {version} (repository copy at {r}/verl)"
    assert not catalog.load(s.facts).get("problems")  # every real layout is read whole


def test_the_release_itself_is_judged_by_its_shipped_facts(verl_tree, tmp_path):
    r = repo(tmp_path, verl_tree("0.9.1"))
    s = source.for_launch(script(r, GUIDE))
    assert (s.kind, s.facts) == (source.REPOSITORY, "0.9.1")


def test_a_fork_calling_itself_a_release_is_not_that_release(verl_tree, tmp_path):
    r = repo(tmp_path, verl_tree("0.9.1"), copy=True)
    cfg = r / "verl" / "trainer" / "config" / "ppo_trainer.yaml"
    cfg.write_text(cfg.read_text() + "\nfork_extra:\n  enabled: false\n")
    s = source.for_launch(script(r, GUIDE))
    assert s.version == "0.9.1" and s.facts.startswith("live-")
    report = validate_script(script(r, "python3 -m verl.trainer.main_ppo fork_extra.enabled=true\n", "b.sh"))
    assert errors(report) == []
    plain = repo(tmp_path, verl_tree("0.9.1"), "plain")
    report = validate_script(script(plain, "python3 -m verl.trainer.main_ppo fork_extra.enabled=true\n", "b.sh"))
    assert [f.rule for f in errors(report)] == ["override"]


def test_cd_and_pythonpath_choose_the_copy(verl_tree, tmp_path):
    r = tmp_path / "proj"
    (r / ".git").mkdir(parents=True)
    (r / "third_party" / "v").mkdir(parents=True)
    (r / "third_party" / "v" / "verl").symlink_to(verl_tree("0.5.0") / "verl", target_is_directory=True)
    sh = script(r, GUIDE)
    for kw in ({"cwd": "third_party/v"}, {"pythonpath": ["third_party/v"]},
               {"cwd": str(r / "third_party" / "v")}):
        s = source.for_launch(sh, **kw)
        assert (s.kind, s.version, s.path) == (source.REPOSITORY, "0.5.0", str(r / "third_party" / "v")), kw
    assert source.for_launch(sh).kind != source.REPOSITORY  # from the root: the installed verl, or none


def test_verl_source_option_wins(verl_tree, tmp_path):
    r = repo(tmp_path, verl_tree("0.5.0"))
    s = source.for_launch(script(r, GUIDE), verl_source=str(verl_tree("0.7.1")))
    assert (s.kind, s.version) == (source.VERL_SOURCE, "0.7.1")


def test_editable_install_is_located_from_its_metadata(verl_tree, tmp_path):
    """pip's editable install of a checkout: the dist-info's direct_url.json names it."""
    checkout = verl_tree("0.7.1")
    site = tmp_path / "site"
    info = site / "verl-0.7.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: verl\nVersion: 0.7.1\n\n")
    (info / "direct_url.json").write_text(json.dumps({"url": checkout.as_uri(), "dir_info": {"editable": True}}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]))
    out = subprocess.run([sys.executable, "-c", "from verl_pdbg_conf.verl_facts import source\n"
                          "s = source.installed_or_newest(); print(s.kind, s.version, s.path, sep='|')"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert out.stdout.strip().split("|") == [source.EDITABLE, "0.7.1", str(checkout)], out.stderr


def test_installed_release_is_the_shipped_release():
    if releases.installed_version() not in releases.shipped():
        pytest.skip("no installed verl release with shipped facts")
    s = source.installed_or_newest()
    assert (s.kind, s.facts, s.where) == (source.RELEASE, releases.installed_version(), "installed")


# ---------------------------------------------------------------- no precision_debugger in that verl

@pytest.mark.parametrize("version", OLD_VERLS)
def test_guide_lines_beside_a_copy_without_the_backend(verl_tree, tmp_path, version):
    """Exactly one error, at the line asking for the tool, saying what that copy does."""
    r = repo(tmp_path, verl_tree(version))
    report = validate_script(script(r, GUIDE))
    errs = errors(report)
    assert [(f.rule, f.line) for f in errs] == [("verl-no-backend", 4)], [f.message for f in errs]
    msg = errs[0].message
    assert f"verl {version} (repository copy at {r}/verl)" in msg
    facts = catalog.load(source.for_launch(script(r, GUIDE)).facts)["stages"]
    if facts["global_profiler"]:  # 0.6, 0.7: the tool is not one of its DistProfiler's
        assert "no-op profiler" in msg and "silently" in msg and facts["unknown_tool"] == "no-op"
    else:
        assert "Hydra stops at start-up" in msg and "global_profiler" in msg


def test_guide_lines_with_the_release_that_has_the_backend(verl_tree, tmp_path):
    r = repo(tmp_path, verl_tree("0.9.1"))
    errs = errors(validate_script(script(r, GUIDE)))
    assert [f.rule for f in errs] == ["config-path-invalid"]  # /path/to/config.json: the only mistake


def test_only_added_keys_beside_a_copy_without_global_profiler(verl_tree, tmp_path):
    r = repo(tmp_path, verl_tree("0.5.0"))
    text = ("python3 -m verl.trainer.main_ppo \\\n"
            "    +global_profiler.global_tool_config.precision_debugger.config_path=c.json \\\n"
            "    +global_profiler.tool=precision_debugger\n")
    errs = errors(validate_script(script(r, text)))
    assert [(f.rule, f.line) for f in errs] == [("verl-no-backend", 2)]
    assert "ignored" in errs[0].message


def test_conf_file_judged_by_its_repository_verl(verl_tree, tmp_path):
    from verl_pdbg_conf.validate import validate_files

    r = repo(tmp_path, verl_tree("0.6.1"))
    conf = r / "conf.yaml"
    conf.write_text("global_profiler:\n  tool: precision_debugger\n  steps: [1]\n")
    report = validate_files([str(conf)], Options())
    assert [(f.rule, f.line) for f in errors(report)] == [("verl-no-backend", 2)]
    assert report.verls()[0].version == "0.6.1"


def test_cli_names_the_copy(verl_tree, tmp_path):
    r = repo(tmp_path, verl_tree("0.5.0"))
    sh = script(r, GUIDE)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "verl_pdbg_conf", os.path.relpath(sh, r)], capture_output=True,
                         text=True, env=env, cwd=r, timeout=300)
    assert out.returncode == 1, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "judged as verl 0.5.0 (repository copy at ./verl)"
    out = subprocess.run([sys.executable, "-m", "verl_pdbg_conf", "-f", "json", os.path.relpath(sh, r)],
                         capture_output=True, text=True, env=env, cwd=r, timeout=300)
    doc = json.loads(out.stdout)
    assert doc["verl"]["version"] == "0.5.0" and doc["verl"]["kind"] == "repository copy"
    assert doc["verl"]["path"] == str(r)
    assert doc["verl_release"] == {"version": "0.5.0", "chosen": "repository copy at ./verl"}


# ---------------------------------------------------------------- extraction never raises

def test_extraction_of_a_broken_fork_gives_partial_facts(verl_tree, tmp_path):
    r = repo(tmp_path, verl_tree("0.7.1"), copy=True)
    v = r / "verl"
    (v / "utils" / "profiler" / "profile.py").unlink()
    (v / "workers" / "broken.py").write_text("def f(:\n")
    (v / "trainer" / "config" / "actor" / "broken.yaml").write_text("a: [1\n")
    (v / "version" / "version").write_text("0.8.0.dev\n")
    facts = extract(Tree.from_dir(str(r)), strict=False)
    assert facts["version"] == "0.8.0.dev"
    assert facts["stages"]["tools"] == [] and facts["stages"]["unknown_tool"] is None
    assert "actor/broken" not in facts["configs"] and "ppo_trainer" in facts["configs"]
    assert any("actor/broken.yaml" in p for p in facts["problems"])


def test_second_script_costs_no_extraction(verl_tree, tmp_path, monkeypatch):
    """The facts of a copy are cached on disk by the digest of what extraction read: a new
    process (here: the in-process memo cleared) reads them back; an edit is a miss."""
    from verl_pdbg_conf.verl_facts.releases import extract as X

    monkeypatch.setenv("VERL_PDBG_CONF_CACHE", str(tmp_path / "cache"))
    r = repo(tmp_path, verl_tree("0.6.1"), copy=True)
    cfg = r / "verl" / "trainer" / "config" / "ppo_trainer.yaml"
    cfg.write_text(cfg.read_text() + "\n# a copy of its own (no other test has its digest)\n")
    first = source.from_tree(str(r), source.REPOSITORY)
    calls = []
    real = X.extract
    monkeypatch.setattr(X, "extract", lambda *a, **k: calls.append(1) or real(*a, **k))
    source._TREES.clear()
    catalog._LIVE.pop(first.facts)
    again = source.from_tree(str(r), source.REPOSITORY)
    assert again == first and calls == [] and catalog.known(first.facts)
    cfg.write_text(cfg.read_text() + "\nfork_extra: 1\n")
    source._TREES.clear()
    edited = source.from_tree(str(r), source.REPOSITORY)
    assert edited.facts != first.facts and calls == [1]


def test_stage_the_copy_does_not_annotate(verl_tree, tmp_path):
    """A fork of 0.9.1 that dropped the ref's annotation: its facts say the stage never fires."""
    r = repo(tmp_path, verl_tree("0.9.1"), copy=True)
    w = r / "verl" / "workers" / "engine_workers.py"
    w.write_text(w.read_text().replace('    @DistProfiler.annotate(color="olive", role="ref_compute_log_prob")\n', ""))
    text = GUIDE.replace("/path/to/config.json", str(ROOT / "tests/examples/scripts/configs/statistics_l1.json"))
    text = text.replace("ref.profiler.enable=True", "ref.profiler.enable=True \\\n"
                        "    +global_profiler.global_tool_config.precision_debugger.stages="
                        "'[ref_compute_log_prob]' \\\n"
                        "    actor_rollout_ref.actor.use_kl_loss=True")
    errs = errors(validate_script(script(r, text)))
    assert [(f.rule, f.line) for f in errs] == [("stage-not-run", 10)], [f.message for f in errs]
    assert f"verl 0.9.1 (repository copy at {r}/verl)" in errs[0].message
    plain = repo(tmp_path, verl_tree("0.9.1"), "plain")
    assert errors(validate_script(script(plain, text))) == []


def test_verl_option_with_verl_source(verl_tree, tmp_path):
    """`--verl --verl-source DIR -- OVERRIDES`: the guide's overrides against a 0.5.0 tree."""
    from verl_pdbg_conf.cli import main

    lines = [ln.strip().rstrip("\\").strip() for ln in GUIDE.splitlines()[3:]]
    out = subprocess.run([sys.executable, "-m", "verl_pdbg_conf", "--verl", "--verl-source", str(verl_tree("0.5.0")),
                          "-f", "json", "--", *lines], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=tmp_path)
    doc = json.loads(out.stdout)
    errs = [d for d in doc["diagnostics"] if d["severity"] == "error"]
    assert [(d["rule"], d["file"], d["line"]) for d in errs] == [("verl-no-backend", "<cli>", 1)], errs
    assert doc["verl"]["kind"] == source.VERL_SOURCE and doc["verl"]["version"] == "0.5.0"
    assert main(["--verl", "--verl-source", str(tmp_path), "--", "trainer.total_epochs=1"]) == 2


def test_the_error_is_at_the_tool_line_whatever_the_order(verl_tree, tmp_path):
    r = repo(tmp_path, verl_tree("0.5.0"))
    lines = GUIDE.splitlines()
    text = "\n".join(lines[:3] + [lines[7], lines[8].rstrip() + " \\", lines[3]] + lines[4:7]).rstrip(" \\") + "\n"
    errs = errors(validate_script(script(r, text)))
    assert [(f.rule, f.line) for f in errs] == [("verl-no-backend", 6)], text
    assert "the same for 4 more profiler override(s) (line 4, 5, 7, 8)" in errs[0].message
