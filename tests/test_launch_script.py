"""Launch scripts: the shell reader (words, positions, quoting, variables) and the scripts
under tests/examples/scripts, shaped like verl's own examples/ scripts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verl_pdbg_conf.context import Options
from verl_pdbg_conf.core.document import Unknown
from verl_pdbg_conf.core.findings import Severity
from verl_pdbg_conf.launch_scripts.launch_script import is_launch_script, read_script, validate_script
from verl_pdbg_conf.launch_scripts.shell_words import Reader

EX = Path(__file__).parent / "examples" / "scripts"
POSITIVE = sorted((EX / "positive").glob("*.sh"))
NEGATIVE = sorted((EX / "negative").glob("*.sh"))
EXPECT = re.compile(r"^# expect: (\S+) (\d+) (\d+)$", re.M)


def words(src: str):
    return [[(w.text, w.line, w.column) for w in c.words] for c in Reader(src).commands()]


def invocation(src: str, tmp_path, name="run.sh"):
    p = tmp_path / name
    p.write_text(src)
    invs, findings = read_script(str(p))
    return invs, findings


# ------------------------------------------------------------------ the shell reader

def test_continuations_quotes_and_positions():
    src = "python3 -m m \\\n    a.b='x y' \\\n  c=\"q\\\"r\" d=$'t\\tu'\n"
    assert words(src) == [[("python3", 1, 1), ("-m", 1, 9), ("m", 1, 12), ("a.b=x y", 2, 5),
                           ('c=q"r', 3, 3), ("d=t\tu", 3, 12)]]


def test_comments_separators_and_redirections():
    src = "a # not b\nb x; c y && d | e 2>&1 > log.txt\nf <<EOF\npython3 -m verl.trainer.main_ppo x=1\nEOF\ng"
    assert [c[0][0] for c in words(src)] == ["a", "b", "c", "d", "e", "f", "g"]
    assert words(src)[4] == [("e", 2, 17)]  # redirections and their targets are not arguments


def test_hash_inside_a_word_is_not_a_comment():
    assert words("x a#b '#c'")[0][1:] == [("a#b", 1, 3), ("#c", 1, 7)]


def test_variables_known_unknown_and_defaults():
    src = "A=1\nB=${A}2\nC=${NOPE:-dflt}\nx $A ${B} $C pre$HOME $(date) `id` ~/x $1 \"$@\"\n"
    from verl_pdbg_conf.launch_scripts.shell_words import Variables

    v = Variables()
    out = []
    for cmd in Reader(src, v).commands():
        if all("=" in w.text and w.text[0].isupper() for w in cmd.words):
            for w in cmd.words:
                name, _, value = w.text.partition("=")
                v.set(name, value if w.known else None, w.unknown)
        else:
            out = cmd.words
    got = [(w.text, w.known) for w in out[1:4]]
    assert got == [("1", True), ("12", True), ("${C}", False) if False else ("$C", False)]
    assert "NOPE" in out[3].unknown and "dflt" in out[3].unknown
    for w in out[4:]:
        assert not w.known, w.text
    assert out[4].unknown_at == 3  # `pre` is known, the rest is not


def test_brace_expansion_is_flagged_not_performed():
    w = Reader("x k={a,b} 'k={a,b}' k={a}").commands().__next__().words
    assert [x.brace for x in w[1:]] == [True, False, False]


# ------------------------------------------------------------------ invocations

@pytest.mark.parametrize("line", [
    "python3 -m verl.trainer.main_ppo",
    "python -m verl.trainer.main_ppo",
    "python3 -u -m verl.trainer.main_ppo",
    "python3 -um verl.trainer.main_ppo",
    "python3 -X faulthandler -mverl.trainer.main_ppo",
    "/opt/conda/bin/python3.11 -m verl.trainer.main_ppo",
    "HYDRA_FULL_ERROR=1 nohup python3 -m verl.trainer.main_ppo",
    "ray job submit --address http://x:8265 -- python3 -m verl.trainer.main_ppo",
    "python3 verl/trainer/main_ppo.py",
])
def test_invocation_forms(tmp_path, line):
    invs, _ = invocation(line + " \\\n  trainer.nnodes=1\n", tmp_path)
    assert len(invs) == 1 and [o.text for o in invs[0].overrides] == ["trainer.nnodes=1"]
    assert invs[0].config_name == "ppo_trainer"


@pytest.mark.parametrize("line", ["python3 -m verl.trainer.main_generation x=1", "python3 -c 'import verl' x=1",
                                  "echo python3 -m verl.trainer.main_ppo", "torchrun -m other x=1"])
def test_not_an_invocation(tmp_path, line):
    invs, _ = invocation(line + "\n", tmp_path)
    assert [i.module for i in invs] in ([], ["verl.trainer.main_ppo"][:0])


def test_override_forms_positions_and_unknowns(tmp_path):
    src = ("set -x\nSTEPS='[1,2]'\nCFG=$HOME/c.json\n"
           "python3 -m verl.trainer.main_ppo --config-name ppo_trainer \\\n"
           "  global_profiler.steps=$STEPS \\\n"  # line 5
           "  +global_profiler.global_tool_config.precision_debugger.config_path=\"$CFG\" \\\n"
           "  ++a.b=x~y ~c.d hydra.run.dir=out \\\n"
           "  e.f=\"${UNSET:-z}\" g.h=pre_${X}_post $@\n")
    invs, _ = invocation(src, tmp_path)
    (inv,) = invs
    texts = [o.text for o in inv.overrides]
    assert texts[0] == "global_profiler.steps=[1,2]"
    assert (inv.overrides[0].line, inv.overrides[0].column) == (5, 3)
    cfg = inv.overrides[1]
    assert isinstance(cfg.unknown, Unknown) and cfg.unknown == "$CFG" and "$HOME" in cfg.unknown.reason
    assert texts[2:4] == ["++a.b=x~y", "~c.d"]
    assert all(not t.startswith("hydra.") for t in texts)
    e, g = inv.overrides[4], inv.overrides[5]
    assert e.unknown is not None and "UNSET" in e.unknown.reason and "'z'" in e.unknown.reason
    assert g.unknown == "pre_$X_post"
    assert any(f.rule == "launch-script" and f.severity is Severity.INFO and "$@" in f.message
               for f in inv.findings)


def test_assignments_inside_blocks_and_after_source_are_unknown(tmp_path):
    src = ("A=1\nif [ -n \"$X\" ]; then\n  A=2\nfi\nB=1\nsource .env\n"
           "python3 -m verl.trainer.main_ppo a.a=$A b.b=$B\n")
    (inv,), _ = invocation(src, tmp_path)
    a, b = inv.overrides
    assert a.unknown is not None and "block" in a.unknown.reason
    assert b.unknown is not None and "source" in b.unknown.reason


def test_cd_makes_relative_config_path_unknown(tmp_path):
    (inv,), _ = invocation("cd $(dirname $0)\npython3 -m verl.trainer.main_ppo x.y=1\n", tmp_path)
    assert inv.cwd == ""


def test_is_launch_script(tmp_path):
    a = tmp_path / "train"
    a.write_text("#!/usr/bin/env bash\npython3 -m verl.trainer.main_ppo\n")
    b = tmp_path / "conf.yaml"
    b.write_text("#!/bin/bash\n")
    assert is_launch_script(str(a)) and is_launch_script("x/run.sh") and not is_launch_script(str(b))


# ------------------------------------------------------------------ composed and validated

def run(path: Path):
    return validate_script(str(path), Options(base_dir=str(EX))).sorted()


@pytest.mark.parametrize("path", POSITIVE, ids=lambda p: p.name)
def test_positive_script_has_no_error(path):
    findings = run(path)
    assert [f for f in findings if f.severity is Severity.ERROR] == []
    assert all(f.file == str(path) or f.file.endswith(".json") for f in findings)


@pytest.mark.parametrize("path", NEGATIVE, ids=lambda p: p.name)
def test_negative_script_finding_at_script_line_and_column(path):
    expects = EXPECT.findall(path.read_text())
    assert expects, f"{path.name} has no `# expect: RULE LINE COL` line"
    findings = run(path)
    for rule, line, col in expects:
        hit = [f for f in findings if f.rule == rule and f.file == str(path) and f.line == int(line)
               and f.column == int(col) and f.severity is Severity.ERROR]
        assert hit, f"no {rule} at {line}:{col} in\n" + "\n".join(
            f"  {f.rule} {f.file}:{f.line}:{f.column} {f.message}" for f in findings)


def test_unknown_config_path_is_not_judged(tmp_path):
    p = tmp_path / "run.sh"
    p.write_text("python3 -m verl.trainer.main_ppo \\\n  global_profiler.tool=precision_debugger \\\n"
                 "  global_profiler.steps=[1] actor_rollout_ref.actor.use_kl_loss=True \\\n"
                 "  +global_profiler.global_tool_config.precision_debugger.config_path=$CFG \\\n"
                 "  actor_rollout_ref.actor.profiler.enable=True\n")
    findings = validate_script(str(p), Options(base_dir=str(tmp_path))).sorted()
    assert not [f for f in findings if f.severity is Severity.ERROR]
    (w,) = [f for f in findings if f.rule == "interpolation"]
    assert (w.line, w.column) == (4, 3) and "$CFG" in w.message


def test_script_without_invocation_is_a_note(tmp_path):
    p = tmp_path / "prep.sh"
    p.write_text("#!/bin/bash\npython3 examples/data_preprocess/gsm8k.py --local_dir ~/data/gsm8k\n")
    (f,) = validate_script(str(p)).sorted()
    assert f.severity is Severity.INFO and f.rule == "no-profiler-config"


def test_cli_launch_script_mode(capsys, monkeypatch):
    from verl_pdbg_conf.cli import main

    monkeypatch.chdir(EX)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    assert main(["negative/stage_typo.sh", "positive/run_deepseek7b_no_profiler.sh"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("negative/stage_typo.sh:15:5: error stage-unknown ")
    assert main(["--verl", "negative/stage_typo.sh"]) == 2
