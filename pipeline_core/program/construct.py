"""Block construction: the ordered body becomes ``total_blocks`` MMA-centred blocks.

Implements the reference's _construct_mma_blocks
(docs/guide/reference-behaviours.md, "Double-buffer block construction"), but
where the reference silently drops ops (a third frag or global, SYNC/FENCE/
SHARED_STORE ops) or emits a NONE MMA, this raises ProgramError naming the
block and the body indices involved.
"""
from __future__ import annotations

from typing import Sequence

import attrs

from pipeline_core.config import NO_WAIT, PipelineConfig, ScheduleConfig
from pipeline_core.errors import ProgramError
from pipeline_core.ops import NONE_OP, Op, OpRole, tag_name
from pipeline_core.program import _ops
from pipeline_core.program.block import BlockSpec
from pipeline_core.program.program import Program

#: Frag and global slots per block.
MAX_SLOTS = 2


def describe_op(index: int, op: Op) -> str:
    """'#5 MMA_LOAD_A(stage 0, sub 1, ch 0)': how errors name a body op."""
    return (f"#{index} {tag_name(op.tag)}(role {op.role.name}, stage {op.stage}, "
            f"sub {op.subtile}, ch {op.channel})")


def main_wait_vm(body: Sequence[Op], order: Sequence[int], config: PipelineConfig) -> int:
    """vm count that leaves one partition's worth of prefetches in flight.

    Sum of vm costs of the prefetch global loads, minus that sum // partitions.
    (The order does not change the sum; it is accepted for the reference's signature.)
    """
    total = sum(config.vm_per_channel(body[i].channel) for i in order
                if body[i].role == OpRole.GLOBAL_LOAD and body[i].is_prefetch)
    parts = config.num_partitions
    return total - total // parts if parts else total


@attrs.frozen
class _RawBlock:
    """Body indices collected for one block before waits and flags are decided."""

    frags: tuple[int, ...]
    globals_: tuple[int, ...]
    mma: int


def _split(body: Sequence[Op], order: Sequence[int], total_blocks: int) -> list[_RawBlock]:
    """Walk the order, closing a block at each COMPUTE op; reject what cannot be placed."""
    raw: list[_RawBlock] = []
    cursor = 0
    n = len(order)
    for b in range(total_blocks):
        frags: list[int] = []
        globs: list[int] = []
        while True:
            if cursor >= n:
                pending = frags + globs
                what = (f"; its ops {', '.join(describe_op(i, body[i]) for i in pending)} have no MMA"
                        if pending else "")
                raise ProgramError(
                    f"block {b} has no MMA: the ordered body ran out after {len(raw)} of "
                    f"{total_blocks} blocks{what}. A double-buffer body needs exactly one COMPUTE "
                    f"op per block (m_mmas * n_mmas * num_partitions = {total_blocks}).",
                    block=b, ops=tuple(pending))
            idx = order[cursor]
            cursor += 1
            op = body[idx]
            if op.role == OpRole.COMPUTE:
                raw.append(_RawBlock(tuple(frags), tuple(globs), idx))
                break
            if op.role == OpRole.FRAGMENT_LOAD:
                frags.append(idx)
                bucket, what = frags, "fragment loads"
            elif op.role == OpRole.GLOBAL_LOAD:
                globs.append(idx)
                bucket, what = globs, "global loads"
            else:
                raise ProgramError(
                    f"block {b}: {describe_op(idx, op)} has role {op.role.name}, which a "
                    f"double-buffer block cannot hold (only FRAGMENT_LOAD, GLOBAL_LOAD and "
                    f"COMPUTE). Remove it from the body; the program adds its own barriers, "
                    f"waits and fences.", block=b, ops=(idx,))
            if len(bucket) > MAX_SLOTS:
                raise ProgramError(
                    f"block {b} would hold {len(bucket)} {what} "
                    f"({', '.join(describe_op(i, body[i]) for i in bucket)}) but a block has "
                    f"{MAX_SLOTS} slots. Reorder the body, or order it with a strategy that "
                    f"fits the blocks (-c scheduling=EXACT_BLOCKS), so that at most {MAX_SLOTS} "
                    f"{what} precede each MMA.",
                    block=b, ops=tuple(bucket))
    if cursor < n:
        left = list(order[cursor:])
        raise ProgramError(
            f"{len(left)} ops are left after the last block ({total_blocks - 1}): "
            f"{', '.join(describe_op(i, body[i]) for i in left)}. The body has more ops after its "
            f"{total_blocks}th COMPUTE than the program can place; every block must end with "
            f"its MMA (total_blocks = m_mmas * n_mmas * num_partitions = {total_blocks}).",
            block=total_blocks - 1, ops=tuple(left))
    return raw


def _bit(mask: int, i: int) -> bool:
    return bool((mask >> i) & 1)


def construct_blocks(body: Sequence[Op], order: Sequence[int], config: PipelineConfig,
                     sched: ScheduleConfig) -> Program:
    """Group the ordered body into blocks and decide their waits and flags (no redistribution)."""
    bph = config.blocks_per_partition
    raw = _split(body, order, config.total_blocks)
    main_vm = main_wait_vm(body, order, config)

    def is_cross(idx: int, part: int) -> bool:
        return body[idx].stage != part

    # top_drain: a cross-stage frag anywhere in the partition (its block 0 included).
    part_has_cross = [any(is_cross(f, p) for rb in raw[p * bph:(p + 1) * bph] for f in rb.frags)
                      for p in range(config.num_partitions)]

    blocks: list[BlockSpec] = []
    seen_cross = False
    for b, rb in enumerate(raw):
        pos, part = b % bph, b // bph
        if pos == 0:
            seen_cross = False
        frag_ops = [body[i] for i in rb.frags]
        glob_ops = [body[i] for i in rb.globals_]
        has_cross = any(is_cross(i, part) for i in rb.frags)
        first_cross = has_cross and not seen_cross
        seen_cross = seen_cross or has_cross
        top_drain = pos == 0 and part_has_cross[part]

        entry_wait = _ops.global_wait(main_vm) if (first_cross or top_drain) else NONE_OP
        entry_wait_lgkm = NONE_OP
        pre_sync = NONE_OP
        post_barrier_lgkm = True
        if pos == 0 and sched.wait_lgkm_first < NO_WAIT:
            if entry_wait.is_present and sched.minimal_barriers:
                entry_wait_lgkm = _ops.FRAGMENT_DRAIN
            else:
                pre_sync = _ops.fragment_wait(sched.wait_lgkm_first)
        elif first_cross:
            if entry_wait.is_present and sched.minimal_barriers:
                entry_wait_lgkm = _ops.FRAGMENT_DRAIN
            else:
                pre_sync = _ops.FRAGMENT_DRAIN
        elif pos == bph - 1:
            pre_sync = _ops.global_wait(sched.wait_vm_last)
            post_barrier_lgkm = sched.lgkm_after_last
        elif sched.inter_block_lgkm_drain:
            entry_wait_lgkm = _ops.FRAGMENT_DRAIN

        pre_mma_barrier = pre_mma_set_prio = post_mma_barrier = post_mma_set_prio = True
        if sched.minimal_barriers:
            pre_mma_barrier = False
            pre_mma_set_prio = False if sched.omit_mma_set_prio else (pos == 0 or first_cross)
            post_mma_barrier = post_mma_set_prio = post_barrier_lgkm = False

        gl0 = glob_ops[0] if glob_ops else NONE_OP
        gl1 = glob_ops[1] if len(glob_ops) > 1 else NONE_OP
        blocks.append(BlockSpec(
            mma=body[rb.mma],
            pre_op_0=frag_ops[0] if frag_ops else NONE_OP,
            pre_op_1=frag_ops[1] if len(frag_ops) > 1 else NONE_OP,
            global_load=gl0,
            global_load_1=gl1,
            entry_wait=entry_wait,
            entry_wait_lgkm=entry_wait_lgkm,
            pre_sync=pre_sync,
            pre_mma_barrier=pre_mma_barrier,
            pre_mma_set_prio=pre_mma_set_prio,
            post_mma_barrier=post_mma_barrier,
            post_mma_set_prio=post_mma_set_prio,
            post_barrier_lgkm=post_barrier_lgkm,
            trailing_sched_barrier=_bit(sched.sched_barrier_mask, b),
            global_load_prefetch=gl0.is_prefetch,
            global_load_1_prefetch=gl1.is_prefetch,
            drain_lgkm_before_loads=_bit(sched.drain_lgkm_mask, b) and bool(frag_ops)
            and bool(glob_ops),
            global_before_frag=sched.global_before_frag,
            barrier_before_pre_ops=sched.barrier_before_pre_ops,
            wrap_waits_with_sched_barrier=sched.wrap_waits_with_sched_barrier,
        ))
    return Program(tuple(blocks))
