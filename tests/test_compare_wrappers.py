"""verl-pdbg-compare across the wrappers verl and its users put around a model, on real dumps: a small
transformers Qwen2 (and an nn.Sequential) run on CPU under torch FSDP1, FSDP2 and DDP on a one-rank gloo
group, PEFT LoRA, activation checkpointing and identity hooks, dumped by this package's runtime at mix and
L1 (tests/make_wrapper_dumps.py), each with and without a 1% change planted in layer K's MLP. The right
answer: the planted layer is named; without a plant, nothing diverges; and "same" only for what was
compared whole."""

from __future__ import annotations

import json
import os

import pytest

import make_cross_impl_dumps as X  # tests/ is on the path (conftest imports it the same way)
import make_wrapper_dumps
import compare_cli

pytestmark = pytest.mark.slow

RUNS = {
    "qwen2-mix": ("qwen2", "mix", "plain,plain-weight,fsdp1,fsdp1-weight,fsdp2,ddp,ddp-weight,lora,lora-weight,"
                  "ckpt,ckpt-weight", []),
    "qwen2-L1": ("qwen2", "L1", "plain,fsdp1,fsdp1-weight,fsdp2,ddp-weight,lora,lora-weight,ckpt-weight,hook,"
                 "hook-weight", []),
    "seq-L1": ("seq", "L1", "plain,hook,hook-weight,hookall,ddp-weight,fsdp1-weight,lora,lora-weight", []),
    "qwen2-mix-nogroup": ("qwen2", "mix", "plain,plain-weight", ["--no-group"]),
}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("wrappers")
    make_wrapper_dumps.make_all(root, {name: ["--arch", arch, "--level", level, "--runs", runs, *extra]
                                       for name, (arch, level, runs, extra) in RUNS.items()})
    return root


def compare(dumps, which: str, target: str, golden: str = "plain", *extra, golden_dir: str | None = None):
    t = dumps / which / target
    g = dumps / (golden_dir or which) / golden
    return compare_cli.run_json(t, g, *extra)


def planted(dumps, which: str) -> int:
    return json.loads((dumps / which / "manifest.json").read_text())["layer"]


def named_layer(pair: dict, level: str):
    return X.named_layer(pair["first_divergence"] or {}, level)


MIX_PLANTED = ["plain-weight", "fsdp1-weight", "ddp-weight", "lora-weight", "ckpt-weight"]
L1_PLANTED = ["fsdp1-weight", "ddp-weight", "lora-weight", "ckpt-weight", "hook-weight"]


@pytest.mark.parametrize("which,target", [("qwen2-mix", t) for t in MIX_PLANTED] +
                         [("qwen2-L1", t) for t in L1_PLANTED] +
                         [("seq-L1", t) for t in ("hook-weight", "ddp-weight", "fsdp1-weight", "lora-weight")])
def test_a_planted_change_is_named_in_its_layer_under_every_wrapper(dumps, which, target):
    code, doc = compare(dumps, which, target)
    k, level = planted(dumps, which), which.split("-")[1]
    assert code == 1
    for p in doc["pairs"]:
        assert p["status"] == "diverged", (target, p["stage"], p["status"])
        if which == "seq-L1" and p["first_divergence"].get("layer") is None:
            # the update stage of the nn.Sequential: the layer is not inferred from its stacks (a gap of
            # stacks.py's), but the node is block K's linear, its weight
            assert p["first_divergence"]["name"] == f"Functional.linear.{k}.forward.input.1"
            continue
        assert named_layer(p, level) == k, (target, p["stage"], p["first_divergence"])


def test_fsdp1_against_fsdp2_names_the_planted_layer(dumps):
    """The issue's case: FSDP1 (paths under _fsdp_wrapped_module) with the change against FSDP2."""
    for which in ("qwen2-mix", "qwen2-L1"):
        code, doc = compare(dumps, which, "fsdp1-weight", "fsdp2")
        assert code == 1 and all(named_layer(p, which.split("-")[1]) == planted(dumps, which) for p in doc["pairs"])


@pytest.mark.parametrize("which,target", [("qwen2-mix", t) for t in ("fsdp1", "fsdp2", "ddp", "lora", "ckpt")] +
                         [("qwen2-L1", t) for t in ("fsdp1", "fsdp2", "lora", "hook")] +
                         [("seq-L1", t) for t in ("hook", "hookall", "lora")])
def test_no_change_is_never_a_divergence(dumps, which, target):
    code, doc = compare(dumps, which, target)
    assert code in (0, 3), doc
    for p in doc["pairs"]:
        assert p["status"] in ("same", "partial")
        cov = p["coverage"]
        assert (p["status"] == "same") == cov["full"]
        if p["status"] == "partial":  # says what was not compared
            assert any(f["rule"] == "compare-coverage" and "not compared in" in f["message"] for f in p["findings"])


@pytest.mark.parametrize("which,target", [("qwen2-mix", "fsdp1"), ("qwen2-mix", "fsdp2"), ("qwen2-mix", "ddp"),
                                          ("qwen2-mix", "lora"), ("qwen2-mix", "ckpt"), ("qwen2-L1", "hook"),
                                          ("seq-L1", "hook"), ("seq-L1", "hookall")])
def test_the_forward_stage_is_compared_whole(dumps, which, target):
    """Wrappers that add no computation to the forward (or add it inside a paired module: LoRA's branch)
    leave nothing of it uncompared: the log-prob stage is "same", every module paired or accounted for."""
    _code, doc = compare(dumps, which, target)
    p = next(p for p in doc["pairs"] if p["stage"] == "actor_compute_log_prob")
    assert p["status"] == "same", p["findings"]
    for side in ("target", "golden"):
        c = p["coverage"][side]
        assert c["share"] == 1.0 and not c["uncompared_modules"]
        assert c["paired_modules"] + c["accounted_modules"] == c["modules"]


def test_lora_update_is_partly_compared_and_says_where(dumps):
    """LoRA trains its adapters, the plain model every weight: the plain run's weight gradients and
    optimizer steps have no counterpart, so the update stage is never "same"."""
    code, doc = compare(dumps, "qwen2-mix", "lora")
    p = next(p for p in doc["pairs"] if p["stage"] == "actor_update")
    assert code == 3 and p["status"] == "partial" and p["coverage"]["golden"]["share"] < 0.99


def test_a_run_without_process_group_pairs_with_rank0(dumps):
    code, doc = compare(dumps, "qwen2-mix-nogroup", "plain-weight", "plain", golden_dir="qwen2-mix")
    assert code == 1 and len(doc["pairs"]) == 2
    k = planted(dumps, "qwen2-mix")
    assert all(named_layer(p, "mix") == k for p in doc["pairs"])
    notes = [f for p in doc["pairs"] for f in p["findings"]] + doc["diagnostics"]
    assert any(f["rule"] == "compare-pairing" and f["severity"] == "info" and "rank0" in f["message"] for f in notes)
    code, doc = compare(dumps, "qwen2-mix-nogroup", "plain", "plain", golden_dir="qwen2-mix")
    assert code == 0 and all(p["status"] == "same" for p in doc["pairs"])


def test_text_and_html_reports_show_coverage(dumps, tmp_path):
    html = tmp_path / "r.html"
    code, out = compare_cli.run([dumps / "qwen2-mix" / "lora", dumps / "qwen2-mix" / "plain", "--html", html])
    assert code == 3 and "compared" in out.splitlines()[4] and "partial" in out and "% of" in out
    page = html.read_text()
    assert "partly compared" in page and "records compared" in page
    # a looser --min-coverage is honoured, and said
    code, doc = compare(dumps, "qwen2-mix", "lora", "plain", "--min-coverage", "0.5")
    assert doc["min_coverage"] == 0.5


# ---- a fuzz of module-path renamings: wrapper levels inserted on one side (removed, seen from the other)

WRAPPER_NAMES = ("_fsdp_wrapped_module", "module", "_orig_mod", "_checkpoint_wrapped_module", "base_model", "model",
                 "wrapped", "inner")


def renamer(paths: list[str], rng):
    """A random renaming of module paths as wrappers make it: 1 to 3 times, a wrapper level inserted after
    a random module (its subtree moves under it) or at the root."""
    edits = []
    for _ in range(rng.randint(1, 3)):
        at = rng.choice(["", *paths])
        levels = rng.choice([1, 1, 2])
        edits.append((at, ".".join(rng.choice(WRAPPER_NAMES) for _ in range(levels))))

    def rename(path: str) -> str:
        for at, ins in edits:
            if at == "":
                path = f"{ins}.{path}" if path else ins
            elif path == at or path.startswith(at + "."):
                path = at + "." + ins + path[len(at):]
        return path
    return rename, edits


def rename_run(src, dst, rename) -> None:
    from verl_pdbg_conf.compare.pipeline.trees import call_name, parse_call

    def name(n):
        if not isinstance(n, str):
            return n
        parsed = parse_call(n)
        return call_name(n.split(".", 1)[0], rename(parsed[0]), parsed[1], parsed[2]) if parsed else n

    for here, _dirs, files in os.walk(src):
        out = dst / os.path.relpath(here, src)
        out.mkdir(parents=True, exist_ok=True)
        for f in files:
            with open(os.path.join(here, f)) as fh:
                text = fh.read()
            if f == "dump.json":
                doc = json.loads(text)
                doc["data"] = {name(k): v for k, v in doc["data"].items()}
                text = json.dumps(doc)
            elif f == "construct.json":
                text = json.dumps({name(k): name(v) for k, v in json.loads(text).items()})
            elif f == "stack.json":
                text = json.dumps({k: [[name(n) for n in v[0]], v[1]] if isinstance(v, list) and len(v) == 2
                                   and isinstance(v[0], list) else v for k, v in json.loads(text).items()})
            (out / f).write_text(text)


def module_paths(run) -> list[str]:
    from verl_pdbg_conf.compare.pipeline.trees import Tree

    dump = next(run.glob("step_*/actor_compute_log_prob/step0/rank*/dump.json"))
    return list(Tree.read(str(dump)).modules)


@pytest.mark.parametrize("seed", range(12))
def test_fuzz_renamed_module_paths_never_hide_a_planted_change(dumps, tmp_path, seed):
    import random

    rng = random.Random(seed)
    base = dumps / "qwen2-mix"
    rename, edits = renamer(module_paths(base / "plain"), rng)
    side = "target" if seed % 2 == 0 else "golden"  # insertion on one side is removal seen from the other
    k = planted(dumps, "qwen2-mix")
    runs = {}
    for run in ("plain-weight", "plain"):
        src = base / run
        if (run == "plain-weight") == (side == "target"):
            rename_run(src, tmp_path / run, rename)
            runs[run] = tmp_path / run
        else:
            runs[run] = src
    code, doc = compare_cli.run_json(runs["plain-weight"], runs["plain"])
    assert code == 1, (edits, side)
    for p in doc["pairs"]:
        assert p["status"] == "diverged", (edits, side, p["stage"], p["status"])
        assert f"layers.{k}." in (p["first_divergence"]["module"] or "") + ".", (edits, side, p["first_divergence"])
    # the same weights renamed: never a divergence
    renamed = tmp_path / "plain-renamed"
    rename_run(base / "plain", renamed, rename)
    code, doc = compare_cli.run_json(renamed, base / "plain")
    assert code in (0, 3) and all(p["status"] != "diverged" for p in doc["pairs"]), edits
