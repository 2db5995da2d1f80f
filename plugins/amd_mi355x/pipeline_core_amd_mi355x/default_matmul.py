"""The single-buffer default matmul schedule
(docs/guide/reference-behaviours.md, "Single-buffer recipes").

One LDS buffer: each iteration loads a DRAM tile, stores it to LDS, and runs T
K-tiles of fragment loads and MMAs; fragment 0 of the next iteration is loaded
at the end of this one (loop-carried). Its kernel gets the AMD
schedule-group-barrier hints from this plugin's kernel transform (see
``plugin.pipeline_core_kernel_transforms``), which is why the schedule carries
``amd_hints``.
"""
from __future__ import annotations

import attrs

from pipeline_core.plugin_api import (Bound, BuildContext, ConfigError, Op, Param, PipelineConfig,
                                      ScheduleConfig, ScheduleRecord, TargetProfile, annotate)

from pipeline_core_amd_mi355x.hints import MMA_SIDES, AMDScheduleHints
from pipeline_core_amd_mi355x.tags import CHANNEL_A, SINGLE_BUFFER_TAG_NAMES, SingleBufferTag as SB

NAME = "default-matmul"
OWNER = f"schedule {NAME}"

#: The body has 2T + 3 ops and the kernel's hints grow with T, the MMA grid and the loads
#: per thread: these ranges cover every real kernel and keep a compile under a second.
K_TILES = Bound(low=1, high=64)
MMA_GRID_SIDE = Bound(low=1, high=16)
LOADS_PER_THREAD = Bound(low=0, high=64)

PARAMS: tuple[Param, ...] = (
    Param("num_k_tiles", int, 2, "K tiles per iteration (T): fragment loads and MMAs per body",
          bound=K_TILES),
    Param("num_m_mmas", int, 4, "MMA rows per warp (hint arithmetic)", bound=MMA_GRID_SIDE),
    Param("num_n_mmas", int, 4, "MMA columns per warp (hint arithmetic)", bound=MMA_GRID_SIDE),
    Param("num_k_mmas", int, 2, "MMAs along K per K tile (hint arithmetic)", bound=MMA_GRID_SIDE),
    Param("MMA_M", int, 16, "MFMA M (with MMA_N equal)", choices=MMA_SIDES),
    Param("MMA_N", int, 16, "MFMA N (with MMA_M equal)", choices=MMA_SIDES),
    Param("a_loads_per_thread", int, 2, "global A loads per thread per iteration (LDS stores)",
          bound=LOADS_PER_THREAD),
    Param("b_loads_per_thread", int, 2, "global B loads per thread per iteration (LDS stores)",
          bound=LOADS_PER_THREAD),
)

def logical_body(num_k_tiles: int) -> list[Op]:
    """load, store, barrier, T fragment loads, T MMAs (the reference's builder sequence)."""
    from pipeline_core.plugin_api import BodyBuilder

    b = BodyBuilder()
    b.load(SB.LOAD_DRAM, ch=CHANNEL_A)
    b.store(SB.STORE_SMEM, ch=CHANNEL_A)
    b.barrier()
    b.fan(num_k_tiles, SB.LOAD_FRAG, ch=CHANNEL_A)
    b.fan(num_k_tiles, SB.COMPUTE)
    return b.done()


#: warps of the default matmul kernel, one group.  The reference spec names no count for it;
#: its hint grid (num_m_mmas x MMA_M = 4 x 16 = 64 rows per warp, the same in N) tiles the
#: 128 x 128 block as 2 x 2 warps, as the 4-wave kernel's 2 x 2 grid does: 4 warps of 64
#: lanes.  The hazard proof runs each of them.
WARPS = 4


@attrs.frozen
class DefaultMatmulSchedule:
    """SingleBufferSchedule[T] with the AMD hints (build_default_matmul_schedule)."""

    num_k_tiles: int
    amd_hints: AMDScheduleHints
    target: TargetProfile
    sched: ScheduleConfig = attrs.field(factory=ScheduleConfig)
    name: str = NAME

    def config(self) -> PipelineConfig:
        return self.target.pipeline

    def logical_body(self) -> list[Op]:
        return logical_body(self.num_k_tiles)

    def build_body(self) -> list[Op]:
        """optimize_within_barriers(single_buffer_reorder(annotate(logical)))."""
        from pipeline_core.plugin_api import optimize_within_barriers, single_buffer_reorder

        config = self.config()
        ops = annotate(self.logical_body(), self.target.cost_model)
        return list(optimize_within_barriers(single_buffer_reorder(ops, config), config))

    def schedule_config(self) -> ScheduleConfig:
        """Reported only: the single-buffer path never reads it."""
        return self.sched

    def tag_names(self) -> dict[int, str]:
        return dict(SINGLE_BUFFER_TAG_NAMES)

    def wait_source(self) -> str:
        """"reference": this is one of the reference's own schedules, so its waits keep the
        reference's formulas (entry-for-entry parity; a racing knob is refused by name)."""
        return "reference"

    def warps_per_group(self) -> int:
        return WARPS


def make_default_matmul(ctx: BuildContext) -> DefaultMatmulSchedule:
    """Bind the schedule to its (single-buffer) target.  ``ctx.params`` were parsed against
    :data:`PARAMS`, whose bounds and choices are the only range checks (what the listing
    shows); the hints check which MMA sides go together."""
    p = ctx.params
    try:
        hints = AMDScheduleHints(p["num_m_mmas"], p["num_n_mmas"], p["num_k_mmas"], p["MMA_M"],
                                 p["MMA_N"], p["a_loads_per_thread"], p["b_loads_per_thread"])
    except ConfigError as exc:
        field = {"mma_m": "MMA_M", "mma_n": "MMA_N"}.get(exc.field, exc.field)
        raise ConfigError(OWNER, field, exc.value, f"{exc.allowed} (MMA_M x MMA_N)") from None
    target = ctx.make_target()
    if target.pipeline.depth != 1:
        raise ConfigError(OWNER, "target", ctx.target.name,
                          "a single-buffer target (pipeline depth 1), e.g. mi355x-single-buffer")
    return DefaultMatmulSchedule(num_k_tiles=p["num_k_tiles"], amd_hints=hints, target=target,
                                 sched=ctx.schedule_config(ScheduleConfig()))


RECORD = ScheduleRecord(
    name=NAME,
    description="MI355X single-buffer matmul: T K-tiles per iteration, loop-carried fragment 0, "
                "AMD sched-group-barrier hints",
    factory=make_default_matmul,
    params=PARAMS,
    default_target="mi355x-single-buffer",
    targets=("mi355x-single-buffer",),
)
