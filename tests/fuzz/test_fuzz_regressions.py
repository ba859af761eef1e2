"""Each case the fuzz campaign found, as a plain test: the input, and the finding it now gets
(before the fix: a traceback, a crash, a wrong position or a wrong result)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from fuzz_harness import ROOT
from verl_pdbg_conf.context import Options
from verl_pdbg_conf.core.loaders import MAX_DEPTH, MAX_NODES, load_json, load_yaml
from verl_pdbg_conf.reporters import REPORTERS
from verl_pdbg_conf.validate import validate_files

GP = "global_profiler:\n  tool: precision_debugger\n  steps: [1]\n"


def write(tmp_path, name, content) -> str:
    p = tmp_path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    return str(p)


def findings(tmp_path, name, content):
    return validate_files([write(tmp_path, name, content)], Options(base_dir=str(tmp_path))).sorted()


# -- crashes of the interpreter: run in a child, so a regression fails the test instead of killing pytest

@pytest.mark.parametrize("text", ["a: " + "[" * 100_000, "- " * 100_000, "{a: " * 40_000],
                         ids=["flow-seq", "block-seq", "flow-map"])
def test_deep_nesting_does_not_overflow_libyaml_stack(text, tmp_path):
    """Before: libyaml's composer recursed in C and the process died with SIGSEGV (about 40 000
    levels; `- ` * 40000 is 80 KB). After: a parse-error past MAX_DEPTH levels, at that level."""
    p = write(tmp_path, "deep.yaml", text)
    code = ("import sys; from verl_pdbg_conf.core.loaders import load_yaml; d = load_yaml(sys.argv[1]); "
            "f = d.findings[0]; print(f.rule, f.line, f.column, f.message)")
    r = subprocess.run([sys.executable, "-c", code, p], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, f"exit {r.returncode} (negative: killed by a signal)\n{r.stderr[-2000:]}"
    rule, line, col, message = r.stdout.split(" ", 3)
    assert rule == "parse-error" and f"more than {MAX_DEPTH} levels" in message and int(line) == 1 and int(col) > 200


# -- tracebacks

def test_json_integer_over_python_digit_limit(tmp_path):
    """Before: ValueError (int() of a 5000-digit number) escaped validate_files."""
    (f,) = [f for f in findings(tmp_path, "c.json", '{"rank": [' + "9" * 5000 + "]}") if f.rule == "parse-error"]
    assert (f.line, f.column) == (1, 11) and "5000 digits" in f.message


def test_yaml_hex_integer_too_large_to_print(tmp_path):
    """Before: `steps: 0xfff...` built an int Python cannot print; the steps-type message then
    raised ValueError."""
    out = findings(tmp_path, "c.yaml", GP.replace("[1]", "0x" + "f" * 5000))
    assert [f for f in out if f.rule == "yaml-tag" and f.line == 3]


def test_quoted_digits_over_the_limit_and_superscripts(tmp_path):
    """Before: the `write it as a plain integer: N` hint called int() on '999...' (5000 digits)
    and on '²' ('²'.isdigit() is True) and raised ValueError."""
    for steps in ('["' + "9" * 5000 + '"]', '["²"]'):
        out = findings(tmp_path, "c.yaml", GP.replace("[1]", steps))
        assert [f for f in out if f.rule == "steps-type" and f.line == 3], out


@pytest.mark.parametrize("tagged", ["!!bool maybe", "!!int", "!!int ''", "!!float ''"])
def test_yaml_constructor_failures_are_findings(tagged, tmp_path):
    """Before: `!!bool maybe` raised KeyError and `!!int` with no digits IndexError inside PyYAML."""
    out = findings(tmp_path, "c.yaml", f"x: {tagged}\n")
    assert [(f.line, f.column) for f in out if f.rule == "yaml-tag"] == [(1, 4)], out


def test_config_path_with_nul_character(tmp_path):
    """Before: os.stat raised ValueError ('embedded null byte')."""
    out = findings(tmp_path, "c.yaml", GP + '  global_tool_config:\n    precision_debugger:\n'
                   '      config_path: "a\\0b.json"\n')
    assert [f for f in out if f.rule == "config-path-invalid" and f.line == 6]


def test_unpaired_surrogate_escape_in_json_renders(tmp_path):
    """Before: json.load keeps '\\ud800' as a lone surrogate; every reporter then failed with
    UnicodeEncodeError when the CLI wrote a finding that quotes it."""
    p = write(tmp_path, "c.json", '{"\\ud800": 1, "task": "stat\\udfffistics"}')
    report = validate_files([p])
    for render in REPORTERS.values():
        render(report).encode("utf-8")
    warn = [f for f in report.sorted() if f.rule == "parse-error"]
    assert [(f.severity.value, f.line, f.column) for f in warn] == [("warning", 1, 2), ("warning", 1, 23)]


# -- wrong results

def test_json_bom_is_refused_like_msprobe_does(tmp_path):
    """Before: the BOM was stripped and the file passed; msprobe opens config.json as UTF-8 and
    json.load raises 'Unexpected UTF-8 BOM' (checked with msprobe 26.2.0)."""
    out = findings(tmp_path, "c.json", b'\xef\xbb\xbf{"task": "statistics"}')
    assert out[0].rule == "parse-error" and "byte order mark" in out[0].message
    conf = GP + "  global_tool_config:\n    precision_debugger:\n      config_path: c.json\n"
    out = findings(tmp_path, "conf.yaml", conf)
    assert [f for f in out if f.rule == "config-path-invalid" and f.line == 6 and "byte order mark" in f.message]
    assert load_yaml(write(tmp_path, "bom.yaml", b"\xef\xbb\xbfa: 1\n")).data == {"a": 1}  # YAML readers skip it


def test_json_nan_and_infinity_are_read_like_json_load(tmp_path):
    """Before: NaN, Infinity and -Infinity were parse errors; json.load (msprobe) accepts them."""
    doc = load_json(write(tmp_path, "c.json", '{"a": NaN, "b": Infinity, "c": [-Infinity]}'))
    assert doc.ok and doc.data["b"] == float("inf") and doc.data["c"] == [float("-inf")]


def test_merge_key_override_is_not_a_duplicate(tmp_path):
    """Before: overriding a key that `<<: *base` merged in was reported as a duplicate key."""
    doc = load_yaml(write(tmp_path, "m.yaml", "base: &b {x: 1, y: 1}\nc:\n  <<: *b\n  x: 2\n"))
    assert doc.data["c"] == {"x": 2, "y": 1} and doc.findings == []
    doc = load_yaml(write(tmp_path, "d.yaml", "c:\n  x: 1\n  x: 2\n"))
    assert [f.rule for f in doc.findings] == ["duplicate-key"]


def test_duplicate_keys_that_hydra_accepts_are_warnings(tmp_path):
    """OmegaConf's loader refuses a repeated string key (an error) but checks no other key type:
    `1: a` then `1: b` loads with the last one winning (a warning, not an error)."""
    sev = [(f.line, f.severity.value) for f in load_yaml(write(tmp_path, "d.yaml", "a: 1\na: 2\n")).findings]
    assert sev == [(2, "error")]
    for text in ("1: a\n1: b\n", "true: a\n'True': b\n", "~: a\n~: b\n"):
        doc = load_yaml(write(tmp_path, "d.yaml", text))
        assert [f.severity.value for f in doc.findings if f.rule == "duplicate-key"] in ([], ["warning"]), text


def test_plain_scalars_are_typed_like_hydra(tmp_path):
    """Before: `save_path: 2024-01-01` was a date (save-path error 'must be a string') and `1e-5`
    a string; Hydra's OmegaConf loader reads them as the string '2024-01-01' and the float 1e-05."""
    doc = load_yaml(write(tmp_path, "t.yaml", "a: 2024-01-01\nb: 1e-5\nc: 2001-12-14t21:59:43.10-05:00\n"))
    assert doc.data == {"a": "2024-01-01", "b": 1e-05, "c": "2001-12-14t21:59:43.10-05:00"}
    out = findings(tmp_path, "c.yaml", GP + "  save_path: 2024-01-01\n")
    assert not [f for f in out if f.rule == "save-path" and f.severity.value == "error"]


@pytest.mark.parametrize("text,col", [("a:\t1\n", 3), ("a: &x\t1\n", 6), ("a: [1,\t2]\n", 7), ("a: 1 \t# c\n", 6)])
def test_tabs_hydra_refuses_are_parse_errors(text, col, tmp_path):
    """Before: libyaml accepts a tab after `key:`, an anchor or a comma, so the conf passed;
    Hydra reads confs with PyYAML's scanner, which raises ScannerError there and the job fails."""
    (f,) = load_yaml(write(tmp_path, "t.yaml", text)).findings
    assert (f.rule, f.line, f.column) == ("parse-error", 1, col) and "tab" in f.hint
    assert load_yaml(write(tmp_path, "ok.yaml", 'a: "x\ty"\nb: |\n  x\ty\n')).data == {"a": "x\ty", "b": "x\ty\n"}


def test_comment_glued_to_a_block_scalar_indicator(tmp_path):
    """Before: `key: |# note` passed (libyaml reads a comment); PyYAML, and so Hydra, raises
    'expected chomping or indentation indicators, but found #'."""
    (f,) = load_yaml(write(tmp_path, "b.yaml", "a: |# note\n  x\n")).findings
    assert (f.rule, f.line, f.column) == ("parse-error", 1, 5)
    assert load_yaml(write(tmp_path, "ok.yaml", "a: | # note\n  x\n")).data == {"a": "x\n"}


def test_pyyaml_scan_is_bounded_for_long_texts(tmp_path):
    """PyYAML's scanner reads long lines at about 0.5 MB/s: a 2 MB conf with a tab must not cost
    seconds (above 256 KB, libyaml's reading stands alone)."""
    t = time.perf_counter()
    load_yaml(write(tmp_path, "l.yaml", "x: '" + "a" * 2_000_000 + "'\ny:\t1\n"))
    assert time.perf_counter() - t < 1


# -- positions

def test_end_of_stream_error_is_inside_the_file(tmp_path):
    """Before: libyaml marks the end of a file without a final newline one line past the end
    (`a: [` at 2:1 in a one-line file); now at the end of the last line, as PyYAML says."""
    assert [(f.line, f.column) for f in load_yaml(write(tmp_path, "e.yaml", "a: [")).findings] == [(1, 5)]
    assert [(f.line, f.column) for f in load_yaml(write(tmp_path, "e.yaml", "- \n~")).findings] == [(2, 2)]


def test_budget_findings_point_at_where_the_budget_ran_out(tmp_path):
    """Before: 'more than N values' and 'nests too deeply' were reported at 1:1."""
    doc = load_json(write(tmp_path, "deep.json", '{"a":\n  ' + "[" * 300))
    assert (doc.findings[0].line, doc.findings[0].column) == (2, 2 + MAX_DEPTH + 1)  # the first `[` too deep
    doc = load_yaml(write(tmp_path, "many.yaml", "x: 0\ny: [" + "1, " * MAX_NODES + "1]\n"))
    f = doc.findings[0]
    assert f.line == 2 and f.column > 1 and "more than" in f.message


# -- time

def test_alias_bomb_is_cut_quickly(tmp_path):
    """Bounded: a billion-laughs file stops once 10 000 values are built (before: 200 000, 0.7 s
    plain and 2.8 s under tracemalloc)."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    t = time.perf_counter()
    out = findings(tmp_path, "bomb.yaml", "\n".join(lines) + "\n")
    assert time.perf_counter() - t < 2 and out[0].rule == "parse-error" and "alias" in out[0].message


def test_long_save_path_is_checked_quickly(tmp_path):
    """Before: a 900 KB save_path with spaces took 9 s (a regex per character), and a 600 KB
    valid one 100 s (realpath, then a stat per component)."""
    for sp in ("'" + "a b" * 300_000 + "'", "a/" * 300_000):
        t = time.perf_counter()
        out = findings(tmp_path, "c.yaml", GP + f"  save_path: {sp}\n")
        assert time.perf_counter() - t < 2 and [f for f in out if f.rule == "save-path"]


# -- memory

def test_reading_a_small_file_does_not_allocate_the_size_limit(tmp_path):
    """Before: read(MAX_BYTES + 1) allocated a 16 MiB buffer for every file read, so the peak of
    any validation was at least 16 MiB."""
    import tracemalloc

    p = write(tmp_path, "c.yaml", GP)
    tracemalloc.start()
    try:
        load_yaml(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * 2**20, peak
