"""README.md and docs/: every command a reader would copy runs and prints what is shown; every page
is reachable and every relative link resolves; README.md stays a five-minute read."""

from __future__ import annotations

import filecmp
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import doc_commands as dc
import release_venvs

ROOT = dc.ROOT
BLOCKS = dc.command_blocks()
RUN = [b for b in BLOCKS if b.marker == "run"]
NOT_RUN = [b for b in BLOCKS if b.marker == "not-run"]


def test_every_command_block_is_marked_run_or_not_run():
    unmarked = [f"{b.where} ```{b.lang}" for b in BLOCKS if b.marker is None]
    assert not unmarked, ("mark each with <!-- run --> (see tests/doc_commands.py) or <!-- not-run: KIND -->"
                          f" (KIND one of {sorted(dc.NOT_RUN)}):\n" + "\n".join(unmarked))


def test_the_blocks_not_run_are_a_short_explicit_list():
    unknown = [f"{b.where}: {b.kind!r}" for b in NOT_RUN if b.kind not in dc.NOT_RUN]
    assert not unknown, f"not-run kinds must be one of {sorted(dc.NOT_RUN)}: {unknown}"
    assert set(dc.NOT_RUN) == {b.kind for b in NOT_RUN}, "a reason no block gives: drop it from NOT_RUN"
    listing = "\n".join(f"  {b.where:32} {b.kind:12} {b.code.strip().splitlines()[0][:60]}" for b in NOT_RUN)
    print(f"\n{len(NOT_RUN)} block(s) not run, {len(RUN)} run:\n{listing}")


@pytest.mark.parametrize("block", NOT_RUN, ids=[b.where for b in NOT_RUN])
def test_not_run(block):
    pytest.skip(f"{block.where} not run ({block.kind}): {dc.NOT_RUN.get(block.kind, '?')}")


@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_shown_command_prints_what_is_shown(block):
    problems = dc.diff(block, dc.run(block))
    assert not problems, f"\n{block.where}: {block.code.strip()}\n{problems}"


def test_a_changed_output_fails_with_the_diff_and_the_regeneration_command():
    block = next(b for b in RUN if b.file == "README.md" and b.shown and "verl-pdbg-validate" in b.code)
    ran = dc.run(block)
    assert dc.diff(block, ran) == ""
    stale = dc.Block(**{**block.__dict__, "shown": block.shown.replace("error", "warning", 1)})
    problems = dc.diff(stale, ran)
    assert "-" in problems and "+" in problems and "python tests/doc_commands.py" in problems
    wrong_rc = dc.Block(**{**block.__dict__, "options": {**block.options, "rc": "0"}})
    assert "exit status 1, the marker says rc=0" in dc.diff(wrong_rc, ran)


def test_select_keeps_the_lines_a_show_spec_names():
    out = "\n".join(f"l{i}" for i in range(1, 11))
    assert dc.select(out, None) == out
    assert dc.select(out, "1-3,-2") == "l1\nl2\nl3\n...\nl9\nl10"
    assert dc.select(out, "2") == "...\nl2\n..."
    assert dc.select(out, "1-20") == out


def test_normalize_and_mask():
    text = f"x {ROOT}/examples/a.sh:1:2 (resolved against {ROOT})\njudged as verl 0.9.1 (installed)  \n\n"
    assert dc.normalize_paths(text, []) == "x examples/a.sh:1:2 (resolved against .)\njudged as verl 0.9.1 (installed)"
    assert dc.normalize_paths("/opt/venv/lib/site-packages/verl_pdbg_conf/conf/x.json", []) == "verl_pdbg_conf/conf/x.json"
    assert dc.masked("judged as msprobe 8.3.3 (--msprobe-version)\ntook 1.5 s") == \
        "judged as msprobe <version> (<source>)\ntook <time>"


def test_regeneration_rewrites_only_the_output_lines(tmp_path):
    doc = tmp_path / "page.md"
    before = ("# Title\n\ntext\n\n<!-- run -->\n```bash\necho one; echo two; echo three\n```\n```text\nstale\n```\n\n"
              "<!-- run show=1,-1 -->\n```bash\nprintf 'a\\nb\\nc\\nd\\n'\n```\n\n```text\nold\n```\nafter\n")
    doc.write_text(before)
    assert dc.regenerate(check_only=True, paths=[doc]) == 1 and doc.read_text() == before
    assert dc.regenerate(paths=[doc]) == 0
    assert doc.read_text() == before.replace("stale", "one\ntwo\nthree").replace("old", "a\n...\nd")
    assert dc.regenerate(check_only=True, paths=[doc]) == 0


# --- the README and the reference pages --------------------------------------------------------------

def test_readme_is_at_most_200_lines():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= dc.README_MAX_LINES, f"README.md has {n} lines: move reference detail to docs/"


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _links(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    return [m.group(1) for m in _LINK.finditer(text)]


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    heads = re.findall(r"^#+ (.+)$", re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M),
                       flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_every_docs_page_is_linked_from_the_readme_or_the_docs_index():
    linked = set()
    for index in (ROOT / "README.md", ROOT / "docs" / "README.md"):
        linked |= {(index.parent / link.split("#")[0]).resolve() for link in _links(index) if "://" not in link}
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"not linked from README.md or docs/README.md: {missing}"
    assert (ROOT / "docs" / "README.md").resolve() in linked
    index = ROOT / "docs" / "README.md"
    listed = {(index.parent / link.split("#")[0]).resolve() for link in _links(index) if "://" not in link}
    unlisted = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p != index and p.resolve() not in listed]
    assert not unlisted, f"docs/README.md lists every page: {unlisted}"


def test_every_relative_link_resolves():
    broken = []
    for path in dc.doc_files():
        for link in _links(path):
            if "://" in link or link.startswith("mailto:"):
                continue
            target, _, anchor = link.partition("#")
            dest = (path.parent / target).resolve() if target else path
            if not dest.exists():
                broken.append(f"{path.relative_to(ROOT)}: {link} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{path.relative_to(ROOT)}: {link} (no such heading)")
    assert not broken, "\n".join(broken)


def test_docs_and_examples_name_no_machine_path():
    offenders = []
    files = dc.doc_files() + [p for p in (ROOT / "examples").rglob("*") if p.is_file()]
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for bad in ("/work/", "../shared", "/tmp/pdbg-example", "/root/"):
            if bad in text:
                offenders.append(f"{path.relative_to(ROOT)}: {bad}")
    assert not offenders, offenders


def test_config_blocks_a_reader_copies_parse_and_name_the_real_hook():
    """The YAML and JSON blocks are configuration to copy (pre-commit, GitHub Actions, editors): each
    parses, and a pre-commit snippet names the hook .pre-commit-hooks.yaml defines."""
    import json

    import yaml

    hooks = {h["id"] for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    blocks = [b for b in dc.all_blocks() if b.lang in ("yaml", "json")]
    assert blocks
    for b in blocks:
        data = yaml.safe_load(b.code) if b.lang == "yaml" else json.loads(b.code)
        if b.lang == "yaml" and "pre-commit-config" in b.code:
            ids = {h["id"] for repo in data["repos"] for h in repo["hooks"]}
            assert ids <= hooks, f"{b.where}: {ids - hooks}"
        for hook in (h for repo in (data if isinstance(data, list) else []) for h in repo.get("hooks", [])):
            if "files" in hook:
                re.compile(hook["files"])


def test_every_rule_and_option_is_documented():
    """Nothing the tools can say or take is left out of the reference."""
    from verl_pdbg_conf.core.rules import RULES

    text = "\n".join(p.read_text(encoding="utf-8") for p in dc.doc_files())
    missing = [r for r in RULES if f"`{r}`" not in text]
    assert not missing, f"rules missing from docs/: {missing}"
    for cli in ("cli.py", "compare/cli.py"):
        source = (ROOT / "verl_pdbg_conf" / cli).read_text(encoding="utf-8")
        options = set(re.findall(r'"(--[a-z][a-z0-9-]*)"', source))
        assert options and not [o for o in options if o not in text], f"options of {cli} missing from docs/"


@pytest.mark.slow
def _same_but_rounding(a: Path, b: Path) -> bool:
    """Two JSON files equal in every key, string, integer and shape, their floats within rounding: CPU
    torch's kernels sum in another order on another processor (a gradient's Mean of 0.0 against -9e-11)."""
    import json
    import math

    def same(x, y, scale: float = 0.0) -> bool:
        if isinstance(x, float) or isinstance(y, float):
            return isinstance(x, (int, float)) and isinstance(y, (int, float)) and \
                math.isclose(x, y, rel_tol=1e-6, abs_tol=max(1e-8, 1e-6 * scale))
        if isinstance(x, dict):
            # a Mean's rounding is that of its elements, not of the mean: values that nearly cancel
            # (a Mean of 0.0129 over elements of magnitude 3) part in the 6th digit on another processor
            big = [abs(v) for k in ("Max", "Min") for v in (x.get(k),) if isinstance(v, (int, float))]
            return isinstance(y, dict) and list(x) == list(y) and \
                all(same(x[k], y[k], max(big) if k == "Mean" and big else 0.0) for k in x)
        if isinstance(x, list):
            return isinstance(y, list) and len(x) == len(y) and all(same(u, v) for u, v in zip(x, y))
        return x == y

    return same(json.loads(a.read_text()), json.loads(b.read_text()))


def test_example_dumps_are_what_their_script_makes(tmp_path):
    """examples/compare/ is made by examples/make_compare_example.py, and making it again gives the
    same files (the runtime on CPU torch, one thread, fixed seeds), floats up to the rounding of another
    processor's kernels."""
    subprocess.run([sys.executable, str(ROOT / "examples" / "make_compare_example.py"), "--out", str(tmp_path)],
                   check=True, capture_output=True, cwd=tmp_path)
    ours = sorted(p.relative_to(ROOT / "examples" / "compare") for p in (ROOT / "examples" / "compare").rglob("*.json"))
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.json"))
    assert ours == made and ours
    differ = [str(p) for p in ours if not filecmp.cmp(ROOT / "examples" / "compare" / p, tmp_path / p, shallow=False)
              and not _same_but_rounding(ROOT / "examples" / "compare" / p, tmp_path / p)]
    assert not differ, f"examples/compare is stale: python examples/make_compare_example.py ({differ})"
    size = sum((tmp_path / p).stat().st_size for p in made)
    assert size < 400_000, f"the example dumps are {size} bytes"


def make_rollout_example(venv, root):
    """examples/make_rollout_example.py with the vllm venv's python, into root/rollout: made in the
    background while the suite runs (conftest.py)."""
    return release_venvs.run_scripts(venv, root, [[str(ROOT / "examples" / "make_rollout_example.py"), "--out",
                                                   str(root / "rollout")]], dict(os.environ, PYTHONPATH=str(ROOT)))


BACKGROUND_JOBS = {"rollout-example": ("vllm", make_rollout_example)}


def _same_tensor(a: Path, b: Path) -> bool:
    import torch

    x, y = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    return x.dtype == y.dtype and x.shape == y.shape and torch.allclose(x, y, rtol=1e-6, atol=1e-8)


@pytest.mark.slow
@pytest.mark.venvs("vllm")
def test_rollout_example_is_what_its_script_makes():
    """examples/rollout/ is made by examples/make_rollout_example.py (real vLLM on CPU, seeded, and the
    actor's forward), and making it again gives the same files: the same names, JSON and tensors equal up to
    the rounding of another processor's kernels."""
    made = release_venvs.job_root("rollout-example", "vllm", make_rollout_example) / "rollout"
    ours = ROOT / "examples" / "rollout"
    files = sorted(p.relative_to(ours) for p in ours.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(made) for p in made.rglob("*") if p.is_file()) and files
    same = {".json": _same_but_rounding, ".pt": _same_tensor}
    differ = [str(p) for p in files if not filecmp.cmp(ours / p, made / p, shallow=False)
              and not same[p.suffix](ours / p, made / p)]
    assert not differ, f"examples/rollout is stale: python examples/make_rollout_example.py in the vllm venv ({differ})"
    size = sum((made / p).stat().st_size for p in files)
    assert size < 700_000, f"the rollout example is {size} bytes"
