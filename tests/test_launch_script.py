"""Launch scripts: the shell reader (words, positions, quoting, variables) and the scripts
under tests/examples/scripts, shaped like verl's own examples/ scripts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    "exec python3 -m verl.trainer.main_ppo",
    'exec "${PYTHON_BIN}" -m verl.trainer.main_ppo',
    "$PYTHON -m verl.trainer.main_ppo",
    '"${PYTHON:-python3}" -u -m verl.trainer.main_ppo',
    "${PY_EXE} -m verl.trainer.main_ppo",
    "$(which python) -m verl.trainer.main_ppo",
    "exec `command -v python3` -m verl.trainer.main_ppo",
    "PY=/usr/bin/python3.10; exec $PY -m verl.trainer.main_ppo",
    'PYTHON_BIN=$(which python3)\nexec "$PYTHON_BIN" -m verl.trainer.main_ppo',
    'LAUNCH=(python3)\nif [ -n "$UV" ]; then\n  LAUNCH=(uv run python3)\nfi\n"${LAUNCH[@]}" -m verl.trainer.main_ppo',
    "RUN=python3\n$RUN -m verl.trainer.main_ppo",
    "$RUNNER -m verl.trainer.main_ppo",
])
def test_invocation_forms(tmp_path, line):
    invs, _ = invocation(line + " \\\n  trainer.nnodes=1\n", tmp_path)
    assert len(invs) == 1 and [o.text for o in invs[0].overrides] == ["trainer.nnodes=1"]
    assert invs[0].config_name == "ppo_trainer"


@pytest.mark.parametrize("line", ["python3 -m verl.trainer.main_generation x=1", "python3 -c 'import verl' x=1",
                                  "echo python3 -m verl.trainer.main_ppo", "torchrun -m other x=1",
                                  "$TOOL run verl.trainer.main_ppo x=1", "exec $HOME/bin/run -m verl.trainer.main_ppo",
                                  "$RUNNER -m tools.convert x=1",
                                  "$PYTHON -c 'import verl.trainer.main_ppo' x=1"])
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


@pytest.mark.parametrize("cd,where", [
    ("", "."), ("cd sub", "sub"), ("cd /abs/dir", "/abs/dir"), ("pushd sub/deeper\npopd", "."),
    ('cd "$(dirname "$0")/.."', ".."), ("cd $(dirname $0)", "."), ('cd "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"', "."),
    ('ROOT=$(cd "$(dirname "$0")/.." && pwd)\ncd $ROOT/sub', "../sub"), ("cd sub\ncd $PWD/deeper", "sub/deeper"),
    ("cd $WORKDIR", None), ("cd ~/x", None), ("if [ -d x ]; then\n  cd x\nfi", None), ("cd sub\ncd $(git rev-parse --show-toplevel)", None),
])
def test_cwd_follows_the_scripts_cds_from_the_launch_directory(tmp_path, cd, where):
    """The directory each invocation runs in, absolute: the launch directory (the repository root), moved
    by `cd`/`pushd`; `$(dirname "$0")` is the script's directory; None where a `cd` cannot be known."""
    (tmp_path / "scripts").mkdir()
    p = tmp_path / "scripts" / "run.sh"
    p.write_text(f"{cd}\npython3 -m verl.trainer.main_ppo x.y=1\n")
    (inv,), _ = read_script(str(p), launch_dir=str(tmp_path))
    base = tmp_path / "scripts" if "$0" in cd or "BASH_SOURCE" in cd else tmp_path
    expect = None if where is None else where if where.startswith("/") else str((base / where).resolve())
    assert inv.cwd == expect


@pytest.mark.parametrize("set_pp,expect", [
    ("export PYTHONPATH=$PYTHONPATH:lib", ["lib"]),
    ('export PYTHONPATH="${PYTHONPATH}:$(pwd)/lib:/opt/x"', ["lib", "/opt/x"]),
    ('PYTHONPATH="$(dirname "$0")/..":$PYTHONPATH', [".."]),
    ("export PYTHONPATH=a\nexport PYTHONPATH=$PYTHONPATH:b", ["a", "b"]),
    ("export PYTHONPATH=a\nexport PYTHONPATH=b", ["b"]),
    ("export PYTHONPATH=$SOMEWHERE:a", ["a"]),
    ("cd sub\nexport PYTHONPATH=$PWD:$PYTHONPATH", ["sub"]),
    ("", []),
])
def test_pythonpath_entries_set_in_the_script(tmp_path, set_pp, expect):
    p = tmp_path / "run.sh"
    p.write_text(f"{set_pp}\npython3 -m verl.trainer.main_ppo x.y=1\n")
    (inv,), _ = read_script(str(p), launch_dir=str(tmp_path))
    assert inv.pythonpath == [e if e.startswith("/") else str((tmp_path / e).resolve()) for e in expect]


def _entry_module(root: Path, module: str, config_name: str) -> Path:
    """A module declaring @hydra.main(config_path="config", config_name=...) with its config beside it."""
    src = root / (module.replace(".", "/") + ".py")
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(f'import hydra\n\n@hydra.main(version_base=None,\n    config_path="config", config_name="{config_name}")\n'
                   "def main(config):\n    pass\n")
    (src.parent / "config").mkdir(exist_ok=True)
    (src.parent / "config" / f"{config_name}.yaml").write_text("trainer:\n  total_epochs: 1\n")
    return src


@pytest.mark.parametrize("module", ["verl.trainer.main_ppo_format", "verl.trainer.main_ppo_async",
                                    "recipe.dapo.main_dapo", "my_project.train.main_grpo"])
def test_repository_module_with_hydra_main_is_an_entry(tmp_path, module):
    """Any -m module of the repository whose source declares @hydra.main: its config_path and
    config_name as Hydra reads them, relative to the module's file."""
    src = _entry_module(tmp_path, module, "special_trainer")
    p = tmp_path / "scripts" / "run.sh"
    p.parent.mkdir()
    p.write_text(f"exec $PYTHON -m {module} \\\n  trainer.total_epochs=2\n")
    (inv,), _ = read_script(str(p), launch_dir=str(tmp_path))
    assert (inv.module, inv.config_name, inv.entry.source) == (module, "special_trainer", str(src))
    assert inv.config_dir == str(src.parent / "config") and not inv.unjudged
    assert [o.text for o in inv.overrides] == ["trainer.total_epochs=2"]


def test_module_is_resolved_as_python_does_from_the_launch_directory(tmp_path):
    """`python -m` looks in the directory it runs in, then PYTHONPATH: with the module in both the
    repository root and a sub-project, the `cd` and the PYTHONPATH decide which one runs."""
    root_src = _entry_module(tmp_path, "proj.main_ppo", "root_trainer")
    sub_src = _entry_module(tmp_path / "sub", "proj.main_ppo", "sub_trainer")
    lib_src = _entry_module(tmp_path / "lib", "other.main_rl", "lib_trainer")
    p = tmp_path / "run.sh"
    p.write_text("python3 -m proj.main_ppo a.a=1\ncd sub\npython3 -m proj.main_ppo b.b=1\n"
                 "PYTHONPATH=../lib python3 -m other.main_rl c.c=1\ncd /\n"
                 "PYTHONPATH=" + str(tmp_path / "sub") + " python3 -m proj.main_ppo d.d=1\n")
    a, b, c, d = read_script(str(p), launch_dir=str(tmp_path))[0]
    assert [i.entry.source for i in (a, b, c, d)] == [str(root_src), str(sub_src), str(lib_src), str(sub_src)]
    assert [i.config_name for i in (a, b, c, d)] == ["root_trainer", "sub_trainer", "lib_trainer", "sub_trainer"]


def test_pythonpath_on_the_command_line_counts_for_that_command_only(tmp_path):
    p = tmp_path / "run.sh"
    p.write_text("PYTHONPATH=lib:$PYTHONPATH python3 -m verl.trainer.main_ppo a.a=1\n"
                 "env PYTHONPATH=/x python3 -m verl.trainer.main_ppo b.b=1\npython3 -m verl.trainer.main_ppo c.c=1\n")
    a, b, c = read_script(str(p), launch_dir=str(tmp_path))[0]
    assert (a.pythonpath, b.pythonpath, c.pythonpath) == ([str(tmp_path / "lib")], ["/x"], [])


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
    assert read_script(str(path), launch_dir=str(EX))[0], "no main_ppo invocation seen"  # judged, not skipped
    findings = run(path)
    assert [f for f in findings if f.severity is Severity.ERROR] == []
    assert not [f for f in findings if "not judged" in f.message]  # composed and judged, not skipped
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


UNJUDGED = sorted((EX / "unjudged").glob("*.sh"))


@pytest.mark.parametrize("path", UNJUDGED, ids=lambda p: p.name)
def test_unknowable_config_script_gives_exactly_one_warning(path):
    """Scripts whose config cannot be known here, each with mistakes in its overrides: exactly one
    finding, a warning at the word that makes it unknowable, and nothing judged."""
    (rule, line, col), = EXPECT.findall(path.read_text())
    (f,) = run(path)
    assert (f.rule, f.severity, f.file, f.line, f.column) == (rule, Severity.WARNING, str(path), int(line), int(col))
    assert "not judged" in f.message


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


# ------------------------------------------------------------------ Hydra's command line, as main_ppo reads it

def errors(findings):
    return [f for f in findings if f.severity is Severity.ERROR]


MEGATRON_ONLY = "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"  # not a key of ppo_trainer


@pytest.mark.parametrize("flags", [
    "--config-path=config --config-name=ppo_megatron_trainer",
    "--config-path config --config-name ppo_megatron_trainer.yaml",
    "-cp config -cn ppo_megatron_trainer",
    "-cp=./config -cn='ppo_megatron_trainer'",
    "--config-path=./config --config-name='ppo_megatron_trainer.yaml'",
    "--config-name=ppo_megatron_trainer",
])
def test_relative_config_path_is_verls_own_tree(tmp_path, flags):
    """Hydra resolves a relative --config-path against verl/trainer/ (the directory of the module
    declaring @hydra.main), so `config` is verl's tree wherever the script is launched from."""
    p = tmp_path / "run.sh"
    p.write_text(f"python3 -m verl.trainer.main_ppo {flags} \\\n  {MEGATRON_ONLY}\n")
    (inv,), _ = read_script(str(p))
    assert (inv.config_dir, inv.config_name, inv.unjudged) == (None, "ppo_megatron_trainer", False)
    assert errors(validate_script(str(p), Options(base_dir=str(tmp_path))).findings) == []
    p.write_text(f"python3 -m verl.trainer.main_ppo \\\n  {MEGATRON_ONLY}\n")  # ppo_trainer has no such key
    (e,) = errors(validate_script(str(p), Options(base_dir=str(tmp_path))).findings)
    assert e.rule == "override" and (e.line, e.column) == (2, 3)


BAD_OVERRIDES = "".join(f"  no_such_section.key{i}=1 \\\n" for i in range(20)) + "  global_profiler.steps=[0]\n"


@pytest.mark.parametrize("line,why", [
    ('--config-path="$CONFIG_PATH" --config-name=ppo_trainer', "$CONFIG_PATH"),
    ("--config-path=config --config-name=$CONFIG_NAME", "$CONFIG_NAME"),
    ("-cp /no/such/dir/anywhere -cn ppo_trainer", "does not exist"),
    ("--config-path=../../somewhere_else", "verl/trainer"),
    ("-cd $EXTRA_CONFIGS", "EXTRA_CONFIGS"),
])
def test_unknowable_config_gives_one_warning_and_no_judging(tmp_path, line, why):
    p = tmp_path / "run.sh"
    p.write_text(f"python3 -m verl.trainer.main_ppo {line} \\\n{BAD_OVERRIDES}")
    findings = validate_script(str(p), Options(base_dir=str(tmp_path))).findings
    (w,) = findings
    assert w.severity is Severity.WARNING and why in w.message and "not judged" in w.message
    assert (w.file, w.line) == (str(p), 1)


def test_unknown_entry_point_copy_gives_one_warning(tmp_path):
    p = tmp_path / "run.sh"
    p.write_text(f"python3 -m someproject.trainer.main_ppo \\\n{BAD_OVERRIDES}")
    (w,) = validate_script(str(p), Options(base_dir=str(tmp_path))).findings
    assert w.severity is Severity.WARNING and "someproject.trainer.main_ppo" in w.message
    p.write_text("python3 examples/data_preprocess/gsm8k.py --local_dir x\npython3 -m tools.convert a.b=1\n")
    assert read_script(str(p))[0] == []  # not training launches: not entry points


def test_config_name_missing_from_verls_tree_is_one_error(tmp_path):
    p = tmp_path / "run.sh"
    p.write_text(f"python3 -m verl.trainer.main_ppo --config-path=config \\\n  --config-name=ppo_trainer_v9 \\\n"
                 f"{BAD_OVERRIDES}")
    (e,) = validate_script(str(p), Options(base_dir=str(tmp_path))).findings
    assert e.severity is Severity.ERROR and "ppo_trainer_v9" in e.message and (e.line, e.column) == (2, 3)


def test_user_config_dir_next_to_the_script_composes_with_verls_defaults(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "mine.yaml").write_text(
        "hydra:\n  searchpath:\n    - pkg://verl.trainer.config\ndefaults:\n  - ppo_trainer\n  - _self_\n"
        "global_profiler:\n  tool: precision_debugger\n  steps: [0]\n")
    for cp in ('"$(dirname "$0")/cfg"', '"$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cfg"', "cfg",
               str(tmp_path / "cfg")):
        p = tmp_path / "run.sh"
        p.write_text(f"python3 -m verl.trainer.main_ppo --config-path={cp} --config-name=mine \\\n"
                     "  trainer.total_epochs=1\n")
        (inv,), _ = read_script(str(p))
        assert inv.config_dir == str(tmp_path / "cfg") or cp == "cfg", cp
        if cp == "cfg":  # relative: Hydra reads it against verl/trainer/, not the script's directory
            assert inv.unjudged
            continue
        found = errors(validate_script(str(p), Options(base_dir=str(tmp_path))).findings)
        assert "steps-range" in [f.rule for f in found], found  # mine.yaml's step 0, composed and judged


# ------------------------------------------------------------------ arrays, sourced files, wrappers

def test_arrays_expand_with_each_elements_position(tmp_path):
    src = ('A=(x.a=1 "x.b=two words"\n   # a comment line inside the array\n   x.c=$HOME)\nA+=(x.d=4)\n'
           'declare -a B=(y.a=1)\nC="z.a=1 z.b=2"\n'
           'python3 -m verl.trainer.main_ppo "${A[@]}" ${B[*]} $C "$C" "${B[0]}" "${NOPE[@]}"\n')
    (inv,), _ = invocation(src, tmp_path)
    got = [(o.text.split("=")[0], o.line, o.column, o.unknown is None) for o in inv.overrides]
    assert got == [("x.a", 1, 4, True), ("x.b", 1, 10, True), ("x.c", 3, 4, False), ("x.d", 4, 5, True),
                   ("y.a", 5, 15, True),  # array elements at their own positions
                   ("z.a", 6, 4, True), ("z.b", 6, 10, True),  # an unquoted $C is split, each where it is written
                   ("z.a", 7, 55, True), ("y.a", 7, 60, True)]
    assert inv.overrides[7].text == "z.a=1 z.b=2"  # quoted: one word, as bash passes it
    assert any("NOPE" in f.message for f in inv.findings)  # an unknown array: noted, not judged


def test_array_assigned_in_a_block_is_unknown(tmp_path):
    (inv,), _ = invocation("if [ x ]; then\n  A=(a.b=1)\nfi\npython3 -m verl.trainer.main_ppo \"${A[@]}\"\n",
                           tmp_path)
    assert inv.overrides == [] and any("block" in f.message for f in inv.findings)


def test_sourced_file_next_to_the_script_is_read(tmp_path):
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "common.sh").write_text("STEPS='[1,2]'\nARGS=(k.a=1)\n")
    for how in ('source "$(dirname "$0")/env/common.sh"', ". ./env/common.sh", "source env/common.sh",
                'SCRIPT_DIR=$(cd $(dirname $0); pwd)\n. "$SCRIPT_DIR/env/common.sh"'):
        (inv,), _ = invocation(f"{how}\npython3 -m verl.trainer.main_ppo s.s=$STEPS \"${{ARGS[@]}}\"\n", tmp_path)
        assert [o.text for o in inv.overrides] == ["s.s=[1,2]", "k.a=1"], how
    (inv,), _ = invocation("X=1\nsource /etc/no-such-env.sh\npython3 -m verl.trainer.main_ppo x.x=$X\n", tmp_path)
    assert inv.overrides[0].unknown is not None  # a file that is not here may change anything


def test_wrapper_passes_its_overrides_through_dollar_at(tmp_path):
    (tmp_path / "base.sh").write_text("python3 -m verl.trainer.main_ppo a.a=1 \"$@\" b.b=$1\n")
    (tmp_path / "wrap.sh").write_text("set -x\nbash $(dirname $0)/base.sh c.c=3 \\\n  d.d=4\n")
    invs, _ = read_script(str(tmp_path / "wrap.sh"))
    (inv,) = invs
    assert [(o.text, o.file or inv.file) for o in inv.overrides] == [
        ("a.a=1", str(tmp_path / "base.sh")), ("c.c=3", str(tmp_path / "wrap.sh")),
        ("d.d=4", str(tmp_path / "wrap.sh")), ("b.b=c.c=3", str(tmp_path / "base.sh"))]
    assert [(o.line, o.column) for o in inv.overrides[1:3]] == [(2, 28), (3, 3)]


def test_reader_never_raises_on_odd_scripts(tmp_path):
    odd = ["A=(", "A=(a b", 'x "unterminated', "$(", "${", "python3 -m verl.trainer.main_ppo ${A[@", "B=(())",
           "python3 -m verl.trainer.main_ppo -cp", "python3 -m verl.trainer.main_ppo --config-name=",
           "bash ./missing.sh a.b=1", "source", "cat <<EOF\nx", "f() { python3 -m verl.trainer.main_ppo x=1; }",
           "python3 -m verl.trainer.main_ppo \"${A[@]:1}\" ${#A[@]} ${A[-1]}", "bash run.sh x=1"]
    for src in odd:
        p = tmp_path / "run.sh"
        p.write_text(src)
        validate_script(str(p), Options(base_dir=str(tmp_path)))


# ------------------------------------------------------------------ the guide's CLI lines in a realistic script

# The guide's "Minimal CLI example" (Precision Debugger (msprobe) in verl), with a real config.json.
GUIDE_CLI = """\
  global_profiler.tool=precision_debugger \\
  global_profiler.steps='[1,2]' \\
  global_profiler.save_path=outputs/profile \\
  +global_profiler.global_tool_config.precision_debugger.config_path=configs/statistics_l1.json \\
  actor_rollout_ref.actor.profiler.enable=True \\
  actor_rollout_ref.ref.profiler.enable=True \\
  +global_profiler.global_tool_config.precision_debugger.stages='[actor_compute_log_prob,ref_compute_log_prob,actor_update]' \\
"""


def _insert_guide_lines(script: Path, dst: Path, cli: str) -> int:
    """The guide's lines right after the script's main_ppo line; returns the first inserted line."""
    lines = script.read_text().splitlines(keepends=True)
    (k,) = [i for i, ln in enumerate(lines) if "verl.trainer.main_ppo" in ln]
    dst.write_text("".join(lines[:k + 1]) + cli + "".join(lines[k + 1:]))
    return k + 2


@pytest.mark.parametrize("script", ["run_deepseek7b_no_profiler.sh", "run_gemma_ppo_critic_no_profiler.sh",
                                    "run_qwen2.5-7b_megatron_arrays_no_profiler.sh"])
@pytest.mark.parametrize("plant", [None, "stage", "step0"])
def test_guide_cli_inserted_into_a_realistic_script(tmp_path, script, plant):
    cli, expect = GUIDE_CLI, None
    if plant == "stage":
        cli = cli.replace("ref_compute_log_prob,", "ref_compute_logprob,")
        expect = ("stage-unknown", 6)
    elif plant == "step0":
        cli = cli.replace("steps='[1,2]'", "steps='[0,2]'")
        expect = ("steps-range", 1)
    dst = tmp_path / script
    first = _insert_guide_lines(EX / "positive" / script, dst, cli)
    findings = validate_script(str(dst), Options(base_dir=str(EX))).findings
    pdbg_errors = [f for f in errors(findings) if f.rule != "override" or "profiler" in f.message]
    if expect is None:
        assert pdbg_errors == [], pdbg_errors
        return
    (f,) = pdbg_errors
    assert (f.rule, f.file, f.line, f.column) == (expect[0], str(dst), first + expect[1], 3)


_TOKENS = ["python3", "-m", "verl.trainer.main_ppo", "bash", "./base.sh", "source", ".", "env.sh", "cd", "..",
           "A=(", ")", "A+=(", '"${A[@]}"', "${A[*]}", "${A[0]}", "$A", '"$@"', "$1", "X=1", "X=$(pwd)",
           "--config-path", "--config-path=", "-cp", "-cn", "-cd", "config", "$X/config", "ppo_trainer", "--",
           "ray", "job", "submit", "a.b=1", "+c.d='[1,2]'", "~e.f", "global_profiler.steps=[0]", "{a,b}",
           "'", '"', "\\", "\\\n", "\n", " ", ";", "&&", "|", "#", "<<EOF", "EOF", "if", "then", "fi", "for",
           "do", "done", "$(", "${", "}", "`", "(", "<", ">", "2>&1"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(_TOKENS), max_size=40), st.sampled_from([" ", "", "\n"]))
def test_any_token_soup_reads_without_raising(tmp_path, tokens, sep):
    """Bad input never gives a traceback: any mix of shell pieces is read (not composed: the
    composition is Hydra's, exercised by the tests above)."""
    p = tmp_path / "run.sh"
    p.write_text(sep.join(tokens))
    (tmp_path / "base.sh").write_text('python3 -m verl.trainer.main_ppo "$@" x.y=$1\n')
    (tmp_path / "env.sh").write_text("A=(q.q=1)\nX=2\n")
    invocations, findings = read_script(str(p))
    for inv in invocations:
        assert inv.unjudged or all(isinstance(o.text, str) for o in inv.overrides)


@pytest.mark.parametrize("release,bad_line", [("0.8.0", 3), ("0.9.1", 2)])
def test_release_only_keys_in_a_script_are_judged_by_the_chosen_release(tmp_path, release, bad_line):
    """A key only 0.8.0 has (router_replay) and one only 0.9.1 has: each release rejects the other's."""
    p = tmp_path / "run.sh"
    p.write_text("python3 -m verl.trainer.main_ppo \\\n  actor_rollout_ref.actor.router_replay.mode=R2 \\\n"
                 "  actor_rollout_ref.actor.fsdp_config.use_no_sync_for_gradient_accumulation=True\n")
    (e,) = errors(validate_script(str(p), Options(base_dir=str(tmp_path), verl_version=release)).findings)
    assert (e.rule, e.line, e.column) == ("override", bad_line, 3)


def test_relative_config_path_missing_from_the_repositorys_own_verl_is_an_error(tmp_path):
    """With the repository's own verl (the one that runs), a literal relative --config-path that its
    verl/trainer/ lacks is Hydra's certain start-up failure: one error, nothing else judged."""
    trainer = tmp_path / "verl" / "trainer"
    (trainer / "config").mkdir(parents=True)
    (tmp_path / "verl" / "__init__.py").write_text("")
    (trainer / "main_ppo.py").write_text('@hydra.main(config_path="config", config_name="ppo_trainer")\n')
    (trainer / "config" / "ppo_trainer.yaml").write_text("trainer:\n  total_epochs: 1\n")
    (tmp_path / ".git").mkdir()
    p = tmp_path / "recipe" / "run.sh"
    p.parent.mkdir()
    p.write_text("BASEDIR=base_dir\npython3 -m verl.trainer.main_ppo --config-path=${BASEDIR}/recipe/configs \\\n"
                 f"  --config-name=mine \\\n{BAD_OVERRIDES}")
    (e,) = validate_script(str(p), Options(base_dir=str(tmp_path))).findings
    assert e.severity is Severity.ERROR and "Primary config directory not found" in e.message
    assert (e.line, e.column) == (2, 34)


@pytest.mark.parametrize("cp,why", [('"$(dirname "$0")/nope"', "does not exist"),
                                    ('"$PROJECT_DIR/cfg"', "holds no mine.yaml")])
def test_config_path_from_the_script_or_launch_directory_is_judged_there(tmp_path, cp, why):
    """`$(dirname "$0")/x` and `$(pwd)`-built paths name a directory known here (the launch directory is
    the repository root): where it is missing or lacks the config, Hydra's failure is one error."""
    (tmp_path / "cfg").mkdir()
    p = tmp_path / "run.sh"
    p.write_text(f'PROJECT_DIR="$(pwd)"\npython3 -m verl.trainer.main_ppo --config-path={cp} --config-name=mine \\\n'
                 f"{BAD_OVERRIDES}")
    (e,) = validate_script(str(p), Options(base_dir=str(tmp_path))).findings
    assert e.severity is Severity.ERROR and why in e.message and e.line == 2
