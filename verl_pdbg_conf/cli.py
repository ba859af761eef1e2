"""`verl-pdbg-validate`: parse arguments, call the core, render, pick the exit code.
Exit 0: no error findings; 1: error findings (or warnings with --warnings-as-errors);
2: the tool could not do what was asked (bad arguments, a named file missing or of a kind it does not read)."""

from __future__ import annotations

import argparse
import os
import sys

from verl_pdbg_conf.verl_facts.stages import VERL_TARGETS

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
FORMATS = ("text", "json", "github", "sarif")


def _columns() -> int:
    """shutil.get_terminal_size().columns ($COLUMNS, else the terminal's, else 80) without
    importing shutil (and bz2, lzma with it): argparse asks on every run, for each argument."""
    try:
        columns = int(os.environ.get("COLUMNS", 0))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _Formatter(argparse.HelpFormatter):
    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="verl-pdbg-validate", formatter_class=_Formatter,
        description="Check a verl precision_debugger (msprobe) setup before launch: verl conf YAML files, "
                    "msprobe config.json files, launch scripts (*.sh: their `python3 -m verl.trainer.main_ppo` "
                    "overrides), or verl's composed config (--verl ... -- OVERRIDES).",
        epilog="Exit status: 0 no errors, 1 errors found, 2 the tool could not run: a usage error, or an input "
               "missing or of a kind it does not read (a directory, a file that is no verl conf, msprobe "
               "config.json or launch script).")
    p.add_argument("files", nargs="*", help="verl conf .yaml files, msprobe .json files, launch scripts (.sh)")
    p.add_argument("-f", "--format", choices=FORMATS, default=None,
                   help="output format (default: github under GitHub Actions, else text)")
    p.add_argument("-W", "--warnings-as-errors", action="store_true", help="exit 1 on warnings too (for CI)")
    p.add_argument("--verl", action="store_true",
                   help="compose verl's installed ppo_trainer config with FILES and the Hydra overrides after `--`, "
                        "then validate the composed, resolved config")
    p.add_argument("--config-name", default="ppo_trainer", help="verl config to compose with --verl")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--verl-version", choices=list(VERL_TARGETS), default=None,
                       help="judge by this shipped verl release's config tree and behaviour (default: the verl that "
                            "will run: the repository's own verl/, else the installed verl, else the newest "
                            "shipped release)")
    which.add_argument("--verl-source", metavar="DIR", default=None,
                       help="judge by the verl package in DIR (a checkout or a copy holding verl/), read live")
    p.add_argument("--msprobe-version", metavar="X.Y.Z", default=None,
                   help="judge config.json by what this mindstudio-probe release does (measured facts ship for "
                        "each supported release; default: the installed mindstudio-probe, read from its metadata, "
                        "else the newest shipped release)")
    p.add_argument("--runtime", choices=("auto", "verl", "pdbg"), default="auto",
                   help="runtime profiler in the workers: verl's own, this package's, or detect from the config")
    p.add_argument("--base-dir", default=None,
                   help="directory a relative config_path resolves against (default: the current directory, "
                        "like the launch directory of a verl run)")
    p.add_argument("--list-rules", action="store_true", help="print the rule ids and exit")
    t = p.add_argument_group("before and after the run")
    t.add_argument("--plan", action="store_true",
                   help="for a valid configuration, print what the run will write: step_N/stage directories, "
                        "dumped ranks, and an ESTIMATE of disk use and profiled-step time")
    t.add_argument("--params", metavar="N|MODEL_DIR", default=None,
                   help="the model for --plan's estimate: a Hugging Face model directory (its layers and hidden size "
                        "size the dump), or a size (7e9, 7B, 500M: shown, but a dump's size follows layers, not "
                        "parameters) (default: actor_rollout_ref.model.path when it is a local directory, or a "
                        "size in its name)")
    t.add_argument("--inspect", metavar="SAVE_PATH", default=None,
                   help="check a finished run's output directory against the configuration in FILES (optional): "
                        "missing, empty or grown dump.json, directories left by other runs")
    t.add_argument("--compare", nargs=2, metavar=("TARGET", "GOLDEN"), default=None,
                   help="print the `msprobe compare` command for two dumps: step_N/stage under --inspect's "
                        "SAVE_PATH, a stage directory or a dump.json (the same stage in two runs or two steps)")
    return p


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, overrides = split_overrides(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(own)
    except SystemExit as e:
        return EXIT_USAGE if e.code not in (0, None) else EXIT_OK
    if args.list_rules:
        from verl_pdbg_conf.core.rules import RULES

        sys.stdout.write("".join(f"{k:22} {v}\n" for k, v in RULES.items()))
        return EXIT_OK
    if overrides and not args.verl:
        parser.print_usage(sys.stderr)
        sys.stderr.write("verl-pdbg-validate: error: overrides after `--` need --verl\n")
        return EXIT_USAGE
    if not args.files and not args.verl and not (args.inspect or args.compare):
        parser.print_usage(sys.stderr)
        sys.stderr.write("verl-pdbg-validate: error: give at least one file, or --verl\n")
        return EXIT_USAGE
    if args.verl_source and not any(os.path.isfile(os.path.join(args.verl_source, *p, "__init__.py"))
                                    for p in (("verl",), ())):
        sys.stderr.write(f"verl-pdbg-validate: error: --verl-source {args.verl_source}: no verl package there "
                         "(give the directory that holds verl/)\n")
        return EXIT_USAGE
    if args.msprobe_version is not None:
        from verl_pdbg_conf.checks.msprobe_releases import shipped

        if args.msprobe_version not in shipped():
            parser.print_usage(sys.stderr)
            sys.stderr.write(f"verl-pdbg-validate: error: --msprobe-version {args.msprobe_version}: no facts ship for "
                             f"it; choose one of {', '.join(shipped())}\n")
            return EXIT_USAGE
    missing = [f for f in args.files if not os.path.lexists(f)]
    if missing:
        for f in missing:
            sys.stderr.write(f"verl-pdbg-validate: error: {f}: no such file\n")
        return EXIT_USAGE
    from verl_pdbg_conf.input_kinds import wrong_kind

    wrong = [w for w in map(wrong_kind, args.files) if w]
    if wrong:
        for w in wrong:
            sys.stderr.write(f"verl-pdbg-validate: error: {w}\n")
        return EXIT_USAGE

    if args.verl and not all(f.lower().endswith((".yaml", ".yml")) for f in args.files):
        from verl_pdbg_conf.launch_scripts.launch_script import is_launch_script

        if any(is_launch_script(f) for f in args.files):
            sys.stderr.write("verl-pdbg-validate: error: a launch script is composed on its own: give it without "
                             "--verl\n")
            return EXIT_USAGE
    from verl_pdbg_conf.context import Options
    from verl_pdbg_conf.validate import validate_composed, validate_files

    options = Options(verl_version=args.verl_version, runtime=args.runtime, verl_source=args.verl_source,
                      msprobe_version=args.msprobe_version,
                      base_dir=os.path.abspath(args.base_dir) if args.base_dir else os.getcwd())
    if args.verl:
        report = validate_composed(args.files, overrides, options, config_name=args.config_name)
    elif args.files:
        report = _validate_inputs(args.files, options, validate_files)
    else:
        from verl_pdbg_conf.core.findings import Report

        report = Report()

    from verl_pdbg_conf.reporters import REPORTERS

    if not report.verl_sources:
        report.verl_sources.append(options.source)
    verls = report.verls()
    report.verl_release = (verls[0].version, verls[0].where) if verls else None
    if any(f.lower().endswith(".json") for f in report.files):
        report.msprobe_release = options.msprobe_release
    fmt = args.format or ("github" if os.environ.get("GITHUB_ACTIONS") == "true" else "text")
    if hasattr(sys.stdout, "reconfigure"):  # a file name that is not valid UTF-8 must not crash the report
        sys.stdout.reconfigure(errors="backslashreplace")
    if args.plan or args.inspect or args.compare:
        from verl_pdbg_conf.run.run_tools import run_tool

        return run_tool(args, overrides, options, report, fmt)
    sys.stdout.write(REPORTERS[fmt](report))
    sys.stdout.flush()
    if report.errors or (args.warnings_as_errors and report.warnings):
        return EXIT_FINDINGS
    return EXIT_OK


def _validate_inputs(files: list[str], options, validate_files):
    """Conf and config.json files through the validator in one call; launch scripts each through
    their own composition. Order of the findings is the reporters' (file, line, column)."""
    from verl_pdbg_conf.core.findings import Report

    if all(f.lower().endswith((".yaml", ".yml", ".json")) for f in files):
        return validate_files(files, options)  # no launch script: its reader is not even imported
    from verl_pdbg_conf.launch_scripts.launch_script import is_launch_script

    scripts = [f for f in files if is_launch_script(f)]
    report = validate_files([f for f in files if f not in scripts], options) if len(scripts) < len(files) \
        else Report()
    if scripts:
        from verl_pdbg_conf.launch_scripts.launch_script import validate_script

        for f in scripts:
            report.extend(validate_script(f, options))
        report.findings = list(dict.fromkeys(report.findings))  # a base script linted and reached by a wrapper
    return report


if __name__ == "__main__":
    sys.exit(main())
