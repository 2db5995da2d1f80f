"""What every ping-pong-style MI355X schedule shares: one logical body per partition,
interleaved into MMA blocks, with lgkm per load carried in the ScheduleConfig."""
from __future__ import annotations

from typing import Sequence

from pipeline_core.plugin_api import Op, PipelineConfig, ScheduleConfig, TargetProfile, annotate

from pipeline_core_amd_mi355x.tags import DOUBLE_BUFFER_TAG_NAMES

#: the ping-pong kernel runs 8 warps as 2 staggered groups of 4
#: (docs/guide/reference-behaviours.md, "Ping-pong"); every ping-pong-shaped schedule
#: declares the same, so
#: the hazard proof runs each of a group's 4 warps, not one agent per group
WARPS_PER_GROUP = 4


class InterleavedMatmulSchedule:
    """Mixin: needs ``target``, ``sched``, ``lgkm_per_load_a/b``, ``config()`` and ``logical_body()``."""

    # What the mixin needs from the class using it (declarations only, no values).
    target: TargetProfile
    sched: ScheduleConfig
    lgkm_per_load_a: int
    lgkm_per_load_b: int

    def config(self) -> PipelineConfig:
        raise NotImplementedError

    def logical_body(self) -> Sequence[Op]:
        raise NotImplementedError

    def build_body(self) -> list[Op]:
        """double_buffer_reorder(annotate(logical body, cost model), pipeline config)."""
        from pipeline_core.plugin_api import double_buffer_reorder

        ops = annotate(self.logical_body(), self.target.cost_model)
        return list(double_buffer_reorder(ops, self.config()))

    def schedule_config(self) -> ScheduleConfig:
        """The stored config with lgkm per load replaced by the schedule's
        (docs/guide/reference-behaviours.md, "Ping-pong's lgkm per load")."""
        return self.sched.evolve(lgkm_per_load_a=self.lgkm_per_load_a,
                                 lgkm_per_load_b=self.lgkm_per_load_b)

    def tag_names(self) -> dict[int, str]:
        return dict(DOUBLE_BUFFER_TAG_NAMES)

    def warps_per_group(self) -> int:
        return WARPS_PER_GROUP
