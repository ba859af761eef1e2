"""msprobe's config.json as verl uses it.

msprobe 26.x's own rules come from the JSON Schema; the judging release's measured behaviour
then decides the verdicts (msprobe_releases/verdict.py). The rules here are what the
schema cannot say: unknown and legacy keys (msprobe ignores them silently), and
what verl's way of driving msprobe makes of a setting. verl builds one
PrecisionDebugger(config_path, dump_path) per worker, runs each stage as its own
start(model) -> stop() -> reset_status() session, never calls debugger.step() or
debugger.save(), and passes its own dump path, so msprobe's step counter is 0 in
every stage. Debugger construction errors are swallowed by verl unless strict.
"""

from __future__ import annotations

import json
import os
import re

from verl_pdbg_conf.context import MsprobeContext
from verl_pdbg_conf.core.document import Document
from verl_pdbg_conf.core.findings import Finding, Severity
from verl_pdbg_conf.core.schema import load_schema, properties, schema_findings
from verl_pdbg_conf.core.suggest import did_you_mean

SCHEMA = "msprobe-config"
ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO

# msprobe/core/dump/data_dump/scope.py: RangeScope.check_name_pattern
API_NAME = re.compile(r"^(Distributed|Functional|Torch|Tensor|Mint|MintFunctional|Primitive|Aten|VF|NPU|Jit)"
                      r"\..*\.\d+\.(forward|backward)$")
MODULE_NAME = re.compile(r"^(Cell|Module)\..*\.(forward|backward)\.\d+$")
API_EXAMPLE, MODULE_EXAMPLE = "Functional.linear.0.forward", "Module.0.Linear.forward.0"
ID_MAX = 1_000_000

LEGACY_TASKS = {
    "overflow_check": ("task overflow_check was removed from msprobe",
                       "use task statistics and run `msprobe overflow_check -i <dump step dir>` on the dump, "
                       "or task nan_check on Ascend NPU"),
    "free_benchmark": ("task free_benchmark was removed from msprobe",
                       "use task statistics or tensor and compare two runs with `msprobe compare`"),
    "run_ut": ("task run_ut is no longer a PrecisionDebugger task",
               "dump with task tensor, then run the `msprobe acc_check` command on that dump"),
    "grad_probe": ("task grad_probe was removed from msprobe",
                   "monitor gradients with msprobe's TrainerMon (msprobe.pytorch), or dump with task statistics"),
    "exception_dump": ("task exception_dump exists only in msprobe's MindSpore debugger",
                       "use task statistics or tensor with the PyTorch debugger"),
}


def check_msprobe(doc: Document, ctx: MsprobeContext | None = None) -> list[Finding]:
    """All findings for one msprobe config.json: loading, schema and verl rules.
    Never raises: a bug here becomes a finding instead of a traceback."""
    out = list(doc.findings)
    if not doc.ok:
        return out
    ctx = ctx or MsprobeContext()
    try:
        out += _Checker(doc, ctx).run()
        if isinstance(doc.data, dict):
            from verl_pdbg_conf.checks.msprobe_releases import judging
            from verl_pdbg_conf.checks.msprobe_releases.verdict import judge

            out = out[:len(doc.findings)] + judge(out[len(doc.findings):], doc, doc.data,
                                                  ctx.msprobe or judging()[0], ctx.strict)
    except Exception as e:  # noqa: BLE001 - the validator must not crash on any input
        out.append(doc.finding("msprobe-schema", ERROR,
                               f"internal error while checking this file ({type(e).__name__}: {e}); "
                               "it was only partly checked", (),
                               hint="please report this to verl-pdbg-conf with the file attached"))
    return out


def _show(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def _id_range(item):
    """(lo, hi) for one rank/step entry as msprobe parses it, or None if it is not one."""
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        return item, item
    if not isinstance(item, str):
        return None
    parts = item.split("-")
    if len(parts) > 2:
        return None
    try:
        bounds = [int(p) for p in parts]
    except ValueError:
        return None
    return bounds[0], bounds[-1]


class _Checker:
    def __init__(self, doc: Document, ctx: MsprobeContext):
        self.doc, self.ctx = doc, ctx
        self.schema = load_schema(SCHEMA)
        self.top = properties(self.schema, self.schema)
        task_enum = self.top.get("task", {}).get("enum", [])
        self.tasks = [t for t in task_enum if isinstance(t, str)]
        self.out: list[Finding] = []

    # ------------------------------------------------------------ helpers
    def add(self, rule, severity, message, path, hint, key=False):
        self.out.append(self.doc.finding(rule, severity, message, tuple(path), hint=hint, key=key))

    def crash(self) -> str:
        """What msprobe raising while the debugger is built does to a verl run."""
        if self.ctx.strict:
            return ("msprobe raises when the debugger is built, and with strict: True the run stops at the "
                    "first profiled stage")
        return "msprobe raises when the debugger is built; verl swallows the error and no stage is dumped"

    def section(self, name) -> dict:
        sec = self.data.get(name)
        return sec if isinstance(sec, dict) else {}

    # ------------------------------------------------------------ run
    def run(self) -> list[Finding]:
        self.data = data = self.doc.data
        found = schema_findings(self.doc, SCHEMA)
        task = data.get("task") if isinstance(data, dict) else None
        if isinstance(task, str) and task in LEGACY_TASKS:
            found = [f for f in found if f.path != "task"]  # replaced by the specific finding below
        self.out += found
        if not isinstance(data, dict):
            return self.out
        self.task = task if isinstance(task, str) and task else "statistics"
        level = data.get("level")
        self.level = level if isinstance(level, str) and level else "L1"
        self.unknown_keys()
        self.dump_path()
        self.task_rules()
        self.level_rules()
        self.id_lists()
        self.step_filter()
        self.dump_enable()
        self.load()
        if self.task in self.tasks and self.level in ("L0", "L1", "L2", "mix", "debug"):
            self.active_section()
        self.wrong_section()
        return self.out

    # ------------------------------------------------------------ keys
    def unknown_keys(self):
        sections = {t: properties(self.schema, self.top[t]) for t in self.tasks if t in self.top}
        section_keys = {k for props in sections.values() for k in props}
        plain_top = [k for k, v in self.top.items() if isinstance(v, dict) and not v.get("x-legacy")
                     and not v.get("deprecated")]
        for k in self.data:
            spec = self.top.get(k)
            if isinstance(spec, dict) and spec.get("x-legacy"):
                self.add("msprobe-unknown-key", WARNING,
                         f"legacy key '{k}': {spec.get('deprecationMessage', 'msprobe 26.x ignores it')}",
                         (k,), spec.get("x-hint", "delete it"), key=True)
            elif spec is None and k in section_keys:
                home = self.task if self.task in sections else "statistics"
                self.add("msprobe-unknown-key", WARNING,
                         f"'{k}' belongs inside the task's section (\"{home}\"); at the top level msprobe ignores it",
                         (k,), f"move it into \"{home}\": {{...}}", key=True)
            elif spec is None:
                self.add("msprobe-unknown-key", WARNING,
                         f"unknown key '{k}'{did_you_mean(k, plain_top)}: msprobe ignores it silently",
                         (k,), "fix its spelling or delete it", key=True)
        for name, known in sections.items():
            for k in self.section(name):
                if k in known:
                    continue
                if k in plain_top and k not in sections:
                    self.add("msprobe-unknown-key", WARNING,
                             f"'{name}.{k}' belongs at the top level; inside the \"{name}\" section msprobe ignores it",
                             (name, k), f"move \"{k}\" to the top level of config.json", key=True)
                else:
                    self.add("msprobe-unknown-key", WARNING,
                             f"unknown key '{name}.{k}'{did_you_mean(k, known)}: msprobe ignores it silently",
                             (name, k), "fix its spelling or delete it", key=True)
        load_known = properties(self.schema, self.top.get("load", {}))
        for k in self.section("load"):
            if k not in load_known:
                self.add("msprobe-unknown-key", WARNING,
                         f"unknown key 'load.{k}'{did_you_mean(k, load_known)}: msprobe ignores it silently",
                         ("load", k), "fix its spelling or delete it", key=True)

    def dump_path(self):
        if "dump_path" not in self.data:
            return
        where = "global_profiler.save_path"
        if self.ctx.referenced_from:
            where += f" in {self.ctx.referenced_from}"
        if self.data["dump_path"] in (None, ""):
            self.add("msprobe-dump-path", WARNING, "dump_path is empty and has no effect under verl", ("dump_path",),
                     f"delete \"dump_path\"; the output goes under {where}", key=True)
            return
        self.add("msprobe-dump-path", ERROR,
                 "dump_path is set, but under verl the output path is verl's: each stage is dumped to "
                 "{global_profiler.save_path}/step_<N>/<stage>/ and this path stays empty",
                 ("dump_path",), f"delete \"dump_path\" and set {where} instead", key=True)

    # ------------------------------------------------------------ task and level
    def task_rules(self):
        task = self.data.get("task")
        if not isinstance(task, str):
            return
        if task in LEGACY_TASKS:
            what, hint = LEGACY_TASKS[task]
            self.add("msprobe-task", ERROR, f"{what}: {self.crash()}", ("task",), hint)
        elif task == "acc_check":
            self.add("msprobe-task", ERROR,
                     "task acc_check cannot run through the PyTorch PrecisionDebugger (\"Processor not found\"): "
                     + self.crash(), ("task",),
                     "dump with task tensor, then run the `msprobe acc_check` command on that dump")
        elif task == "nan_check":
            self.add("msprobe-task", WARNING,
                     "task nan_check runs only on Ascend NPU with torch_npu and msprobe's nan_check operators; "
                     "elsewhere " + self.crash(), ("task",),
                     "run it on Ascend NPU, or use task statistics (NaN/Inf show in each tensor's max/min)")

    def level_rules(self):
        at = ("level",) if "level" in self.data else ("task",) if "task" in self.data else ()
        if self.task == "structure" and self.level in ("L1", "L2", "debug"):
            self.add("msprobe-cross-field", WARNING,
                     f"task structure runs at level L0 or mix; msprobe replaces level {self.level}"
                     f"{'' if 'level' in self.data else ' (the default)'} with mix",
                     at, "set \"level\": \"mix\" (or \"L0\" for modules only)")
            self.level = "mix"
        if self.level == "debug":
            self.add("msprobe-level", ERROR,
                     "level debug dumps only what debugger.save() is called on, and verl never calls it: "
                     "no stage is dumped", at, "use level L1 (torch APIs), L0 (modules) or mix (both)")
        elif self.level == "L2":
            self.add("msprobe-level", WARNING,
                     "level L2 is a kernel dump that works only on Ascend NPU; elsewhere msprobe warns and "
                     "dumps nothing", at,
                     "run on Ascend NPU, or use level L1 with task tensor and the API name in list")
        elif self.level in ("L0", "mix"):
            self.add("msprobe-level", INFO,
                     f"level {self.level} hooks the stage's model: verl binds the model it resolves for each stage "
                     "(e.g. actor.engine.module; only the first Megatron chunk); a stage that logs "
                     "'PrecisionDebugger model not resolved' is not dumped", at,
                     "nothing to change here; check the worker logs for 'PrecisionDebugger model not resolved'")

    # ------------------------------------------------------------ rank / step
    def id_lists(self):
        """Range entries the schema's pattern admits but msprobe rejects: A > B or out of bounds."""
        for path in (("rank",), ("step",), ("load", "rank"), ("load", "step")):
            items = self.data.get(path[0]) if len(path) == 1 else self.section("load").get(path[1])
            if not isinstance(items, list):
                continue
            for i, item in enumerate(items):
                if not isinstance(item, str):
                    continue
                r = _id_range(item)
                if r is None:
                    continue  # the schema reports the form
                lo, hi = r
                name = ".".join(path)
                if not (0 <= lo <= ID_MAX and 0 <= hi <= ID_MAX):
                    self.add("msprobe-schema", ERROR, f"{name}[{i}]: \"{item}\" is outside [0, {ID_MAX}]: {self.crash()}",
                             path + (i,), f"use values between 0 and {ID_MAX}")
                elif lo > hi:
                    self.add("msprobe-schema", ERROR,
                             f"{name}[{i}]: \"{item}\" runs backwards ({lo} > {hi}): {self.crash()}",
                             path + (i,), f"write it as \"{hi}-{lo}\"")

    def _steps(self, items):
        """The set of steps a valid filter selects, or None when it is not valid."""
        steps = set()
        for item in items:
            r = _id_range(item)
            if r is None or not (0 <= r[0] <= r[1] <= ID_MAX):
                return None
            if r[0] <= 0 <= r[1]:
                steps.add(0)
            steps.add(r[0])
            steps.add(r[1])
        return steps

    def step_filter(self):
        items = self.data.get("step")
        steps = self._steps(items) if isinstance(items, list) and items else None
        if steps is not None and 0 not in steps:
            self.add("msprobe-step-filter", ERROR,
                     f"step {_show(items)} never matches under verl: each stage is its own start/stop session and verl "
                     "never calls debugger.step(), so msprobe's step counter stays 0; no stage is dumped",
                     ("step",), "delete \"step\" (or set it to []); choose training steps with global_profiler.steps")
        elif steps is not None and len(steps) > 1:
            self.add("msprobe-step-filter", WARNING,
                     f"step {_show(items)} lists steps other than 0, which never occur under verl (every stage is msprobe "
                     "step 0); only global_profiler.steps selects training steps", ("step",),
                     "set \"step\": [] and choose training steps with global_profiler.steps")
        load = self.section("load")
        items = load.get("step")
        steps = self._steps(items) if isinstance(items, list) and items else None
        if steps is not None and 0 not in steps:
            self.add("msprobe-step-filter", WARNING,
                     f"load.step {_show(items)} never matches under verl (msprobe's step is always 0): no input is replaced",
                     ("load", "step"), "set \"step\": [] in the load section")

    # ------------------------------------------------------------ dump switches
    def dump_enable(self):
        value = self.data.get("dump_enable")
        if value is False:
            self.add("msprobe-dump-disabled", ERROR,
                     "dump_enable is false: msprobe dumps nothing unless the file is edited to true while the job runs",
                     ("dump_enable",), "delete \"dump_enable\" (or set it to true)")
        elif value is True:
            self.add("msprobe-dump-disabled", INFO,
                     "dump_enable makes msprobe re-read config.json at every stage while the job runs; an edit that "
                     "does not parse turns dumping off for the rest of the run",
                     ("dump_enable",), "delete \"dump_enable\" unless you mean to switch dumping by editing the file")

    def load(self):
        if "load" not in self.data or not isinstance(self.data["load"], dict):
            return
        load = self.data["load"]
        if load.get("dump_after_load") is True:
            self.add("msprobe-cross-field", WARNING,
                     "load replaces the listed modules' inputs with tensors from load.path in every profiled stage: "
                     "the training itself changes, not only the dump", ("load",),
                     "use load only for a deliberate replay; delete the section for an ordinary dump", key=True)
        else:
            self.add("msprobe-dump-disabled", ERROR,
                     "a load section without \"dump_after_load\": true is load-only mode: msprobe replaces module "
                     "inputs with tensors from load.path and dumps nothing", ("load",),
                     "delete the \"load\" section to dump, or set \"dump_after_load\": true", key=True)
        path = load.get("path")
        if isinstance(path, str) and path and not os.path.isdir(path):
            self.add("msprobe-cross-field", WARNING,
                     f"load.path \"{path}\" is not a directory here; msprobe needs an existing dump directory "
                     "(step<N>/rank<R>/dump_tensor_data) when the debugger is built", ("load", "path"),
                     "point it at an existing dump, e.g. {save_path}/step_1/<stage> of an earlier verl run")

    # ------------------------------------------------------------ the active task's section
    def active_section(self):
        sec = self.section(self.task)
        name = self.task
        scope = sec.get("scope")
        if (isinstance(scope, list) and len(scope) == 2 and self.level in ("L0", "L1", "mix")
                and all(isinstance(s, str) for s in scope)):
            for i, entry in enumerate(scope):
                self.scope_entry(name, i, entry)
        for key, kind in (("slice", list), ("request_id", str)):
            if not sec.get(key) or not isinstance(sec.get(key), kind):
                continue  # unset, or the schema reports its type
            if self.task not in ("tensor", "statistics") or self.level not in ("L0", "L1", "mix"):
                self.add("msprobe-cross-field", WARNING,
                         f"'{name}.{key}' is ignored: it applies only to tasks tensor and statistics at levels "
                         f"L0, L1 and mix (here task {self.task}, level {self.level})", (name, key),
                         f"delete \"{key}\"", key=True)
            elif key == "request_id":
                self.add("msprobe-cross-field", WARNING,
                         f"'{name}.request_id' has no effect under verl: it selects tokens through scheduled_tokens "
                         "passed to start(), which verl never passes", (name, key), "delete \"request_id\"", key=True)
        lst = sec.get("list")
        regex = [i for i, e in enumerate(lst) if isinstance(e, str) and e.startswith("name-regex(")] \
            if isinstance(lst, list) else []
        for i in regex:
            alone = len(regex) == len(lst)
            self.add("msprobe-cross-field", ERROR if alone else WARNING,
                     "PyTorch matches list entries as plain substrings of API and module names; name-regex(...) "
                     "is understood only by msprobe's MindSpore kernel dump, so this entry matches nothing"
                     + ("; with only such entries, nothing is dumped" if alone else ""), (name, "list", i),
                     "write a plain name fragment, e.g. \"Functional.linear\"")
        self.risk_level(sec)
        bench = sec.get("bench_path") if self.task == "tensor" else None
        if isinstance(bench, str) and bench:
            if not os.path.isdir(bench):
                self.add("msprobe-cross-field", WARNING,
                         f"tensor.bench_path \"{bench}\" is not a directory here; msprobe needs an existing dump "
                         "directory when the debugger is built", ("tensor", "bench_path"),
                         "point it at an earlier verl dump of the same stage, e.g. {save_path}/step_1/actor_update")
            elif not os.path.isdir(os.path.join(bench, "step0")):
                self.add("msprobe-cross-field", WARNING,
                         f"tensor.bench_path \"{bench}\" has no step0/ directory; under verl every stage is msprobe "
                         "step 0, so msprobe looks for step0/rank<N>/dump.json there", ("tensor", "bench_path"),
                         "point it at one stage's directory of an earlier verl dump, e.g. {save_path}/step_1/actor_update")

    def scope_entry(self, name, i, entry):
        api, module = bool(API_NAME.match(entry)), bool(MODULE_NAME.match(entry))
        if self.level == "L1" and not api:
            hint = (f"this is an L0 module name: use API names like \"{API_EXAMPLE}\", or set level mix"
                    if module else f"use full API names like \"{API_EXAMPLE}\" (prefix, name, call index, "
                                   "forward|backward)")
            what = "an API name"
        elif self.level == "L0" and not module:
            hint = (f"this is an L1 API name: use module names like \"{MODULE_EXAMPLE}\", or set level mix"
                    if api else f"use full module names like \"{MODULE_EXAMPLE}\" (Module, path, class, "
                                "forward|backward, call index)")
            what = "a module name"
        elif self.level == "mix" and not (api or module):
            hint = f"use an API name like \"{API_EXAMPLE}\" or a module name like \"{MODULE_EXAMPLE}\""
            what = "an API or module name"
        else:
            return
        self.add("msprobe-cross-field", ERROR,
                 f"{name}.scope[{i}] \"{entry}\" is not {what} as level {self.level} needs: {self.crash()}",
                 (name, "scope", i), hint)

    def risk_level(self, sec):
        if self.data.get("risk_level") in (None, ""):
            return
        if self.level not in ("L1", "mix"):
            why = f"it applies only at levels L1 and mix, not {self.level}"
        elif sec.get("scope") or sec.get("list"):
            why = "scope or list is set, and they select what is dumped instead"
        else:
            return
        self.add("msprobe-cross-field", WARNING, f"risk_level is ignored: {why}", ("risk_level",),
                 "delete \"risk_level\"", key=True)

    def wrong_section(self):
        """Settings written in another task's section while the task's own is absent."""
        if self.task not in self.tasks or self.task in self.data:
            return
        for other in self.tasks:
            if other != self.task and self.section(other):
                self.add("msprobe-cross-field", WARNING,
                         f"task is {self.task} but the settings are in \"{other}\", which msprobe reads only for task "
                         f"{other}; the {self.task} task runs with default settings", (other,),
                         f"rename \"{other}\" to \"{self.task}\", or set \"task\": \"{other}\"", key=True)
