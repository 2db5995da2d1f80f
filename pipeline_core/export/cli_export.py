"""``pipeline-core export``: options and glue for the trace, DOT and picture exports.

The CLI compiles the schedule and calls :func:`run`; everything here is argument handling,
progress on a terminal (stderr, only when it is a TTY), and messages. When the export goes
to a file, stdout gets a short summary of the modelled run (of the graph's size for DOT, which
models none). Exit status: 0 written, 2 bad request (no format,
missing -o for an image, matplotlib missing, --iterations or --width out of its bound, unwritable -o file).
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable, TextIO

from pipeline_core import PLOT_INSTALL
from pipeline_core.limits import (EXPORT_ITERATIONS, PICTURE_WIDTH, default_iterations,
                                  iterations_help, iterations_over_budget)

FORMATS = ("trace", "dot", "png", "svg")
SUFFIX_FORMAT = {".json": "trace", ".dot": "dot", ".gv": "dot", ".png": "png", ".svg": "svg"}
EXIT_OK, EXIT_INPUT = 0, 2
DEFAULT_WIDTH = 1600  #: ``--width`` of a picture when not given


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("export")
    g.add_argument("--format", dest="format", choices=FORMATS, default=None,
                   help="trace: Perfetto / Chrome trace-event JSON of the modelled execution; "
                        "dot: the body's dependency graph; png, svg: a timeline picture (needs "
                        f"matplotlib: {PLOT_INSTALL}). Default: from the -o suffix")
    g.add_argument("-o", "--output", dest="output", metavar="FILE", default=None,
                   help="file to write (trace and dot: stdout when omitted or '-')")
    g.add_argument("--iterations", type=EXPORT_ITERATIONS.argparse_type(), default=None,
                   metavar="N", help=iterations_help(EXPORT_ITERATIONS))
    g.add_argument("--width", type=PICTURE_WIDTH.argparse_type(), default=None, metavar="PX",
                   help=f"picture width in pixels (png, svg; default {DEFAULT_WIDTH}; "
                        f"{PICTURE_WIDTH.allowed()})")


class Progress:
    """One self-rewriting status line on a terminal; silent when the stream is not a TTY."""

    def __init__(self, stream: TextIO, label: str):
        self.stream, self.label = stream, label
        self.active = bool(getattr(stream, "isatty", lambda: False)())
        self.shown = False
        self._last = 0.0

    def update(self, done: int, total: int) -> None:
        if not self.active:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.05:
            return  # at most 20 redraws a second
        self._last = now
        self.stream.write(f"\r{self.label}: iteration {done}/{total}")
        self.stream.flush()
        self.shown = True

    def stage(self, text: str) -> None:
        if self.active:
            self.stream.write(f"\r{self.label}: {text}\x1b[K")
            self.stream.flush()
            self.shown = True

    def close(self) -> None:
        if self.active and self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _format_of(args) -> str | None:
    if args.format:
        return args.format
    if args.output and args.output != "-":
        from pathlib import Path

        return SUFFIX_FORMAT.get(Path(args.output).suffix.lower())
    return None


def _error(text: str) -> int:
    print(f"error: {text}", file=sys.stderr)
    return EXIT_INPUT


def _emit(text: str, output: str | None) -> None:
    from pipeline_core.output import write_text

    write_text(text, output)


def run(args, compiled: Any) -> int:
    """Export ``compiled`` (a CompiledSchedule, or a schedule document) as asked by ``args``."""
    fmt = _format_of(args)
    if fmt is None:
        return _error("choose an export format: --format trace|dot|png|svg "
                      "(or an -o FILE ending in .json, .dot, .png or .svg)")
    to_file = bool(args.output) and args.output != "-"
    width = getattr(args, "width", None)
    if width is not None and fmt not in ("png", "svg"):  # it would be ignored: say so instead
        return _error(f"--width sizes a picture (png, svg); --format {fmt} draws none: drop "
                      "--width")
    iterations = getattr(args, "iterations", None)
    if fmt == "dot":  # the dependency graph: nothing is modelled, so no run is asked for
        if iterations is not None:
            return _error("--iterations sets the modelled run (trace, png, svg); --format dot "
                          "writes the dependency graph, which models none: drop --iterations")
        return _export_dot(args, compiled, to_file)
    if fmt in ("png", "svg"):
        if not to_file:
            return _error(f"--format {fmt} writes an image: give -o FILE.{fmt}")
        from pipeline_core.export.picture import MissingMatplotlib, require_matplotlib

        try:
            require_matplotlib()
        except MissingMatplotlib as exc:
            return _error(str(exc))
    if iterations is None:
        iterations = default_iterations(_kernel_entries(compiled), EXPORT_ITERATIONS)
    if not EXPORT_ITERATIONS.contains(iterations):
        return _error(f"--iterations {iterations}: expected {EXPORT_ITERATIONS.allowed()}")
    too_many = iterations_over_budget(iterations, _kernel_entries(compiled), EXPORT_ITERATIONS)
    if too_many:
        return _error(too_many)
    width = DEFAULT_WIDTH if width is None else width
    if not PICTURE_WIDTH.contains(width):
        return _error(f"--width {width}: expected {PICTURE_WIDTH.allowed()} pixels")
    progress = Progress(sys.stderr, f"export {fmt}")
    try:
        timeline = _simulate(compiled, iterations, progress.update)
        if fmt == "trace":
            from pipeline_core.export import trace

            progress.stage("writing trace events")
            _emit(trace.dumps(timeline), args.output)
        else:
            from pipeline_core.export import picture

            from pipeline_core.output import reporting_path

            progress.stage(f"drawing {fmt}")
            with reporting_path(args.output):
                picture.write(timeline, args.output, fmt=fmt, width=width)
    finally:
        progress.close()
    if to_file:  # stdout is free: say what was written and what the model measured
        from pipeline_core.simulate import format_summary

        print(f"wrote {args.output}")
        print(format_summary(timeline))
    return EXIT_OK


def _export_dot(args, compiled: Any, to_file: bool) -> int:
    """The dependency graph and, to a file, one line of its size: a DOT file is the body's
    graph, so nothing is modelled (no timing run, no --iterations; docs/guide/concepts.md, "Seeing a
    schedule")."""
    from pipeline_core.export import dot

    graph = dot.graph_from(compiled)
    _emit(dot.to_dot(graph), args.output)
    if to_file:
        carried = sum(1 for *_, d in graph.edges(data=True) if d.get("distance"))
        print(f"wrote {args.output}")
        print(f"dependency graph: {graph.number_of_nodes()} ops, {graph.number_of_edges()} edges "
              f"({carried} loop-carried)")
    return EXIT_OK


def _kernel_entries(compiled: Any) -> int:
    kernel = compiled.get("kernel") if isinstance(compiled, dict) else getattr(compiled, "kernel", ())
    return len(kernel or ())


def _simulate(compiled: Any, iterations: int, progress: Callable[[int, int], None]):
    from pipeline_core.simulate import model_run

    return model_run(compiled, iterations, progress=progress)
