"""Benchmark of the exact scheduler against the reference-style exhaustive CSP.

    python3 benchmarks/bench_scheduling.py [--budget SECONDS] [--penalties 8,16] [--grids 2x2,2x5,...]
                                           [--max-globals 1] [--json]

Bodies come from the ``matmul-grid`` schedule (ping-pong generalised to an m x n MMA
grid per warp group; 2 x (m*n + 2*(m+n)) ops): 24 (2x2), 48 (2x5), 96 (2x11),
100 (4x7), 132 (5x8).  Each body is ordered under an LDS-contention penalty (the
CSP's cost model knob; without it the greedy seed already meets the bound and
nothing is searched) by:

* CSP: ``exhaustive.optimal_schedule_with_halves``, the reference's search (this
  port adds partial-bound pruning that never changes its result), with the budget
  as its time limit: as the reference runs it (slots "-") and as the CSP strategy
  runs it (block slots 2).  It proves nothing unless it finishes; its lower bound
  is then the reference's ASAP bound.
* EXACT: the same constraints and result (both variants), proven optimal (or the
  best found and the gap).
* EXACT_BLOCKS: EXACT holding the greedy seed to the block rules too (every
  result compiles).

Columns: time to the proven optimum (or "budget" and the gap at the budget),
makespan, lower bound, search nodes.  Exits 1 when EXACT does not prove a body of
96 ops or more within the budget.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline_core.costs import annotate  # noqa: E402
from pipeline_core.edges import derive_edges  # noqa: E402
from pipeline_core.scheduling.evaluate import evaluate_schedule, lower_bound, Tables  # noqa: E402
from pipeline_core.scheduling.exact import exact_schedule  # noqa: E402
from pipeline_core.scheduling.exact_search import BLOCK_SLOTS  # noqa: E402
from pipeline_core.scheduling.exhaustive import optimal_schedule_with_halves  # noqa: E402
from pipeline_core.transforms import double_buffer_reorder  # noqa: E402

DEFAULT_GRIDS = "2x2,2x5,2x11,4x7,5x8"
TARGET_OPS = 96  #: EXACT must prove bodies at least this large within the budget


def grid_body(m: int, n: int, max_globals: int):
    """The matmul-grid body on MI355X (same construction as the schedule plugin)."""
    from pipeline_core_amd_mi355x import mi355x_cost_model, mi355x_double_buffer
    from pipeline_core_schedules_matmul_grid import logical_body

    config = mi355x_double_buffer(max_globals=max_globals).evolve(m_mmas=m, n_mmas=n)
    body = double_buffer_reorder(annotate(logical_body(m, n), mi355x_cost_model()), config)
    return body, derive_edges(body, config), config


def run_csp(body, edges, config, penalty: int, budget: float, slots: int) -> dict:
    t0 = time.perf_counter()
    order = optimal_schedule_with_halves(
        body, edges, max_globals_per_block=config.block_sizing.max_globals, block_slots=slots,
        lds_contention_penalty=penalty, num_partitions=config.num_partitions,
        blocks_per_partition=config.blocks_per_partition, time_limit=budget)
    seconds = time.perf_counter() - t0
    makespan = evaluate_schedule(body, edges, order, penalty)[0]
    finished = seconds < budget * 0.98
    lb = makespan if finished else lower_bound(Tables(body, edges), penalty)
    return {"strategy": "CSP", "slots": slots, "proven": finished, "seconds": seconds,
            "makespan": makespan, "lower_bound": lb, "gap": makespan - lb, "nodes": None}


def run_exact(body, edges, config, penalty: int, budget: float, slots: int,
              strict: bool = False) -> dict:
    r = exact_schedule(body, edges, max_globals_per_block=config.block_sizing.max_globals,
                       lds_contention_penalty=penalty, num_partitions=config.num_partitions,
                       blocks_per_partition=config.blocks_per_partition, time_limit=budget,
                       block_slots=slots, strict=strict)
    return {"strategy": "EXACT_BLOCKS" if strict else "EXACT", "slots": slots,
            "proven": r.proven_optimal,
            "seconds": r.time, "makespan": r.makespan, "lower_bound": r.lower_bound,
            "gap": r.gap, "nodes": r.nodes}


def fmt_row(case: dict, res: dict) -> str:
    when = f"{res['seconds']:.2f} s" if res["proven"] else f"budget (gap {res['gap']})"
    nodes = "-" if res["nodes"] is None else str(res["nodes"])
    slots = str(res["slots"]) if res["slots"] else "-"
    return (f"| {case['ops']:>4} | {case['grid']:>5} | {case['penalty']:>3} | {res['strategy']:<12} "
            f"| {slots:>5} | {when:>16} | {res['makespan']:>8} | {res['lower_bound']:>11} "
            f"| {nodes:>6} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=10.0, help="seconds per search (default 10)")
    p.add_argument("--grids", default=DEFAULT_GRIDS, help=f"m x n grids (default {DEFAULT_GRIDS})")
    p.add_argument("--penalties", default="8,16", help="LDS-contention penalties (default 8,16)")
    p.add_argument("--max-globals", type=int, default=1, help="globals cap per block (default 1)")
    p.add_argument("--skip-csp", action="store_true", help="run only the exact strategies")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of the table")
    args = p.parse_args(argv)

    grids = [tuple(int(x) for x in g.lower().split("x")) for g in args.grids.split(",") if g]
    penalties = [int(x) for x in args.penalties.split(",") if x]
    rows = []
    if not args.json:
        print(f"budget {args.budget:g} s per search, max_globals {args.max_globals}")
        print("|  ops |  grid | pen | strategy     | slots | time to optimum  | makespan "
              "| lower bound |  nodes |")
        print("|-----:|------:|----:|:-------------|------:|-----------------:|---------:"
              "|------------:|-------:|")
    failed = False
    for m, n in grids:
        body, edges, config = grid_body(m, n, args.max_globals)
        for penalty in penalties:
            case = {"ops": len(body), "grid": f"{m}x{n}", "penalty": penalty}
            results = []
            for slots in (0, BLOCK_SLOTS):
                if not args.skip_csp:
                    results.append(run_csp(body, edges, config, penalty, args.budget, slots))
                results.append(run_exact(body, edges, config, penalty, args.budget, slots))
            results.append(run_exact(body, edges, config, penalty, args.budget, BLOCK_SLOTS,
                                     strict=True))
            for res in results:
                rows.append({**case, **res})
                if not args.json:
                    print(fmt_row(case, res), flush=True)
                if res["strategy"] == "EXACT" and case["ops"] >= TARGET_OPS and not res["proven"]:
                    failed = True
    if args.json:
        print(json.dumps(rows, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
