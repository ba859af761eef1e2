"""The launch-script reader against real bash: each script is run by bash with a recording
`python3` (tests/bash_oracle.py) and the words main_ppo receives must fit the words the reader
gives for that command (an unknown part of the reader's word stands for any text)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bash_oracle import Sandbox, compare_words, launches, module_args, overrides_run_as_commands, same_words
from verl_pdbg_conf.launch_scripts.launch_script import read_script

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

EX = Path(__file__).parent / "examples" / "scripts"
SCRIPTS = sorted(p for d in ("positive", "negative", "unjudged") for p in (EX / d).glob("*.sh"))


@pytest.fixture(scope="module")
def examples_box():
    with Sandbox(str(EX)) as box:
        yield box


# what the environment must hold for bash to reach the launch (the scripts stop without it)
ENV = {"config_path_from_env.sh": {"CONFIG_PATH": "/opt/configs"},
       "python_var_module_after_unknown_cd.sh": {"WORKDIR": ".", "PYTHON_BIN": "python3"}}


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_script_words_are_what_bash_passes(examples_box, path):
    calls, ended = examples_box.run(str(path), env=ENV.get(path.name))
    assert not ended
    runs = launches(calls)
    assert runs, "bash made no main_ppo launch"
    problems, paired = compare_words(str(path), str(EX), runs)
    assert problems == [] and paired == len(runs)


def bash_and_reader(tmp_path, src: str):
    """(bash's words for the one main_ppo launch, the reader's words for it)."""
    p = tmp_path / "run.sh"
    p.write_text(src)
    with Sandbox(str(tmp_path)) as box:
        calls, _ = box.run(str(p))
    (call,) = [c for c in calls if module_args(c["args"])[0] == "verl.trainer.main_ppo"]
    (inv,) = read_script(str(p), launch_dir=str(tmp_path))[0]
    return module_args(call["args"])[1], inv


FORMS = {
    "value built from variables, unquoted": 'A="a.a=1\n  a.b=2"\nB="x.x=$HOME/d \\\n  y.y=3"\nC="$A $B"\n'
                                             "python3 -m verl.trainer.main_ppo $C\n",
    "split inside a longer word": 'V="1 b.b=2"\npython3 -m verl.trainer.main_ppo a.a=$V\n',
    "empty and blank expansions pass nothing": 'E=""\nS="  "\npython3 -m verl.trainer.main_ppo $E $S "$E" k.k=1\n',
    "assignment is not split": 'V="1 2"\nW=$V\npython3 -m verl.trainer.main_ppo "w.w=$W"\n',
    "array extended in if": 'X=(m=megatron a.b=1)\nif [ -n "$NOPE" ]; then\n  X+=(c.d=2)\nfi\n'
                            'if [ -z "$NOPE" ]; then\n  X+=(e.f=3)\nfi\npython3 -m verl.trainer.main_ppo "${X[@]}"\n',
    "assignment after && / ||": '[ 1 -gt 2 ] && v=yes || v=no\npython3 -m verl.trainer.main_ppo v.v=$v\n',
    "prefix and suffix around an array": 'A=(1 2 3)\npython3 -m verl.trainer.main_ppo "k.k=[${A[@]}]"\n',
    "tilde after NAME=": 'M=~/models/q\npython3 -m verl.trainer.main_ppo m.p=$M k=~/x a.b=~/y\n',
    "backslash ending the file": "python3 -m verl.trainer.main_ppo \\\n  a.a=1 \\\n  b.b=2 \\",
    "unknown parts stay in their word": 'P=${P:-/opt/m}\nS="p.p=$P/x q.q=$(nproc)"\n'
                                        "python3 -m verl.trainer.main_ppo $S\n",
}


@pytest.mark.parametrize("src", FORMS.values(), ids=FORMS.keys())
def test_shell_forms_read_as_bash_reads_them(tmp_path, src):
    bash, inv = bash_and_reader(tmp_path, src)
    assert same_words(inv.args, bash) == "", (bash, [w.text for w in inv.args])


def test_split_words_are_placed_where_written(tmp_path):
    _, inv = bash_and_reader(tmp_path, FORMS["value built from variables, unquoted"])
    assert [(w.text, w.line, w.column) for w in inv.args[:2]] == [("a.a=1", 1, 4), ("a.b=2", 2, 3)]
    assert [w.known for w in inv.args] == [True, True, False, True]  # x.x=$HOME/d: $HOME not known here


def test_array_extended_in_if_keeps_its_first_elements(tmp_path):
    bash, inv = bash_and_reader(tmp_path, FORMS["array extended in if"])
    assert bash == ["m=megatron", "a.b=1", "e.f=3"]
    assert [(w.text, bool(w.maybe)) for w in inv.args] == [("m=megatron", False), ("a.b=1", False),
                                                            ("c.d=2", True), ("e.f=3", True)]
    assert [o.text for o in inv.overrides] == ["m=megatron", "a.b=1"]  # the branch's: one note, not judged
    notes = [f for f in inv.findings if "branch" in f.message]  # one per branch
    assert [(f.line, f.message.split(" ")[0]) for f in notes] == [(3, "1"), (6, "1")]


def test_the_comparison_can_fail():
    """same_words is not a rubber stamp: a missing, extra or different word is reported."""
    from verl_pdbg_conf.launch_scripts.shell_words import Reader

    (cmd,) = Reader("x a.a=1 b.b=$HOME/x").commands()
    ours = cmd.words[1:]
    assert same_words(ours, ["a.a=1", "b.b=/root/x"]) == ""
    assert same_words(ours, ["a.a=1"]) != ""
    assert same_words(ours, ["a.a=1", "b.b=/root/x", "c"]) != ""
    assert same_words(ours, ["a.a=2", "b.b=/root/x"]) != ""
    assert same_words(ours, ["a.a=1", "c.c=/root/x"]) != ""


@pytest.mark.parametrize("name", ["comment_inside_continuation.sh", "trailing_space_after_backslash.sh"])
def test_a_broken_continuation_is_bash_running_an_override_as_a_command(examples_box, name):
    """What the reader reports as a broken `\\` continuation, bash really does: the next override
    line is run as a command of its own (and a clean script has none)."""
    calls, _ = examples_box.run(str(EX / "negative" / name))
    assert overrides_run_as_commands(calls)
    calls, _ = examples_box.run(str(EX / "positive" / "run_qwen2-0.5b_grpo_pdbg.sh"))
    assert overrides_run_as_commands(calls) == []
