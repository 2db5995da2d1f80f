"""What every ping-pong-style MI355X schedule shares: one logical body per partition,
interleaved into MMA blocks, with lgkm per load carried in the ScheduleConfig."""
from __future__ import annotations

from typing import Sequence

from pipeline_core.config import PipelineConfig, ScheduleConfig, TargetProfile
from pipeline_core.costs import annotate
from pipeline_core.ops import Op

from pipeline_core_amd_mi355x.tags import DOUBLE_BUFFER_TAG_NAMES


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
        from pipeline_core.transforms import double_buffer_reorder

        ops = annotate(self.logical_body(), self.target.cost_model)
        return list(double_buffer_reorder(ops, self.config()))

    def schedule_config(self) -> ScheduleConfig:
        """The stored config with lgkm per load replaced by the schedule's (REFERENCE Appendix B 10.2)."""
        return self.sched.evolve(lgkm_per_load_a=self.lgkm_per_load_a,
                                 lgkm_per_load_b=self.lgkm_per_load_b)

    def tag_names(self) -> dict[int, str]:
        return dict(DOUBLE_BUFFER_TAG_NAMES)
