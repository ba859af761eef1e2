"""Which verl release judges, and keys that exist in one release only judged by each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl_pdbg_conf.context import Options
from verl_pdbg_conf.verl_facts import releases
from verl_pdbg_conf.verl_facts.stages import STAGES, VERL_TARGETS

ROOT = Path(__file__).resolve().parent.parent
ROUTER = "actor_rollout_ref.actor.router_replay.mode=disabled"  # 0.8.0 and 0.9.0 only
NO_SYNC = "actor_rollout_ref.actor.fsdp_config.use_no_sync_for_gradient_accumulation=true"  # 0.9.1 only


def test_the_three_releases_ship():
    assert {"0.8.0", "0.9.0", "0.9.1"} <= set(releases.shipped())
    assert releases.newest() == releases.shipped()[-1]


def _override_errors(release, override):
    from verl_pdbg_conf.validate import validate_composed

    report = validate_composed([], [override], Options(verl_version=release))
    return [f for f in report.findings if f.rule == "override"]


@pytest.mark.parametrize("release,override,composes", [
    ("0.8.0", ROUTER, True), ("0.9.0", ROUTER, True), ("0.9.1", ROUTER, False),
    ("0.8.0", NO_SYNC, False), ("0.9.0", NO_SYNC, False), ("0.9.1", NO_SYNC, True),
])
def test_release_only_keys_judged_by_each_release(release, override, composes):
    errors = _override_errors(release, override)
    if composes:
        assert errors == []
    else:
        assert len(errors) == 1 and "does not compose" in errors[0].message


def test_stage_rules_come_from_each_release():
    for r in releases.shipped():
        t = VERL_TARGETS[r]
        st = releases.load(r)["stages"]
        annotated = {a["stage"] for a in st["annotations"]}
        assert t.fired == annotated & set(STAGES)
        assert set(t.aliases) <= annotated and set(t.aliases.values()) <= set(STAGES)
    # read off the code: 0.8.0's backend does not take a list of Megatron chunks, 0.9.x binds the first
    assert [VERL_TARGETS[r].binds_first_chunk for r in ("0.8.0", "0.9.0", "0.9.1")] == [False, True, True]
    assert VERL_TARGETS["legacy-workers"].fired >= set(STAGES)


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "verl_pdbg_conf", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env or {**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def test_text_names_the_release_once_and_json_carries_it():
    out = _cli("--verl", "--verl-version", "0.8.0", "--", "+profiler=precision_debugger_l1", ROUTER)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("judged as verl") == 1
    assert out.stdout.strip().splitlines()[-1] == "judged as verl 0.8.0 (--verl-version)"
    out = _cli("--verl", "-f", "json", "--", "+profiler=precision_debugger_l1", NO_SYNC)
    doc = json.loads(out.stdout)
    expected = releases.judging()
    assert doc["verl_release"] == {"version": expected[0], "chosen": expected[1]}
    if releases.installed_version() == "0.9.1":
        assert doc["verl_release"]["chosen"] == "installed" and doc["summary"]["errors"] == 0


def _no_verl_env(tmp_path: Path) -> tuple[list, dict]:
    """An interpreter that cannot see verl: `python -S` with only the worktree and links to every
    site-packages entry but verl's."""
    import hydra

    site = Path(hydra.__file__).resolve().parent.parent
    shadow = tmp_path / "site"
    shadow.mkdir()
    for entry in site.iterdir():
        if not entry.name.lower().startswith("verl"):
            (shadow / entry.name).symlink_to(entry)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{shadow}"
    return [sys.executable, "-S"], env


def test_without_verl_composes_against_the_shipped_facts(tmp_path):
    py, env = _no_verl_env(tmp_path)
    probe = subprocess.run([*py, "-c", "import importlib.util, importlib.metadata as m\n"
                            "assert importlib.util.find_spec('verl') is None\n"
                            "try:\n    m.version('verl'); print('found')\nexcept m.PackageNotFoundError:\n"
                            "    print('absent')"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert probe.stdout.strip() == "absent", probe.stderr
    out = subprocess.run([*py, "-m", "verl_pdbg_conf", "--verl", "--", "+profiler=precision_debugger_l1",
                          "actor_rollout_ref.actor.use_kl_loss=True"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "error" not in out.stdout.replace("0 error(s)", ""), out.stdout
    assert out.stdout.strip().splitlines()[-1] == \
        f"judged as verl {releases.newest()} (newest shipped; verl is not installed)"
    # a 0.8.0-only key fails against the newest release and composes against 0.8.0
    bad = subprocess.run([*py, "-m", "verl_pdbg_conf", "--verl", "--", ROUTER], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120)
    assert bad.returncode == 1 and "override" in bad.stdout
    ok = subprocess.run([*py, "-m", "verl_pdbg_conf", "--verl", "--verl-version", "0.8.0", "--", ROUTER],
                        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
