"""The ``4wave`` schedule: 4 warps, two K-partitions per iteration, cross-stage rotation.

Mirrors the reference's Pipeline4Wave[geometry]. The op order is fixed
(IDENTITY, the mini-iteration order), blocks use minimal barriers, and the
prologue ends with two bootstrap fragment loads under partial vm drains. The
edge, explicit-block and bootstrap overrides are contributed through the
plugin hooks (``plugin.py``); this module builds the schedule object and its
configs.

Configs (docs/guide/reference-behaviours.md, "The 4-wave configs", "Geometry factors"):
* launch_defaults=true (default): the target gets vm per load and max_globals
  from the geometry, the ScheduleConfig is the kernel's flat
  ScheduleConfig(IDENTITY, auto_waits, mask 0xFF / 0, wrap BM >= 128);
* launch_defaults=false: the schedule builder's own defaults (from_strategies
  config, mi355x target defaults vm 4/4, max_globals 1);
then the user's -T/-c values, then the knobs 4-wave cannot run without.

The epilogue guard (docs/design/amd-waits-and-warps.md): the reference's epilogue reads LDS
tiles that another of the 4 waves loaded, after no barrier that follows that wave's retiring
wait: with the kernel's real 4 warps the hazard checker finds six LDS_RAW reads there, a real
race on gfx950 (per-wave vmcnt, an s_barrier that drains nothing).  So the epilogue starts
with ``WAIT_VM(0), BARRIER`` (the reference kernel's own guard for split-K, made
unconditional) and is proven safe.  ``-p epilogue_guard=off`` (or ``--allow-unsafe``, which
asks for the reference's exact output) drops it; that output is refused unless
``--allow-unsafe``.
"""
from __future__ import annotations

from typing import Any, Mapping

import attrs

from pipeline_core.plugin_api import (BuildContext, ConfigError, FrameworkTag, Op, OpRole, Param,
                                      PipelineConfig, ScheduleConfig, ScheduleRecord, TargetProfile,
                                      WarpStagger, annotate, apply_overrides, framework_op)

from pipeline_core_amd_mi355x.configs import require_2x2_double_buffer
from pipeline_core_amd_mi355x.geometry import (DTYPES, FOUR_WAVE_LAYOUT, TILE_SIZE, LaunchDefaults, TileShape,
                                               four_wave_launch_defaults)
from pipeline_core_amd_mi355x.tags import (CHANNEL_A, CHANNEL_B, DOUBLE_BUFFER_TAG_NAMES,
                                           DoubleBufferTag as T)

from pipeline_core_schedules_4wave.body import logical_body

NAME = "4wave"
OWNER = f"schedule {NAME}"

#: BM at and above which the launch config fences waits with schedule barriers
#: (they help at BM >= 128, +13%, and hurt at BM = 64, -4%:
#: docs/guide/reference-behaviours.md, "The 4-wave configs").
FENCE_MIN_BM = 128

PARAMS: tuple[Param, ...] = (
    Param("dtype", str, "fp8", "input type", choices=DTYPES),
    Param("BM", int, 128, "block tile M (a multiple of 64 for the 2x2 warp grid of 16-row MMAs)",
          bound=TILE_SIZE),
    Param("BN", int, 128, "block tile N", bound=TILE_SIZE),
    Param("BK", int, 128, "block tile K (a multiple of MMA_K)", bound=FOUR_WAVE_LAYOUT.bk_bound),
    Param("MMA_M", int, 16, "MFMA M", bound=TILE_SIZE),
    Param("MMA_N", int, 16, "MFMA N", bound=TILE_SIZE),
    Param("MMA_K", int, 128, "MFMA K", bound=TILE_SIZE),
    Param("launch_defaults", bool, True,
          "apply what the production 4-wave kernel passes: target vm/max_globals from the geometry, "
          "schedule-barrier mask 0xFF and wait wrapping when BM >= 128 (false: the builder's defaults)"),
    Param("epilogue_guard", str, "auto",
          "start the epilogue with WAIT_VM(0), BARRIER, the repair of the reference's epilogue "
          "race with 4 warps (docs/design/amd-waits-and-warps.md); auto: on, except under "
          "--allow-unsafe, which reproduces the reference; off: the reference's epilogue, "
          "refused unless --allow-unsafe", choices=("auto", "on", "off")),
)

#: warps of the 4-wave kernel, all in one group
#: (docs/guide/reference-behaviours.md, "The 4-wave configs"); the hazard proof
#: runs each of them
WARPS = 4

#: Knobs Pipeline4Wave forces on any ScheduleConfig, and why (shown when a -c contradicts one).
FORCED_KNOBS: Mapping[str, Any] = {
    "scheduling": "IDENTITY",
    "minimal_barriers": True,
    "omit_mma_set_prio": True,
    "inter_block_lgkm_drain": True,
    "partial_prologue_drain": True,
}
FORCED_WHY: Mapping[str, str] = {
    "scheduling": (
        "4wave keeps its mini-iteration order. Its LDS edges cross partitions "
        "(half-1 fragment loads must precede half-0 refills of the same stage), so the "
        "half-isolated GREEDY/CSP schedulers cannot place the half-0 loads: the reference's "
        "greedy returns 20 of 24 ops"),
    "minimal_barriers": "4wave blocks are emitted by the minimal-barrier emitter",
    "omit_mma_set_prio": "4wave never raises MMA priority (it blocks register reuse)",
    "inter_block_lgkm_drain": "cross-stage fragments need every block to drain lgkm on entry",
    "partial_prologue_drain": "the prologue's bootstrap fragments rely on partial vm drains",
}


def builder_default_schedule_config() -> ScheduleConfig:
    """Pipeline4Wave's own from_strategies default (used with launch_defaults=false)."""
    return ScheduleConfig(scheduling="IDENTITY", minimal_barriers=True, omit_mma_set_prio=True,
                          inter_block_lgkm_drain=True, partial_prologue_drain=True,
                          auto_waits=True)


def launch_schedule_config(BM: int) -> ScheduleConfig:
    """The flat ScheduleConfig the production 4-wave kernel passes
    (docs/guide/reference-behaviours.md, "The 4-wave configs")."""
    fenced = BM >= FENCE_MIN_BM
    return ScheduleConfig(scheduling="IDENTITY", auto_waits=True,
                          sched_barrier_mask=0xFF if fenced else 0,
                          wrap_waits_with_sched_barrier=fenced)


def force_knobs(sched: ScheduleConfig) -> ScheduleConfig:
    """What Pipeline4Wave's constructor does to whatever config it is given."""
    return sched.evolve(**FORCED_KNOBS)


def four_wave_pipeline(base: PipelineConfig, launch: LaunchDefaults) -> PipelineConfig:
    """The target's config with no warp stagger, geometry lgkm, and cross-stage rotation on."""
    return base.evolve(warp_stagger=WarpStagger.none(),
                       lgkm_per_load_a=launch.lgkm_per_load_a,
                       lgkm_per_load_b=launch.lgkm_per_load_b,
                       cross_stage_rotation=True)


@attrs.frozen
class FourWaveSchedule:
    """Pipeline4Wave: the adjusted target, the forced ScheduleConfig and the geometry."""

    target: TargetProfile  #: pipeline already adjusted by four_wave_pipeline
    sched: ScheduleConfig
    launch: LaunchDefaults
    name: str = NAME
    #: start the epilogue with WAIT_VM(0), BARRIER (module docstring)
    epilogue_guard: bool = True

    def config(self) -> PipelineConfig:
        return self.target.pipeline

    def wait_source(self) -> str:
        """"reference": this is one of the reference's own schedules, so its waits keep the
        reference's formulas (entry-for-entry parity; a racing knob is refused by name)."""
        return "reference"

    def warps_per_group(self) -> int:
        return WARPS

    def epilogue_prefix(self) -> list[Op]:
        """WAIT_VM(0), BARRIER: every wave's last loads retired, then published to all."""
        return ([framework_op(FrameworkTag.WAIT_VM, wait_value=0), framework_op(FrameworkTag.BARRIER)]
                if self.epilogue_guard else [])

    def logical_body(self) -> list[Op]:
        return logical_body()

    def build_body(self) -> list[Op]:
        """annotate(logical body): no reorder, the interleaver would misplace cross-stage frags."""
        return annotate(self.logical_body(), self.target.cost_model)

    def schedule_config(self) -> ScheduleConfig:
        return self.sched

    def tag_names(self) -> dict[int, str]:
        return dict(DOUBLE_BUFFER_TAG_NAMES)

    def forced_knobs(self) -> Mapping[str, Any]:
        """The knobs Pipeline4Wave always sets (``pipeline-core knobs`` shows them)."""
        return dict(FORCED_KNOBS)


def bootstrap_frags() -> list[Op]:
    """The first quadrant's A and B fragments of stage 0, issued at the prologue tail.

    Built directly (not annotated), as the reference does: resource NONE, latency 0.
    """
    return [Op(tag=T.MMA_LOAD_A, stage=0, subtile=0, channel=CHANNEL_A, role=OpRole.FRAGMENT_LOAD),
            Op(tag=T.MMA_LOAD_B, stage=0, subtile=0, channel=CHANNEL_B, role=OpRole.FRAGMENT_LOAD)]


def four_wave_edges(body, config: PipelineConfig) -> list:
    """Rule-table edges minus spurious same-partition flows, plus the cross-stage rotation edges."""
    from pipeline_core.plugin_api import derive_edges

    from pipeline_core_schedules_4wave.rotation import (derive_cross_stage_rotation_edges,
                                                        filter_spurious_cross_stage_flow)

    raw = derive_edges(body, config)
    return list(filter_spurious_cross_stage_flow(raw, body)) + list(
        derive_cross_stage_rotation_edges(body))


def four_wave_explicit_blocks(program) -> list[list[Op]]:
    """Every block through the minimal-barrier emitter, wrapping waits where the block asks."""
    from pipeline_core.plugin_api import emit_minimal_barrier_block

    return [emit_minimal_barrier_block(b, wrap_waits=b.wrap_waits_with_sched_barrier)
            for b in program.blocks]


def _reject_contradicting_overrides(ctx: BuildContext) -> None:
    """-c values that contradict a forced knob are refused rather than silently replaced."""
    given = {k: v for k, v in ctx.config_overrides.items() if k in FORCED_KNOBS}
    if not given:
        return
    parsed = apply_overrides(ScheduleConfig(), given, what="ScheduleConfig")
    for key, text in given.items():
        if getattr(parsed, key) != FORCED_KNOBS[key]:
            want = FORCED_KNOBS[key]
            want_text = want if isinstance(want, str) else str(want).lower()
            raise ConfigError(f"ScheduleConfig ({NAME})", key, text,
                              f"{want_text} only: {FORCED_WHY[key]}")


def make_four_wave(ctx: BuildContext) -> FourWaveSchedule:
    """Parameters -> geometry -> target and ScheduleConfig -> FourWaveSchedule."""
    p = ctx.params
    shape = TileShape(dtype=p["dtype"], BM=p["BM"], BN=p["BN"], BK=p["BK"], MMA_M=p["MMA_M"],
                      MMA_N=p["MMA_N"], MMA_K=p["MMA_K"])
    launch = four_wave_launch_defaults(shape, OWNER)
    if p["launch_defaults"]:
        target = ctx.make_target(vm_per_load_a=launch.vm_per_load_a,
                                 vm_per_load_b=launch.vm_per_load_b,
                                 max_globals=launch.max_globals)
        base = launch_schedule_config(shape.BM)
    else:
        target = ctx.make_target()
        base = builder_default_schedule_config()
    require_2x2_double_buffer(OWNER, ctx.target.name, target.pipeline)
    _reject_contradicting_overrides(ctx)
    sched = force_knobs(ctx.schedule_config(base))
    target = attrs.evolve(target, pipeline=four_wave_pipeline(target.pipeline, launch))
    guard = {"on": True, "off": False}.get(p["epilogue_guard"], not ctx.reference)
    return FourWaveSchedule(target=target, sched=sched, launch=launch, epilogue_guard=guard)


RECORD = ScheduleRecord(
    name=NAME,
    description="AMD 4-wave matmul: two K-partitions per iteration, cross-stage fragment rotation, "
                "minimal barriers",
    factory=make_four_wave,
    params=PARAMS,
    default_target="mi355x",
    targets=("mi355x",),
)
