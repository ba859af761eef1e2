"""Loaders keep positions and turn every bad input into a finding."""

from __future__ import annotations

from verl_pdbg_conf.core.loaders import load_json, load_yaml


def write(tmp_path, name, content):
    p = tmp_path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(p)


def test_yaml_positions_of_keys_and_list_items(tmp_path):
    f = write(tmp_path, "c.yaml", "a:\n  b: [x, y]\n  c:\n    - 1\n    - 2\n")
    doc = load_yaml(f)
    assert doc.ok and doc.data == {"a": {"b": ["x", "y"], "c": [1, 2]}}
    assert doc.where(("a", "b", 1)) == (2, 10)
    assert doc.where(("a", "c", 1)) == (5, 7)
    assert doc.where(("a", "b"), key=True) == (2, 3)
    assert doc.where(("a", "missing", "deeper")) == (1, 1)  # falls back to the nearest ancestor (a's key)


def test_yaml_parse_error_has_line_and_column(tmp_path):
    doc = load_yaml(write(tmp_path, "c.yaml", "a:\n  b: 1\n c: 2\n"))
    assert not doc.ok
    (f,) = doc.findings
    assert f.rule == "parse-error" and f.line == 3 and f.column == 2


def test_yaml_alias_bomb_is_bounded(tmp_path):
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 10):
        lines.append(f"{chr(97 + i)}: &{chr(97 + i)} [{','.join('*' + chr(96 + i) for _ in range(9))}]")
    doc = load_yaml(write(tmp_path, "bomb.yaml", "\n".join(lines) + "\n"))
    assert not doc.ok and doc.findings[0].rule == "parse-error"
    assert "alias" in doc.findings[0].message


def test_yaml_recursive_alias_is_a_finding(tmp_path):
    doc = load_yaml(write(tmp_path, "rec.yaml", "a: &a\n  b: *a\n"))
    assert not doc.ok and doc.findings[0].rule == "parse-error"


def test_yaml_python_tag_is_refused_not_executed(tmp_path):
    marker = tmp_path / "executed"
    doc = load_yaml(write(tmp_path, "t.yaml", f"x: !!python/object/apply:os.system ['touch {marker}']\n"))
    assert not marker.exists()
    assert any(f.rule == "yaml-tag" for f in doc.findings)


def test_yaml_duplicate_key_is_an_error_at_the_second(tmp_path):
    doc = load_yaml(write(tmp_path, "d.yaml", "a: 1\nb: 2\na: 3\n"))
    (f,) = doc.findings
    assert (f.rule, f.line, f.severity.value, doc.data["a"]) == ("duplicate-key", 3, "error", 3)


def test_yaml_merge_keys(tmp_path):
    doc = load_yaml(write(tmp_path, "m.yaml", "base: &b {x: 1}\nc:\n  <<: *b\n  y: 2\n"))
    assert doc.data["c"] == {"x": 1, "y": 2}


def test_non_utf8_and_bom_and_binary(tmp_path):
    doc = load_yaml(write(tmp_path, "n.yaml", b"a: 1\nb: \xff\n"))
    assert doc.findings[0].rule == "parse-error" and doc.findings[0].line == 2 and doc.findings[0].column == 4
    doc = load_yaml(write(tmp_path, "bom.yaml", b"\xef\xbb\xbfa: 1\n"))
    assert doc.ok and doc.data == {"a": 1}
    doc = load_json(write(tmp_path, "bin.json", b"\x00\x01\x02"))
    assert doc.findings[0].rule == "parse-error"


def test_json_positions_and_errors(tmp_path):
    doc = load_json(write(tmp_path, "c.json", '{\n  "task": "tensor",\n  "rank": [0, 1]\n}\n'))
    assert doc.ok and doc.where(("rank", 1)) == (3, 15) and doc.where(("task",), key=True) == (2, 3)
    doc = load_json(write(tmp_path, "e.json", '{\n  "task": "tensor",\n}\n'))
    (f,) = doc.findings
    assert (f.rule, f.line, f.column) == ("parse-error", 3, 1)


def test_json_duplicate_keys_reported(tmp_path):
    doc = load_json(write(tmp_path, "d.json", '{"level": "L1",\n "level": "L0"}'))
    assert doc.data == {"level": "L0"}
    assert doc.findings[0].rule == "duplicate-key" and doc.findings[0].line == 2


def test_json_deep_nesting_is_bounded(tmp_path):
    doc = load_json(write(tmp_path, "deep.json", "[" * 5000 + "]" * 5000))
    assert not doc.ok and doc.findings[0].rule == "parse-error"


def test_missing_directory_and_fifo(tmp_path):
    import os

    assert load_yaml(str(tmp_path / "nope.yaml")).findings[0].rule == "file-not-found"
    assert load_yaml(str(tmp_path)).findings[0].rule == "file-is-directory"
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert load_yaml(str(fifo)).findings[0].rule == "file-not-regular"


def test_yaml_duplicate_key_positions_are_the_last_values(tmp_path):
    """The last value wins, and every position under it is the last one's: a finding on the list item
    points at the second `steps`, not at the first one's item."""
    text = "gp:\n  steps: [1, 2]\n  steps: [0]\n  sub: {a: [1]}\n  sub:\n    a: [5]\n"
    doc = load_yaml(write(tmp_path, "d.yaml", text))
    assert doc.data["gp"] == {"steps": [0], "sub": {"a": [5]}}
    assert doc.where(("gp", "steps", 0)) == (3, 11)
    assert doc.where(("gp", "steps"), key=True) == (3, 3)
    assert doc.where(("gp", "sub", "a", 0)) == (6, 9)
    assert [(f.line, f.column, f.message) for f in doc.findings] == [
        (3, 3, "key 'steps' appears twice (first at line 2): Hydra refuses to load the file ('found duplicate key')"),
        (5, 3, "key 'sub' appears twice (first at line 4): Hydra refuses to load the file ('found duplicate key')")]


def test_json_duplicate_key_positions_are_the_last_values(tmp_path):
    doc = load_json(write(tmp_path, "d.json", '{"rank": [1, 2],\n "rank": [7]}'))
    assert doc.data == {"rank": [7]} and doc.where(("rank", 0)) == (2, 11)
    (f,) = doc.findings
    assert (f.rule, f.line, f.column) == ("duplicate-key", 2, 2) and "first at line 1" in f.message


def test_empty_or_comment_only_yaml_is_said_not_passed_silently(tmp_path):
    from verl_pdbg_conf.validate import validate_file

    for name, text in (("empty.yaml", ""), ("comments.yaml", "# nothing yet\n\n# more\n")):
        report = validate_file(write(tmp_path, name, text))
        assert [(f.rule, f.severity.value, f.line, f.column) for f in report.findings] == [
            ("no-profiler-config", "info", 1, 1)], name
        assert "empty, or only comments" in report.findings[0].message
