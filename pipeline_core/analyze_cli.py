"""``pipeline-core analyze SCHEDULE``: options and output of the schedule metrics.

The CLI compiles the schedule and calls :func:`run`; the numbers come from
:mod:`pipeline_core.metrics`.  Exit status: 0 reported, 2 bad option values (counts
outside their bounds in :mod:`pipeline_core.limits` are refused by the parser).
"""
from __future__ import annotations

import argparse
import sys

from pipeline_core.limits import ANALYZE_ITERATIONS, OPTIMAL_SECONDS, iterations_over_budget

DEFAULT_ITERATIONS = 12
EXIT_OK, EXIT_INPUT = 0, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline_core.cli import add_format_option

    g = parser.add_argument_group("analyze")
    add_format_option(g, deprecated_json=True)
    g.add_argument("--iterations", type=ANALYZE_ITERATIONS.argparse_type(), default=DEFAULT_ITERATIONS,
                   metavar="N",
                   help="kernel iterations for the steady-state timing model "
                        f"(default {DEFAULT_ITERATIONS}; {ANALYZE_ITERATIONS.allowed()})")
    g.add_argument("--no-timing", action="store_true",
                   help="skip the timing model of the emitted kernel (steady state)")
    g.add_argument("--optimal", type=OPTIMAL_SECONDS.argparse_type(), nargs="?", const=10.0,
                   default=None, metavar="SECONDS",
                   help="also run the exact scheduler (block-program orders) for the optimal "
                        "makespan and this order's distance to it (budget default 10 s; "
                        f"{OPTIMAL_SECONDS.allowed()})")


def run(args: argparse.Namespace, compiled, host=None) -> int:
    from pipeline_core.metrics import analyze_compiled, format_metrics

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
        sys.stdout.write(dumps(doc, host))
    else:
        print(f"{format_metrics(metrics, title)}")
        print(f"  strategy {compiled.schedule_config.scheduling}")
    return EXIT_OK
