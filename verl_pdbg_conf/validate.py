"""The validator's core: files in, a Report of findings out. No printing, no exit codes."""

from __future__ import annotations

import os
import re

from verl_pdbg_conf.context import MsprobeContext, Options
from verl_pdbg_conf.core.document import Document, is_unknown
from verl_pdbg_conf.core.findings import Finding, Report, Severity, format_path
from verl_pdbg_conf.core.loaders import load_json, load_yaml, read_text
from verl_pdbg_conf.verl_facts.verl_tree import DUMP_PATH_CHARS

E = Severity.ERROR


def validate_files(files: list[str], options: Options | None = None) -> Report:
    options = options or Options()
    report = Report()
    seen_json: dict = {}
    for f in files:
        opts = options
        if not f.lower().endswith(".json"):  # a conf is judged by the verl of its repository
            opts = options.for_source(options.verl or _source_for_file(f, options))
            report.verl_sources.append(opts.source)
        report.extend(validate_file(f, opts, seen_json))
    return report


def _source_for_file(f: str, options: Options):
    from verl_pdbg_conf.verl_facts import releases, source

    requested = options.verl_version if options.verl_version in releases.shipped() else None
    return source.for_file(f, options.verl_source, requested)


def validate_file(file: str, options: Options | None = None, _seen_json: dict | None = None) -> Report:
    options = options or Options()
    if file.lower().endswith(".json"):
        report = Report(files=[file])
        jdoc = load_json(file)
        report.findings += _msprobe(jdoc, MsprobeContext(msprobe=options.msprobe_release[0]))
        if jdoc.ok:
            report.findings += _pair(jdoc, (), options)
        return report
    return validate_document(load_yaml(file), options, _seen_json)


def validate_document(doc: Document, options: Options | None = None, _seen_json: dict | None = None) -> Report:
    """All rules for a verl config Document (a user's conf, a composed config)."""
    from verl_pdbg_conf.core import interpolation
    from verl_pdbg_conf.checks.verl_profiler import check_verl_config

    options = options or Options()
    report = Report(files=[doc.file])
    report.findings += doc.findings
    if not doc.ok:
        return report
    interpolation.resolve(doc)
    findings, tc = check_verl_config(doc, options)
    report.findings += findings
    if tc is not None:
        from verl_pdbg_conf.checks.moe import check_routing_replay

        report.findings += check_routing_replay(doc, tc, options)
    if tc is not None and isinstance(tc.config_path, str) and tc.config_path and not is_unknown(tc.config_path):
        report.extend(_config_json(doc, tc, options, _seen_json if _seen_json is not None else {}))
    report.findings = [f for f in report.findings if not _own_remark(f, doc)]
    return report


# Rules that say a setting is not needed ("leave it disabled"): advice to whoever wrote it.
_REDUNDANT = {"role-unused"}
_OWN_CONF = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "conf")) + os.sep


def _own_remark(f: Finding, doc: Document) -> bool:
    """A remark on this package's own settings, not the user's: an info in a file it ships
    (conf/msprobe/*.json), or an info or a redundant-setting remark on a key one of its config
    groups set. The group sets such keys on purpose (ref.profiler.enable for a separate ref worker
    group); where a stage it lists will not run under the user's config, `stage-not-run` says so."""
    if f.severity is Severity.ERROR:
        return False
    if f.severity is Severity.INFO and os.path.realpath(f.file).startswith(_OWN_CONF):
        return True
    return (f.severity is Severity.INFO or f.rule in _REDUNDANT) and any(
        f.path == format_path(p) for p in doc.own)


def _config_json(doc: Document, tc, options: Options, seen: dict) -> Report:
    """Load and check the msprobe config.json that config_path names."""
    report = Report()
    path = tc.config_path
    resolved = path if os.path.isabs(path) else os.path.join(options.base_dir, path)
    at = tc.config_path_at
    shown = path if resolved == path else f"{path} (resolved against {options.base_dir})"
    text, errs = read_text(resolved, "config.json")
    if text is None:
        why = errs[0].message.replace("config.json ", "")
        report.findings.append(doc.finding(
            "config-path-invalid", E, f"config_path {shown}: {why}; msprobe cannot load its config",
            at, hint="point config_path at an existing msprobe config.json (a relative path resolves against "
                     "the directory the job is launched from)"))
        return report
    if not resolved.lower().endswith(".json"):
        report.findings.append(doc.finding(
            "config-path-invalid", E, f"config_path {shown} does not end in .json: msprobe refuses it",
            at, hint="rename the file to end in .json"))
    real = os.path.realpath(resolved)
    if not re.match(DUMP_PATH_CHARS, real):
        report.findings.append(doc.finding(
            "config-path-invalid", E, f"config_path {shown} resolves to {real!r}, which has characters msprobe "
            "refuses in a file path: PrecisionDebugger fails to open it", at,
            hint="move or link the file to a path of letters, digits and _ . : / - only"))
    key = (real, tc.strict)
    if key in seen:  # the file's own findings are said once; what this conf does with it, per conf
        if getattr(tc, "rollout", False) and seen[key].ok:
            report.findings += _rollout_json(doc, seen[key], tc, options)
        return report
    jdoc = seen[key] = load_json(resolved, text)
    report.files.append(resolved)
    if not jdoc.ok:
        report.findings += jdoc.findings
        first = jdoc.findings[0] if jdoc.findings else None
        report.findings.append(doc.finding(
            "config-path-invalid", E, f"config_path {shown} is not valid JSON"
            + (f" ({first.file}:{first.line}:{first.column})" if first else "") + "; msprobe fails to load it",
            at, hint="fix the JSON file"))
        return report
    report.findings += _msprobe(jdoc, MsprobeContext(strict=tc.strict, referenced_from=doc.file,
                                                      config_path_key=format_path(at),
                                                      msprobe=options.msprobe_release[0]))
    report.findings += _pair(doc, at, options)
    if getattr(tc, "rollout", False):
        report.findings += _rollout_json(doc, jdoc, tc, options)
    return report


def _rollout_json(doc: Document, jdoc: Document, tc, options: Options) -> list[Finding]:
    """What this conf's rollout collection needs of the config.json it names."""
    from verl_pdbg_conf.checks.moe import rollout_routers

    return _rollout_task(doc, jdoc, tc) + rollout_routers(doc, jdoc, tc, options)


def _rollout_task(doc: Document, jdoc: Document, tc) -> list[Finding]:
    """rollout_generate in task statistics: msprobe reduces each tensor of an engine step over every token the
    step scheduled (all requests concatenated, [num_scheduled_tokens, hidden]), so no token can be paired with
    the actor's forward."""
    task = jdoc.data.get("task", "statistics") if isinstance(jdoc.data, dict) else None
    if task != "statistics":
        return []
    return [doc.finding(
        "rollout-task", Severity.WARNING, "rollout_generate is collected with msprobe task 'statistics': each "
        "statistic of an engine step reduces over every token the step scheduled (all requests together), so the "
        "rollout's tokens cannot be aligned with the actor's", tc.config_path_at,
        hint="use task tensor for the rollout: +profiler=precision_debugger_rollout (msprobe/tensor_rollout.json)")]


def _pair(doc: Document, at, options: Options) -> list[Finding]:
    """The judging verl and msprobe releases as a pair: one finding when they cannot run together.
    An error when both were named the same way (both by option, or both installed here); a
    warning when one side is only a default, which may not be the release the run will have."""
    from verl_pdbg_conf.checks.msprobe_releases.verl_pair import pair_problems

    (verl, verl_how), (ms, ms_how) = options.release, options.msprobe_release
    problems = pair_problems(verl, ms)
    if not problems:
        return []
    same_way = (verl_how, ms_how) in (("--verl-version", "--msprobe-version"), ("installed", "installed"))
    how = f"verl {verl} ({verl_how}), msprobe {ms} ({ms_how})"
    return [doc.finding("msprobe-verl-pair", E if same_way else Severity.WARNING, "; ".join(problems) + f" [{how}]",
                        tuple(at), hint="install an msprobe release that fits beside this verl, or the verl "
                                        "release your msprobe allows; --verl-version and --msprobe-version name "
                                        "the releases to judge by")]


def _msprobe(doc: Document, ctx: MsprobeContext) -> list[Finding]:
    from verl_pdbg_conf.checks.msprobe import check_msprobe

    return check_msprobe(doc, ctx)


def check_tool_config(tool_config: dict, *, save_path: str | None, strict: bool | None = None,
                      base_dir: str | None = None, enabled: bool = True) -> list[Finding]:
    """The runtime's hand-off: every rule that applies to one role's precision_debugger settings,
    as the runtime profiler sees them. The same rules as the CLI, run on a synthetic config."""
    pd = dict(tool_config or {})
    if strict is not None:
        pd["strict"] = strict
    data = {
        "global_profiler": {"tool": "precision_debugger", "steps": [1], "save_path": save_path,
                            "global_tool_config": {"precision_debugger": pd}},
    }
    doc = Document("<tool_config>", data)
    opts = Options(base_dir=base_dir or os.getcwd(), runtime="pdbg", verl_version="legacy-workers")
    report = validate_document(doc, opts)
    ignore = {"role-disabled", "role-unused", "steps-none"}
    return [f for f in report.sorted() if f.rule not in ignore]


def validate_composed(files: list[str], overrides: list[str], options: Options | None = None,
                      config_name: str = "ppo_trainer") -> Report:
    """Compose verl's own config with the user's files and Hydra overrides, then validate it."""
    from verl_pdbg_conf.verl_facts.compose import compose_verl

    options = options or Options()
    if files and options.verl is None:
        options = options.for_source(_source_for_file(files[0], options))
    result = compose_verl(list(files), list(overrides), config_name=config_name, release=options.release[0])
    report = Report(files=list(files), verl_sources=[options.source])
    report.findings += result.findings
    if result.document is not None:
        report.extend(validate_document(result.document, options))
    from verl_pdbg_conf.checks.verl_support import one_per_cause

    from verl_pdbg_conf.core.cascade import fold

    report.findings = fold(one_per_cause(report.findings, options.target))
    return report
