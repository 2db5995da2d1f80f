"""Target ``h100-pingpong``: the AMD 8-warp ping-pong schedule's double buffer on mma.sync.

The target gives the double-buffer PipelineConfig the reference's ping-pong program is built for:
2 shared-memory stages, 2 partitions (K tiles) of a 2x2 MMA quadrant grid, at most one global load
per MMA block, and the warp stagger computed from the body (two warp groups of 4 warps, group 1
one barrier behind).  A second target record rather than a parameter of ``h100``: a schedule
document names its target only, and the checker rebuilds the sync model from that name, so each
sync model needs its own name.  On the H100 (the plugin's README.md, "Ping-pong target"):

* every LOAD op is its cp.async copies followed by one ``cp.async.commit_group``, so the channel
  counts one group per LOAD op (``vm_per_load`` 1) and ``WAIT_VM n`` is ``cp.async.wait_group n``;
* ldmatrix and mma.sync are synchronous: the block program's fragment waits vanish;
* the barrier is the NON-aligned ``barrier.sync 0``: staggered warp groups meet at different
  barrier instructions, which ``.aligned`` (``bar.sync``, ``__syncthreads``) forbids.
  ``-T barrier=bar.sync`` emits the aligned form, and the proof refuses the staggered schedule
  (the checker's aligned-barrier rule, pipeline_core/check/README.md);
* AMD's ``s_setprio`` / ``sched_barrier`` hints stay in the entries and emit nothing.

The body's tags are the reference's ping-pong tags (its JSON contract), costed with the H100
latencies of :mod:`pipeline_core_nvidia_h100.costs`.
"""
from __future__ import annotations

import enum

import attrs

from pipeline_core.plugin_api import (PING_PONG, BlockBinding, Channel, ConfigError, CostModel,
                                      Effect, FrameworkTag, OpCost, OpRole, Param, PipelineConfig,
                                      ResourceKind, SyncModel, TargetProfile, TargetRecord)

from pipeline_core_nvidia_h100.contracts import H100_ARCH, H100_OFFERS
from pipeline_core_nvidia_h100.costs import CP_ASYNC_L2_LATENCY, LDMATRIX_X4_LATENCY, MMA_LATENCY
from pipeline_core_nvidia_h100.cuda import MAX_WAIT_GROUP
from pipeline_core_nvidia_h100.machine import H100_SXM
from pipeline_core_nvidia_h100.sync import (BARRIERS, CP_ASYNC, HINTS, ISA_FORMS, WAIT_CP_ASYNC,
                                            H100_SYNC)

TARGET_NAME = "h100-pingpong"
#: the barrier kinds ``-T barrier`` chooses between (the sync model's names)
NONALIGNED, ALIGNED = "barrier.sync", "bar.sync"
BARRIER_FORMS = (NONALIGNED, ALIGNED)
#: warps that run one warp group's stream (8 warps, 2 groups)
WARPS_PER_GROUP = 4


class PingPongTag(enum.IntEnum):
    """The ping-pong body's kernel tags (the reference's PingPongOps numbers)."""

    LOAD_A = 0      #: cp.async of one A subtile (+ its commit)
    LOAD_B = 1      #: cp.async of one B subtile (+ its commit)
    COMPUTE = 2     #: declared by the reference, never emitted
    MMA_LOAD_A = 3  #: ldmatrix.x4 of one A quadrant fragment (the whole BK)
    MMA_LOAD_B = 4  #: ldmatrix.x4 of one B quadrant fragment
    MMA = 5         #: one quadrant's unrolled mma.sync block


def pingpong_cost_model() -> CostModel:
    """The ping-pong tags with H100 latencies (global loads assumed to hit L2)."""
    g, smem, mma = ResourceKind.GLOBAL_MEM, ResourceKind.LDS, ResourceKind.MMA_UNIT
    t = PingPongTag
    return CostModel({
        t.LOAD_A: OpCost(g, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name="LOAD_A"),
        t.LOAD_B: OpCost(g, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name="LOAD_B"),
        t.COMPUTE: OpCost(mma, MMA_LATENCY, OpRole.COMPUTE, vgpr_def=4, name="COMPUTE"),
        t.MMA_LOAD_A: OpCost(smem, LDMATRIX_X4_LATENCY, OpRole.FRAGMENT_LOAD, vgpr_def=4,
                             name="MMA_LOAD_A"),
        t.MMA_LOAD_B: OpCost(smem, LDMATRIX_X4_LATENCY, OpRole.FRAGMENT_LOAD, vgpr_def=4,
                             name="MMA_LOAD_B"),
        t.MMA: OpCost(mma, MMA_LATENCY, OpRole.COMPUTE, vgpr_def=4, name="MMA"),
    })


def pingpong_pipeline() -> PipelineConfig:
    """The ping-pong family's double buffer with the H100's MMA latency, one cp.async group
    per LOAD op (``PipelineConfig.ping_pong_double_buffer``'s defaults)."""
    return PipelineConfig.ping_pong_double_buffer(mma_latency=MMA_LATENCY)


#: One group per LOAD op: the emitter closes each LOAD op's copies with its own commit, so the
#: entries carry no COMMIT and each LOAD op is one tick of the in-order group counter.
CP_ASYNC_PER_LOAD = Channel(
    name=CP_ASYNC, label="cp.async groups", wait_tag=WAIT_CP_ASYNC, wait_name="WAIT_CP_ASYNC",
    unit="group (one per LOAD op)", in_order=True, owner="thread", results_visible_to="issuer",
    max_wait=MAX_WAIT_GROUP)

#: The block program's global waits count cp.async groups; its fragment waits vanish (ldmatrix
#: is synchronous); its priority hint and scheduling fence stay as entries that emit nothing.
BLOCK_BINDING = BlockBinding(global_channel=CP_ASYNC, fragment_channel=None,
                             priority_tag=int(FrameworkTag.SET_PRIO),
                             fence_tag=int(FrameworkTag.SCHEDULE_BARRIER))


def pingpong_sync(barrier: str = NONALIGNED) -> SyncModel:
    """The h100 sync model for the block program, with ``barrier`` as the CTA barrier."""
    sync = SyncModel(
        name=f"{H100_SYNC.name}-pingpong",
        channels=(CP_ASYNC_PER_LOAD,),
        effects=(Effect(role=OpRole.GLOBAL_LOAD, counter=CP_ASYNC, ticks=1),
                 *(e for e in H100_SYNC.effects if e.role != OpRole.GLOBAL_LOAD)),
        barriers=BARRIERS,
        hint_tags=HINTS, isa_forms=ISA_FORMS, priority_tag=None,
        register_interlock=H100_SYNC.register_interlock,
        shared_in_order=H100_SYNC.shared_in_order,
        global_loads_write_shared=True, combined_wait="", block_binding=BLOCK_BINDING,
        notes=("each LOAD op is its cp.async copies and one commit: one group per LOAD op",
               *H100_SYNC.notes))
    return with_barrier(sync, barrier)


def with_barrier(sync: SyncModel, barrier: str) -> SyncModel:
    """``sync`` with ``barrier`` (a declared kind's name) as its CTA barrier (the first kind)."""
    kinds = {b.name: b for b in sync.barriers}
    if barrier not in kinds:
        raise ConfigError(f"target {TARGET_NAME}", "barrier", barrier, f"one of {', '.join(kinds)}")
    chosen = kinds[barrier]
    return attrs.evolve(sync, barriers=(chosen, *(b for b in sync.barriers if b is not chosen)))


def pingpong_target(barrier: str = NONALIGNED) -> TargetProfile:
    """The ping-pong profile: the reference's double-buffer shape on H100 sync and costs."""
    return TargetProfile(pingpong_cost_model(), pingpong_pipeline(), sync=pingpong_sync(barrier),
                         clock_ghz=H100_SXM.clock_ghz, warps_per_group=WARPS_PER_GROUP,
                         arch=H100_ARCH, smem_per_cta=H100_SXM.smem_per_cta_optin)


TARGETS: tuple[TargetRecord, ...] = (
    TargetRecord(
        name=TARGET_NAME,
        description="NVIDIA H100 (sm_90a), mma.sync family, for the ping-pong schedule: double "
                    "buffer, 2 staggered warp groups of 4 warps, one cp.async group per LOAD op, "
                    "non-aligned barrier.sync",
        factory=pingpong_target, family=PING_PONG, offers=H100_OFFERS,
        params=(Param("barrier", str, NONALIGNED, "CTA barrier kind: barrier.sync (non-aligned, "
                      "what staggered warp groups need) or bar.sync (aligned: refused under the "
                      "stagger)", choices=BARRIER_FORMS),),
    ),
)
