"""Hostile inputs, built from real configs or from nothing. Each generator yields
(case name, bytes); the name ends in .yaml or .json, which decides how the validator
reads the file. Deterministic for a given seed, so a failing case can be rebuilt by name."""

from __future__ import annotations

import copy
import gzip
import json
import random
from collections.abc import Iterator
from pathlib import Path

import yaml

Case = tuple[str, bytes]

# Values of the wrong type (or the wrong kind of right type) put at every key path.
WRONG_VALUES: list = [
    None, True, False, 0, -1, 2**70, 3.5, float("nan"), float("inf"), "", "x", " ", "-1", "True", "null",
    "a b/c", "é/ü", "${oc.env:VERL_PDBG_FUZZ_UNSET}", "${no.such.key}", "${", "\t", "x" * 5000,
    [], [None], [1, "a", [2]], [{"a": 1}], {}, {"a": 1}, {"": None}, {"1": [1]},
]


# Fragments that mean something to YAML, JSON, OmegaConf or this validator.
YAML_TOKENS = [
    "\n", "\n", "\n  ", "\n    ", "  ", " ", "\t", "- ", "-", ": ", ":", "? ", ", ", ",", "[", "]", "{", "}",
    "'", '"', "#", "# c", "|", "|-", ">", "&a ", "*a", "&b ", "*b", "<<: ", "<<: *a", "!!python/object:os.system ",
    "!!binary ", "!!set ", "!!str ", "!!int ", "!x ", "%YAML 1.1\n", "---\n", "...\n", "~", "null", "true", "True",
    "1", "-1", "0x1f", "1e3", ".nan", "12:30:00", "2001-12-14", "\\", "\\u0000", "\xa0", "\u2028", "\ufeff", "é",
    "${", "}", "${oc.env:X}", "${global_profiler.save_path}", "${oc.select:a,b}",
    "global_profiler", "tool", "precision_debugger", "nsys", "steps", "save_path", "global_tool_config",
    "config_path", "configs/statistics_l1.json", "stages", "strict", "actor_update", "actor_compute_log_prob",
    "ref_compute_log_prob", "compute_values", "critic_update", "rollout_generate", "train_batch",
    "actor_rollout_ref", "actor", "ref", "rollout", "critic", "profiler", "enable", "all_ranks", "ranks",
    "tool_config", "profile_continuous_steps", "trainer", "total_training_steps", "hybrid_engine",
    "outputs/profile", "/tmp/a b", "a",
]
JSON_TOKENS = [
    "{", "}", "[", "]", ":", ",", " ", "\n", "\t", '"', '"task"', '"level"', '"rank"', '"step"', '"scope"', '"list"',
    '"statistics"', '"tensor"', '"structure"', '"acc_check"', '"nan_check"', '"data_mode"', '"summary_mode"',
    '"dump_path"', '"async_dump"', '"L0"', '"L1"', '"L2"', '"mix"', '"debug"', '"all"', '"md5"', '"0-3"', '"3-1"',
    "0", "1", "-1", "1.5", "1e400", "true", "false", "null", "NaN", "Infinity", "-Infinity", '"\\ud800"', '"\\u00e9"',
    '"\\n"', '"a\\', "//", "/*", "'", "\ufeff", "\x00", "99999999999999999999",
]


def _suffix(path: Path) -> str:
    return ".json" if path.suffix == ".json" else ".yaml"


def _load(path: Path):
    """The parsed config, or None when the file is not valid (tests/examples holds a broken one on purpose)."""
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except ValueError:  # json.JSONDecodeError
        return None
    except yaml.YAMLError:
        return None


def _dump(data, suffix: str) -> bytes:
    if suffix == ".json":
        return json.dumps(data, indent=2).encode()
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10**9).encode()


def key_paths(data, path=()) -> Iterator[tuple]:
    """Every path to a value: mapping keys and list indices, depth first."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield path + (k,)
            yield from key_paths(v, path + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield path + (i,)
            yield from key_paths(v, path + (i,))


def set_at(data, path, value):
    """A deep copy of data with the value at path (keys and indices) replaced."""
    data = copy.deepcopy(data)
    cur = data
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return data


def _rename(data, path, new_key):
    data = copy.deepcopy(data)
    cur = data
    for p in path[:-1]:
        cur = cur[p]
    if isinstance(cur, dict):
        items = [(new_key if k == path[-1] else k, v) for k, v in cur.items()]
        cur.clear()
        cur.update(items)
    return data


# ------------------------------------------------------------------ from a real config

def truncations(path: Path, every: int = 0, max_cases: int = 40) -> Iterator[Case]:
    """The file cut after every N bytes (N chosen so there are about max_cases cuts)."""
    raw = path.read_bytes()
    step = every or max(1, len(raw) // max_cases)
    for n in range(0, len(raw), step):
        yield f"{path.stem}.trunc{n}{_suffix(path)}", raw[:n]


def byte_flips(path: Path, count: int = 30, seed: int = 0) -> Iterator[Case]:
    """One to four bytes changed: a bit flipped, a random byte, a YAML/JSON special character."""
    raw = path.read_bytes()
    rng = random.Random(f"{seed}:{path.name}")
    specials = b"[]{}:,-?&*!|>'\"%@`#\t\n\r\\\x00\xff\xc3"
    for i in range(count):
        b = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(b)) if b else 0
            if not b:
                b.append(rng.randrange(256))
                continue
            how = rng.random()
            if how < 0.4:
                b[pos] ^= 1 << rng.randrange(8)
            elif how < 0.7:
                b[pos] = rng.randrange(256)
            else:
                b[pos] = specials[rng.randrange(len(specials))]
        yield f"{path.stem}.flip{seed}-{i}{_suffix(path)}", bytes(b)


def wrong_types(path: Path, per_path: int | None = None, seed: int = 0, max_paths: int | None = None) -> Iterator[Case]:
    """Each key path of the parsed config given each wrong value (or `per_path` of them, chosen
    per path), and each mapping key renamed to a non-string key."""
    suffix = _suffix(path)
    data = _load(path)
    if data is None:
        return
    rng = random.Random(f"{seed}:{path.name}")
    paths = list(key_paths(data))
    if max_paths is not None and len(paths) > max_paths:
        paths = sorted(rng.sample(paths, max_paths), key=paths.index)
    for n, kp in enumerate(paths):
        values = list(enumerate(WRONG_VALUES))
        if per_path is not None:
            values = rng.sample(values, per_path)
        for j, v in values:
            yield f"{path.stem}.wrong{n}-{j}{suffix}", _dump(set_at(data, kp, v), suffix)
        if suffix == ".yaml" and isinstance(kp[-1], str):
            keys = list(enumerate((1, None, True, 2.5, "")))
            for j, k in (keys if per_path is None else rng.sample(keys, 1) if rng.random() < 0.3 else []):
                yield f"{path.stem}.key{n}-{j}{suffix}", _dump(_rename(data, kp, k), suffix)


def text_mutations(path: Path, max_dupkeys: int | None = None) -> Iterator[Case]:
    """Whole-file mutations of one real config: BOM, tabs, duplicate keys (each key line
    repeated in place, or max_dupkeys of them evenly spread), CRLF, non-UTF-8."""
    raw = path.read_bytes()
    text = raw.decode("utf-8")
    sfx = _suffix(path)
    stem = path.stem
    yield f"{stem}.bom{sfx}", b"\xef\xbb\xbf" + raw
    yield f"{stem}.bom2{sfx}", b"\xef\xbb\xbf\xef\xbb\xbf" + raw
    yield f"{stem}.midbom{sfx}", raw[: len(raw) // 2] + b"\xef\xbb\xbf" + raw[len(raw) // 2:]
    yield f"{stem}.crlf{sfx}", text.replace("\n", "\r\n").encode()
    yield f"{stem}.cr{sfx}", text.replace("\n", "\r").encode()
    yield f"{stem}.ls{sfx}", text.replace("\n", "\u2028").encode()
    yield f"{stem}.nel{sfx}", text.replace("\n", "\x85").encode()
    yield f"{stem}.tabs{sfx}", "\n".join("\t" * ((len(x) - len(x.lstrip(" "))) // 2) + x.lstrip(" ")
                                          for x in text.split("\n")).encode()
    yield f"{stem}.tabafter{sfx}", text.replace(": ", ":\t").encode()
    yield f"{stem}.nocolonspace{sfx}", text.replace(": ", ":").encode()
    yield f"{stem}.utf16{sfx}", text.encode("utf-16")
    latin1 = (text + "# é\n" if sfx == ".yaml" else text + " ").encode("latin-1", "replace")
    yield f"{stem}.latin1{sfx}", latin1 + b"\xe9"
    yield f"{stem}.ff{sfx}", raw[: len(raw) // 3] + b"\xff\xfe" + raw[len(raw) // 3:]
    yield f"{stem}.overlong{sfx}", raw[: len(raw) // 2] + b"\xc0\xaf" + raw[len(raw) // 2:]
    yield f"{stem}.surrogate{sfx}", raw[: len(raw) // 2] + b"\xed\xa0\x80" + raw[len(raw) // 2:]
    yield f"{stem}.nul{sfx}", raw[: len(raw) // 2] + b"\x00" + raw[len(raw) // 2:]
    yield f"{stem}.nul_late{sfx}", raw + b"\n" * 9000 + b"\x00"
    yield f"{stem}.gzip{sfx}", gzip.compress(raw, mtime=0)
    yield f"{stem}.twice{sfx}", raw + b"\n" + raw
    yield f"{stem}.doubled_lines{sfx}", "\n".join(x + "\n" + x for x in text.split("\n")).encode()
    yield f"{stem}.longline{sfx}", raw.rstrip(b"\n") + (b"  # " if sfx == ".yaml" else b" ") + b"x" * 1_000_000 + b"\n"
    if sfx == ".yaml":
        yield f"{stem}.docs.yaml", b"---\n" + raw + b"\n---\n" + raw
        yield f"{stem}.enddoc.yaml", raw + b"\n...\n" + raw
        yield f"{stem}.anchor_all.yaml", text.replace(": ", ": &x").encode()
        yield f"{stem}.python_tags.yaml", text.replace(
            ": True", ": !!python/object/apply:os.system ['exit 7']").encode()
        lines = text.split("\n")
        keyed = [i for i, line in enumerate(lines) if ":" in line and not line.lstrip().startswith(("#", "-"))]
        if max_dupkeys is not None and len(keyed) > max_dupkeys:
            keyed = [keyed[round(j * (len(keyed) - 1) / max(1, max_dupkeys - 1))] for j in range(max_dupkeys)]
        for i in keyed:  # duplicate a key line in place
            yield f"{stem}.dupkey{i}.yaml", "\n".join(lines[: i + 1] + [lines[i]] + lines[i + 1:]).encode()
    else:
        try:
            data = json.loads(text)
        except ValueError:
            return
        if isinstance(data, dict) and data:
            k = next(iter(data))
            body = text.strip()
            yield f"{stem}.dupkey.json", (body[:-1].rstrip() + f',\n  "{k}": {json.dumps(data[k])}\n}}').encode()
            yield f"{stem}.trailing_comma.json", (body[:-1].rstrip() + ",\n}").encode()
            yield f"{stem}.comment.json", ("// config\n" + text).encode()
            yield f"{stem}.single_quotes.json", text.replace('"', "'").encode()
            yield f"{stem}.nan.json", json.dumps({**data, "rank": float("nan"), "step": [float("inf")]}).encode()
            yield f"{stem}.bigint.json", (body[:-1].rstrip() + ',\n  "rank": [' + "9" * 5000 + "]\n}").encode()
            yield f"{stem}.deep_value.json", json.dumps({**data, "statistics": _nest(150, "list")}).encode()
            yield f"{stem}.as_yaml.yaml", raw  # JSON is YAML: a config.json given where a conf is expected


def _nest(depth: int, kind: str):
    v: object = "x"
    for _ in range(depth):
        v = [v] if kind == "list" else {"a": v}
    return v


# ------------------------------------------------------------------ from nothing

def _bomb(width: int, depth: int) -> str:
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, depth):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def special_cases(full: bool = True) -> Iterator[Case]:
    """Inputs no real config starts from: nesting, size, aliases, tags, emptiness, binary.
    full=False (CI) leaves out the lists just under the loaders' value budget, which take
    about a second each to check (plus three under tracemalloc)."""
    gp = "global_profiler:\n  tool: precision_debugger\n  steps: [1]\n"
    pd = gp + "  global_tool_config:\n    precision_debugger:\n      config_path: configs/statistics_l1.json\n"
    act = "actor_rollout_ref:\n  actor:\n    profiler:\n      enable: True\n"
    # deep nesting
    for n in (150, 199, 201, 1000, 50_000):
        yield f"deep_flow_seq{n}.yaml", ("a: " + "[" * n + "]" * n + "\n").encode()
        yield f"deep_flow_map{n}.yaml", ("a: " + "{a: " * n + "1" + "}" * n + "\n").encode()
        yield f"deep_json_arr{n}.json", ("[" * n + "]" * n).encode()
        yield f"deep_json_obj{n}.json", ('{"a": ' * n + "1" + "}" * n).encode()
    for n in (100_000, 1_000_000):
        yield f"deep_open{n}.yaml", ("[" * n).encode()
        yield f"deep_open{n}.json", ("[" * n).encode()
        yield f"deep_open_map{n}.json", ('{"a":' * (n // 5)).encode()
    for n in (150, 250, 40_000, 200_000):
        yield f"deep_block_seq{n}.yaml", ("- " * n + "x\n").encode()
    yield "deep_block_map300.yaml", "".join(" " * i + "k:\n" for i in range(300)).encode()
    yield "deep_block_map3000.yaml", "".join(" " * i + "k:\n" for i in range(3000)).encode()
    yield "deep_mixed.yaml", ("- " * 100 + "{a: " * 100 + "[" * 100 + "1" + "]" * 100 + "}" * 100 + "\n").encode()
    yield "deep_stages.yaml", (pd + "      stages: " + "[" * 300 + "]" * 300 + "\n" + act).encode()
    # huge lists and mappings
    for n in (2_000, 9_000, 60_000) if full else (2_000, 60_000):  # under, near, over the 10 000-value budget
        yield f"steps{n}.yaml", (gp.replace("[1]", "[" + ", ".join(str(i % 7) for i in range(n)) + "]")).encode()
        yield f"stages{n}.yaml", (pd + "      stages: [" + ", ".join(["actor_upd"] * n) + "]\n" + act).encode()
        yield f"keys{n}.yaml", ("".join(f"k{i}: {i}\n" for i in range(n))).encode()
        yield f"gpkeys{n}.yaml", (gp + "".join(f"  k{i}: {i}\n" for i in range(n))).encode()
        yield f"list{n}.json", ('{"task": "statistics", "statistics": {"list": ['
                                + ", ".join(f'"Functional.f{i}.0.forward"' for i in range(n)) + "]}}").encode()
        yield f"rank{n}.json", ('{"rank": [' + ", ".join(str(i) for i in range(n)) + "]}").encode()
        yield f"flat{n}.yaml", ("[" + "1," * n + "]").encode()
        yield f"flat{n}.json", ("[" + "1," * (n - 1) + "1]").encode()
    yield "million_commas.yaml", ("[" + "," * 1_000_000 + "]").encode()
    yield "million_dashes.yaml", ("-\n" * 300_000).encode()
    yield "many_docs.yaml", ("---\n" * 100_000).encode()
    # alias bombs and recursive aliases
    for width, depth in ((9, 9), (10, 10), (2, 40), (100, 3), (1000, 2)):
        yield f"bomb{width}x{depth}.yaml", _bomb(width, depth).encode()
    yield "bomb_in_steps.yaml", (_bomb(9, 9) + gp.replace("[1]", "*a8")).encode()
    yield "bomb_in_stages.yaml", (_bomb(9, 9) + pd + "      stages: *a8\n" + act).encode()
    yield "merge_bomb.yaml", ("a0: &a0 {k: v}\n" + "".join(
        f"a{i}: &a{i}\n  <<: [*a{i - 1}, *a{i - 1}]\n  k{i}: [*a{i - 1}, *a{i - 1}, *a{i - 1}]\n"
        for i in range(1, 25))).encode()
    yield "key_bomb.yaml", (_bomb(9, 7) + "? *a6\n: x\n").encode()
    yield "recursive_seq.yaml", b"a: &a [*a]\n"
    yield "recursive_map.yaml", b"a: &a {b: *a}\n"
    yield "recursive_root.yaml", b"&a [*a, *a]\n"
    yield "recursive_merge.yaml", b"a: &a\n  <<: *a\n  x: 1\n"
    yield "recursive_deep.yaml", b"a: &a\n  b:\n    c:\n      - d: *a\n"
    yield "undefined_alias.yaml", b"a: *nope\n"
    yield "anchor_redefined.yaml", b"a: &x 1\nb: &x 2\nc: *x\n"
    yield "alias_as_key.yaml", b"a: &k steps\n*k : [1]\n"
    yield "merge_scalar.yaml", b"a:\n  <<: 1\n"
    yield "merge_list_of_scalars.yaml", b"a:\n  <<: [1, 2]\n"
    yield "merge_override.yaml", b"base: &b {x: 1}\nc:\n  <<: *b\n  x: 2\n"
    yield "alias_save_path.yaml", (gp + "  save_path: &p outputs/p\n  global_tool_config:\n    precision_debugger:\n"
                                   "      config_path: *p\n" + act).encode()
    # tags
    for tag in ("!!python/object/apply:os.system ['exit 7']", "!!python/object:os.system {}", "!!python/name:os.system",
                "!!python/module:os", "!!python/object/new:subprocess.Popen [['true']]", "!!binary aGVsbG8=",
                "!!binary '#not base64'", "!!set {a, b}", "!!omap [a: 1]", "!!timestamp 2001-13-45", "!!int x",
                "!!float x", "!!bool maybe", "!!null x", "!!str 1", "!custom x", "!<tag:yaml.org,2002:int> 3",
                "!!map [1]", "!!seq {a: 1}", "!!merge x", "!!value x", "!!yaml x", "!!int 0x" + "f" * 5000):
        safe = tag.replace("!", "").replace("/", "_").replace(" ", "_").replace(":", "_")[:40]
        yield f"tag_{safe}.yaml", f"x: {tag}\n".encode()
        yield f"tag_steps_{safe}.yaml", gp.replace("[1]", tag).encode()
        yield f"tag_pd_{safe}.yaml", (gp + f"  global_tool_config:\n    precision_debugger: {tag}\n").encode()
        yield f"tag_key_{safe}.yaml", f"? {tag}\n: 1\n".encode()
    yield "tag_directive.yaml", b"%TAG !e! tag:example.com,2000:\n---\nx: !e!foo 1\n"
    yield "yaml_directive.yaml", b"%YAML 1.1\n%YAML 1.1\n---\nx: 1\n"
    yield "yaml_version2.yaml", b"%YAML 2.0\n---\nx: 1\n"
    yield "big_int.yaml", ("x: " + "9" * 5000 + "\n").encode()
    yield "big_int_steps.yaml", gp.replace("[1]", "[" + "9" * 5000 + "]").encode()
    yield "big_float.yaml", ("x: 1e" + "9" * 5000 + "\n").encode()
    yield "sexagesimal.yaml", b"x: 190:20:30\n"
    # empty and near-empty
    for name, data in (("empty", b""), ("newline", b"\n"), ("spaces", b"   \n  "), ("comment", b"# nothing\n"),
                       ("doc_start", b"---\n"), ("doc_end", b"...\n"), ("tilde", b"~\n"), ("null", b"null"),
                       ("bom_only", b"\xef\xbb\xbf"), ("empty_map", b"{}"), ("empty_list", b"[]"), ("zero", b"0"),
                       ("string", b'"x"'), ("true", b"true"), ("nan", b"NaN"), ("tab", b"\t"), ("crlf", b"\r\n"),
                       ("nul", b"\x00"), ("ff", b"\xff"), ("gp_null", b"global_profiler:\n"),
                       ("gp_list", b"global_profiler: []\n"), ("gp_str", b"global_profiler: x\n"),
                       ("pd_list", gp.encode() + b"  global_tool_config:\n    precision_debugger: []\n"),
                       ("gtc_list", gp.encode() + b"  global_tool_config: [1]\n")):
        yield f"empty_{name}.yaml", data
        yield f"empty_{name}.json", data
    # binary
    rng = random.Random(7)
    for i in range(6):
        blob = bytes(rng.randrange(256) for _ in range(rng.choice((16, 4096, 65536))))
        yield f"binary{i}.yaml", blob
        yield f"binary{i}.json", blob
        no_nul = blob.replace(b"\x00", b"\x01")
        yield f"binary_nonul{i}.yaml", no_nul
        yield f"binary_nonul{i}.json", no_nul
    yield "png.yaml", b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    yield "elf.json", b"\x7fELF\x02\x01\x01" + bytes(200)
    yield "control_chars.yaml", ("x: " + "".join(chr(c) for c in range(1, 32) if c not in (9, 10, 13)) + "\n").encode()
    yield "control_chars.json", ('{"task": "' + "".join(chr(c) for c in range(1, 32)) + '"}').encode()
    yield "c1_chars.yaml", ("x: " + "".join(chr(c) for c in range(0x80, 0xa0)) + "\n").encode()
    yield "noncharacters.yaml", "x: \ufffe\uffff\U0010ffff\n".encode()
    yield "lone_surrogate_escape.json", b'{"\\ud800": "\\udfff", "task": "\\ud83d"}'
    yield "lone_surrogate_escape.yaml", b'x: "\\ud800"\n'
    yield "emoji.yaml", ("global_profiler:\n  save_path: /tmp/\U0001f600\n  tool: precision_debugger\n").encode()
    # very long lines, keys and values
    yield "long_value.yaml", ("x: " + "a" * 2_000_000 + "\n").encode()
    yield "long_key.yaml", ("a" * 1_000_000 + ": 1\n").encode()
    yield "long_comment.yaml", ("# " + "c" * 2_000_000 + "\nx: 1\n").encode()
    yield "long_spaces.yaml", (" " * 2_000_000 + "x: 1\n").encode()
    yield "long_string.json", ('{"task": "' + "t" * 2_000_000 + '"}').encode()
    yield "long_key.json", ('{"' + "k" * 1_000_000 + '": 1}').encode()
    yield "long_ws.json", (" " * 2_000_000 + "{}").encode()
    yield "long_save_path.yaml", (gp + "  save_path: '" + "a b" * 300_000 + "'\n").encode()
    yield "long_save_path_ok.yaml", (gp + "  save_path: " + "a/" * 300_000 + "\n").encode()
    yield "long_config_path.yaml", (pd.replace("configs/statistics_l1.json", "c" * 100_000 + ".json") + act).encode()
    yield "long_stage.yaml", (pd + "      stages: [" + "s" * 1_000_000 + "]\n" + act).encode()
    yield "long_tool.yaml", gp.replace("precision_debugger", "p" * 1_000_000).encode()
    yield "long_key_in_gp.yaml", (gp + "  " + "k" * 1_000_000 + ": 1\n").encode()
    # tabs and indentation
    yield "tab_indent.yaml", gp.replace("  ", "\t").encode()
    yield "tab_mixed.yaml", gp.replace("  tool", "\t tool").encode()
    yield "tab_value.yaml", b"x:\t1\ny:\t[1,\t2]\n"
    # duplicate keys
    yield "dup_top.yaml", (gp + gp).encode()
    yield "dup_nested.yaml", (gp + "  tool: nsys\n  tool: precision_debugger\n").encode()
    yield "dup_many.yaml", ("x: 1\n" * (4_000 if full else 1_000)).encode()
    yield "dup_many.json", ("{" + ", ".join(['"x": 1'] * (9_000 if full else 2_000)) + "}").encode()
    yield "dup_int_str.yaml", b"1: a\n'1': b\n"
    # config_path pointing at odd things (relative to the workspace)
    for target in ("configs", "configs/a_directory.json", "configs/broken.json", "/dev/null", "/dev/zero",
                   "/proc/self/status", "/etc/hostname", "cases", ".", "", " ", "configs/\x00x.json",
                   "/" + "x" * 5000 + ".json", "configs/../configs/statistics_l1.json", "~/x.json"):
        yield f"config_path_{abs(hash(target)) % 10**8}.yaml", (
            pd.replace("configs/statistics_l1.json", json.dumps(target)) + act).encode()
    # interpolation, kept small (long or many interpolations: see test_interpolation_bounds)
    yield "interp_self.yaml", b"a: ${a}\n"
    yield "interp_cycle.yaml", b"a: ${b}\nb: ${a}\n"
    yield "interp_steps.yaml", (gp.replace("[1]", "${x}") + "x: [1, 2]\n").encode()
    yield "interp_bad.yaml", (gp + "  save_path: ${oc.env:\n").encode()
    yield "interp_nested.yaml", (gp + "  save_path: ${oc.select:${oc.select:a,b},c}\n").encode()
    yield "interp_int_keys.yaml", b"1: a\nb: ${1}\n"
    yield "interp_decode.yaml", (gp + "  save_path: '${oc.decode:\"[1, 2\"}'\n").encode()
    yield "interp_create.yaml", (gp + "  save_path: '${oc.create:{a: 1}}'\n").encode()
    yield "interp_dict_key.yaml", b"'${x}': 1\nx: 2\n"
    yield "interp_hundred.yaml", (gp + "  save_path: '" + "${" * 100 + "'\n").encode()


# ------------------------------------------------------------------ random, stacked (the long campaign)

def random_mutations(corpus: list[Path], seed: int = 0) -> Iterator[tuple[str, str, bytes]]:
    """Endless (source name, case name, bytes): a real config with one to six random edits
    stacked (bit flips, token insertions, span deletions and copies, splices from another
    config, truncation, a wrong value at a key path). Deterministic for a seed; the case name
    carries the seed and the index."""
    rng = random.Random(seed)
    raws = {p: p.read_bytes() for p in corpus}
    parsed = {p: d for p in corpus if (d := _load(p)) is not None}
    i = 0
    while True:
        src = rng.choice(corpus)
        sfx = _suffix(src)
        tokens = YAML_TOKENS if sfx == ".yaml" else JSON_TOKENS
        b = bytearray(raws[src])
        if src in parsed and rng.random() < 0.25:
            tree = parsed[src]
            paths = list(key_paths(tree))
            if paths:
                b = bytearray(_dump(set_at(tree, rng.choice(paths), rng.choice(WRONG_VALUES)), sfx))
        for _ in range(rng.randint(1, 6)):
            op = rng.randrange(8)
            pos = rng.randint(0, len(b))
            if op == 0 and b:
                b[min(pos, len(b) - 1)] ^= 1 << rng.randrange(8)
            elif op == 1 and b:
                b[min(pos, len(b) - 1)] = rng.randrange(256)
            elif op == 2:
                b[pos:pos] = rng.choice(tokens).encode("utf-8", "surrogatepass")
            elif op == 3:
                del b[pos:pos + rng.randint(1, 64)]
            elif op == 4:
                span = bytes(b[pos:pos + rng.randint(1, 256)])
                at = rng.randint(0, len(b))
                b[at:at] = span * rng.choice((1, 1, 2, 50))
            elif op == 5:
                other = raws[rng.choice(corpus)]
                start = rng.randint(0, len(other))
                b[pos:pos] = other[start:start + rng.randint(1, 512)]
            elif op == 6:
                del b[pos:]
            else:
                b[pos:pos] = rng.choice(("\t", "\n" + " " * rng.randint(0, 9), ": ", "- ", "\xff", "\x00")).encode(
                    "latin-1")
        yield src.name, f"{src.stem}.rand{seed}-{i}{sfx}", bytes(b)
        i += 1
