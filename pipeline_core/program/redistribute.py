"""Global-load redistribution: cap every block at ``max_globals`` (Appendix B 8.5).

Schedulers may bunch global loads (the CSP seed is never checked against the
cap), so this pass moves surplus loads, first-in first-out, into blocks that
have room, scanning the whole program.
"""
from __future__ import annotations

from collections import deque

from pipeline_core.config import PipelineConfig, ScheduleConfig
from pipeline_core.ops import NONE_OP, Op
from pipeline_core.program.block import BlockSpec
from pipeline_core.program.program import Program


def _drain_flag(block: BlockSpec, index: int, mask: int) -> bool:
    return bool((mask >> index) & 1) and block.has_frag and block.has_global


def redistribute_globals(program: Program, config: PipelineConfig,
                         sched: ScheduleConfig) -> Program:
    """Move surplus global loads so that no block holds more than max_globals.

    Pass 1 empties over-full blocks into one FIFO pool (slot 1 before slot 0,
    clearing the source prefetch flag). Pass 2 refills from block 0 onwards
    (slot 0 first, prefetch flag from the load's k_offset) and stops at the
    first block reached with an empty pool; every block it visits gets its
    drain flag recomputed. No-op when max_globals is 0.
    """
    cap = config.block_sizing.max_globals
    if cap <= 0:
        return program
    blocks = list(program.blocks)
    pool: deque[Op] = deque()
    for i, blk in enumerate(blocks):
        count = blk.num_globals
        while count > cap:
            if blk.global_load_1.is_present:
                pool.append(blk.global_load_1)
                blk = blk.evolve(global_load_1=NONE_OP, global_load_1_prefetch=False)
            else:
                pool.append(blk.global_load)
                blk = blk.evolve(global_load=NONE_OP, global_load_prefetch=False)
            count -= 1
        blocks[i] = blk
    if not pool:
        return program.with_blocks(blocks)
    mask = sched.drain_lgkm_mask
    for i, blk in enumerate(blocks):
        if not pool:
            break
        count = blk.num_globals
        while count < cap and pool:
            load = pool.popleft()
            if not blk.global_load.is_present:
                blk = blk.evolve(global_load=load, global_load_prefetch=load.is_prefetch)
            else:
                blk = blk.evolve(global_load_1=load, global_load_1_prefetch=load.is_prefetch)
            count += 1
        blocks[i] = blk.evolve(drain_lgkm_before_loads=_drain_flag(blk, i, mask))
    return program.with_blocks(blocks)
