"""Layer benchmarks: the speed claims the test suite used to time, each against its budget.

    python benchmarks/bench_layers.py [--repeat 50]

Tests never read the clock (a loaded CI machine makes timing asserts flaky); the same
claims are measured here, on the reference goldens in ``tests/goldens``:

* the CSP strategy orders the BF16 ping-pong body in well under 1 ms;
* the block program of a ping-pong schedule builds in well under 1 ms;
* the timing model runs 3 iterations of ping-pong in under 50 ms;
* EXACT proves every matmul-grid body of the scheduling tests optimal in under 5 s;
* CSP with an LDS penalty stops at its 300 ms budget (``search_time_limit_ms``);
* the proof stage every compile ends with (pipeline_core/proof.py: the hazard checker with the
  real warp counts) costs tens of milliseconds at most, on each bundled schedule.

Prints one row per claim (median, budget, verdict); exits 1 when a claim misses its budget.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import golden_data  # noqa: E402  (the golden decoders of the test suite)


def median_s(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up: imports, caches
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def csp_pingpong() -> Callable[[], object]:
    from pipeline_core.scheduling import SchedulingRequest, get_strategy

    d = golden_data.load("pingpong_bf16")
    config = golden_data.config_from(d["config"])
    request = SchedulingRequest(golden_data.ops_from(d["body"]), golden_data.edges_from(d["edges"]),
                                max_globals_per_block=config.block_sizing.max_globals,
                                num_partitions=config.num_partitions,
                                blocks_per_partition=config.blocks_per_partition)
    csp = get_strategy("CSP")
    return lambda: csp(request)


def build_pingpong() -> Callable[[], object]:
    from pipeline_core.program.build import build_kernel_program

    d = golden_data.load("pingpong_bf16")
    args = (tuple(golden_data.ops_from(d["body"])), golden_data.config_from(d["config"]),
            golden_data.schedule_config_from(d["schedule_config"]),
            tuple(golden_data.edges_from(d["edges"])))
    order = tuple(d["scheduler"]["order"])
    return lambda: build_kernel_program(*args, order=order)


def simulate_pingpong() -> Callable[[], object]:
    from pipeline_core.simulate import simulate

    doc = golden_data.load("pingpong_bf16")
    return lambda: simulate(doc, 3)


def exact_grids() -> Callable[[], object]:
    from pipeline_core.costs import annotate
    from pipeline_core.edges import derive_edges
    from pipeline_core.scheduling.exact import exact_schedule
    from pipeline_core.transforms import double_buffer_reorder
    from pipeline_core_amd_mi355x import mi355x_cost_model, mi355x_double_buffer
    from pipeline_core_schedules_matmul_grid import logical_body

    cases = [(2, 2, 8), (2, 5, 4), (2, 5, 8), (3, 3, 4), (4, 4, 16), (2, 11, 16), (4, 7, 16),
             (5, 8, 16)]
    problems = []
    for m, n, penalty in cases:
        config = mi355x_double_buffer(max_globals=1).evolve(m_mmas=m, n_mmas=n)
        body = double_buffer_reorder(annotate(logical_body(m, n), mi355x_cost_model()), config)
        problems.append((body, derive_edges(body, config), penalty, m * n))

    def slowest() -> float:
        worst = 0.0
        for body, edges, penalty, blocks in problems:
            for slots, strict in ((0, False), (2, False), (2, True)):
                t0 = time.perf_counter()
                result = exact_schedule(body, edges, max_globals_per_block=1,
                                        lds_contention_penalty=penalty, num_partitions=2,
                                        blocks_per_partition=blocks, time_limit=20,
                                        block_slots=slots, strict=strict)
                assert result.proven_optimal
                worst = max(worst, time.perf_counter() - t0)
        return worst
    return slowest


def csp_penalty_budget() -> Callable[[], object]:
    from pipeline_core.api import compile_named

    return lambda: compile_named("pingpong", config_overrides={
        "lds_contention_penalty": "15", "search_time_limit_ms": "300"})


def proof_stage(name: str) -> Callable[[], object]:
    """The proof stage alone, on an already compiled schedule (its default parameters)."""
    from pipeline_core.api import compile_named
    from pipeline_core.proof import prove

    compiled = compile_named(name)
    return lambda: prove(compiled)


PROVEN = ("pingpong", "4wave", "default-matmul", "matmul-grid")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args(argv)
    rows = [
        ("CSP orders BF16 ping-pong", median_s(csp_pingpong(), args.repeat), 1e-3),
        ("block program of ping-pong", median_s(build_pingpong(), args.repeat), 1e-3),
        ("timing model, ping-pong x3", median_s(simulate_pingpong(), max(3, args.repeat // 10)), 0.05),
        ("EXACT grid bodies (slowest)", exact_grids()(), 5.0),
        ("CSP with penalty 15, 300 ms budget", median_s(csp_penalty_budget(), 3), 5.0),
        *((f"proof stage, {name}", median_s(proof_stage(name), max(3, args.repeat // 5)), 0.05)
          for name in PROVEN),
    ]
    missed = 0
    print(f"{'claim':<36} {'measured':>12} {'budget':>10}  verdict")
    for label, seconds, budget in rows:
        ok = seconds <= budget
        missed += not ok
        print(f"{label:<36} {seconds * 1e3:>9.3f} ms {budget * 1e3:>7.0f} ms  {'ok' if ok else 'MISSED'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
