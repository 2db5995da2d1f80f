"""A toy GPU target and a 1x1-MMA double-buffer schedule, registered through entry points.

The body has two partitions; each loads A and B for its own stage, reads its
fragments, and runs one MMA.  It exercises the whole compile pipeline with
about the smallest body the double-buffer program accepts.
"""
from __future__ import annotations

from pipeline_core import hookimpl
from pipeline_core.config import BlockSizing, PipelineConfig, ScheduleConfig, TargetProfile
from pipeline_core.costs import CostModel, OpCost, annotate
from pipeline_core.limits import GLOBAL_LOAD_TICKS
from pipeline_core.ops import KOffset, OpRole, ResourceKind, logical
from pipeline_core.schedule import Param, ScheduleRecord, TargetRecord

LOAD_A, LOAD_B, FRAG_A, FRAG_B, MMA = range(5)

COSTS = CostModel({
    LOAD_A: OpCost(ResourceKind.GLOBAL_MEM, 300, OpRole.GLOBAL_LOAD, name="LOAD_A"),
    LOAD_B: OpCost(ResourceKind.GLOBAL_MEM, 300, OpRole.GLOBAL_LOAD, name="LOAD_B"),
    FRAG_A: OpCost(ResourceKind.LDS, 30, OpRole.FRAGMENT_LOAD, vgpr_def=4, name="FRAG_A"),
    FRAG_B: OpCost(ResourceKind.LDS, 30, OpRole.FRAGMENT_LOAD, vgpr_def=4, name="FRAG_B"),
    MMA: OpCost(ResourceKind.MMA_UNIT, 32, OpRole.COMPUTE, vgpr_def=8, name="MMA"),
})


def toy_gpu(vm_per_load: int = 1) -> TargetProfile:
    return TargetProfile(COSTS, PipelineConfig(
        m_mmas=1, n_mmas=1, block_sizing=BlockSizing(4, 2, 0),
        vm_per_load_a=vm_per_load, vm_per_load_b=vm_per_load))


class HelloSchedule:
    """Partition p: frag A, frag B (stage p), load A and B into stage p (next K), one MMA."""

    name = "hello"

    def __init__(self, target: TargetProfile, sched: ScheduleConfig) -> None:
        self.target = target
        self._sched = sched

    def config(self) -> PipelineConfig:
        return self.target.pipeline

    def build_body(self):
        ops = []
        for p in (0, 1):
            k = KOffset.K0 if p == 0 else KOffset.K1
            ops += [logical(FRAG_A, channel=0, stage=p), logical(FRAG_B, channel=1, stage=p),
                    logical(LOAD_A, channel=0, stage=p, k_offset=k),
                    logical(LOAD_B, channel=1, stage=1 - p,
                            k_offset=KOffset.K_PREV if p == 0 else KOffset.K0),
                    logical(MMA, stage=0, subtile=0)]
        return annotate(ops, self.target.cost_model)

    def schedule_config(self) -> ScheduleConfig:
        return self._sched

    def tag_names(self):
        return COSTS.tag_names()


def _build(ctx):
    target = ctx.make_target()
    return HelloSchedule(target, ctx.schedule_config(ScheduleConfig(wait_lgkm_first=1, wait_vm_last=1)))


@hookimpl
def pipeline_core_register_targets():
    return [TargetRecord("toy-gpu", "A toy GPU with one MMA per partition", toy_gpu,
                         params=[Param("vm_per_load", int, 1, "vmcnt ticks per global load",
                                       bound=GLOBAL_LOAD_TICKS)])]


@hookimpl
def pipeline_core_register_schedules():
    return [ScheduleRecord("hello", "Smallest double-buffer schedule: 1x1 MMA per partition",
                           _build, default_target="toy-gpu")]
