"""The rollout as a profiled stage: each vLLM engine step (a prefill chunk or a decode step, with every
request scheduled in it) is one msprobe step, `{stage dir}/step{K}/rank{R}/`, and beside its dump.json a
token record (tokens.json) says which request and position each row computed, so that tokens can be
aligned with the trainer's forward afterwards (compare/rollout/).

The engine's model runner is wrapped for the stage only: `execute_model` (the forward and the logits)
and `sample_tokens` (what the engine returns: the sampled token and its log-prob). Nothing of vLLM is
imported here; its objects are read by attribute."""

from __future__ import annotations

import json
import os
from typing import Any

from verl_pdbg_conf.runtime import model as _model
from verl_pdbg_conf.runtime import session as _session
from verl_pdbg_conf.verl_facts.stages import ROLLOUT_STAGE as STAGE

TOKENS = "tokens.json"
FORMAT = 1
# Where an in-process vLLM LLM (VLLM_ENABLE_V1_MULTIPROCESSING=0) keeps its model runner, newest first.
_RUNNER_PATHS = (
    "llm_engine.model_executor.driver_worker.worker.model_runner",
    "llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner",
    "model_executor.driver_worker.worker.model_runner",
    "driver_worker.worker.model_runner",
    "worker.model_runner",
    "model_runner",
)


def model_runner(obj: Any) -> Any:
    """The vLLM model runner behind `obj` (an LLM, an engine, a worker or the runner itself), or None."""
    if callable(getattr(obj, "execute_model", None)) and getattr(obj, "model", None) is not None:
        return obj
    for path in _RUNNER_PATHS:
        runner = _model.attr_path(obj, path)
        if runner is not None and callable(getattr(runner, "execute_model", None)):
            return runner
    return None


def _ints(values, n: int | None = None) -> list[int]:
    """The first n of a CPU tensor, numpy array or list, as ints."""
    if hasattr(values, "tolist"):
        values = values[:n].tolist() if n is not None else values.tolist()
    else:
        values = list(values)[:n] if n is not None else list(values)
    return [int(v) for v in values]


def _host(runner: Any, name: str) -> Any:
    """A runner buffer's host copy: CpuGpuBuffer.cpu (vLLM >= 0.10) or the `<name>_cpu` tensor before."""
    if not hasattr(runner, name):
        return getattr(runner, f"{name}_cpu")
    buffer = getattr(runner, name)
    inner = getattr(buffer, "cpu", None)
    return buffer if inner is None or callable(inner) else inner


def step_rows(runner: Any, scheduler_output: Any) -> list[dict]:
    """Which request each row of this engine step computed, in the runner's batch order: per request
    its id, the positions and token ids of its rows (rows are the requests' tokens concatenated)."""
    counts = dict(getattr(scheduler_output, "num_scheduled_tokens", {}) or {})
    req_ids = [r for r in list(getattr(runner.input_batch, "req_ids", []) or []) if r in counts]
    total = sum(counts[r] for r in req_ids)
    positions = _ints(_host(runner, "positions"), total)
    ids = _ints(_host(runner, "input_ids"), total)
    rows, start = [], 0
    for r in req_ids:
        n = counts[r]
        rows.append({"request": str(r), "rows": [start, start + n], "positions": positions[start:start + n],
                     "token_ids": ids[start:start + n]})
        start += n
    return rows


def _sampling(runner: Any, req_ids: list[str]) -> dict:
    """Per request, what the engine samples with (temperature, top_k, top_p), as the runner holds it."""
    out = {}
    states = getattr(runner, "requests", {}) or {}
    for r in req_ids:
        params = getattr(states.get(r), "sampling_params", None)
        if params is not None:
            out[r] = {k: getattr(params, k, None) for k in ("temperature", "top_k", "top_p", "logprobs")}
    return out


def _sampled(output: Any) -> dict:
    """The engine's answer per request: the sampled token ids and, where asked for, their log-probs."""
    req_ids = list(getattr(output, "req_ids", None) or [])
    tokens = getattr(output, "sampled_token_ids", None)
    if not req_ids or tokens is None:
        return {}
    logprobs = getattr(output, "logprobs", None)
    values = getattr(logprobs, "logprobs", None)
    ids = getattr(logprobs, "logprob_token_ids", None)
    out = {}
    for i, r in enumerate(req_ids):
        sampled = _ints(tokens[i]) if i < len(tokens) else []
        entry: dict = {"token_ids": sampled}
        if values is not None and ids is not None and i < len(values):
            # row i: [sampled token's log-prob, then the top-k]; its token id comes first in ids[i]
            row_ids, row_vals = list(ids[i]), list(values[i])
            entry["logprob"] = float(row_vals[0]) if row_vals and row_ids and int(row_ids[0]) in sampled[:1] else None
        out[str(r)] = entry
    return out


def _own_logprobs(record: dict, logits: Any) -> None:
    """Per sampled request, the log-softmax of the engine's own logits at the sampled token: what its
    returned log-prob is without temperature and top-k/top-p (logits rows follow the requests' order)."""
    if logits is None or not hasattr(logits, "float"):
        return
    import torch

    rows = torch.log_softmax(logits.detach().float(), dim=-1)
    for i, req in enumerate(record.get("requests") or ()):
        entry = (record.get("sampled") or {}).get(req["request"])
        if entry and entry.get("token_ids") and i < rows.shape[0]:
            entry["logprob_logits"] = float(rows[i, entry["token_ids"][0]])


def engine_info(runner: Any) -> dict:
    """The engine and its settings that decide how its numbers come out."""
    info: dict = {"engine": "vllm"}
    try:
        import vllm

        info["version"] = getattr(vllm, "__version__", None)
    except Exception:  # the record is still useful without it
        pass
    mc = getattr(runner, "model_config", None)
    if mc is not None:
        info["dtype"] = str(getattr(mc, "dtype", "")).replace("torch.", "") or None
        info["logprobs_mode"] = str(getattr(mc, "logprobs_mode", "") or "") or None
        info["enforce_eager"] = getattr(mc, "enforce_eager", None)
        hf = getattr(mc, "hf_config", None)
        info["architectures"] = list(getattr(hf, "architectures", None) or [])
        info["hf_config"] = _scalars(getattr(mc, "hf_text_config", None) or hf)  # routing: top-k, scoring...
    info["model_class"] = type(getattr(runner, "model", None)).__name__
    return info


def _scalars(config: Any) -> dict:
    """A config's plain settings (numbers, strings, flags), as JSON can hold them."""
    try:
        items = config.to_dict().items()
    except Exception:  # not a transformers config: nothing to record
        return {}
    return {k: v for k, v in items if v is None or isinstance(v, (bool, int, float, str))}


class EngineSteps:
    """The stage around an engine's steps: its runner's execute_model and sample_tokens wrapped while
    it is open. Each engine step with tokens scheduled is msprobe step K of `session`."""

    def __init__(self, runner: Any, session: _session.Session, on_error):
        self.runner, self.session, self.on_error = runner, session, on_error
        self.k = 0
        self._last_logits = None
        # the step whose sampled tokens are still to come: its rank dir, token record and logits
        self.pending: tuple[str, dict, Any] | None = None
        self.info = engine_info(runner)

    def __enter__(self):
        runner = self.runner
        self._execute = runner.execute_model
        runner.execute_model = self.execute_model
        model = runner.model
        self._logits_fn = getattr(model, "compute_logits", None)
        if callable(self._logits_fn):
            model.compute_logits = self.compute_logits
        self._sample = getattr(runner, "sample_tokens", None)
        if callable(self._sample):
            runner.sample_tokens = self.sample_tokens
        return self

    def __exit__(self, *exc):
        runner = self.runner
        for name in ("execute_model", "sample_tokens"):
            if name in vars(runner):
                delattr(runner, name)  # the class's own method is back
        if "compute_logits" in vars(runner.model):
            delattr(runner.model, "compute_logits")
        self._flush()
        return False

    def execute_model(self, scheduler_output, *args, **kwargs):
        self._flush()
        if not getattr(scheduler_output, "total_num_scheduled_tokens", 0):
            return self._execute(scheduler_output, *args, **kwargs)
        k, self.k = self.k, self.k + 1
        self._last_logits = None
        try:
            rank_dir = _session.step_start(self.session, k, self.runner.model)
        except _session.MsprobeError as e:
            self.on_error(e)
            return self._execute(scheduler_output, *args, **kwargs)
        try:
            output = self._execute(scheduler_output, *args, **kwargs)
        except BaseException:
            self._stop(failed=True)
            raise
        record = {"format": FORMAT, **self.info, "engine_step": k, "requests": []}
        try:
            record["requests"] = step_rows(self.runner, scheduler_output)
            record["sampling"] = _sampling(self.runner, [r["request"] for r in record["requests"]])
        except Exception as e:  # the dump is still written; the compare says the record is incomplete
            record["error"] = f"token rows not read: {e!r}"
        if not self._stop():
            return output  # msprobe failed on this step and said so: no token record beside its dump
        self.pending = (rank_dir, record, self._last_logits)
        if output is not None and getattr(output, "sampled_token_ids", None) is not None:
            self._answer(output)
        return output

    def compute_logits(self, *args, **kwargs):
        """The engine's logits, one row per request of the step: kept for the step's log-probs of its own
        (msprobe skips the model's last module where verl is imported, the logits processor among them)."""
        logits = self._logits_fn(*args, **kwargs)
        # a copy: the sampler divides the logits by the temperature in place before the step's record is written
        self._last_logits = logits.detach().clone() if hasattr(logits, "detach") else None
        return logits

    def sample_tokens(self, *args, **kwargs):
        output = self._sample(*args, **kwargs)
        self._answer(output)
        return output

    def _answer(self, output) -> None:
        if self.pending is None:
            return
        _, record, logits = self.pending
        try:
            record["sampled"] = _sampled(output)
            _own_logprobs(record, logits)
        except Exception as e:
            record["error"] = f"sampled tokens not read: {e!r}"
        self._flush()

    def _stop(self, failed: bool = False) -> bool:
        try:
            _session.step_stop(self.session)
            return True
        except _session.MsprobeError as e:
            self.on_error(e, failed)
            return False

    def _flush(self) -> None:
        """Write the pending step's token record beside its dump.json."""
        if self.pending is None:
            return
        rank_dir, record, _ = self.pending
        self.pending = None
        if not os.path.isdir(rank_dir):
            return  # msprobe wrote nothing for this step (its rank or step filter)
        write_record(os.path.join(rank_dir, TOKENS), record)


_WRITTEN: set = set()  # token records this process wrote: a continued stage's record grows in place


def write_record(path: str, record: dict) -> None:
    """Write a token record next to a dump, never over a file this process did not write."""
    try:
        with open(path, "w" if path in _WRITTEN else "x", encoding="utf-8") as fh:
            json.dump(record, fh)
        _WRITTEN.add(path)
    except FileExistsError:
        _session.warn_once(("tokens-exist", path), f"{path} exists already; the token record is not written")
    except OSError as e:
        _session.warn_once(("tokens-write", type(e).__name__), f"token record not written ({e!r})")


class ForwardTokens:
    """The trainer's side of the token record: the token ids (and mask, positions) each forward of the
    stage's model was called with, written beside the stage's dump.json at close."""

    def __init__(self, model: Any):
        self.model, self.calls, self.handles = model, [], []

    def __enter__(self):
        register = getattr(self.model, "register_forward_pre_hook", None)
        if callable(register):
            self.handles = [register(self._hook, with_kwargs=True),
                            self.model.register_forward_hook(self._logits, with_kwargs=True)]
        return self

    def _logits(self, module, args, kwargs, output):
        """Each position's log-prob of the next token from the forward's logits: the actor's log-probs as the
        dump's token record holds them (msprobe skips lm_head where verl is imported)."""
        logits = getattr(output, "logits", output if hasattr(output, "dim") else None)
        if not self.calls or logits is None or not hasattr(logits, "dim") or logits.dim() != 3:
            return None
        try:  # a hook in the model's forward: nothing here may reach training
            import torch

            ids = torch.as_tensor(self.calls[-1]["input_ids"], device=logits.device)
            if ids.shape != logits.shape[:2] or ids.numel() == 0 or int(ids.max()) >= logits.shape[-1]:
                return None  # not a language model's logits over these ids (a value head, a classifier)
            with torch.no_grad():
                logp = torch.log_softmax(logits[:, :-1].detach().float(), dim=-1)
                self.calls[-1]["next_logprobs"] = logp.gather(-1, ids[:, 1:, None]).squeeze(-1).cpu().tolist()
        except Exception as e:
            _session.warn_once(("tokens-logprobs", type(e).__name__), f"the forward's log-probs are not recorded ({e!r})")
        return None

    def _hook(self, module, args, kwargs):
        try:  # a hook in the model's forward: nothing here may reach training
            self._record(args, kwargs)
        except Exception as e:
            _session.warn_once(("tokens-ids", type(e).__name__), f"the forward's token ids are not recorded ({e!r})")
        return None

    def _record(self, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None or not hasattr(ids, "tolist") or ids.dim() != 2:
            return None  # token ids are [batch, seq]: anything else is not a language model's batch
        call = {"input_ids": ids.tolist()}
        for key in ("attention_mask", "position_ids"):
            value = kwargs.get(key)
            # a 2-D mask says which tokens are padding; a 4-D one (packed sequences kept apart) does not
            if value is not None and hasattr(value, "tolist") and getattr(value, "dim", lambda: 2)() == 2:
                call[key] = value.tolist()
        self.calls.append(call)
        return None

    def detach(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def write(self, rank_dir: str) -> None:
        if self.calls and os.path.isdir(rank_dir):
            write_record(os.path.join(rank_dir, TOKENS), {"format": FORMAT, "engine": "trainer",
                                                          "calls": self.calls})
