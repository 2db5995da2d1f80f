"""Small plugins used by the host tests (objects with hookimpls, no installation needed)."""
from __future__ import annotations

from pipeline_core import hookimpl
from pipeline_core.config import PipelineConfig, ScheduleConfig, TargetProfile
from pipeline_core.costs import CostModel, OpCost
from pipeline_core.edges import DepEdge
from pipeline_core.ops import OpRole, ResourceKind, op
from pipeline_core.schedule import Param, ScheduleRecord, TargetRecord

COSTS = CostModel({0: OpCost(ResourceKind.LDS, 20, OpRole.FRAGMENT_LOAD, name="FRAG"),
                   1: OpCost(ResourceKind.MMA_UNIT, 16, OpRole.COMPUTE, name="MMA")})


def tiny_target(depth: int = 1) -> TargetProfile:
    return TargetProfile(COSTS, PipelineConfig(depth=depth, num_partitions=1, m_mmas=1, n_mmas=1))


class TinySchedule:
    """Single-buffer: one fragment load feeding one MMA."""

    name = "tiny"

    def __init__(self, target: TargetProfile) -> None:
        self.target = target

    def config(self):
        return self.target.pipeline

    def build_body(self):
        return [op(0, ResourceKind.LDS, 20, OpRole.FRAGMENT_LOAD, channel=0),
                op(1, ResourceKind.MMA_UNIT, 16, OpRole.COMPUTE)]

    def schedule_config(self):
        return ScheduleConfig()


class TinyWithOwnEdges(TinySchedule):
    def derive_edges(self, body):
        return [DepEdge.flow(0, 1)]


class Provider:
    """Registers the tiny target and schedule."""

    @hookimpl
    def pipeline_core_register_targets(self):
        return [TargetRecord("tiny-gpu", "tiny target", tiny_target,
                             params=[Param("depth", int, 1, "buffer depth")])]

    @hookimpl
    def pipeline_core_register_schedules(self):
        return [ScheduleRecord("tiny", "tiny schedule", lambda ctx: TinySchedule(ctx.make_target()),
                               default_target="tiny-gpu"),
                ScheduleRecord("tiny-own-edges", "tiny schedule with its own edges",
                               lambda ctx: TinyWithOwnEdges(ctx.make_target()),
                               default_target="tiny-gpu")]


class SameNames:
    """Collides with Provider on the schedule name 'tiny'."""

    @hookimpl
    def pipeline_core_register_schedules(self):
        return [ScheduleRecord("tiny", "another tiny", lambda ctx: None, default_target="tiny-gpu")]


class Misspelled:
    @hookimpl
    def pipeline_core_register_schedule(self):  # missing "s"
        return []


class BadRecord:
    @hookimpl
    def pipeline_core_register_targets(self):
        return ["not a record"]


class EdgeOverride:
    """Answers the edge hook for 'tiny' schedules with a recognisable edge list."""

    def __init__(self, distance: int = 1) -> None:
        self.distance = distance

    @hookimpl
    def pipeline_core_derive_edges(self, schedule, body, config):
        if schedule.name != "tiny":
            return None
        return [DepEdge.flow(0, 1, self.distance)]
