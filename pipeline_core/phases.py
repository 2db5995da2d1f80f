"""Phase derivation: prologue / kernel / epilogue entry lists.

Single-buffer kernels use fixed recipes over the body
(docs/guide/reference-behaviours.md, "Single-buffer recipes").
Double-buffer kernels derive the prologue and epilogue from the block program
(docs/guide/reference-behaviours.md, "Double-buffer prologue",
"Epilogue: strip, drain, fuse"). The warp-stagger index says how many prologue
entries warp group 0 runs before group 1 joins
(docs/guide/reference-behaviours.md, "Warp stagger").
"""
from __future__ import annotations

import enum
from typing import Sequence

import attrs

from pipeline_core.config import PipelineConfig, ScheduleConfig
from pipeline_core.errors import ProgramError
from pipeline_core.ops import NONE_OP, Entry, KOffset, Op, OpRole, Phase, tag_name
from pipeline_core.program import _ops
from pipeline_core.program.block import BlockSpec
from pipeline_core.program.program import Program


# --- single-buffer recipes ----------------------------------------------------------

class PhaseAction(enum.IntEnum):
    EMIT = 0  #: copy matching body ops
    BARRIER = 1  #: emit barrier()
    FENCE = 2  #: emit schedule_barrier()


@attrs.frozen
class PhaseStep:
    """One recipe step: an action and, for EMIT, which body ops it copies."""

    action: PhaseAction = attrs.field(converter=PhaseAction)
    match_role: OpRole = attrs.field(default=OpRole.NONE, converter=OpRole)
    match_subtile: int = -1  #: -1 = any subtile
    exclude_lc: bool = False  #: skip loop-carried ops
    match_lc_only: bool = False  #: only loop-carried ops
    match_all: bool = False  #: every match (else only the first)

    @classmethod
    def emit(cls, role: OpRole, *, all: bool = False, exclude_lc: bool = False,
             lc_only: bool = False, subtile: int = -1) -> "PhaseStep":
        return cls(PhaseAction.EMIT, role, subtile, exclude_lc, lc_only, all)

    @classmethod
    def barrier(cls) -> "PhaseStep":
        return cls(PhaseAction.BARRIER)

    @classmethod
    def fence(cls) -> "PhaseStep":
        return cls(PhaseAction.FENCE)


#: Load, store, barrier, load again, the loop-carried frag, fence (6 entries).
PROLOGUE_RECIPE: tuple[PhaseStep, ...] = (
    PhaseStep.emit(OpRole.GLOBAL_LOAD),
    PhaseStep.emit(OpRole.SHARED_STORE),
    PhaseStep.barrier(),
    PhaseStep.emit(OpRole.GLOBAL_LOAD),
    PhaseStep.emit(OpRole.FRAGMENT_LOAD, lc_only=True),
    PhaseStep.fence(),
)

#: Two drain passes: (fence, non-lc frags, barrier, store, computes, fence) then
#: (barrier, all frags, computes, fence): 4T + 5 entries for T k-tiles.
EPILOGUE_RECIPE: tuple[PhaseStep, ...] = (
    PhaseStep.fence(),
    PhaseStep.emit(OpRole.FRAGMENT_LOAD, all=True, exclude_lc=True),
    PhaseStep.barrier(),
    PhaseStep.emit(OpRole.SHARED_STORE),
    PhaseStep.emit(OpRole.COMPUTE, all=True),
    PhaseStep.fence(),
    PhaseStep.barrier(),
    PhaseStep.emit(OpRole.FRAGMENT_LOAD, all=True),
    PhaseStep.emit(OpRole.COMPUTE, all=True),
    PhaseStep.fence(),
)


def _step_matches(step: PhaseStep, op: Op, selector: int) -> bool:
    if op.role != step.match_role:
        return False
    if step.match_subtile >= 0 and op.subtile != step.match_subtile:
        return False
    lc = op.subtile == selector
    if step.exclude_lc and lc:
        return False
    if step.match_lc_only and not lc:
        return False
    return True


def apply_phase_recipe(body: Sequence[Op], steps: Sequence[PhaseStep], config: PipelineConfig,
                       phase: Phase) -> tuple[Entry, ...]:
    """Run a recipe over the body; matched ops are copied verbatim, is_prefetch False.

    An EMIT step with no match contributes nothing. "Loop-carried" is
    subtile == loop_carried.selector (the role is not consulted).
    """
    phase = Phase(phase)
    selector = config.loop_carried.selector
    ops: list[Op] = []
    for step in steps:
        if step.action == PhaseAction.BARRIER:
            ops.append(_ops.BARRIER)
        elif step.action == PhaseAction.FENCE:
            ops.append(_ops.FENCE)
        else:
            for op in body:
                if _step_matches(step, op, selector):
                    ops.append(op)
                    if not step.match_all:
                        break
    return _entries(ops, phase)


def default_prologue(body: Sequence[Op], config: PipelineConfig) -> tuple[Entry, ...]:
    return apply_phase_recipe(body, PROLOGUE_RECIPE, config, Phase.PROLOGUE)


def default_kernel(body: Sequence[Op], config: PipelineConfig | None = None) -> tuple[Entry, ...]:
    """The body 1:1 as KERNEL entries (``config`` unused; accepted for symmetry)."""
    return _entries(body, Phase.KERNEL)


def default_epilogue(body: Sequence[Op], config: PipelineConfig) -> tuple[Entry, ...]:
    return apply_phase_recipe(body, EPILOGUE_RECIPE, config, Phase.EPILOGUE)


def _entries(ops: Sequence[Op], phase: Phase) -> tuple[Entry, ...]:
    return tuple(Entry(op, i, phase, False) for i, op in enumerate(ops))


# --- double-buffer prologue ----------------------------------------------------------

def _prologue_load(op: Op, k_offset: KOffset, config: PipelineConfig) -> Op:
    """A fresh load op: only tag/stage/subtile/resource/latency/role kept (channel -1)."""
    return Op(tag=op.tag, stage=op.stage, subtile=op.subtile, k_offset=k_offset,
              vm_cost=config.vm_per_channel(op.channel), resource=op.resource,
              latency=op.latency, role=op.role)


def derive_prologue(program: Program, config: PipelineConfig, sched: ScheduleConfig,
                    bootstrap: Sequence[Op] = ()) -> tuple[Entry, ...]:
    """Fill both LDS stages before the loop: stage-0 prefetches, drain, stage-1 prefetches.

    With partial_prologue_drain the full drains are skipped; bootstrap frags
    (if any) each follow a partial wait_vm that retires one more prologue load
    (per-load costs: docs/guide/reference-behaviours.md, "Bootstrap waits") and a barrier.
    """
    ops: list[Op] = []
    costs: list[int] = []
    for stage, k_offset in ((0, KOffset.K0), (1, KOffset.K1)):
        if stage == 1 and not sched.partial_prologue_drain:
            ops += [_ops.GLOBAL_DRAIN, _ops.BARRIER]
        for blk in program.blocks:
            for op, prefetch in blk.global_loads():
                if prefetch and op.stage == stage:
                    load = _prologue_load(op, k_offset, config)
                    ops.append(load)
                    costs.append(load.vm_cost)
    if not sched.partial_prologue_drain:
        ops.append(_ops.GLOBAL_DRAIN)
    elif bootstrap:
        if len(bootstrap) > len(costs):
            raise ProgramError(
                f"{len(bootstrap)} bootstrap frags but only {len(costs)} prologue prefetch loads: "
                f"each bootstrap frag waits for one more prologue load to land. Drop the extra "
                f"frags ({', '.join(tag_name(o.tag) for o in bootstrap[len(costs):])}) or give the "
                f"body more prefetch loads.")
        remaining = sum(costs)
        for frag, cost in zip(bootstrap, costs):
            remaining -= cost
            ops += [_ops.global_wait(remaining), _ops.BARRIER, frag]
    return _entries(ops, Phase.PROLOGUE)


# --- double-buffer epilogue ----------------------------------------------------------

def _epilogue_block(blk: BlockSpec, drain: bool) -> BlockSpec:
    """Strip prefetches, force an lgkm drain at entry, keep only the five barrier flags."""
    keep0 = blk.global_load.is_present and not blk.global_load_prefetch
    keep1 = blk.global_load_1.is_present and not blk.global_load_1_prefetch
    return BlockSpec(
        mma=blk.mma, pre_op_0=blk.pre_op_0, pre_op_1=blk.pre_op_1,
        global_load=blk.global_load if keep0 else NONE_OP,
        global_load_1=blk.global_load_1 if keep1 else NONE_OP,
        entry_wait_lgkm=_ops.FRAGMENT_DRAIN,
        pre_sync=_ops.GLOBAL_DRAIN if drain else NONE_OP,
        pre_mma_barrier=blk.pre_mma_barrier, pre_mma_set_prio=blk.pre_mma_set_prio,
        post_mma_barrier=blk.post_mma_barrier, post_mma_set_prio=blk.post_mma_set_prio,
        post_barrier_lgkm=blk.post_barrier_lgkm)


def _keeps_a_global(blk: BlockSpec) -> bool:
    return ((blk.global_load.is_present and not blk.global_load_prefetch)
            or (blk.global_load_1.is_present and not blk.global_load_1_prefetch))


def epilogue_blocks(program: Program, config: PipelineConfig) -> tuple[BlockSpec, ...]:
    """The epilogue's blocks before expansion
    (docs/guide/reference-behaviours.md, "Epilogue: strip, drain, fuse")."""
    bph = config.blocks_per_partition
    out: list[BlockSpec] = []
    for h in range(config.num_partitions):
        part = program.blocks[h * bph:(h + 1) * bph]
        drain_start = next((i for i, b in enumerate(part) if b.has_prefetch), bph)
        i = 0
        while i < len(part):
            new = _epilogue_block(part[i], i >= drain_start)
            if i + 1 < len(part):
                nxt = part[i + 1]
                if not nxt.pre_op_0.is_present and not _keeps_a_global(nxt):
                    new = new.evolve(fused_mma=nxt.mma)
                    i += 1
            out.append(new)
            i += 1
    if out:
        out[-1] = out[-1].evolve(pre_sync=NONE_OP)
    return tuple(out)


def derive_epilogue(program: Program, config: PipelineConfig) -> tuple[Entry, ...]:
    """Drain the last iteration: template-expanded epilogue blocks plus one barrier.

    Explicit kernel lists are ignored: the epilogue always uses the template.
    """
    return Program(epilogue_blocks(program, config), (), trailing_barrier=True).expand(
        Phase.EPILOGUE)


# --- warp stagger ----------------------------------------------------------------------

def warp_stagger_index(config: PipelineConfig, body: Sequence[Op], prologue_len: int) -> int:
    """Prologue entries group 0 runs before group 1 joins.

    Disabled: past the end (no split). From the body: the number of stage-0
    prefetch global loads of the body (not of the program). Else the fixed amount.
    """
    rule = config.warp_stagger
    if not rule.enabled:
        return prologue_len + 1
    if rule.compute_from_body:
        return sum(1 for op in body
                   if op.role == OpRole.GLOBAL_LOAD and op.is_prefetch and op.stage == 0)
    return rule.fixed_amount
