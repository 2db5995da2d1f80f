"""Global-load redistribution: cap every block at ``max_globals``
(docs/guide/reference-behaviours.md, "Global-load redistribution").

Schedulers may bunch global loads (the CSP seed is never checked against the
cap), so this pass moves surplus loads, first-in first-out, into blocks that
have room, scanning the whole program.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable

from pipeline_core.config import PipelineConfig, ScheduleConfig
from pipeline_core.errors import ProgramError
from pipeline_core.ops import NONE_OP, Op, tag_name
from pipeline_core.program.block import BlockSpec
from pipeline_core.program.program import Program


def _drain_flag(block: BlockSpec, index: int, mask: int) -> bool:
    return bool((mask >> index) & 1) and block.has_frag and block.has_global


def _region(op: Op) -> tuple[int, int, int]:
    return (op.channel, op.stage, op.subtile)


def _allowed_blocks(blocks: list[BlockSpec]) -> Callable[[Op, int], bool]:
    """Whether a load may go into block ``i`` without passing a fragment read of its region.

    A prefetch load (the next tiles) overwrites what this iteration reads: it goes at or
    after the block of the region's last read (the block emits its reads first).  A
    completion load (the tile this iteration reads) goes before the block of the first read.
    """
    first: dict[tuple[int, int, int], int] = {}
    last: dict[tuple[int, int, int], int] = {}
    for i, blk in enumerate(blocks):
        for op in (blk.pre_op_0, blk.pre_op_1):
            if op.is_present:
                first.setdefault(_region(op), i)
                last[_region(op)] = i

    def allowed(op: Op, i: int) -> bool:
        if op.is_prefetch:
            return last.get(_region(op), -1) <= i
        return i < first.get(_region(op), len(blocks))
    return allowed


def redistribute_globals(program: Program, config: PipelineConfig,
                         sched: ScheduleConfig, *, keep_reads_first: bool = False) -> Program:
    """Move surplus global loads so that no block holds more than max_globals.

    Pass 1 empties over-full blocks into one FIFO pool (slot 1 before slot 0,
    clearing the source prefetch flag). Pass 2 refills from block 0 onwards
    (slot 0 first, prefetch flag from the load's k_offset) and stops at the
    first block reached with an empty pool; every block it visits gets its
    drain flag recomputed. No-op when max_globals is 0.

    ``keep_reads_first`` (schedules with derived waits, pipeline_core/sync/settle.py): a
    moved load keeps its place relative to the fragment reads of its region: a prefetch
    never before the last read of the tile it overwrites, which the reference's FIFO
    refill ignores (matmul-grid 2 x 3 then reads the next tile: WRONG_K_STEP), a
    completion load never after the first read of the tile it brings; the pool is
    searched first-in first-out for a load that may go into the block at hand.
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
    allowed_in = _allowed_blocks(blocks) if keep_reads_first else (lambda op, i: True)
    for i, blk in enumerate(blocks):
        if not pool:
            break
        count = blk.num_globals
        while count < cap and pool:
            allowed = [j for j, op in enumerate(pool) if allowed_in(op, i)]
            if not allowed:
                break
            load = pool[allowed[0]]
            del pool[allowed[0]]
            if not blk.global_load.is_present:
                blk = blk.evolve(global_load=load, global_load_prefetch=load.is_prefetch)
            else:
                blk = blk.evolve(global_load_1=load, global_load_1_prefetch=load.is_prefetch)
            count += 1
        blocks[i] = blk.evolve(drain_lgkm_before_loads=_drain_flag(blk, i, mask))
    if pool:  # only with keep_reads_first: no block after the reads had room
        raise ProgramError(
            f"{len(pool)} global load(s) ({', '.join(tag_name(op.tag) for op in pool)}) find no "
            f"block with room (max_globals {cap}) after the last fragment read of the shared "
            "memory they overwrite; raise max_globals (-T max_globals=2 where the target has it, "
            "else the schedule's config(): "
            'docs/guide/concepts.md, "Block sizing") or pick '
            "another ordering strategy (-c scheduling=NAME; `pipeline-core strategies` lists "
            "them)")
    return program.with_blocks(blocks)
