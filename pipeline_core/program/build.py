"""build_kernel_program: order -> blocks -> redistribution -> waits -> verification.

The double-buffer path of the compiler (§8 build_kernel_program + Appendix B).
The result record keeps the intermediate facts the JSON output reports.
"""
from __future__ import annotations

from typing import Sequence

import attrs

from pipeline_core.config import PipelineConfig, ScheduleConfig
from pipeline_core.edges import DepEdge
from pipeline_core.errors import ConfigError, ProgramError, SchedulingError
from pipeline_core.ops import Op
from pipeline_core.program.construct import construct_blocks, main_wait_vm
from pipeline_core.program.program import Program
from pipeline_core.program.redistribute import redistribute_globals
from pipeline_core.program.verify import verify_program
from pipeline_core.program.waits import (apply_auto_drain, apply_auto_waits, derive_drain_mask,
                                         derive_waits)
from pipeline_core.scheduling.registry import SchedulingRequest, get_strategy


@attrs.frozen
class KernelProgram:
    """The final (patched, verified) program and the values derived on the way.

    ``wait_lgkm_first`` / ``wait_vm_last`` are always the derived values
    (Appendix B 8.7), also when ``waits_applied`` is False and the kernel
    carries the manual ones.
    """

    program: Program
    order: tuple[int, ...]
    main_wait_vm: int
    wait_lgkm_first: int
    wait_vm_last: int
    waits_applied: bool
    derived_drain_mask: int


def _check_order(order: Sequence[int], n: int, source: str) -> tuple[int, ...]:
    """The order as a tuple, or an error saying how it is not a permutation of range(n)."""
    try:
        result = tuple(int(i) for i in order)
    except (TypeError, ValueError):
        result = None
    problem = ""
    if result is None:
        problem = "it is not a sequence of integers"
    elif len(result) != n:
        problem = f"it has {len(result)} entries for a body of {n} ops"
    else:
        seen: set[int] = set()
        for i in result:
            if not 0 <= i < n:
                problem = f"index {i} is outside 0..{n - 1}"
                break
            if i in seen:
                problem = f"index {i} appears twice"
                break
            seen.add(i)
    if not problem and result is not None:
        return result
    missing = tuple(sorted(set(range(n)) - set(result or ())))
    msg = (f"the order from {source} is not a permutation of the body indices 0..{n - 1}: "
           f"{problem}" + (f" (missing: {list(missing)})" if missing else "") + ".")
    if source.startswith("strategy"):
        raise SchedulingError(msg + " The strategy must place every op exactly once.",
                              strategy=source.split(" ", 1)[1], ops=missing)
    raise ProgramError(msg + " Pass a permutation of range(len(body)).", ops=missing)


def schedule_order(body: Sequence[Op], config: PipelineConfig, sched: ScheduleConfig,
                   edges: Sequence[DepEdge] = ()) -> tuple[int, ...]:
    """Ask the configured strategy for an order (edges derived when none are given)."""
    if not edges:
        from pipeline_core.edges import derive_edges  # provided by the edges module
        edges = derive_edges(body, config)
    strategy = get_strategy(sched.scheduling)
    request = SchedulingRequest(
        body=body, edges=edges,
        max_globals_per_block=config.block_sizing.max_globals,
        lds_contention_penalty=sched.lds_contention_penalty,
        max_vgpr=sched.max_vgpr,
        time_limit=sched.search_time_limit_ms / 1000 if sched.search_time_limit_ms else None,
        num_partitions=config.num_partitions,
        blocks_per_partition=config.blocks_per_partition)
    return _check_order(strategy(request), len(body), f"strategy {sched.scheduling}")


def build_kernel_program(body: Sequence[Op], config: PipelineConfig,
                         sched: ScheduleConfig = ScheduleConfig(),
                         edges: Sequence[DepEdge] = (), *,
                         order: Sequence[int] | None = None) -> KernelProgram:
    """Order the body, build the blocks, patch waits and verify (double-buffer path).

    ``order`` bypasses the scheduling strategy (tools, tests).
    """
    if config.depth < 2:
        raise ConfigError("PipelineConfig", "depth", config.depth,
                          "a depth >= 2 for the block program (depth 1 uses the recipes)")
    body = tuple(body)
    if order is None:
        final_order = schedule_order(body, config, sched, edges)
    else:
        final_order = _check_order(order, len(body), "the order= argument")
    program = construct_blocks(body, final_order, config, sched)
    program = redistribute_globals(program, config, sched)
    wl, wv = derive_waits(program, config, sched.lgkm_per_load_a, sched.lgkm_per_load_b)
    if sched.auto_waits:
        if sched.auto_drain:
            program = apply_auto_drain(program, config)
        program = apply_auto_waits(program, config, sched, wl, wv)
    verify_program(program, config, sched.lgkm_per_load_a, sched.lgkm_per_load_b,
                   wl if sched.auto_waits else 0, wv if sched.auto_waits else 0)
    return KernelProgram(program=program, order=final_order,
                         main_wait_vm=main_wait_vm(body, final_order, config),
                         wait_lgkm_first=wl, wait_vm_last=wv, waits_applied=sched.auto_waits,
                         derived_drain_mask=derive_drain_mask(program, config))
