"""``pipeline-core analyze SCHEDULE``: options and output of the schedule metrics.

The CLI compiles the schedule and calls :func:`run`; the numbers come from
:mod:`pipeline_core.metrics`.  Exit status: 0 reported, 1 the body's VGPR peak exceeds the target's declared register
budget (the report is still printed), 2 bad option values (counts
outside their bounds in :mod:`pipeline_core.limits` are refused by the parser).
"""
from __future__ import annotations

import argparse
import sys

from pipeline_core.limits import (ANALYZE_ITERATIONS, OPTIMAL_SECONDS, default_iterations,
                                  iterations_help, iterations_over_budget, parse_number)

EXIT_OK, EXIT_PROBLEM, EXIT_INPUT = 0, 1, 2
OPTIMAL_DEFAULT_SECONDS = 10.0


def _optimal_seconds(text: str) -> float:
    """``--optimal``'s optional budget; a word there is most likely the schedule, misplaced."""
    try:
        parse_number(text)
    except ValueError as exc:
        if not text.isascii():  # another script's digits, not a misplaced schedule name
            raise argparse.ArgumentTypeError(f"expected {OPTIMAL_SECONDS.allowed()} seconds: "
                                             f"{exc}") from None
        raise argparse.ArgumentTypeError(
            f"expected an optional time budget in seconds ({OPTIMAL_SECONDS.allowed()}), got "
            f"{text!r}; --optimal takes the next word as its budget, so name the schedule "
            f"first (pipeline-core analyze {text} --optimal) or write --optimal=SECONDS") from None
    value: float = OPTIMAL_SECONDS.argparse_type()(text)
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline_core.cli_options import add_format_option, add_output_option

    g = parser.add_argument_group("analyze")
    add_format_option(g, deprecated_json=True)
    add_output_option(g)
    g.add_argument("--iterations", type=ANALYZE_ITERATIONS.argparse_type(), default=None,
                   metavar="N",
                   help=iterations_help(ANALYZE_ITERATIONS, "kernel iterations the steady-state "
                                        "timing model runs (a steady state needs 3)"))
    g.add_argument("--no-timing", action="store_true",
                   help="skip the timing model of the emitted kernel (steady state)")
    g.add_argument("--optimal", type=_optimal_seconds, nargs="?", const=OPTIMAL_DEFAULT_SECONDS,
                   default=None, metavar="SECONDS",
                   help="also run the exact scheduler (block-program orders) for the optimal "
                        "makespan and this order's distance to it (budget default "
                        f"{OPTIMAL_DEFAULT_SECONDS:g} s; "
                        f"{OPTIMAL_SECONDS.allowed()})")


def run(args: argparse.Namespace, compiled, host=None) -> int:
    from pipeline_core.metrics import analyze_compiled, format_metrics
    from pipeline_core.output import write_text

    if args.no_timing and getattr(args, "iterations", None) is not None:  # it would be ignored
        print(f"error: --iterations {args.iterations} sets the timing model's run, which "
              "--no-timing skips: drop one", file=sys.stderr)
        return EXIT_INPUT
    if getattr(args, "iterations", None) is None:
        args.iterations = default_iterations(len(compiled.kernel), ANALYZE_ITERATIONS)
    if not ANALYZE_ITERATIONS.contains(args.iterations):
        print(f"error: --iterations {args.iterations}: expected {ANALYZE_ITERATIONS.allowed()} "
              "(a steady state needs warm-up and drain)", file=sys.stderr)
        return EXIT_INPUT
    too_many = "" if args.no_timing else iterations_over_budget(
        args.iterations, len(compiled.kernel), ANALYZE_ITERATIONS)
    if too_many:
        print(f"error: {too_many}", file=sys.stderr)
        return EXIT_INPUT
    if args.optimal is not None and not OPTIMAL_SECONDS.contains(args.optimal):
        print(f"error: --optimal {args.optimal:g}: expected {OPTIMAL_SECONDS.allowed()} seconds",
              file=sys.stderr)
        return EXIT_INPUT
    metrics = analyze_compiled(compiled, iterations=args.iterations, simulate=not args.no_timing,
                               optimal_time=args.optimal)
    title = compiled.schedule_name + (f" on {compiled.target_name}" if compiled.target_name else "")
    if args.format == "json":
        doc = {"schedule": compiled.schedule_name, "target": compiled.target_name,
               "strategy": compiled.schedule_config.scheduling, **metrics.to_dict()}
        from pipeline_core.json_output import dumps
        text = dumps(doc, host)
    else:
        text = f"{format_metrics(metrics, title)}\n  strategy {compiled.schedule_config.scheduling}\n"
    write_text(text, getattr(args, "output", None))
    if metrics.over_register_budget:
        # a schedule that cannot hold its registers would spill: the report is written, and
        # the exit status says it is a problem (docs/guide/cli.md, "analyze")
        print(f"error: {compiled.schedule_name}: VGPR peak {metrics.vgpr_peak} exceeds the "
              f"target's register budget of {metrics.register_budget} per wave",
              file=sys.stderr)
        return EXIT_PROBLEM
    return EXIT_OK
