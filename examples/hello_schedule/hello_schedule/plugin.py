"""A toy GPU target with its own sync model, and a ring-pipelined one-MMA schedule.

The target, ``toy-gpu``, is not shaped like any real GPU family: global->shared
copies are asynchronous and counted in *commit groups* on one channel
(``copy``), fragment loads from shared memory are synchronous, and one aligned
barrier (``sync_threads``) publishes completed copies.  The schedule, ``hello``,
describes one K tile (load A and B, read both fragments, one MMA) and asks for
the core's ring lowering (N stages), which places the waits and barriers and
derives every wait's count from this sync model: the schedule writes none.
"""
from __future__ import annotations

from pipeline_core.plugin_api import (COPY_RING, BarrierKind, Bound, Channel, CostModel, Effect,
                                      OpCost, OpRole, Param, PipelineConfig, ResourceKind,
                                      ScheduleConfig, ScheduleRecord, SyncModel, TargetProfile,
                                      TargetRecord, WarpStagger, annotate, hookimpl, logical)

LOAD_A, LOAD_B, FRAG_A, FRAG_B, MMA = range(5)
#: this target's own sync tags (kernel tags are 0-127)
WAIT_COPY, COMMIT_COPY, SYNC_THREADS = 140, 141, 142

COSTS = CostModel({
    LOAD_A: OpCost(ResourceKind.GLOBAL_MEM, 300, OpRole.GLOBAL_LOAD, name="LOAD_A"),
    LOAD_B: OpCost(ResourceKind.GLOBAL_MEM, 300, OpRole.GLOBAL_LOAD, name="LOAD_B"),
    FRAG_A: OpCost(ResourceKind.LDS, 30, OpRole.FRAGMENT_LOAD, vgpr_def=4, name="FRAG_A"),
    FRAG_B: OpCost(ResourceKind.LDS, 30, OpRole.FRAGMENT_LOAD, vgpr_def=4, name="FRAG_B"),
    MMA: OpCost(ResourceKind.MMA_UNIT, 32, OpRole.COMPUTE, vgpr_def=8, name="MMA"),
})

TOY_SYNC = SyncModel(
    name="toy-gpu",
    channels=(Channel(name="copy", label="copy groups", wait_tag=WAIT_COPY,
                      wait_name="WAIT_COPY", unit="group", in_order=True, owner="thread",
                      commit_tag=COMMIT_COPY, max_wait=7),),
    effects=(Effect(role=OpRole.GLOBAL_LOAD, counter="copy"),
             Effect(role=OpRole.FRAGMENT_LOAD, counter=None),  # synchronous reads
             Effect(role=OpRole.COMPUTE, counter=None)),
    barriers=(BarrierKind(tag=SYNC_THREADS, name="sync_threads", aligned=True),),
    register_interlock=True, shared_in_order=False, global_loads_write_shared=True,
    # the toy machine's own assembly, so views read at its level
    isa_forms={WAIT_COPY: "copy.wait {wait_value}", COMMIT_COPY: "copy.commit",
               SYNC_THREADS: "sync.threads"})

TAG_NAMES = {**COSTS.tag_names(), WAIT_COPY: "WAIT_COPY", COMMIT_COPY: "COMMIT_COPY",
             SYNC_THREADS: "SYNC_THREADS"}
STAGES = Bound(low=2, high=8)


def toy_gpu(stages: int = 3) -> TargetProfile:
    """A ring of ``stages`` shared-memory stages; one MMA per K tile."""
    return TargetProfile(COSTS, PipelineConfig(
        depth=stages, m_mmas=1, n_mmas=1, num_partitions=1, warp_stagger=WarpStagger.none()),
        sync=TOY_SYNC, clock_ghz=1.5)


class HelloSchedule:
    """One K tile: load A and B, read fragment A and B, one MMA (the lowering does the rest)."""

    name = "hello"

    def __init__(self, target: TargetProfile, sched: ScheduleConfig) -> None:
        self.target = target
        self._sched = sched

    def config(self) -> PipelineConfig:
        return self.target.pipeline

    def lowering(self) -> str:
        return "ring"

    def build_body(self):
        ops = [logical(LOAD_A, channel=0), logical(LOAD_B, channel=1),
               logical(FRAG_A, channel=0), logical(FRAG_B, channel=1),
               logical(MMA, stage=0, subtile=0)]
        return annotate(ops, self.target.cost_model)

    def schedule_config(self) -> ScheduleConfig:
        return self._sched

    def tag_names(self):
        return dict(TAG_NAMES)


def _build(ctx):
    return HelloSchedule(ctx.make_target(), ctx.schedule_config(ScheduleConfig()))


@hookimpl
def pipeline_core_register_targets():
    return [TargetRecord("toy-gpu", "A toy GPU: async copies in commit groups, synchronous "
                         "fragment loads, one aligned barrier", toy_gpu, family=COPY_RING,
                         params=[Param("stages", int, 3, "shared-memory stages in the ring",
                                       bound=STAGES)])]


@hookimpl
def pipeline_core_register_schedules():
    return [ScheduleRecord("hello", "Smallest ring pipeline: one MMA per K tile, waits derived "
                           "from the target's sync model", _build, default_target="toy-gpu",
                           families=(COPY_RING,))]
