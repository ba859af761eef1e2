"""The README's set-up commands, .ci/run and the test lock agree with each other and with pyproject."""

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def _readme_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements" / "test.lock").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def test_ci_runs_exactly_the_readme_test_command_in_a_fresh_venv():
    ci = (ROOT / ".ci" / "run").read_text()
    command = [ln for ln in ci.splitlines() if ln.strip() and not ln.startswith("#")][-1]
    assert "python -m pytest" in command
    assert any(block.strip() == command for block in _readme_blocks()), command
    before = ci[:ci.index(command)]
    assert "-m venv" in before and "mktemp -d" in before and "/bin/activate" in before
    assert "--system-site-packages" not in ci


def test_lock_pins_the_cpu_torch_and_no_cuda_package():
    pins = _lock()
    assert pins["torch"].endswith("+cpu")
    assert pins["verl"] == "0.9.1" and pins["mindstudio-probe"] == "26.2.0"
    assert not [p for p in pins if p.startswith(("nvidia-", "cuda-"))]


def test_lock_satisfies_every_direct_requirement_of_the_test_extra():
    """A stale lock (a dependency added to pyproject and not locked, or a range the pin leaves) would
    make pip resolve again on a fresh machine; caught here instead."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    seen, todo, reqs = set(), ["test"], list(project["dependencies"])
    while todo:
        extra = todo.pop()
        seen.add(extra)
        for r in extras[extra]:
            req = Requirement(r)
            if req.name == project["name"]:
                todo += [e for e in req.extras if e not in seen]
            else:
                reqs.append(r)
    pins = _lock()
    for r in map(Requirement, reqs):
        name = r.name.lower().replace("_", "-")
        assert name in pins, f"{r} is not in requirements/test.lock: run bash requirements/lock.sh"
        assert r.specifier.contains(pins[name], prereleases=True), f"lock pins {name}=={pins[name]}, outside {r}"


def test_runtime_extra_never_replaces_the_users_torch():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not [r for r in extras["runtime"] if Requirement(r).name in ("torch", "torch-npu", "torch_npu")]
