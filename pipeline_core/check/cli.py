"""Command-line glue for ``pipeline-core check``: arguments, input loading, exit codes.

Exit codes: 0 the schedule is safe, 1 a hazard was found, 2 the input is bad
(one line on stderr says why; counts outside their bounds in :mod:`pipeline_core.limits`
are refused by the parser).  A plugin's counter model that fails raises PluginError
for the caller (the main CLI exits 3).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import attrs

from typing import TYPE_CHECKING, Callable

from pipeline_core.errors import PipelineError, PluginError
from pipeline_core.limits import (CHECK_ITERATIONS, JSON_DEPTH, WARPS_PER_GROUP, default_iterations,
                                  iterations_help, iterations_over_budget)

if TYPE_CHECKING:
    from pipeline_core.check.counters import CounterModel
    from pipeline_core.check.verdict import Fix

# The checker itself is imported when a check runs, so that building the CLI parser
# (every pipeline-core command) stays cheap.

EXIT_SAFE, EXIT_HAZARD, EXIT_BAD_INPUT = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the checker's options to ``parser`` (the caller adds SCHEDULE / target options)."""
    parser.add_argument("--input", metavar="FILE", default=None,
                        help="check a compiled schedule JSON document (docs/document-format.md) instead of "
                             "compiling; '-' reads standard input")
    from pipeline_core.cli_options import add_format_option, add_output_option

    add_format_option(parser)
    add_output_option(parser)
    parser.add_argument("--iterations", type=CHECK_ITERATIONS.argparse_type(), default=None,
                        metavar="N", help=iterations_help(CHECK_ITERATIONS))
    parser.add_argument("--tightest", action="store_true",
                        help="also report, for every kernel wait, the loosest value that stays safe")
    parser.add_argument("--explicit-register-waits", action="store_true",
                        help="assume no compiler interlock on fragment registers: an MMA needs an "
                             "emitted wait to have retired its fragment loads")
    parser.add_argument("--no-lds-order", action="store_true",
                        help="do not assume the LDS services accesses in arrival order: an LDS read "
                             "issued before a global->LDS load must be retired by a wait before the "
                             "load may overwrite its buffer (stricter; the AMD default assumes the "
                             "read is serviced first)")
    parser.add_argument("--warps-per-group", type=WARPS_PER_GROUP.argparse_type(), default=None,
                        metavar="N",
                        help="model each warp group as N warps that only synchronise through "
                             "barriers (default: what the document records, else 1: a group "
                             "is one agent; never fewer than the document records; "
                             f"{WARPS_PER_GROUP.allowed()}: a CTA holds at most 32 warps)")


def load_input(path: str, stdin: TextIO | None = None) -> dict[str, Any]:
    """Read a JSON document from ``path`` ('-' = stdin); DocumentError on any problem."""
    from pipeline_core.check.program import DocumentError
    where = "standard input" if path == "-" else path
    try:
        if path == "-":
            stream = stdin or sys.stdin
            raw = stream.buffer.read() if hasattr(stream, "buffer") else stream.read()
        else:
            with open(path, "rb") as fh:
                raw = fh.read()
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except OSError as err:
        raise DocumentError("", f"cannot read {path}: {err.strerror or err}")
    except UnicodeDecodeError as err:
        raise DocumentError("", f"{where} is not UTF-8 text (byte {err.start} is "
                                f"0x{err.object[err.start]:02x}); a schedule document is JSON in UTF-8")
    if not text.strip():  # else the depth check below would say it "nests 0 levels deep"
        raise DocumentError("", f"{where} is empty; --input wants a compiled schedule document: "
                                f"write one with pipeline-core compile SCHEDULE --format json -o "
                                f"FILE.json and pass --input FILE.json, or check the schedule "
                                f"itself: pipeline-core check SCHEDULE")
    depth = json_depth(text)
    if not JSON_DEPTH.contains(depth):
        raise DocumentError("", f"{where} nests {depth} levels deep, more than the "
                                f"{int(JSON_DEPTH.high)} a schedule document may (it needs 5)")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise DocumentError("", f"{where} is not valid JSON ({err.msg} at line {err.lineno} "
                                f"column {err.colno})")
    if not isinstance(doc, dict):
        raise DocumentError("", f"{where}: expected a JSON object, got {type(doc).__name__}")
    from pipeline_core.json_output import FORMAT_VERSION

    version = doc.get("format_version", FORMAT_VERSION)  # the reference's documents have none
    if isinstance(version, bool) or not isinstance(version, int) or version > FORMAT_VERSION:
        raise DocumentError("format_version", f"{where} has format_version {version!r}; this "
                            f"pipeline-core reads {FORMAT_VERSION} (upgrade pipeline-core)")
    if version < 1:  # versions start at 1 (docs/document-format.md)
        raise DocumentError("format_version", f"{where} has format_version {version}, but versions "
                            f"start at 1: write {FORMAT_VERSION}, or leave the key out")
    return doc


def json_depth(text: str) -> int:
    """The deepest nesting of objects and arrays in JSON ``text`` (strings skipped), found
    without parsing, so that a hostile document cannot exhaust the parser's recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def run(args: argparse.Namespace, document: Mapping[str, Any] | None = None, *,
        model: "CounterModel | None" = None, host: Any = None, out: TextIO | None = None,
        err: TextIO | None = None, warps_per_group: int = 1, verdict: Any = None,
        unproven: str = "", explain: Callable[[Fix], str] | None = None) -> int:
    """Check ``document`` (or ``args.input`` when ``document`` is None) and print the verdict.

    ``warps_per_group`` is the compiled schedule's declared count, used unless
    ``--warps-per-group`` is given.  The counter model is ``model`` if given, else the one built from the sync model
    of the target (``args.target`` or the document's) registered with ``host``; a
    target that declares none is refused with one line naming it.  ``explain`` says how the
    user applies a fix (``check SCHEDULE``: the flags, pipeline_core/lowering/knob_fixes.py); its answer
    is added to each fix's text.
    """
    from pipeline_core.api import require_document_fit, schedule_warps
    from pipeline_core.check.checker import check_document, modelled_warps, recorded_warps
    from pipeline_core.check.counters import model_for_document
    from pipeline_core.check.program import DocumentError, check_shape

    out = out or sys.stdout
    err = err or sys.stderr
    try:
        if verdict is None and document is None and unproven:
            raise DocumentError("", f"cannot be proven: {unproven}")
        if verdict is not None:  # an agents compile's proof (pipeline_core/agents/prove.py)
            document = {"schedule": verdict.name}
            return _print(args, verdict, document, host, out)
        if document is None:
            if not getattr(args, "input", None):
                raise DocumentError("", "no schedule given (pass a document or --input FILE)")
            document = load_input(args.input)
        _require_registered_lowering(document, host)
        check_shape(document)  # the lowering, stagger and phases, before any model is built
        if model is None:
            if not getattr(args, "target", None):
                require_document_fit(document, host)
            model = model_for_document(document, host, getattr(args, "target", None))
        if getattr(args, "explicit_register_waits", False):
            model = attrs.evolve(model, register_interlock=False)
        if getattr(args, "no_lds_order", False):
            model = attrs.evolve(model, lds_in_order=False)
        # a document's word on its warps is held to what its schedule runs
        runs = schedule_warps(document, host)
        warps_per_group = max(warps_per_group, recorded_warps(document, runs) or 1)
        warps = modelled_warps(document, model, getattr(args, "warps_per_group", None),
                               declared=warps_per_group)

        def length(phase: str) -> int:
            items = document.get(phase)
            return (len(items) if isinstance(items, list) else 0) * warps  # each warp runs them

        entries, fixed = length("kernel"), length("prologue") + length("epilogue")
        iterations = getattr(args, "iterations", None)
        if iterations is None:
            iterations = default_iterations(entries, CHECK_ITERATIONS, fixed)
        for flag, value, bound in (("--iterations", iterations, CHECK_ITERATIONS),
                                   ("--warps-per-group", warps, WARPS_PER_GROUP)):
            if not bound.contains(value):
                raise ValueError(f"{flag} {value}: expected {bound.allowed()}")
        too_many = iterations_over_budget(iterations, entries, CHECK_ITERATIONS,
                                          fixed_entries=fixed)
        if too_many:
            raise ValueError(too_many + (f" (--warps-per-group {warps}: every warp runs the "
                                         "kernel)" if warps > 1 else ""))
        verdict = check_document(document, model=model, iterations=iterations, runs=runs,
                                 warps_per_group=warps, tightest=getattr(args, "tightest", False))
    except PluginError:
        raise  # names the plugin; the CLI gives it the plugin exit status
    except (PipelineError, ValueError, TypeError) as e:
        print(f"pipeline-core check: error: {e}", file=err)
        return EXIT_BAD_INPUT
    if explain is not None:
        verdict = attrs.evolve(verdict, violations=tuple(
            attrs.evolve(v, fix=_explained(v.fix, explain)) for v in verdict.violations))
    return _print(args, verdict, document, host, out)


def _require_registered_lowering(document: Mapping[str, Any], host: Any) -> None:
    """A document's ``lowering`` names a lowering this host registers (the block program's
    documents name none): a name nothing registers could be read the wrong way."""
    from pipeline_core.check.program import DocumentError

    lowering = document.get("lowering")
    if host is None or not isinstance(lowering, str) or lowering in host.lowerings:
        return
    known = ", ".join(f'"{n}"' for n in sorted(host.lowerings))
    raise DocumentError("lowering", f"{lowering!r} is no registered lowering ({known}; no "
                                    "lowering key: the block program); install the plugin that "
                                    "built the document, or recompile it")


def _explained(fix: Fix | None, explain: Callable[[Fix], str]) -> Fix | None:
    how = explain(fix) if fix is not None else ""
    return attrs.evolve(fix, text=f"{fix.text}; {how}") if fix is not None and how else fix


def _print(args: argparse.Namespace, verdict: Any, document: Mapping[str, Any], host: Any,
           out: TextIO) -> int:
    """Write ``verdict`` as the command's output; the exit status says safe or not."""
    if not verdict.name and isinstance(document.get("schedule"), str):
        verdict = attrs.evolve(verdict, name=document["schedule"])  # a compiled document names it
    if getattr(args, "format", "text") == "json":
        from pipeline_core.json_output import dumps
        text = dumps(verdict.to_dict(), host)
    else:
        text = verdict.render_text() + "\n"
    output = getattr(args, "output", None)
    from pipeline_core.output import to_stdout, write_text

    if not to_stdout(output):
        write_text(text, output)
    else:
        out.write(text)
    return EXIT_SAFE if verdict.safe else EXIT_HAZARD


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (``python -m pipeline_core.check --input FILE``)."""
    from pipeline_core.cli_options import OneLineParser

    parser = OneLineParser(prog="pipeline-core check",
                                     description="Prove a compiled schedule free of LDS/register hazards.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(args)
