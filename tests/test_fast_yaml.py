"""core/fast_yaml.py against the full path (libyaml through loaders.load_yaml): wherever the fast
reader returns a Document, its data (compared with types: True, 1, 1.0 and "1" differ), keys and
values equal the full path's, which has no findings. Over every YAML file at hand (this
package's conf/, tests/examples, examples, the installed verl's trainer/config) and a few thousand
generated texts, in the subset and just outside it (tabs, anchors, duplicate keys, odd scalars,
quotes and comments in odd places)."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from verl_pdbg_conf.core import fast_yaml, loaders

REPO = Path(__file__).resolve().parent.parent


def tagged(x):
    """x with the type of every scalar beside its repr, mappings in order."""
    if isinstance(x, dict):
        return ("dict", [(tagged(k), tagged(v)) for k, v in x.items()])
    if isinstance(x, list):
        return ("list", [tagged(v) for v in x])
    return (type(x).__name__, repr(x))


def full(text: str):
    orig = fast_yaml.load
    fast_yaml.load = lambda *a: None
    try:
        return loaders.load_yaml("c.yaml", text)
    finally:
        fast_yaml.load = orig


def same(text: str) -> bool:
    """Whether the fast reader read text; when it did, that it read what the full path reads."""
    fast = fast_yaml.load("c.yaml", text)
    if fast is None:
        return False
    ref = full(text)
    assert ref.ok and ref.findings == [], (text, ref.findings)
    assert fast.ok and fast.findings == [] and fast.file == "c.yaml" and fast.kind == "yaml"
    assert tagged(fast.data) == tagged(ref.data), text
    assert fast.keys == ref.keys, (text, {k: (v, ref.keys.get(k)) for k, v in fast.keys.items()
                                          if ref.keys.get(k) != v})
    assert fast.values == ref.values, (text, {k: (v, ref.values.get(k)) for k, v in fast.values.items()
                                              if ref.values.get(k) != v}, set(ref.values) - set(fast.values))
    return True


def _verl_config() -> Path | None:
    spec = importlib.util.find_spec("verl")  # its location only: importing verl takes seconds
    return Path(spec.origin).parent / "trainer" / "config" if spec and spec.origin else None


def hits(files) -> tuple[int, int, list]:
    read = [f for f in files if same(f.read_text(encoding="utf-8", errors="replace"))]
    return len(read), len(files), sorted(set(files) - set(read))


def test_this_packages_confs_all_read_fast():
    files = sorted((REPO / "verl_pdbg_conf" / "conf").rglob("*.yaml"))
    n, total, missed = hits(files)
    print(f"\nfast_yaml hit rate, verl_pdbg_conf/conf: {n}/{total}")
    assert total >= 6 and missed == []


def test_examples_agree():
    files = sorted({*(REPO / "tests" / "examples").rglob("*.yaml"), *(REPO / "tests" / "examples").rglob("*.yml"),
                    *(REPO / "examples").rglob("*.yaml")})
    n, total, missed = hits(files)
    print(f"\nfast_yaml hit rate, tests/examples and examples: {n}/{total}; full path: "
          + ", ".join(p.name for p in missed))
    positive = [p for p in files if "positive" in p.parts or p.parent == REPO / "examples"]
    assert total > 40 and len(set(positive) - set(missed)) >= 0.9 * len(positive)


def test_verl_trainer_config_agrees():
    root = _verl_config()
    if root is None or not root.is_dir():
        pytest.skip("verl is not installed")
    files = sorted(root.rglob("*.yaml"))
    n, total, missed = hits(files)
    # verl's _generated_*.yaml hold a plain scalar over two lines (`${oc.select:...,\n  null}`): refused.
    print(f"\nfast_yaml hit rate, {root}: {n}/{total}; full path: " + ", ".join(p.name for p in missed))
    assert total > 10 and n >= 0.75 * total


# ---------------------------------------------------------------- generated texts

# Scalars as confs write them; then odd ones, mostly refused (read the full way) or read as strings.
ORDINARY = ["1", "0", "-3", "2", "64", "1.5", "0.001", "1e-5", "3.0e-6", "-1.0", "True", "False", "true", "null",
            "~", "x", "fsdp", "actor_update", "outputs/profile", "/tmp/a b", "${oc.env:HOME}", "${..x}",
            "${now:%Y-%m-%d}", "${oc.select:a.b,null}", "???", "'quoted'", '"dq"', "[1, 2]", "[]", "{}",
            "[a, b]", "{a: 1, b: [2, 3]}", "it's", "a#b", "a:b", "http://x:8080/p", "2024-01-01", "-x"]
SCALARS = ORDINARY + [
    "1", "0", "-3", "+7", "-0", "100_000", "1_0", "017", "08", "0_7", "0x1f", "0x1g", "0o7", "0b101", "1:30",
    "190:20:30", "1.5", "1.", "-1.5", "+2.0", "00.5", "1e-5", "1e5", "1E+5", "1.0e5", "1.e5", ".5", ".5e-3",
    ".5e3", "-.5", "+.5", ".inf", "-.inf", "+.Inf", ".NaN", ".nan", "-.nan", "1_000.5", "1.5.5", "1e", "9" * 120,
    "yes", "No", "on", "OFF", "True", "false", "TRUE", "y", "n", "null", "Null", "NULL", "~", "~/x", "nil",
    "=", "<<", "2024-01-01", "2024-01-01 10:00:00", "1-2", "--5", "-", "+", ".", "...", "a", "a b", "a  b",
    "it's", 'say "hi"', "x|#y", "x>#y", "a#b", "a:b", "http://x:8080/p", "${oc.env:HOME}", "${..x}",
    "${now:%Y-%m-%d}", "${oc.select:a.b,null}", "???", "?x", ":x", "-x", "--flag", "é", "中文", "\U0001f600",
    "a,b", "x[0]", "{x}", "[x", "a ]", "a: b", "a:", "#x", "&a", "*a", "!!str 1", "!x", "|", ">-", "%x", "@x",
    "`x`", "'a''b'", "''", "' x '", "'a # b'", "'a: b'", '"a\\"b"', '""', '"\\t"', '"\\n\\\\"', '"\\/"',
    '"\\x41"', '"\\u00e9"', '"\\N"', '"\\q"', '"a # b"', '"a: b"', "'unclosed", '"unclosed', "[1, 2]", "[]",
    "---", "-- x", "a -b", "0.", "-0.0", "1.0E-5", "1e+5", "6e-05", "12:", "a'", "x\\y", "]x", "a b # c: d",
    "{}", "[a, b]", "[ 1 ,2 ]", "[a, [b, c]]", "{a: 1, b: [2, 3]}", "{a: 1}", "[${x}]", "[a, ]", "[a: 1]",
    "[a,,b]", "[-1, .5, 'q', \"d\"]", "[a b, c]", "{'k': v}", "{1: a, true: b}", "{a: 1, a: 2}", "[a] x",
    "[1, 2] # c", "[?x]", "[a#b]", "{a:1}", "{a}", "[\"a, b\"]",
]
KEYS = ["a", "b", "steps", "save_path", "defaults", "override /profiler", "/a@b.c", "+key", "++k", "~k",
        "_target_", "a.b.c", "1", "-1", "1.5", "1e5", "true", "No", "null", "~", ".inf", "0x1f", "1_0", "???",
        "a b", "'quoted key'", '"dq key"', "'k'", "${x}", "a#b", "k:x", "-k", "?k", "é", "<<", "=", "&a k",
        "!k", "[k]", "{k}", "k ", "%k", "'a''b'"]


def _scalar(rng):
    s = rng.choice(ORDINARY if rng.random() < 0.9 else SCALARS)
    return s + rng.choice(["", "", "", "  ", " # c", "#c", "  # : - [x]"])


def _block(rng, indent, depth, lines):
    """Append a block mapping or sequence at `indent` to lines."""
    step = rng.choice([2, 2, 2, 4, 1, 3])
    if rng.random() < 0.6 or depth == 0:
        keys = rng.sample(KEYS[:20] if rng.random() < 0.9 else KEYS, rng.randint(1, 5))
        for k in keys:
            _comment(rng, lines)
            head = " " * indent + k + ":"
            _value(rng, head, indent, step, depth, lines, in_map=True)
    else:
        for _ in range(rng.randint(1, 4)):
            _comment(rng, lines)
            _value(rng, " " * indent + "-", indent, step, depth, lines, in_map=False)


def _value(rng, head, indent, step, depth, lines, in_map):
    r = rng.random()
    if depth < 4 and r < 0.3:
        lines.append(head + rng.choice(["", "", " # c", "  "]))
        if in_map and rng.random() < 0.2:  # an indentless sequence
            for _ in range(rng.randint(1, 3)):
                lines.append(" " * indent + "- " + _scalar(rng))
        else:
            _block(rng, indent + step, depth + 1, lines)
    elif depth < 4 and not in_map and r < 0.45:  # compact: `- key: v`, `- - x`
        sub: list = []
        _block(rng, indent + 2, depth + 1, sub)
        first = sub[0]
        if first.startswith(" " * (indent + 2)) and first.strip()[:1] not in ("", "#"):
            lines.append(head + " " + first[indent + 2:])  # the block's first line joins the `-`
            lines.extend(sub[1:])
        else:
            lines.append(head)
            lines.extend(sub)
    elif r < 0.5:
        lines.append(head)  # an empty value
    else:
        lines.append(head + " " + _scalar(rng))


def _comment(rng, lines):
    r = rng.random()
    if r < 0.1:
        lines.append(" " * rng.randint(0, 6) + "# " + rng.choice(["note", "a: b", "- x", "'q", "\U0001f600"]))
    elif r < 0.15:
        lines.append(" " * rng.randint(0, 3))


def generated(rng) -> str:
    lines: list = []
    if rng.random() < 0.2:
        lines.append("# @package _global_")
    _block(rng, rng.choice([0, 0, 0, 2]), 0, lines)
    return "\n".join(lines) + rng.choice(["\n", "", "\n\n", "\n# end\n"])


MUTATIONS = ["\t", " ", "  ", "#", " #", ":", ": ", "- ", "'", '"', "&a ", "*a", "!!str ", "<<: ", "? ", "|",
             ">", "---\n", "...\n", "%YAML 1.1\n", "\r", "\r\n", "\x85", "\u2028", "\ufeff", "\x00", "\x07", "[",
             "]", "{", "}", ",", "\n", "\n  ", "\\", "é", "\xa0", "\u200b", "~", "=", "@", "`", "%"]


def mutated(rng, text: str) -> str:
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        lines = text.split("\n")
        i = rng.randrange(len(lines))
        if r < 0.15:  # a line twice: a duplicate key or one more item
            lines.insert(i, lines[i])
        elif r < 0.3:  # a line one space more or less indented
            lines[i] = lines[i][1:] if lines[i].startswith(" ") and rng.random() < 0.5 else " " + lines[i]
        elif r < 0.4 and len(lines) > 1:  # two lines joined or a line dropped
            j = min(i + 1, len(lines) - 1)
            lines[i:j + 1] = [lines[i] + rng.choice([" ", ""]) + lines[j].lstrip()] if rng.random() < 0.5 else []
        else:
            p = rng.randrange(len(text) + 1)
            return text[:p] + rng.choice(MUTATIONS) + text[p:]
        text = "\n".join(lines)
    return text


HANDWRITTEN = [
    "", "\n", "# only a comment\n", "a: 1", "a:\n", "a:\n- x\n- y\nb: 2\n", "- a: 1\n  b:\n  - x\n- c\n",
    "- - a\n  - b\n- - c\n", "-\n  a: 1\n-\n- x\n", "a:\n  b:\n    c: 1\n  d: 2\n", "  a: 1\n  b: 2\n",
    "a: [1, 2] # c\nb: {x: [3, 4], 'y z': \"w\"}\n", "a:   # c\n\n  # c2\n  b: 1\n", "'k': 1\n\"k2\":\n",
    "a: 1\n  # deeper comment\nb: 2\n", "a:\n- x\n", "a: b\nc:\n", "- \n- x\n", "-\n", "a: ''\nb: \"\"\n",
    "defaults:\n  - /verl_pdbg_conf/config_path@global_profiler.global_tool_config.precision_debugger: x\n"
    "  - override /profiler: y\n  - _self_\n", "1: a\n2: b\n-1: c\n", "true: a\n'true': b\n", "a: b: c\n",
    "a:\n  - x\n  b: 1\n", "a:\n    b: 1\n  c: 2\n", "a: 1\n b: 2\n", "a:\n  b\n", "- a\n  b\n", "[1, 2]\n",
    "x\n", "a: [1,\n  2]\n", "a: 'x\n  y'\n", "a: &x 1\nb: *x\n", "a: !!int 1\n", "<<: {a: 1}\n",
    "a: 1\na: 2\n", "? a\n: b\n", "a: |\n  x\n", "--- \na: 1\n", "a: 1\n...\n", "a:\tb\n", "a: b\r\nc: d\r\n",
    "a: ${oc.env:HOME}\nb: ${..x}\nc: ${now:%Y-%m-%d}\nd: '${x}'\n", "name: ???\n", "x: 0x1f\n",
    "k" * 1100 + ": 1\n", "a: " + "[" * 150 + "]" * 150 + "\n", "".join(" " * i + "k:\n" for i in range(150)),
    "- " * 150 + "x\n", "".join(f"k{i}: {i}\n" for i in range(6000)),
]


def test_handwritten_texts_agree():
    read = sum(same(t) for t in HANDWRITTEN)
    assert read >= 25


def test_generated_texts_agree():
    rng = random.Random(20240522)
    texts = [generated(rng) for _ in range(1500)]
    read = sum(same(t) for t in texts)
    print(f"\nfast_yaml read {read}/{len(texts)} generated texts")
    assert read >= 0.3 * len(texts)


def test_mutated_texts_agree():
    rng = random.Random(7)
    bases = [generated(rng) for _ in range(300)]
    bases += [p.read_text() for p in sorted((REPO / "verl_pdbg_conf" / "conf").rglob("*.yaml"))]
    bases += [p.read_text() for p in sorted((REPO / "tests" / "examples" / "verl" / "positive").glob("*.yaml"))][:20]
    texts = [mutated(rng, rng.choice(bases)) for _ in range(3000)]
    read = sum(same(t) for t in texts)
    print(f"\nfast_yaml read {read}/{len(texts)} mutated texts")
    assert read > 0


TOKENS = ["a", "b", "k", "1", "-", ": ", ":", " ", "  ", "\n", "\n", "\n  ", "\n    ", "\n- ", "\n  - ", "- ", "#",
          " #", "'", '"', "[", "]", "{", "}", ", ", ",", "?", "x y", "~", "true", "1.5", "\\", "é", "a: ", "b: ",
          "\n  a: ", "\nb: ", "- a: ", "[1, 2]", "{a: 1}", "'q'", '"d"', "''", "-1", ".5", "null"]


def test_token_soup_agrees():
    """Texts strung from YAML's punctuation and a few words: structures no generator above makes."""
    rng = random.Random(3)
    texts = [rng.choice(["a: ", "- ", "a:\n  ", "k: v\nb: ", ""]) + "".join(rng.choice(TOKENS) for _ in range(
        rng.randint(1, 14))) for _ in range(6000)]
    read = sum(same(t) for t in texts)
    print(f"\nfast_yaml read {read}/{len(texts)} token soups")
    assert read > 300


def test_scalars_one_by_one():
    """Every scalar of the pool as a value, a sequence item, a flow item and a key."""
    for s in SCALARS:
        for text in (f"v: {s}\n", f"- {s}\n", f"v: [{s}]\n", f"v: {{k: {s}}}\n", f"{s}: v\n", f"- {s}: v\n"):
            same(text)
    for k in KEYS:
        same(f"{k}: v\n")
        same(f"m: {{{k}: v}}\n")


def test_refuses_what_it_does_not_read():
    for text in ("a: 1\na: 2\n", "a: &x 1\n", "a: !!str 1\n", "a: |\n  x\n", "a:\tb\n", "a: 0x1f\n", "a: 1:30\n",
                 "a: b\r\n", "---\na: 1\n", "? a\n: b\n", "a: x\n  y\n", "<<: {a: 1}\n", "a: '\n  b'\n", "x\n"):
        assert fast_yaml.load("c.yaml", text) is None, text
    doc = loaders.load_yaml("c.yaml", "a: 1\na: 2\n")
    assert [f.rule for f in doc.findings] == ["duplicate-key"]
