"""Wait derivation and patching: lgkm/vm counts computed from the final blocks.

derive_waits, derive_drain_mask, apply_auto_drain and apply_auto_waits
(docs/guide/reference-behaviours.md, "Wait derivation", "Drain mask",
"The auto-wait patch"). Every function returns a new program.
"""
from __future__ import annotations

from pipeline_core.config import NO_WAIT, PipelineConfig, ScheduleConfig
from pipeline_core.ops import NONE_OP
from pipeline_core.program import _ops
from pipeline_core.program.program import Program


def lgkm_cost(config: PipelineConfig, channel: int, lgkm_a: int = 0, lgkm_b: int = 0) -> int:
    """lgkmcnt of one load: the pipeline config's value, else the fallback argument.

    Channel 0 is A; any other channel (-1 included) is B.
    """
    value = config.lgkm_per_channel(channel)
    if value == 0:
        value = lgkm_a if channel == 0 else lgkm_b
    return value


def block0_lgkm(program: Program, config: PipelineConfig, partition: int,
                lgkm_a: int = 0, lgkm_b: int = 0) -> int:
    """lgkm issued by the global loads of the partition's first block."""
    blk = program.blocks[partition * config.blocks_per_partition]
    return sum(lgkm_cost(config, op.channel, lgkm_a, lgkm_b) for op, _ in blk.global_loads())


def derive_waits(program: Program, config: PipelineConfig, lgkm_a: int = 0,
                 lgkm_b: int = 0) -> tuple[int, int]:
    """(wait_lgkm_first, wait_vm_last) derived from the blocks.

    lgkm: the largest block-0 global lgkm over partitions, so block 0's wait
    leaves only its own global loads' lgkm outstanding. vm: per partition, the
    vm of loads into its own stage (prefetches that may stay in flight); the
    completion loads (stage != partition) must land. Minimum over partitions,
    255 with no partitions.
    """
    bph = config.blocks_per_partition
    best_lgkm, best_vm = 0, NO_WAIT
    for h in range(config.num_partitions):
        best_lgkm = max(best_lgkm, block0_lgkm(program, config, h, lgkm_a, lgkm_b))
        total = completion = 0
        for blk in program.blocks[h * bph:(h + 1) * bph]:
            for op, _ in blk.global_loads():
                cost = config.vm_per_channel(op.channel)
                total += cost
                if op.stage != h:
                    completion += cost
        best_vm = min(best_vm, total - completion)
    return best_lgkm, best_vm


def derive_drain_mask(program: Program, config: PipelineConfig) -> int:
    """Bit i: block i reads LDS on one channel while its slot-0 global writes another.

    Frags on channel -1 never count (docs/guide/reference-behaviours.md, "Drain mask").
    """
    mask = 0
    for i, blk in enumerate(program.blocks):
        gl = blk.global_load
        if not (blk.has_frag and gl.is_present):
            continue
        if any(f.channel >= 0 and f.channel != gl.channel for f in blk.frags()):
            mask |= 1 << i
    return mask


def apply_auto_drain(program: Program, config: PipelineConfig) -> Program:
    """Replace every block's drain flag by derive_drain_mask (and frag + global present)."""
    mask = derive_drain_mask(program, config)
    return program.with_blocks(
        blk.evolve(drain_lgkm_before_loads=bool((mask >> i) & 1) and blk.has_frag
                   and blk.has_global)
        for i, blk in enumerate(program.blocks))


def apply_auto_waits(program: Program, config: PipelineConfig, sched: ScheduleConfig,
                     wait_lgkm_first: int, wait_vm_last: int) -> Program:
    """Patch the derived waits into each partition's first and last block.

    Only the named slots change: block 0 gets the lgkm wait (0 under
    barrier_before_pre_ops; in entry_wait_lgkm with pre_sync cleared when
    minimal_barriers and it has an entry_wait, else in pre_sync), skipped when
    the value is >= 255; the last block's pre_sync becomes wait_vm, always.
    """
    bph = config.blocks_per_partition
    blocks = list(program.blocks)
    for h in range(config.num_partitions):
        first, last = h * bph, h * bph + bph - 1
        if wait_lgkm_first < NO_WAIT:
            value = 0 if sched.barrier_before_pre_ops else wait_lgkm_first
            blk = blocks[first]
            if sched.minimal_barriers and blk.entry_wait.is_present:
                blocks[first] = blk.evolve(entry_wait_lgkm=_ops.fragment_wait(value), pre_sync=NONE_OP)
            else:
                blocks[first] = blk.evolve(pre_sync=_ops.fragment_wait(value))
        blocks[last] = blocks[last].evolve(pre_sync=_ops.global_wait(wait_vm_last))
    return program.with_blocks(blocks)
