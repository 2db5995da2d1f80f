"""The a100 targets: the NVIDIA A100 (sm_80), for schedules other plugins wrote.

The A100 has what a cp.async ring GEMM needs (cp.async commit groups, ldmatrix, mma.sync, the
aligned ``bar.sync`` and the non-aligned ``barrier.sync``) and none of Hopper's TMA, mbarrier
rings or wgmma.  So the targets offer the first and not the second: every installed schedule
whose contract they cover compiles, is proven, is timed with the costs below and is emitted for
sm_80 (``multistage-gemm`` on ``a100``, ``pingpong`` on ``a100-pingpong``), and a schedule that
needs wgmma or TMA is refused in one line naming what the A100 lacks
(docs/guide/retarget.md walks through this file).

This plugin imports only ``pipeline_core.plugin_api``: it writes no schedule and no emitter.
"""
from __future__ import annotations

from pipeline_core.plugin_api import (COPY_RING, PING_PONG, BarrierKind, BlockBinding, Bound,
                                      Capabilities, Channel, CostModel, Effect, FrameworkTag,
                                      OpCost, OpRole, Param, PipelineConfig, ResourceKind,
                                      SyncModel, TargetProfile, TargetRecord, WarpStagger,
                                      hookimpl)

from pipeline_core_target_a100.machine import A100, MMA_M16N8K16_INTERVAL

TARGET, PINGPONG_TARGET = "a100", "a100-pingpong"
ARCH = "sm_80"

# --- what the A100 offers --------------------------------------------------------------------

#: the sync channel's name is the one schedules and emitters of a cp.async ring name
CP_ASYNC = "cp_async"
OFFERS = Capabilities(channels=(CP_ASYNC,), instructions=("ldmatrix", "mma.sync"),
                      copies=("cp.async",))

# --- kernel tags: the families' numbering ----------------------------------------------------

#: the copy-ring family's tags (multistage-gemm emits these)
LOAD_A, LOAD_B, FRAG_A, FRAG_B, MMA = range(5)
#: the ping-pong family's tags (pingpong emits these)
PP_LOAD_A, PP_LOAD_B, PP_COMPUTE, PP_MMA_LOAD_A, PP_MMA_LOAD_B, PP_MMA = range(6)

# --- the cost model --------------------------------------------------------------------------
# Latencies in SM cycles: published A100 microbenchmark figures, not measured by this project
# (benchmarks/h100/ shows how the H100's were measured and calibrated; do the same on an A100).
#: cp.async 16 B, global (an L2 hit) -> shared: issue to wait_group 0
CP_ASYNC_L2_LATENCY = 260
#: ldmatrix.x4 to a dependent use
LDMATRIX_X4_LATENCY = 30
#: mma.sync m16n8k16 bf16 -> f32, chained through its accumulator
MMA_LATENCY = 32
#: one ldmatrix.x4 per SM: 512 bytes at 128 bytes per cycle of shared memory
LDMATRIX_X4_INTERVAL = 4.0


def _global(name: str) -> OpCost:
    return OpCost(ResourceKind.GLOBAL_MEM, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name=name)


def _fragment(name: str) -> OpCost:
    return OpCost(ResourceKind.LDS, LDMATRIX_X4_LATENCY, OpRole.FRAGMENT_LOAD, vgpr_def=4,
                  name=name, interval=LDMATRIX_X4_INTERVAL)


def _mma(name: str) -> OpCost:
    return OpCost(ResourceKind.MMA_UNIT, MMA_LATENCY, OpRole.COMPUTE, vgpr_def=4, name=name,
                  interval=MMA_M16N8K16_INTERVAL)


#: copy-ring tags; ``interval`` is what multistage-gemm costs a whole CTA's instructions by
RING_COSTS = CostModel({LOAD_A: _global("LOAD_A"), LOAD_B: _global("LOAD_B"),
                        FRAG_A: _fragment("FRAG_A"), FRAG_B: _fragment("FRAG_B"),
                        MMA: _mma("MMA")})
PINGPONG_COSTS = CostModel({PP_LOAD_A: _global("LOAD_A"), PP_LOAD_B: _global("LOAD_B"),
                            PP_COMPUTE: _mma("COMPUTE"), PP_MMA_LOAD_A: _fragment("MMA_LOAD_A"),
                            PP_MMA_LOAD_B: _fragment("MMA_LOAD_B"), PP_MMA: _mma("MMA")})

# --- the sync model --------------------------------------------------------------------------
#: this target's sync tags, above the kernel tags (0-127) and the block template's (128-133)
WAIT_CP_ASYNC, COMMIT_CP_ASYNC, BARRIER_SYNC = 160, 161, 162
#: the aligned bar.sync takes the block template's BARRIER tag: the ping-pong program's
#: barriers mean it
BAR_SYNC = int(FrameworkTag.BARRIER)
#: cp.async.wait_group's count: SASS encodes 6 bits (the H100 plugin's nvcc test shows the clamp)
MAX_WAIT_GROUP = 63

BAR_SYNC_KIND = BarrierKind(tag=BAR_SYNC, name="bar.sync", participants="cta", aligned=True,
                            drains=False, publishes="completed")
BARRIER_SYNC_KIND = BarrierKind(tag=BARRIER_SYNC, name="barrier.sync", participants="cta",
                                aligned=False, drains=False, publishes="completed")
SYNCHRONOUS = (Effect(role=OpRole.FRAGMENT_LOAD, counter=None),  # ldmatrix
               Effect(role=OpRole.SHARED_STORE, counter=None),
               Effect(role=OpRole.COMPUTE, counter=None))         # mma.sync
#: the block program's priority hint and scheduling fence: accepted, emit nothing
HINTS = {int(FrameworkTag.SET_PRIO): "SET_PRIO",
         int(FrameworkTag.SCHEDULE_BARRIER): "SCHEDULE_BARRIER"}
ISA_FORMS = {WAIT_CP_ASYNC: "cp.async.wait_group {wait_value}",
             COMMIT_CP_ASYNC: "cp.async.commit_group", BAR_SYNC: "bar.sync 0",
             BARRIER_SYNC: "barrier.sync 0",
             int(FrameworkTag.SET_PRIO): "// set_prio (no PTX)",
             int(FrameworkTag.SCHEDULE_BARRIER): "// schedule_barrier (no PTX)"}


def _sync(name: str, channel: Channel, barriers: tuple[BarrierKind, ...],
          block_binding: BlockBinding | None = None) -> SyncModel:
    return SyncModel(
        name=name, channels=(channel,),
        effects=(Effect(role=OpRole.GLOBAL_LOAD, counter=CP_ASYNC), *SYNCHRONOUS),
        barriers=barriers, hint_tags=HINTS, priority_tag=None, isa_forms=ISA_FORMS,
        register_interlock=True,         # the scoreboard stalls a use of an ldmatrix / mma result
        shared_in_order=False, global_loads_write_shared=True, combined_wait="",
        block_binding=block_binding)


#: the ring: cp.async counted in commit groups (one per K tile), visible to the waiting thread
RING_SYNC = _sync("nvidia-a100-cp-async",
                  Channel(name=CP_ASYNC, label="cp.async groups", wait_tag=WAIT_CP_ASYNC,
                          wait_name="WAIT_CP_ASYNC", unit="group", in_order=True, owner="thread",
                          results_visible_to="issuer", max_wait=MAX_WAIT_GROUP,
                          commit_tag=COMMIT_CP_ASYNC),
                  (BAR_SYNC_KIND, BARRIER_SYNC_KIND))
#: the double buffer: one group per LOAD op; the staggered warp groups meet at barrier.sync
PINGPONG_SYNC = _sync("nvidia-a100-pingpong",
                      Channel(name=CP_ASYNC, label="cp.async groups", wait_tag=WAIT_CP_ASYNC,
                              wait_name="WAIT_CP_ASYNC", unit="group (one per LOAD op)",
                              in_order=True, owner="thread", results_visible_to="issuer",
                              max_wait=MAX_WAIT_GROUP),
                      (BARRIER_SYNC_KIND, BAR_SYNC_KIND),
                      BlockBinding(global_channel=CP_ASYNC, fragment_channel=None,
                                   priority_tag=int(FrameworkTag.SET_PRIO),
                                   fence_tag=int(FrameworkTag.SCHEDULE_BARRIER)))

# --- the targets -----------------------------------------------------------------------------
#: ring depths: 3 stages of the default 128 x 256 x 64 tile take 147,456 of the 166,912 bytes
#: of shared memory a CTA may use on the A100
STAGES = Bound(low=2, high=3)


def a100(stages: int = 3) -> TargetProfile:
    """An S-stage cp.async ring, one commit group per K tile, the warps of one CTA."""
    pipeline = PipelineConfig(
        depth=stages, prefetch=stages - 1, prologue_fill=stages - 1, drain_passes=stages - 1,
        m_mmas=1, n_mmas=1, num_partitions=1, mma_latency=MMA_LATENCY,
        vm_per_load_a=1, vm_per_load_b=1, lgkm_per_load_a=0, lgkm_per_load_b=0,
        warp_stagger=WarpStagger.none())
    return TargetProfile(RING_COSTS, pipeline, sync=RING_SYNC, clock_ghz=A100.clock_ghz,
                         arch=ARCH, smem_per_cta=A100.smem_per_cta_optin)


def a100_pingpong() -> TargetProfile:
    """The ping-pong family's double buffer: 2 partitions of a 2x2 quadrant grid, two warp
    groups of 4 warps staggered by one barrier, one cp.async group per LOAD op."""
    pipeline = PipelineConfig.ping_pong_double_buffer(mma_latency=MMA_LATENCY)
    return TargetProfile(PINGPONG_COSTS, pipeline, sync=PINGPONG_SYNC, clock_ghz=A100.clock_ghz,
                         warps_per_group=4, arch=ARCH, smem_per_cta=A100.smem_per_cta_optin)


TARGETS = (
    TargetRecord(TARGET, "NVIDIA A100 (sm_80): cp.async commit groups, ldmatrix, mma.sync, "
                 "bar.sync / barrier.sync; no TMA, no wgmma", a100, family=COPY_RING,
                 offers=OFFERS,
                 params=[Param("stages", int, 3, "shared-memory stages of the cp.async ring",
                               bound=STAGES)]),
    TargetRecord(PINGPONG_TARGET, "NVIDIA A100 (sm_80) for the ping-pong family: double buffer, "
                 "2 staggered warp groups of 4 warps, non-aligned barrier.sync", a100_pingpong,
                 family=PING_PONG, offers=OFFERS),
)


@hookimpl
def pipeline_core_register_targets() -> list[TargetRecord]:
    return list(TARGETS)
