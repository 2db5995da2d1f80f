"""``pipeline-core``: argument parsing and messages only; the work is in the API.

Exit status: 0 success, 1 the schedule is unsafe / a check failed (``check``'s verdict, or
``compile``/``analyze``/``export`` refusing a schedule it cannot prove race-free; see
pipeline_core/proof.py and --allow-unsafe), 2 bad input
(unknown name, bad value or count out of its bound, invalid schedule, unwritable -o
file or standard output), 3 a plugin failed while the command ran or conflicts with another (and, under
--strict-plugins, any plugin problem found while loading), 70 an internal error (a bug
in pipeline-core: the message says how to report it), 130 interrupted (Ctrl-C), 141 the
reader of standard output went away (``| head``; nothing is printed, as for a command that
SIGPIPE ends).
"""
from __future__ import annotations

import argparse
import sys
import traceback
from typing import Any, Callable, Sequence

from pipeline_core.cli_options import (EXIT_BROKEN_PIPE, EXIT_INPUT, EXIT_INTERNAL,
                                       EXIT_INTERRUPTED, EXIT_OK, EXIT_PLUGINS, EXIT_UNSAFE,
                                       OneLineParser,
                                       add_format_option, add_output_option)


class CliError(Exception):
    """A usage problem reported as one line (exit 2)."""


def _pairs(values: Sequence[str] | None, flag: str) -> dict[str, str]:
    """``flag KEY=VALUE`` items as a mapping; a key given twice is refused, not overwritten by
    the later value (which one the user meant is theirs to say)."""
    out: dict[str, str] = {}
    for item in values or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{flag} expects KEY=VALUE, got {item!r}")
        key = key.strip()
        if key in out:
            raise CliError(f"{flag} {key} is given twice ({flag} {key}={out[key]} and "
                           f"{flag} {key}={value.strip()}): give it once")
        out[key] = value.strip()
    return out


HOST_GROUP = "plugin host options (before or after the command)"
HOST_OPTIONS_NOTE = ("plugin host options (--strict-plugins, --disable-plugin, --no-autoload, --plugin, "
                     "--require-plugin, --trace, -v) are accepted here too: see `pipeline-core --help`")
ENV_REQUIRE = "PIPELINE_CORE_REQUIRE_PLUGINS"


def _add_host_options(p: argparse.ArgumentParser, sub: bool = False) -> None:
    """Plugin-host options, accepted before or after the command name.

    They are listed once, in ``pipeline-core --help``; a command's own help names them in
    one line (``sub``: hidden, and their defaults do not overwrite values given before the
    command).
    """
    def d(value):
        return argparse.SUPPRESS if sub else value

    def h(text: str) -> str:
        return argparse.SUPPRESS if sub else text

    g = p if sub else p.add_argument_group(HOST_GROUP)
    g.add_argument("--strict-plugins", action="store_true", default=d(None),
                   help=h("exit non-zero on any plugin load failure or conflict "
                          "(also: PIPELINE_CORE_STRICT_PLUGINS=1)"))
    g.add_argument("--disable-plugin", action="append", metavar="NAME", default=d([]),
                   help=h("do not load this plugin (entry-point or distribution name; "
                          "also: PIPELINE_CORE_DISABLE_PLUGINS=a,b)"))
    g.add_argument("--no-autoload", action="store_true", default=d(None),
                   help=h("skip entry-point discovery (also: PIPELINE_CORE_NO_AUTOLOAD=1)"))
    g.add_argument("--plugin", action="append", metavar="MODULE", default=d([]), type=_module_name,
                   help=h("load an uninstalled plugin module (also: PIPELINE_CORE_PLUGINS=mod1,mod2)"))
    g.add_argument("--require-plugin", action="append", metavar="NAME", default=d([]),
                   help=h("exit 3 unless this plugin (entry-point or distribution name) is "
                          "loaded, as pytest's required_plugins (repeatable; also: "
                          "PIPELINE_CORE_REQUIRE_PLUGINS=a,b)"))
    g.add_argument("--trace", action="store_true", default=d(False),
                   help=h("log every hook call to stderr"))
    g.add_argument("-v", "--verbose", action="store_true", default=d(False),
                   help=h("tracebacks for plugin and internal errors"))


def _module_name(text: str) -> str:
    """``--plugin MODULE``: a dotted Python module name, refused by the parser (one line
    naming --plugin) rather than handed to the import system, whose answer for ``''`` is
    ValueError "Empty module name", reported as a plugin that failed to load."""
    name = text.strip()
    if not name or not all(part.isidentifier() for part in name.split(".")):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a module name: give the plugin's importable module, dotted "
            f"Python identifiers, e.g. --plugin my_plugin or --plugin my_package.plugin")
    return name


def _emitter_name(text: str) -> str:
    """``emit --emitter NAME``: an empty name is refused by the parser (one line naming
    --emitter), not read as "no --emitter", which would quietly take the default."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "an empty emitter name: give one that `pipeline-core emitters` lists, e.g. "
            "--emitter cuda, or leave --emitter out to take the one emitter that serves the "
            "target")
    return text.strip()


#: The ``examples:`` epilog of each command's --help (a test checks every command has one).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "compile": ("pipeline-core compile pingpong",
                "pipeline-core compile pingpong -p dtype=fp8 -c scheduling=GREEDY --format json -o pp.json",
                "pipeline-core compile matmul-grid -p m=3 -p n=2 --format json -o grid.json",
                "pipeline-core compile matmul-grid -p m=5 -p n=8 --compact --kernel-only"),
    "check": ("pipeline-core check pingpong",
              "pipeline-core check 4wave --tightest --format json -o verdict.json",
              "pipeline-core compile pingpong --format json | pipeline-core check --input -"),
    "analyze": ("pipeline-core analyze pingpong",
                "pipeline-core analyze pingpong -c scheduling=GREEDY --optimal 5 --format json"),
    "export": ("pipeline-core export pingpong -o pingpong.trace.json   # open in ui.perfetto.dev",
               "pipeline-core export pingpong -o pingpong.dot",
               "pipeline-core export 4wave -o timeline.png --iterations 6"),
    "targets": ("pipeline-core targets", "pipeline-core targets --format json -o targets.json"),
    "schedules": ("pipeline-core schedules", "pipeline-core schedules --format json"),
    "strategies": ("pipeline-core strategies", "pipeline-core strategies --format json"),
    "knobs": ("pipeline-core knobs", "pipeline-core knobs --format json -o knobs.json",
              "pipeline-core compile pingpong -c scheduling=GREEDY -c lds_contention_penalty=8"),
    "emitters": ("pipeline-core emitters",),
    "emit": ("pipeline-core emit multistage-gemm --target h100 -o kernel.cu",
             "pipeline-core emit multistage-gemm -T stages=4 --emitter cuda -o kernel.cu"),
    "new-plugin": ("pipeline-core new-plugin my-gpu", "pipeline-core new-plugin my-gpu --dir ~/src"),
    "completion": ("pipeline-core completion bash -o ~/.local/share/bash-completion/completions/pipeline-core",
                   "pipeline-core completion zsh -o ~/.zfunc/_pipeline-core"),
    "plugins": ("pipeline-core plugins", "pipeline-core plugins --format json",
                "pipeline-core --disable-plugin schedules_4wave plugins"),
}


def _epilog(command: str, examples: Sequence[str] = ()) -> str:
    lines = ["examples:"] + [f"  {line}" for line in (examples or EXAMPLES.get(command, ()))]
    return "\n".join(lines) + "\n\n" + HOST_OPTIONS_NOTE


def _add_schedule_options(p: argparse.ArgumentParser, *, schedule_help: str,
                          optional: bool = False) -> None:
    """The schedule, its target and the -p / -T / -c values every compiling command takes."""
    p.add_argument("schedule", nargs="?" if optional else None, help=schedule_help)
    p.add_argument("--target", help="target name (default: the schedule's default target)")
    p.add_argument("-p", dest="params", action="append", metavar="KEY=VALUE",
                   help="schedule parameter")
    p.add_argument("-T", dest="target_args", action="append", metavar="KEY=VALUE",
                   help="target parameter")
    p.add_argument("-c", dest="overrides", action="append", metavar="KEY=VALUE",
                   help="ScheduleConfig knob, applied on top of the schedule's own config "
                        "(see `pipeline-core knobs`)")


def _add_compile_options(p: argparse.ArgumentParser) -> None:
    _add_schedule_options(p, schedule_help="schedule name (see `pipeline-core schedules`)")
    p.add_argument("--allow-unsafe", action="store_true",
                   help="emit exactly what the reference would, even when the hazard checker does "
                        "not prove it race-free (the JSON document then lists its hazards under "
                        "\"hazards\"); schedule repairs that depart from the reference, such as "
                        "4-wave's epilogue guard, are off unless asked for (schedules that are not "
                        "the reference's own, such as matmul-grid, keep their derived waits). "
                        "Without it an unsafe schedule is refused with exit status 1")


def build_parser(host: Any = None) -> argparse.ArgumentParser:
    """The command line; with ``host``, the commands its plugins add (see :func:`_add_plugin_commands`)."""
    from pipeline_core import __version__

    parser = OneLineParser(
        prog="pipeline-core",
        description="Compile-time software pipelining of GPU kernel loops.",
        epilog="examples:\n  pipeline-core schedules\n  pipeline-core compile pingpong\n"
               "  pipeline-core check pingpong\n\n`pipeline-core COMMAND --help` shows a "
               "command's options and examples.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="store_true", help="show core and plugin versions")
    _add_host_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add_parser(name: str, examples: Sequence[str] = (), **kwargs: Any) -> argparse.ArgumentParser:
        """A command parser with its examples; it accepts the plugin-host options too."""
        q = sub.add_parser(name, epilog=_epilog(name, examples), description=kwargs.get("help"),
                           formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
        _add_host_options(q, sub=True)
        return q

    p = add_parser("compile", help="compile a schedule into prologue / kernel / epilogue entries")
    _add_compile_options(p)
    add_format_option(p)
    add_output_option(p)
    view = p.add_argument_group("text view")
    view.add_argument("--kernel-only", action="store_true",
                      help="print the header and the steady-state kernel only")
    view.add_argument("--compact", action="store_true",
                      help="several entries per line: one line per kernel block, 8 per line in "
                           "the prologue and epilogue; no block layout")

    for name, what in (("targets", "registered targets"), ("schedules", "registered schedules"),
                       ("plugins", "discovered plugins and their status"),
                       ("strategies", "registered scheduling strategies"),
                       ("emitters", "registered emitters (compiled schedule -> kernel source)")):
        q = add_parser(name, help=f"list {what}")
        q.add_argument("names", nargs="*", metavar="NAME",
                       help=f"list only these (default: all {what.split(' (')[0]})")
        add_format_option(q, deprecated_json=True)
        add_output_option(q)

    k = add_parser("knobs", help="list the ScheduleConfig knobs (-c KEY=VALUE): type, default, "
                                 "range, meaning, and the schedules that force or refuse them")
    add_format_option(k)
    add_output_option(k)

    c = add_parser("check", help="prove a compiled schedule race-free on a model of the hardware")
    _add_schedule_options(c, schedule_help="schedule to compile and check (or use --input)",
                          optional=True)
    _extend(c, "pipeline_core.check.cli")

    a = add_parser("analyze", help="schedule metrics: makespan, bounds, utilisation, MII")
    _add_compile_options(a)
    _extend(a, "pipeline_core.analyze_cli")

    e = add_parser("export", help="timeline trace (Perfetto), dependency graph (DOT), timeline picture")
    _add_compile_options(e)
    _extend(e, "pipeline_core.export.cli_export")

    m = add_parser("emit", help="compile a schedule and write a kernel's source through an emitter")
    _add_compile_options(m)
    m.add_argument("--emitter", type=_emitter_name, help="emitter name (see `pipeline-core emitters`; default: the one "
                                     "emitter that serves the target)")
    m.add_argument("-O", dest="emit_options", action="append", metavar="KEY=VALUE",
                   help="emitter option")
    add_output_option(m)

    n = add_parser("new-plugin", help="write a ready-to-install plugin project (a target and a "
                                      "schedule, a README and a test)")
    _extend(n, "pipeline_core.scaffold")
    s = add_parser("completion", help="write a bash or zsh completion script (needs the "
                                      "'completion' extra: shtab)")
    _extend(s, "pipeline_core.completion")
    if host is not None:
        _add_plugin_commands(host, add_parser)
    parser.set_defaults(version_string=__version__)
    return parser


def documented_parser() -> argparse.ArgumentParser:
    """The command line as the CLI reference shows it (docs/guide/cli.md): the built-in
    commands and those of the plugins installed (or named in PIPELINE_CORE_PLUGINS).  Sphinx's
    argparse extension takes a function of no arguments, hence this one."""
    return build_parser(make_host(_early_host_options([])))


def _add_plugin_commands(host, add_parser: Any) -> None:
    """The plugins' commands, each under the guard; a built-in name is refused naming the plugin."""
    from pipeline_core.errors import PluginError

    for name in sorted(host.commands):
        record = host.commands[name]
        owner = host.command_owner(name)
        if name in COMMANDS:
            host.warnings.append(f"{owner.culprit.describe()}: command {name!r} is a built-in "
                                 "pipeline-core command; the plugin's command is not added")
            owner.status = "conflict"
            continue
        q = add_parser(name, examples=record.examples, help=f"{record.help} [{record.provider}]")
        try:
            record.add_arguments(q)
        except PluginError as exc:
            host.warnings.append(str(exc))
        q.set_defaults(plugin_command=name)


def _extend(parser: argparse.ArgumentParser, module: str) -> None:
    """Let a feature module add its own options (it owns its flags and their help)."""
    import importlib

    try:
        importlib.import_module(module).add_arguments(parser)
    except ImportError:  # pragma: no cover - feature not available in this build
        pass


class _EarlyExit(Exception):
    """The early host-options parse met something only the full parser can report."""


class _HostOptionsParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise _EarlyExit(message)


def _early_host_options(argv: Sequence[str]) -> argparse.Namespace:
    """The plugin-host options, wherever they are in ``argv``: the host (and with it the
    plugins' commands) must exist before the full command line can be parsed."""
    early = _HostOptionsParser(add_help=False)
    _add_host_options(early)
    try:
        return early.parse_known_args(list(argv))[0]
    except _EarlyExit:  # the full parser reports it
        return early.parse_known_args([])[0]


def _required_plugins(args, host) -> int:
    """``--require-plugin`` / PIPELINE_CORE_REQUIRE_PLUGINS: EXIT_PLUGINS naming each missing one."""
    import difflib
    def key(text: str) -> str:
        return text.strip().lower().replace("_", "-")

    from pipeline_core.plugins import split_env

    wanted = list(getattr(args, "require_plugin", None) or []) + split_env(ENV_REQUIRE)
    status = EXIT_OK
    for name in dict.fromkeys(wanted):
        found = [p for p in host.plugins if key(name) in (key(p.name), key(p.distribution))]
        if any(p.status in ("ok", "conflict") for p in found):
            continue
        if found:
            p = found[0]
            why = ("is disabled (--disable-plugin or PIPELINE_CORE_DISABLE_PLUGINS)"
                   if p.status == "disabled" else f"failed to load: {p.error}")
            print(f"error: required plugin {name!r} ({p.distribution}) {why}", file=sys.stderr)
        else:
            names = sorted({p.name for p in host.plugins if p.name != "core"})
            close = difflib.get_close_matches(name, names, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            print(f"error: required plugin {name!r} is not installed.{hint} Loaded plugins: "
                  f"{', '.join(names) or 'none'} (pip install the plugin's distribution)",
                  file=sys.stderr)
        status = EXIT_PLUGINS
    return status


def make_host(args, sigints=None):
    """The host for ``args``' plugin-host options; ``sigints`` counts the user's Ctrl-Cs."""
    from pipeline_core.plugins import PluginHost

    log = (lambda line: print(line, file=sys.stderr)) if args.trace else None
    return PluginHost(autoload=None if not args.no_autoload else False,
                      disabled=args.disable_plugin, extra_modules=args.plugin,
                      strict=args.strict_plugins, trace=log, sigints=sigints)


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
    if args.format == "json":  # the text view's options would be ignored: say so instead
        for flag in ("--kernel-only", "--compact"):
            if getattr(args, flag[2:].replace("-", "_"), False):
                raise CliError(f"{flag} shapes the text view, but --format json writes the "
                               f"whole document: drop {flag} or --format json")
    compiled = _warn_unwritten(_compile_from_args(args, host), host)
    if not compiled.plan.lockstep:  # the agents listing has no phases for them to shape
        for flag in ("--kernel-only", "--compact"):
            if getattr(args, flag[2:].replace("-", "_"), False):
                raise CliError(f"{flag} shapes the prologue / kernel / epilogue listing, but "
                               f"schedule {compiled.schedule_name} is lowered to one program "
                               f"per agent (no phases to cut): drop {flag}")
    if args.format == "json":
        from pipeline_core.export.json import to_document
        from pipeline_core.json_output import dumps
        _write(dumps(to_document(compiled), host), args.output)
    else:
        from pipeline_core.export.text import render
        _write(render(compiled, kernel_only=getattr(args, "kernel_only", False),
                      compact=getattr(args, "compact", False), host=host), args.output)
    return EXIT_OK


def _warn_unwritten(compiled, host):
    """``compiled``, after one warning line on stderr when no emitter of its kernel family
    writes it (pipeline_core/emit_choice.py): every command that compiles a schedule the user
    means to run (compile, check, analyze, export) says so, not only compile."""
    from pipeline_core.emit_choice import unwritten

    unwritable = unwritten(compiled, host)
    if unwritable:
        print(f"warning: {unwritable}", file=sys.stderr)
    return compiled


def _params_doc(params) -> list[dict]:
    """The listing rows of ``params``: ``allowed`` in words, and for an int the same range as
    data, ``bound`` (``{"low", "high"}``, the one ``-p``/``-T``/``-O`` parsing enforces) or
    ``choices``."""
    rows = []
    for p in params:
        row = {"name": p.name, "type": p.type_name, "default": p.default, "help": p.help,
               "allowed": p.range_text()}
        if p.choices:
            row["choices"] = list(p.choices)
        elif p.type is int:
            row["bound"] = {"low": int(p.int_bound.low), "high": int(p.int_bound.high)}
        rows.append(row)
    return rows


def _param_line(prm: dict) -> str:
    """``name (type, default X; allowed values): help``; no default clause when none is fixed."""
    head = prm["type"]
    if prm["default"] is not None:  # None: the schedule derives it (its help says how)
        from pipeline_core.knobs import value_text

        head += f", default {value_text(prm['default'])}"
    if prm["allowed"]:
        head += f"; {prm['allowed']}"
    return f"    {prm['name']} ({head}): {prm['help']}"


def _plugin_source(p) -> str:
    """Where a plugin came from, as its listing line says it."""
    from pipeline_core.plugin_guard import DEVELOPMENT, IN_PROCESS

    if p.distribution == DEVELOPMENT:
        return f"module {p.module}, loaded with --plugin"
    if p.distribution == IN_PROCESS:
        return f"in-process, {p.module}"
    return f"{p.distribution} {p.version}".strip()


def _chosen(args, known, kind: str):
    """Whether a listing shows a name: every name, or only the NAMEs the command line gave
    (``pipeline-core schedules NAME``), each of which must exist (named in one line if not)."""
    from pipeline_core.errors import UnknownNameError

    wanted = list(getattr(args, "names", None) or ())
    for name in wanted:
        if name not in known:
            raise UnknownNameError(kind, name, sorted(known),
                                   given_as=f"pipeline-core {args.command} NAME")
    return lambda name: not wanted or name in wanted


def _listing(args, host) -> tuple[list[dict], list[str]]:
    """The rows of a listing command (its JSON) and its text lines."""
    from pipeline_core.schedule import fitting_targets

    lines: list[str] = []
    if args.command == "plugins":
        shown = _chosen(args, [p.name for p in host.plugins], "plugin")
        for p in filter(lambda p: shown(p.name), host.plugins):
            lines.append(f"{p.name}  ({_plugin_source(p)})  {p.status}")
            for label, names in (("targets", p.targets), ("schedules", p.schedules),
                                 ("strategies", p.strategies), ("lowerings", p.lowerings),
                                 ("commands", p.commands), ("hooks", p.hooks)):
                if names:
                    lines.append(f"    {label}: {', '.join(names)}")
            if p.location:
                lines.append(f"    location: {p.location}")
        return [p.as_dict() for p in host.plugins if shown(p.name)], lines
    if args.command == "emitters":
        from pipeline_core.emit_choice import schedules_written

        rows = [{"name": r.name, "description": r.description,
                 "schedules": schedules_written(r, host),
                 # the installed targets it serves, by name or by capability (empty: any)
                 "targets": (sorted(t for t, record in host.targets.items() if r.serves(record))
                             if r.targets or r.requires is not None else []),
                 "requires": r.requires.as_dict() if r.requires is not None else None,
                 "kernel_families": list(r.kernel_families), "provider": r.provider,
                 "options": _params_doc(r.options or ())}
                for name, r in sorted(host.emitters.items())
                if _chosen(args, host.emitters, "emitter")(name)]
        for r in rows:  # the -O options as -p's are listed (the record declares their bounds)
            lines.append(f"{r['name']}: {r['description']}  [{r['provider']}; schedules "
                         f"{', '.join(r['schedules']) or 'none installed'}; targets "
                         f"{', '.join(r['targets']) or 'any'}; kernel families "
                         f"{', '.join(r['kernel_families']) or 'any'}]")
            lines.extend(_param_line({**prm, "name": f"-O {prm['name']}"})
                         for prm in r["options"])
        if not rows:  # an empty listing would read as a broken command
            lines.append("no emitter is installed: emitters come with target plugins, e.g. "
                         "pip install pipeline-core-nvidia-h100 (its `h100` emitters write CUDA)")
        return rows, lines
    if args.command == "strategies":
        rows = [{"name": r.name, "description": r.description, "provider": r.provider}
                for name, r in sorted(host.strategies.items())
                if _chosen(args, host.strategies, "scheduling strategy")(name)]
        lines = [f"{r['name']:<12} {r['description']}  [{r['provider']}]" for r in rows]
        return rows, lines
    table = host.targets if args.command == "targets" else host.schedules
    shown = _chosen(args, table, args.command[:-1])
    rows = []
    for name in filter(shown, sorted(table)):
        r = table[name]
        row = {"name": r.name, "description": r.description, "provider": r.provider,
               "params": _params_doc(r.params)}
        extra = ""
        if args.command == "schedules":
            row["default_target"] = r.default_target
            # what the schedule declares, and the installed targets that fit it
            # (docs/guide/schedule-plugin.md, "Targets a schedule is made for")
            row["made_for"] = {"targets": list(r.targets), "families": list(r.families),
                               "requires": r.requires.as_dict() if r.requires else None}
            row["targets"] = fitting_targets(r, host.targets)
            if r.default_target:
                extra = f", default target {r.default_target}"
            extra += (f"; fits {', '.join(row['targets']) or 'no installed target'}"
                      if r.declares_targets else "; fits any target")
        else:
            row["family"] = r.family
            row["offers"] = r.offers.as_dict() if r.offers is not None else None
            extra = f", family {r.family}" if r.family else ""
            extra += f", offers {r.offers.words()}" if r.offers is not None else ""
        rows.append(row)
        lines.append(f"{row['name']}: {row['description']}  [{row['provider']}{extra}]")
        lines.extend(_param_line(prm) for prm in row["params"])
    return rows, lines


def cmd_list(args, host) -> int:
    from pipeline_core.json_output import dumps

    rows, lines = _listing(args, host)
    text = dumps({args.command: rows}, host) if args.format == "json" else "\n".join(lines) + "\n"
    _write(text, args.output)
    return EXIT_OK


def cmd_knobs(args, host) -> int:
    from pipeline_core.json_output import dumps
    from pipeline_core.knobs import knob_rows, render_text

    rows, notes = knob_rows(host)
    if args.format == "json":
        text = dumps({"knobs": rows, "notes": notes}, host)
    else:
        text = render_text(rows, notes)
    _write(text, args.output)
    return EXIT_OK


def cmd_check(args, host) -> int:
    from pipeline_core.check.cli import run

    document = None
    warps = 1
    if getattr(args, "input", None):
        _refuse_compile_options_with_input(args)
    else:
        if not args.schedule:
            raise CliError("check needs a SCHEDULE or --input FILE")
        from pipeline_core.export.json import to_document
        # check reports rather than refuses, and judges what a plain compile emits
        compiled = _warn_unwritten(
            _compile_from_args(args, host, allow_unsafe=True, reference=False), host)
        if not compiled.plan.lockstep:  # agents on rings: the verdict is compile's proof
            assert compiled.proof is not None  # compile always proves
            return run(args, None, host=host, verdict=compiled.proof.verdict,
                       unproven=compiled.proof.unprovable)
        document = to_document(compiled)
        warps = compiled.execution.warps_per_group if compiled.execution is not None else 1
        from pipeline_core.proof import how_to_apply

        return run(args, document, host=host, warps_per_group=warps,
                   explain=lambda fix: how_to_apply(compiled, fix, host))
    return run(args, document, host=host, warps_per_group=warps)


def _refuse_compile_options_with_input(args) -> None:
    """``check --input FILE`` judges the document as it is: a SCHEDULE, ``-p``, ``-T`` or
    ``-c`` beside it would be ignored (the document already fixed them), so each is refused
    naming itself.  ``--target`` stays: it picks the sync model
    (pipeline_core/check/README.md)."""
    if args.schedule:
        raise CliError(f"check takes a SCHEDULE or --input FILE, not both (got {args.schedule} "
                       f"and --input {args.input}): drop one")
    for flag, dest in (("-p", "params"), ("-T", "target_args"), ("-c", "overrides")):
        given = getattr(args, dest, None)
        if given:
            raise CliError(f"{flag} {given[0]}: check --input judges the document as compiled, "
                           f"which fixed its {flag} values; drop {flag}, or check the schedule "
                           f"itself: pipeline-core check SCHEDULE {flag} {given[0]}")


def _compile_from_args(args, host, allow_unsafe: bool | None = None,
                       reference: bool | None = None):
    from pipeline_core.api import compile_named
    from pipeline_core.errors import ConfigError

    if allow_unsafe is None:
        allow_unsafe = bool(getattr(args, "allow_unsafe", False))
    given = _values_with_project_defaults(args, host)
    try:
        return compile_named(args.schedule, target=args.target, params=given["-p"],
                             target_args=given["-T"], config_overrides=given["-c"], host=host,
                             allow_unsafe=allow_unsafe, reference=reference)
    except ConfigError as exc:  # a value from the file: name the file and the key
        defaults = _project_defaults()
        typed = {"-p": args.params, "-T": args.target_args, "-c": args.overrides}
        from_file = defaults.for_schedule(args.schedule).get(exc.flag, {})
        if exc.field in from_file and exc.field not in _pairs(typed.get(exc.flag), exc.flag):
            letter = exc.flag.lstrip("-")
            raise ConfigError(defaults.table(args.schedule), f"{letter}.{exc.field}", exc.value,
                              f"{exc} (the value comes from this file: fix it there)") from None
        raise


def _project_defaults():
    """``[tool.pipeline-core]`` of the nearest pyproject.toml (pipeline_core/project_defaults.py)."""
    from pipeline_core import project_defaults

    return project_defaults.load(project_defaults.find())


def _values_with_project_defaults(args, host) -> dict[str, dict[str, str]]:
    """The command line's -p / -T / -c over the project file's, each file value checked by the
    parser its flag goes through."""
    from pipeline_core.api import check_config_overrides
    from pipeline_core.project_defaults import merged
    from pipeline_core.schedule import parse_params, parse_target_args

    given = {"-p": _pairs(args.params, "-p"), "-T": _pairs(args.target_args, "-T"),
             "-c": _pairs(args.overrides, "-c")}
    if args.schedule not in host.schedules:  # compile refuses the name itself
        return given
    record = host.schedules[args.schedule]
    target = host.targets.get(args.target or record.default_target)
    checks = {"-p": lambda pairs: parse_params(f"schedule {record.name}", record.params, pairs,
                                               flag="-p"),
              "-T": lambda pairs: target is None or parse_target_args(target, pairs),
              "-c": lambda pairs: check_config_overrides(pairs, host)}
    out = merged(_project_defaults(), args.schedule, given, checks)
    return {flag: out.get(flag, {}) for flag in ("-p", "-T", "-c")}


def cmd_analyze(args, host) -> int:
    from pipeline_core.analyze_cli import run

    return run(args, _warn_unwritten(_compile_from_args(args, host), host), host=host)


def cmd_export(args, host) -> int:
    from pipeline_core.export.cli_export import run

    return run(args, _warn_unwritten(_compile_from_args(args, host), host))


def cmd_emit(args, host) -> int:
    from pipeline_core.errors import ConfigError

    compiled = _compile_from_args(args, host)
    target = compiled.target_name
    target_record = host.get_target(target)
    if args.emitter:
        record = host.get_emitter(args.emitter)
        if not record.serves(target_record):
            raise ConfigError("emit", "--emitter", args.emitter,
                              f"an emitter for target {target} (it serves "
                              f"{record.serves_words()})")
        if not record.writes(compiled.launch):
            raise ConfigError("emit", "--emitter", args.emitter,
                              f"an emitter for {_kernel_of(compiled)} (it writes kernel "
                              f"famil{'y' if len(record.kernel_families) == 1 else 'ies'} "
                              f"{', '.join(record.kernel_families)})")
    else:
        serving = sorted(n for n, r in host.emitters.items()
                         if r.serves(target_record) and r.writes(compiled.launch))
        if not serving:
            raise CliError(_no_emitter(compiled, host))
        if len(serving) != 1:
            raise CliError(f"{len(serving)} emitters serve {_kernel_of(compiled)} on target "
                           f"{target}: pass "
                           + " or ".join(f"--emitter {name}" for name in serving))
        record = host.emitters[serving[0]]
    options = record.parse_options(_pairs(args.emit_options, "-O"))
    source = record.emit(compiled, **options)
    _write(source, args.output)
    if args.output not in (None, "-"):  # the source went to a file: say what was written
        print(f"wrote {args.output}: {source.count(chr(10))} lines from emitter {record.name} "
              f"({_kernel_of(compiled)} on target {target})", file=sys.stderr)
    return EXIT_OK


def _no_emitter(compiled, host) -> str:
    """Why ``emit`` found no emitter for the target it compiled for, and the ``--target`` that
    has one for this schedule's kernel (docs/guide/records.md, "Commands and emitters")."""
    from pipeline_core.emit_choice import targets_with_emitter

    record = host.get_schedule(compiled.schedule_name)
    fits = targets_with_emitter(host.emitters.values(), compiled.launch,
                                [t for t in host.targets.values() if record.fits(t)])
    head = f"no emitter serves {_kernel_of(compiled)} on target {compiled.target_name}"
    if fits:
        return f"{head}; try {' or '.join(f'--target {name}' for name in fits)}"
    return (f"{head}, nor on any target it is made for; `pipeline-core emitters` lists the "
            "installed emitters and the kernel families they write")


def _kernel_of(compiled) -> str:
    """Schedule S and the kernel family it declared (pipeline_core/launch.py), for emit's errors."""
    launch = compiled.launch
    if launch is None:
        return f"schedule {compiled.schedule_name} (which declares no kernel family)"
    return f"kernel family {launch.kernel_family} of schedule {compiled.schedule_name}"


def cmd_new_plugin(args, host) -> int:
    from pipeline_core.scaffold import run

    return run(args, host)


def cmd_version(host=None) -> int:
    """The core's and each plugin distribution's version, from package metadata (no plugin is
    imported for it: pipeline_core/distributions.py; ``pipeline-core plugins`` gives status)."""
    from pipeline_core import __version__
    from pipeline_core.distributions import version_lines

    print("\n".join(version_lines(__version__)))
    return EXIT_OK


def cmd_completion(args, host) -> int:
    from pipeline_core.completion import script

    _write(script(build_parser(host), args.shell, host), args.output)
    return EXIT_OK


COMMANDS = {"compile": cmd_compile, "targets": cmd_list, "schedules": cmd_list,
            "plugins": cmd_list, "strategies": cmd_list, "emitters": cmd_list, "emit": cmd_emit, "check": cmd_check,
            "analyze": cmd_analyze, "export": cmd_export, "knobs": cmd_knobs,
            "new-plugin": cmd_new_plugin, "completion": cmd_completion}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a ``KeyboardInterrupt`` that a plugin raises without the user's
    Ctrl-C is that plugin's failure (pipeline_core/interrupts.py)."""
    from pipeline_core.interrupts import counting_sigints

    from pipeline_core.output import guarded_stdout

    with counting_sigints() as sigints, guarded_stdout():
        return _main(list(sys.argv[1:] if argv is None else argv), sigints)


def _main(argv: list[str], sigints: Callable[[], int] | None) -> int:
    early = _early_host_options(argv)
    if argv == ["--version"]:  # answered from metadata, before any plugin is imported
        try:
            status = cmd_version()
            sys.stdout.flush()
            return status
        except BaseException as exc:  # a closed or full stdout: one line, as every command
            return _report_failure(exc, early)
    try:
        host = make_host(early, sigints)
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except BaseException as exc:  # every failure is one line with its own exit status
        return _report_failure(exc, early)
    try:
        parser = build_parser(host)  # runs the plugins' add_arguments (under the guard)
        args = parser.parse_args(argv)  # (--help writes to standard output)
        if not args.command and not args.version:
            parser.print_help()
            sys.stdout.flush()
            return EXIT_INPUT
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except BaseException as exc:  # every failure is one line with its own exit status
        return _report_failure(exc, early)
    try:
        status = _report_plugin_problems(host, args) or _required_plugins(args, host)
        if status:
            return status
        loaded = len(host.problems())
        try:
            status = cmd_version(host) if args.version else _command(args)(args, host)
            sys.stdout.flush()  # a write that fails (a full disk) is reported here, as one line
        finally:
            late = _report_plugin_problems(host, args, already=loaded)
        return late or status
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except BaseException as exc:  # every failure is one line with its own exit status
        return _report_failure(exc, args)


def _interrupted(exc: KeyboardInterrupt) -> int:
    """The user's Ctrl-C: one line, naming the plugin code it stopped, if any."""
    from pipeline_core.plugin_guard import InterruptedInPlugin

    where = f" while {exc.where}" if isinstance(exc, InterruptedInPlugin) else ""
    print(f"interrupted{where}", file=sys.stderr)
    return EXIT_INTERRUPTED


def _command(args):
    """The function that runs ``args.command``: a built-in, or a plugin's (under the guard)."""
    if args.command in COMMANDS:
        return COMMANDS[args.command]

    def run_plugin_command(args, host) -> int:
        status: int = host.get_command(args.plugin_command).run(args, host)
        return status

    return run_plugin_command


def _report_failure(exc: BaseException, args) -> int:
    """One line on stderr for ``exc`` and the exit status it maps to (see the module docstring)."""
    from pipeline_core.errors import OutputError, PipelineError, PluginError
    from pipeline_core.proof import UnsafeScheduleError

    if isinstance(exc, SystemExit):  # from our own code: a plugin's is a PluginError by now
        raise exc
    if isinstance(exc, OutputError) and exc.broken_pipe:  # the reader went away (`| head`)
        return EXIT_BROKEN_PIPE
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
