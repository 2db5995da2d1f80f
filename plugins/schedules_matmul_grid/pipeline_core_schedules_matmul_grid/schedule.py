"""The ``matmul-grid`` schedule: ping-pong with an m x n MMA grid per warp group.

Built like ping-pong (annotate the logical body with the target's cost model,
then ``double_buffer_reorder`` into MMA blocks); the pipeline config is the
target's with ``m_mmas`` / ``n_mmas`` set to the grid.  Bodies have
2 * (m*n + 2*(m+n)) ops: 24 for 2 x 2, 48 for 2 x 5, 64 for 4 x 4, 100 for 4 x 7,
132 for 5 x 8.

The default strategy is EXACT_BLOCKS: for grids beyond 2 x 2 the producers-first
orders of GREEDY / CSP bunch the global loads of a stage behind its last
fragment load (the LDS ANTI edges), more than a block's two slots hold, and the
program builder rejects them; EXACT_BLOCKS searches only orders that compile.
"""
from __future__ import annotations

from typing import Any, Mapping

import attrs

from pipeline_core.plugin_api import (COUNTER_TICKS, REFUSED, Bound, BuildContext, ConfigError, Op,
                                      Param, PipelineConfig, ScheduleConfig, ScheduleRecord,
                                      TargetProfile, TransformError)

from pipeline_core_amd_mi355x.interleaved import InterleavedMatmulSchedule

from pipeline_core_schedules_matmul_grid.body import PARTITIONS, logical_body

NAME = "matmul-grid"
OWNER = f"schedule {NAME}"
#: Largest grid side accepted (PipelineConfig allows 64; bodies grow as m*n).
MAX_SIDE = 16
#: The grid's sides, checked by ``-p`` parsing before the factory runs and listed by
#: ``pipeline-core schedules`` from the same records: m >= 2 (a warp group's two quadrant
#: rows), n >= 1.
GRID_M = Bound(low=2, high=MAX_SIDE)
GRID_N = Bound(low=1, high=MAX_SIDE)
#: The double-buffer program, its prologue and the K offsets (K0, K1, K_PREV) cover exactly
#: two LDS stages, one per warp group: 2 is the only value.
PARTITIONS_BOUND = Bound(low=PARTITIONS, high=PARTITIONS)

PARAMS: tuple[Param, ...] = (
    Param("m", int, 2, "MMA rows per warp group", bound=GRID_M),
    Param("n", int, 2, "MMA columns per warp group", bound=GRID_N),
    Param("partitions", int, PARTITIONS,
          "warp groups, one LDS stage each; the double-buffer program fills two stages "
          "(K0/K1 prefetch, K_PREV completion), so 2 is the only value", bound=PARTITIONS_BOUND),
    Param("fp8", bool, False, "FP8 inputs (informational, as in ping-pong)"),
    Param("lgkm_per_load_a", int, 0, "lgkmcnt per channel-A load, written into the ScheduleConfig",
          bound=COUNTER_TICKS),
    Param("lgkm_per_load_b", int, 0, "lgkmcnt per channel-B load, written into the ScheduleConfig",
          bound=COUNTER_TICKS),
)


def default_schedule_config() -> ScheduleConfig:
    """Ping-pong's (auto waits) with the exact, always-compilable strategy."""
    return ScheduleConfig(scheduling="EXACT_BLOCKS", auto_waits=True)


@attrs.frozen
class MatmulGridSchedule(InterleavedMatmulSchedule):
    """A double-buffer matmul with an m x n MMA grid per partition."""

    m: int
    n: int
    target: TargetProfile
    sched: ScheduleConfig = attrs.field(factory=default_schedule_config)
    is_fp8: bool = False
    lgkm_per_load_a: int = 0
    lgkm_per_load_b: int = 0
    name: str = NAME

    def config(self) -> PipelineConfig:
        return self.target.pipeline.evolve(m_mmas=self.m, n_mmas=self.n,
                                           num_partitions=PARTITIONS)

    def logical_body(self) -> list[Op]:
        return logical_body(self.m, self.n)

    def forced_knobs(self) -> Mapping[str, Any]:
        """``-c lgkm_per_load_a/b`` are refused: the lgkm per load comes from ``-p``."""
        return {name: REFUSED for name in OWNED_SCHEDULE_FIELDS}


#: ScheduleConfig fields this schedule writes from its -p parameters (never from -c).
OWNED_SCHEDULE_FIELDS = ("lgkm_per_load_a", "lgkm_per_load_b")


def make_matmul_grid(ctx: BuildContext) -> MatmulGridSchedule:
    """Parameters -> MatmulGridSchedule; the body is built once here to report bad grids early.

    ``ctx.params`` were parsed against :data:`PARAMS` (``m``, ``n`` and ``partitions`` in their
    bounds): the bounds live there alone, so the listing shows what is enforced."""
    p = ctx.params
    m, n = p["m"], p["n"]
    lgkm = {k: p[k] for k in OWNED_SCHEDULE_FIELDS}
    for name in lgkm:
        if name in ctx.config_overrides:
            raise ConfigError(OWNER, f"-c {name}", ctx.config_overrides[name],
                              f"not a -c override for {NAME}: the schedule writes its own lgkm per "
                              f"load into the ScheduleConfig; use -p {name}=...")
    target = ctx.make_target()
    if target.pipeline.depth < 2:
        raise ConfigError(OWNER, "target", ctx.target.name,
                          "a double-buffer target (pipeline depth >= 2), e.g. mi355x")
    schedule = MatmulGridSchedule(m=m, n=n, target=target,
                                  sched=ctx.schedule_config(default_schedule_config()),
                                  is_fp8=bool(p["fp8"]), lgkm_per_load_a=lgkm["lgkm_per_load_a"],
                                  lgkm_per_load_b=lgkm["lgkm_per_load_b"])
    try:
        schedule.build_body()
    except TransformError as exc:
        raise ConfigError(OWNER, "m x n", f"{m} x {n}",
                          f"a grid whose {m + n} global loads per partition fit its {m * n} "
                          f"MMA blocks under max_globals "
                          f"{target.pipeline.block_sizing.max_globals} ({exc})") from None
    return schedule


RECORD = ScheduleRecord(
    name=NAME,
    description="AMD ping-pong double-buffer matmul with an m x n MMA grid per warp group "
                "(2 x 2 = pingpong's body)",
    factory=make_matmul_grid,
    params=PARAMS,
    default_target="mi355x",
    targets=("mi355x",),
)
