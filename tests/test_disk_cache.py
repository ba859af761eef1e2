"""The on-disk cache of verl's composed tree (verl_facts/disk_cache.py): a second process that
reads it reports exactly what a fresh composition reports; a change of any input is a miss."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from verl_pdbg_conf.verl_facts import disk_cache

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "tests" / "examples" / "scripts"


def run(cache: str, *files: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), VERL_PDBG_CONF_CACHE=cache)
    env.pop("GITHUB_ACTIONS", None)
    return subprocess.run([sys.executable, "-m", "verl_pdbg_conf", "--format", "json", *files], cwd=SCRIPTS,
                          env=env, capture_output=True, text=True, timeout=300)


def test_second_process_reads_the_cache_and_reports_the_same(tmp_path):
    files = ["negative/stage_typo.sh", "negative/megatron_cn_missing.sh", "positive/run_megatron_cp_cn_pdbg.sh",
             "negative/plus_on_existing_strict.sh"]
    fresh = run("off", *files)
    first = run(str(tmp_path), *files)
    entries = sorted(p.name for p in tmp_path.glob("compose-*.pickle"))
    assert len(entries) >= 2  # ppo_trainer and ppo_megatron_trainer
    second = run(str(tmp_path), *files)
    assert sorted(p.name for p in tmp_path.glob("compose-*.pickle")) == entries  # read, not rewritten
    assert fresh.returncode == first.returncode == second.returncode == 1
    assert fresh.stdout == first.stdout == second.stdout


def test_any_input_change_is_a_miss_and_failures_are_misses(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_PDBG_CONF_CACHE", str(tmp_path))
    key = ("verl-facts://0.9.1", None, "ppo_trainer", ())
    disk_cache.put(key, b"blob")
    assert disk_cache.get(key) == b"blob" and disk_cache.get(key[:3] + (("x=1",),)) is None
    disk_cache._inputs.cache_clear()
    monkeypatch.setattr(disk_cache, "_VERSION", b"changed")  # stands for any changed input
    assert disk_cache.get(key) is None
    disk_cache._inputs.cache_clear()
    monkeypatch.setenv("VERL_PDBG_CONF_CACHE", "off")
    assert disk_cache.get(key) is None
    monkeypatch.setenv("VERL_PDBG_CONF_CACHE", str(tmp_path / "file"))
    (tmp_path / "file").write_text("not a directory")
    disk_cache.put(key, b"x")  # cannot be written: no error
    assert disk_cache.get(key) is None


def test_an_entry_others_can_change_is_never_read(tmp_path, monkeypatch):
    """Entries are unpickled: one that another user could have written is a miss."""
    monkeypatch.setenv("VERL_PDBG_CONF_CACHE", str(tmp_path))
    key = ("verl-facts://0.9.1", None, "ppo_trainer", ("tampered",))
    disk_cache.put(key, b"blob")
    (entry,) = tmp_path.glob("compose-*.pickle")
    assert disk_cache.get(key) == b"blob" and (entry.stat().st_mode & 0o077) == 0
    entry.chmod(0o666)
    assert disk_cache.get(key) is None
