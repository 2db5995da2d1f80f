"""``pipeline-core``: argument parsing and messages only; the work is in the API.

Exit status: 0 success, 1 the schedule is unsafe / a check failed (``check``'s verdict, or
``compile``/``analyze``/``export`` refusing a schedule it cannot prove race-free; see
pipeline_core/proof.py and --allow-unsafe), 2 bad input
(unknown name, bad value or count out of its bound, invalid schedule, unwritable -o
file), 3 a plugin failed while the command ran or conflicts with another (and, under
--strict-plugins, any plugin problem found while loading), 70 an internal error (a bug
in pipeline-core: the message says how to report it), 130 interrupted (Ctrl-C).
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import Any, Sequence

EXIT_OK, EXIT_UNSAFE, EXIT_INPUT, EXIT_PLUGINS = 0, 1, 2, 3
EXIT_INTERNAL = 70  #: EX_SOFTWARE (sysexits.h): our bug, never the user's input or a plugin's
EXIT_INTERRUPTED = 130  #: 128 + SIGINT, as shells report Ctrl-C


class CliError(Exception):
    """A usage problem reported as one line (exit 2)."""


def _pairs(values: Sequence[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _add_host_options(p: argparse.ArgumentParser, sub: bool = False) -> None:
    """Plugin-host options, accepted before or after the command name."""
    def d(value):
        return argparse.SUPPRESS if sub else value

    g = p.add_argument_group("plugins")
    g.add_argument("--strict-plugins", action="store_true", default=d(None),
                   help="exit non-zero on any plugin load failure or conflict "
                        "(also: PIPELINE_CORE_STRICT_PLUGINS=1)")
    g.add_argument("--disable-plugin", action="append", metavar="NAME", default=d([]),
                   help="do not load this plugin (entry-point or distribution name; "
                        "also: PIPELINE_CORE_DISABLE_PLUGINS=a,b)")
    g.add_argument("--no-autoload", action="store_true", default=d(None),
                   help="skip entry-point discovery (also: PIPELINE_CORE_NO_AUTOLOAD=1)")
    g.add_argument("--plugin", action="append", metavar="MODULE", default=d([]),
                   help="load an uninstalled plugin module (also: PIPELINE_CORE_PLUGINS=mod1,mod2)")
    g.add_argument("--trace", action="store_true", default=d(False), help="log every hook call to stderr")
    p.add_argument("-v", "--verbose", action="store_true", default=d(False),
                   help="tracebacks for plugin and internal errors")


def _add_compile_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("schedule", help="schedule name (see `pipeline-core schedules`)")
    p.add_argument("--target", help="target name (default: the schedule's default target)")
    p.add_argument("-p", dest="params", action="append", metavar="KEY=VALUE",
                   help="schedule parameter")
    p.add_argument("-T", dest="target_args", action="append", metavar="KEY=VALUE",
                   help="target parameter")
    p.add_argument("-c", dest="overrides", action="append", metavar="KEY=VALUE",
                   help="ScheduleConfig override (applied on top of the schedule's own config)")
    p.add_argument("--allow-unsafe", action="store_true",
                   help="emit exactly what the reference would, even when the hazard checker does "
                        "not prove it race-free (the JSON document then lists its hazards under "
                        "\"hazards\"); schedule repairs that depart from the reference, such as "
                        "4-wave's epilogue guard, are off unless asked for. Without it an unsafe "
                        "schedule is refused with exit status 1")


def build_parser() -> argparse.ArgumentParser:
    from pipeline_core import __version__

    parser = argparse.ArgumentParser(
        prog="pipeline-core",
        description="Compile-time software pipelining of GPU kernel loops.")
    parser.add_argument("--version", action="store_true", help="show core and plugin versions")
    _add_host_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add_parser(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """A command parser; every command accepts the plugin-host options too."""
        q = sub.add_parser(name, **kwargs)
        _add_host_options(q, sub=True)
        return q

    p = add_parser("compile", help="compile a schedule into prologue / kernel / epilogue entries")
    _add_compile_options(p)
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    for name, what in (("targets", "registered targets"), ("schedules", "registered schedules"),
                       ("plugins", "discovered plugins and their status"),
                       ("strategies", "registered scheduling strategies")):
        q = add_parser(name, help=f"list {what}")
        q.add_argument("--json", action="store_true", help="machine-readable output")

    c = add_parser("check", help="prove a compiled schedule race-free on a model of the hardware")
    c.add_argument("schedule", nargs="?", help="schedule to compile and check (or use --input)")
    c.add_argument("--target")
    c.add_argument("-p", dest="params", action="append", metavar="KEY=VALUE")
    c.add_argument("-T", dest="target_args", action="append", metavar="KEY=VALUE")
    c.add_argument("-c", dest="overrides", action="append", metavar="KEY=VALUE")
    _extend(c, "pipeline_core.check.cli")

    a = add_parser("analyze", help="schedule metrics: makespan, bounds, utilisation, MII")
    _add_compile_options(a)
    _extend(a, "pipeline_core.analyze_cli")

    e = add_parser("export", help="timeline trace (Perfetto), dependency graph (DOT), timeline picture")
    _add_compile_options(e)
    _extend(e, "pipeline_core.export.cli_export")
    parser.set_defaults(version_string=__version__)
    return parser


def _extend(parser: argparse.ArgumentParser, module: str) -> None:
    """Let a feature module add its own options (it owns its flags and their help)."""
    import importlib

    try:
        importlib.import_module(module).add_arguments(parser)
    except ImportError:  # pragma: no cover - feature not available in this build
        pass


def make_host(args):
    from pipeline_core.plugins import PluginHost

    log = (lambda line: print(line, file=sys.stderr)) if args.trace else None
    return PluginHost(autoload=None if not args.no_autoload else False,
                      disabled=args.disable_plugin, extra_modules=args.plugin,
                      strict=args.strict_plugins, trace=log)


def _report_plugin_problems(host, args, already: int = 0) -> int:
    """Print the host's plugin warnings from number ``already`` on; EXIT_PLUGINS if strict.

    Called once after loading and once after the command (a plugin that printed to
    stdout while the command ran is reported then).
    """
    problems = host.problems()[already:]
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    if args.verbose and not already:
        for info in host.plugins:
            if info.traceback:
                print(info.traceback, file=sys.stderr)
    if host.strict and problems:
        print("error: plugin problems with --strict-plugins", file=sys.stderr)
        return EXIT_PLUGINS
    return EXIT_OK


def _write(text: str, output: str | None) -> None:
    from pipeline_core.output import write_text

    write_text(text, output)


def cmd_compile(args, host) -> int:
    compiled = _compile_from_args(args, host)
    if args.format == "json":
        from pipeline_core.export.json import dumps
        _write(dumps(compiled), args.output)
    else:
        from pipeline_core.export.text import render
        _write(render(compiled), args.output)
    return EXIT_OK


def _params_doc(params) -> list[dict]:
    return [{"name": p.name, "type": p.type_name, "default": p.default, "help": p.help,
             "allowed": p.range_text()} for p in params]


def cmd_list(args, host) -> int:
    if args.command == "plugins":
        rows = [p.as_dict() for p in host.plugins]
        if args.json:
            print(json.dumps(rows, indent=2))
            return EXIT_OK
        for p in host.plugins:
            provides = [f"targets: {', '.join(p.targets)}" if p.targets else "",
                        f"schedules: {', '.join(p.schedules)}" if p.schedules else "",
                        f"strategies: {', '.join(p.strategies)}" if p.strategies else ""]
            print(f"{p.name}  ({p.distribution} {p.version})  {p.status}")
            for line in filter(None, provides):
                print(f"    {line}")
            if p.hooks:
                print(f"    hooks: {', '.join(p.hooks)}")
        return EXIT_OK
    if args.command == "strategies":
        rows = [{"name": r.name, "description": r.description, "provider": r.provider}
                for _, r in sorted(host.strategies.items())]
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for r in rows:
                print(f"{r['name']:<12} {r['description']}  [{r['provider']}]")
        return EXIT_OK
    table = host.targets if args.command == "targets" else host.schedules
    rows = []
    for name in sorted(table):
        r = table[name]
        row = {"name": r.name, "description": r.description, "provider": r.provider,
               "params": _params_doc(r.params)}
        if args.command == "schedules":
            row["default_target"] = r.default_target
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    for row in rows:
        extra = f", default target {row['default_target']}" if row.get("default_target") else ""
        print(f"{row['name']}: {row['description']}  [{row['provider']}{extra}]")
        for prm in row["params"]:
            allowed = f" ({prm['allowed']})" if prm["allowed"] else ""
            print(f"    {prm['name']} ({prm['type']}, default {prm['default']!r}): {prm['help']}{allowed}")
    return EXIT_OK


def cmd_check(args, host) -> int:
    from pipeline_core.check.cli import run

    document = None
    warps = 1
    if not getattr(args, "input", None):
        if not args.schedule:
            raise CliError("check needs a SCHEDULE or --input FILE")
        from pipeline_core.export.json import to_document
        # check reports rather than refuses, and judges what a plain compile emits
        compiled = _compile_from_args(args, host, allow_unsafe=True, reference=False)
        document = to_document(compiled)
        warps = compiled.execution.warps_per_group
    return run(args, document, host=host, warps_per_group=warps)


def _compile_from_args(args, host, allow_unsafe: bool | None = None,
                       reference: bool | None = None):
    from pipeline_core.api import compile_named

    if allow_unsafe is None:
        allow_unsafe = bool(getattr(args, "allow_unsafe", False))
    return compile_named(args.schedule, target=args.target, params=_pairs(args.params, "-p"),
                         target_args=_pairs(args.target_args, "-T"),
                         config_overrides=_pairs(args.overrides, "-c"), host=host,
                         allow_unsafe=allow_unsafe, reference=reference)


def cmd_analyze(args, host) -> int:
    from pipeline_core.analyze_cli import run

    return run(args, _compile_from_args(args, host))


def cmd_export(args, host) -> int:
    from pipeline_core.export.cli_export import run

    return run(args, _compile_from_args(args, host))


def cmd_version(host) -> int:
    from pipeline_core import __version__

    print(f"pipeline-core {__version__}")
    seen = set()
    for p in host.plugins:
        if p.name == "core" or p.distribution in seen:
            continue
        seen.add(p.distribution)
        print(f"  {p.distribution} {p.version} ({p.status})")
    return EXIT_OK


COMMANDS = {"compile": cmd_compile, "targets": cmd_list, "schedules": cmd_list,
            "plugins": cmd_list, "strategies": cmd_list, "check": cmd_check,
            "analyze": cmd_analyze, "export": cmd_export}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command and not args.version:
        parser.print_help()
        return EXIT_INPUT
    try:
        host = make_host(args)
        status = _report_plugin_problems(host, args)
        if status:
            return status
        loaded = len(host.problems())
        try:
            status = cmd_version(host) if args.version else COMMANDS[args.command](args, host)
        finally:
            late = _report_plugin_problems(host, args, already=loaded)
        return late or status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BaseException as exc:  # every failure is one line with its own exit status
        return _report_failure(exc, args)


def _report_failure(exc: BaseException, args) -> int:
    """One line on stderr for ``exc`` and the exit status it maps to (see the module docstring)."""
    from pipeline_core.errors import PipelineError, PluginError
    from pipeline_core.proof import UnsafeScheduleError

    if isinstance(exc, SystemExit):  # from our own code: a plugin's is a PluginError by now
        raise exc
    if isinstance(exc, BrokenPipeError):  # pragma: no cover - the reader went away
        return EXIT_OK
    if isinstance(exc, (PipelineError, CliError)):
        print(f"error: {exc}", file=sys.stderr)
        status = (EXIT_PLUGINS if isinstance(exc, PluginError)
                  else EXIT_UNSAFE if isinstance(exc, UnsafeScheduleError) else EXIT_INPUT)
    elif isinstance(exc, OSError) and exc.filename:
        print(f"error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        status = EXIT_INPUT
    else:  # an internal error: say so plainly and how to report it
        print(f"internal error: {type(exc).__name__}: {exc}\n"
              "This is a bug in pipeline-core, not in your input. Please report it with the "
              "command line, the output of `pipeline-core --version` and the traceback that "
              "-v prints.", file=sys.stderr)
        status = EXIT_INTERNAL
    if args.verbose:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
