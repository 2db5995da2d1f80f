"""build_kernel_program: a given order -> blocks -> redistribution -> waits -> verification.

The double-buffer path of the compiler (docs/guide/reference-behaviours.md:
"Double-buffer block construction" to "The auto-wait patch").
The result record (``KernelProgram``, kept with ``Program`` in ``program.py`` so the compiled
record can name it without importing the builder) keeps the intermediate facts the JSON
output reports.
"""
from __future__ import annotations

from typing import Sequence

from pipeline_core.config import PipelineConfig, ScheduleConfig
from pipeline_core.edges import DepEdge
from pipeline_core.errors import ConfigError
from pipeline_core.ops import Op
from pipeline_core.ordering import check_order
from pipeline_core.program.construct import construct_blocks, main_wait_vm
from pipeline_core.program.program import KernelProgram, Program
from pipeline_core.program.redistribute import redistribute_globals
from pipeline_core.program.verify import verify_program
from pipeline_core.program.waits import (apply_auto_drain, apply_auto_waits, derive_drain_mask,
                                         derive_waits)


def build_kernel_program(body: Sequence[Op], config: PipelineConfig,
                         sched: ScheduleConfig = ScheduleConfig(),
                         edges: Sequence[DepEdge] = (), *,
                         order: Sequence[int], keep_reads_first: bool = False) -> KernelProgram:
    """Build the blocks of ``body`` in ``order``, patch waits and verify (double-buffer path).

    The order comes from the compiler's ordering stage (:mod:`pipeline_core.ordering`);
    ``edges`` are accepted for callers that pass them positionally and are not consulted.
    ``keep_reads_first``: redistributed global loads stay after the fragment reads of the
    region they overwrite (:func:`redistribute_globals`; schedules with derived waits).
    """
    if config.depth < 2:
        raise ConfigError("PipelineConfig", "depth", config.depth,
                          "a depth >= 2 for the block program (depth 1 uses the recipes)")
    body = tuple(body)
    final_order = check_order(order, len(body), "the order= argument")
    program = construct_blocks(body, final_order, config, sched)
    program = redistribute_globals(program, config, sched, keep_reads_first=keep_reads_first)
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
