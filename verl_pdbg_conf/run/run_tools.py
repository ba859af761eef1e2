"""`--plan`, `--inspect` and `--compare` for the CLI: call the cores (plan.py, inspect_run.py),
render their data in the chosen format, return the exit code."""

from __future__ import annotations

import json
import sys

from verl_pdbg_conf.core.findings import Report


def run_tool(args, overrides, options, report: Report, fmt: str) -> int:
    from verl_pdbg_conf.reporters import REPORTERS

    configs = []
    if args.files or args.verl:
        from verl_pdbg_conf.run.run_configs import run_configs

        configs = run_configs(args.files, options, verl=args.verl, overrides=overrides, config_name=args.config_name)
    params = None
    if args.params:
        from verl_pdbg_conf.run.estimate import parse_params

        params = parse_params(args.params)
        if params is None:
            sys.stderr.write(f"verl-pdbg-validate: error: --params {args.params}: not a number (7e9, 7B) nor a "
                             "model directory with a config.json\n")
            return 2
    if args.plan:
        return _plan(args, configs, options, report, params, fmt, REPORTERS)
    return _inspect(args, configs, report, fmt, REPORTERS)


def _plan(args, configs, options, report, params, fmt, reporters) -> int:
    from verl_pdbg_conf.run import plan as planmod

    if report.errors:
        sys.stdout.write(reporters[fmt](report))
        sys.stderr.write("verl-pdbg-validate: no plan: the configuration has errors\n")
        return 1
    plans, skipped = [], []
    for rc in configs:
        try:
            plans.append(planmod.build_plan(rc.document, rc.options, params=params, source=rc.source))
        except planmod.NotPlannable as e:
            skipped.append((rc.source, str(e)))
    if fmt == "json":
        out = {"plans": [planmod.as_dict(p) for p in plans],
               "not_planned": [{"source": s, "why": w} for s, w in skipped],
               "diagnostics": [f.to_dict() for f in report.sorted()]}
        sys.stdout.write(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    elif fmt == "text":
        sys.stdout.write("".join(planmod.render_text(p) for p in plans))
        for s, w in skipped:
            sys.stdout.write(f"no plan for {s}: {w}\n")
        if report.findings:
            sys.stdout.write(reporters["text"](report))
    else:
        sys.stdout.write(reporters[fmt](report))
    if not configs:
        sys.stderr.write("verl-pdbg-validate: --plan needs a verl conf, a launch script or --verl\n")
        return 2
    return 1 if args.warnings_as_errors and report.warnings else 0


def _inspect(args, configs, report, fmt, reporters) -> int:
    from verl_pdbg_conf.run import inspect_run, plan as planmod

    plan = None
    for rc in configs:
        try:
            plan = planmod.build_plan(rc.document, rc.options, source=rc.source)
            break
        except planmod.NotPlannable:
            continue
    findings, cmds, ins = [], [], None
    if args.inspect:
        ins = inspect_run.inspect_run(args.inspect, plan)
        findings += ins.findings
    if args.compare:
        cmds, more = inspect_run.compare_commands(args.compare[0], args.compare[1], args.inspect)
        findings += more
        if ins is not None:
            ins.compare = cmds
    merged = Report(findings=list(report.findings) + findings, files=list(report.files))
    if fmt == "json":
        out = inspect_run.as_dict(ins) if ins is not None else {"compare": cmds}
        out["diagnostics"] = [f.to_dict() for f in merged.sorted()]
        sys.stdout.write(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    elif fmt == "text":
        if ins is not None:
            ins.findings = merged.sorted()
            sys.stdout.write(inspect_run.render_text(ins))
        else:
            sys.stdout.write("".join(c + "\n" for c in cmds))
            if merged.findings:
                sys.stdout.write(reporters["text"](merged))
    else:
        sys.stdout.write(reporters[fmt](merged))
        if fmt == "github":
            sys.stdout.write("".join(c + "\n" for c in cmds))
    bad = merged.errors or (args.warnings_as_errors and merged.warnings)
    return 1 if bad else 0
