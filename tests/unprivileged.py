"""Running a check with a normal user's permissions: root ignores file modes, and CI runs as root, so a
test of a permission refusal runs its body in a forked child that has dropped to `nobody` (uid 65534),
where the kernel really refuses the access. Without fork or setuid the test is skipped, saying why."""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from pathlib import Path

import pytest

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NOBODY = 65534


def as_unprivileged(fn):
    """fn() run with the permissions of a normal user: directly when not root, else in a forked child that
    drops to uid/gid 65534. Returns fn's result (it must pickle). Import what fn needs before calling: the
    child may not read the venv's site-packages."""
    if not IS_ROOT:
        return fn()
    if not hasattr(os, "fork"):
        pytest.skip("running as root without os.fork: cannot drop privileges to test permissions honestly")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        except OSError as e:
            result = ("no-drop", f"{type(e).__name__}: {e}")
        else:
            try:
                result = ("ok", fn())
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                result = ("error", f"{type(e).__name__}: {e}")
        try:
            with os.fdopen(w, "wb") as fh:
                fh.write(pickle.dumps(result))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data)
    if kind == "no-drop":
        pytest.skip(f"running as root and cannot drop to uid {NOBODY} here ({value}): not testable honestly")
    assert kind == "ok", value
    return value


@pytest.fixture
def open_dir():
    """A directory anyone can traverse (pytest's tmp_path is 0700 under root, which the unprivileged child
    could not enter); what tests left in it made removable again afterwards."""
    d = Path(tempfile.mkdtemp(prefix="verl-pdbg-fs-"))
    d.chmod(0o755)
    yield d
    for p in d.rglob("*"):  # undo chmod 000 and the like so the tree can be removed
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)
    shutil.rmtree(d, ignore_errors=True)
