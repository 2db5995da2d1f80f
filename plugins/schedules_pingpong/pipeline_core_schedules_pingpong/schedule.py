"""The ``pingpong`` schedule: 8 warps in two warp groups taking turns on the MMA unit.

Mirrors the reference's DeclarativeSchedule[is_fp8, lgkm_a, lgkm_b]: the body is
the logical 24-op body annotated with the target's cost model and interleaved
into MMA blocks by the double-buffer reorder; the default ScheduleConfig is
(CSP, auto_waits); ``schedule_config()`` always carries the schedule's lgkm per
load (docs/guide/reference-behaviours.md, "Ping-pong's lgkm per load").

Tile-shape parameters are the friendlier way in: given any of them, the
schedule derives what the production kernel passes
(docs/guide/reference-behaviours.md, "Geometry factors"): lgkm per load for the
ScheduleConfig, vm per load and max_globals
for the target. Explicit ``-p`` / ``-T`` values win over derived ones.
"""
from __future__ import annotations

from typing import Any, Mapping

import attrs

from pipeline_core.plugin_api import (COUNTER_TICKS, PING_PONG, REFUSED, BuildContext,
                                      ConfigError, CostModel, KernelLaunch, Op, Param,
                                      PipelineConfig, ScheduleConfig, ScheduleRecord,
                                      TargetProfile)

from pipeline_core_amd_mi355x.configs import require_2x2_double_buffer
from pipeline_core_amd_mi355x.geometry import (DTYPES, PINGPONG_LAYOUT, TILE_SIZE, LaunchDefaults,
                                               TileShape, pingpong_launch_defaults)
from pipeline_core_amd_mi355x.interleaved import InterleavedMatmulSchedule

from pipeline_core_schedules_pingpong.body import logical_body

NAME = "pingpong"
#: The kernel family its body is (``KernelLaunch``, pipeline_core/launch.py): two staggered
#: warp groups over a 2x2 grid of MMA quadrants, double-buffered.  An emitter that writes it
#: (``cuda-pingpong`` on h100-pingpong) takes its tile from its own -O options.
KERNEL_FAMILY = "gemm-pingpong"
OWNER = f"schedule {NAME}"

#: The production kernels' tiles, per input type (used for shape parameters not given).
SHAPE_DEFAULTS: Mapping[str, Mapping[str, int]] = {
    "bf16": {"BM": 256, "BN": 256, "BK": 64, "MMA_M": 16, "MMA_N": 16, "MMA_K": 32},
    "fp8": {"BM": 256, "BN": 256, "BK": 128, "MMA_M": 16, "MMA_N": 16, "MMA_K": 128},
}
SHAPE_PARAMS: tuple[str, ...] = ("dtype", "BM", "BN", "BK", "MMA_M", "MMA_N", "MMA_K")
#: ScheduleConfig fields this schedule owns (set from -p, never from -c).
OWNED_SCHEDULE_FIELDS: Mapping[str, str] = {"lgkm_per_load_a": "lgkm_per_load_a",
                                             "lgkm_per_load_b": "lgkm_per_load_b"}


def _shape_param(name: str, what: str) -> Param:
    """A tile-shape parameter; its default depends on dtype only where the kernels differ."""
    b, f = SHAPE_DEFAULTS["bf16"][name], SHAPE_DEFAULTS["fp8"][name]
    bound = PINGPONG_LAYOUT.bk_bound if name == "BK" else TILE_SIZE
    if b == f:
        return Param(name, int, b, f"{what}; giving any shape parameter derives lgkm/vm/max_globals",
                     bound=bound)
    return Param(name, int, None, f"{what} (default {b} for bf16, {f} for fp8); giving any shape "
                                  "parameter derives lgkm/vm/max_globals", bound=bound)


PARAMS: tuple[Param, ...] = (
    Param("fp8", bool, False, "FP8 inputs (informational, as in the reference; see dtype)"),
    Param("lgkm_per_load_a", int, 0, "lgkmcnt per channel-A load, written into the ScheduleConfig",
          bound=COUNTER_TICKS),
    Param("lgkm_per_load_b", int, 0, "lgkmcnt per channel-B load, written into the ScheduleConfig",
          bound=COUNTER_TICKS),
    Param("dtype", str, None, "input type of the tile shape (default bf16, or fp8 with -p fp8=true)",
          choices=DTYPES),
    _shape_param("BM", "block tile M"),
    _shape_param("BN", "block tile N"),
    _shape_param("BK", "block tile K"),
    _shape_param("MMA_M", "MFMA M"),
    _shape_param("MMA_N", "MFMA N"),
    _shape_param("MMA_K", "MFMA K"),
    Param("launch_defaults", bool, True,
          "derive lgkm per load, vm per load and max_globals from the tile shape as the production "
          "kernel does (applies when a shape parameter, or launch_defaults=true, is given)"),
)


def default_schedule_config() -> ScheduleConfig:
    """What the reference's DeclarativeSchedule starts from."""
    return ScheduleConfig(scheduling="CSP", auto_waits=True)


@attrs.frozen
class PingPongSchedule(InterleavedMatmulSchedule):
    """DeclarativeSchedule: a target, a ScheduleConfig and the lgkm per load it carries."""

    target: TargetProfile
    sched: ScheduleConfig = attrs.field(factory=default_schedule_config)
    is_fp8: bool = False
    lgkm_per_load_a: int = 0
    lgkm_per_load_b: int = 0
    launch: LaunchDefaults | None = None  #: the derivation used, if any (for reports)
    name: str = NAME

    @classmethod
    def from_parts(cls, sched: ScheduleConfig, pipeline: PipelineConfig, cost_model: CostModel,
                   **kwargs: Any) -> "PingPongSchedule":
        """The reference's second constructor: (config, hw_config, cost_model)."""
        return cls(TargetProfile(cost_model, pipeline), sched, **kwargs)

    def config(self) -> PipelineConfig:
        return self.target.pipeline

    def logical_body(self) -> list[Op]:
        return logical_body()

    def forced_knobs(self) -> Mapping[str, Any]:
        """``-c lgkm_per_load_a/b`` are refused: the lgkm per load comes from ``-p``."""
        return {name: REFUSED for name in OWNED_SCHEDULE_FIELDS}

    def wait_source(self) -> str:
        """"reference": this is one of the reference's own schedules, so its waits keep the
        reference's formulas (entry-for-entry parity; a racing knob is refused by name)."""
        return "reference"

    def kernel_launch(self) -> KernelLaunch:
        """Kernel family ``gemm-pingpong``; no geometry (the emitter's -O options size it)."""
        return KernelLaunch(kernel_family=KERNEL_FAMILY)


def _non_negative(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(OWNER, name, value, "a non-negative integer")
    return value


def resolve_dtype(ctx: BuildContext) -> str:
    """dtype if given, else from fp8; both given and disagreeing is an error."""
    p = ctx.params
    if ctx.given("dtype"):
        if ctx.given("fp8") and (p["dtype"] == "fp8") != p["fp8"]:
            raise ConfigError(OWNER, "fp8", p["fp8"],
                              f"consistent with dtype={p['dtype']} (fp8={'true' if p['dtype'] == 'fp8' else 'false'}), "
                              "or leave one of them out")
        return p["dtype"]
    return "fp8" if p["fp8"] else "bf16"


def resolve_launch(ctx: BuildContext, dtype: str) -> LaunchDefaults | None:
    """The launch-default derivation, when the user asked for a tile shape."""
    wants = any(ctx.given(n) for n in SHAPE_PARAMS) or (
        ctx.given("launch_defaults") and ctx.params["launch_defaults"])
    if not wants:
        return None
    dims = {n: ctx.params[n] if ctx.given(n) else SHAPE_DEFAULTS[dtype][n]
            for n in SHAPE_PARAMS if n != "dtype"}
    return pingpong_launch_defaults(TileShape(dtype=dtype, **dims), OWNER)


def make_pingpong(ctx: BuildContext) -> PingPongSchedule:
    """Parameters -> PingPongSchedule (derivations under explicit values)."""
    p = ctx.params
    for name in OWNED_SCHEDULE_FIELDS:
        if name in ctx.config_overrides:
            raise ConfigError(f"schedule {NAME}", name, ctx.config_overrides[name],
                              f"not settable with -c: pingpong always writes its own lgkm per "
                              f"load into the ScheduleConfig; use "
                              f"-p {name}={ctx.config_overrides[name]}", flag="-c")
    dtype = resolve_dtype(ctx)
    launch = resolve_launch(ctx, dtype)
    derive = launch is not None and p["launch_defaults"]
    lgkm = {}
    for name in ("lgkm_per_load_a", "lgkm_per_load_b"):
        if derive and not ctx.given(name):
            lgkm[name] = getattr(launch, name)
        else:
            lgkm[name] = _non_negative(name, p[name])
    if derive and launch is not None:  # derive implies a launch; said again for the type checker
        target = ctx.make_target(vm_per_load_a=launch.vm_per_load_a,
                                 vm_per_load_b=launch.vm_per_load_b,
                                 max_globals=launch.max_globals)
    else:
        target = ctx.make_target()
    require_2x2_double_buffer(OWNER, ctx.target.name, target.pipeline)
    sched = ctx.schedule_config(default_schedule_config())
    return PingPongSchedule(target=target, sched=sched, is_fp8=dtype == "fp8",
                            launch=launch if derive else None, **lgkm)


RECORD = ScheduleRecord(
    name=NAME,
    description="AMD 8-warp ping-pong matmul: two warp groups alternate LDS stages, 24-op body",
    factory=make_pingpong,
    params=PARAMS,
    default_target="mi355x",
    # h100-pingpong (pipeline-core-nvidia-h100) is this schedule's shape on H100 sync and costs;
    # any target of the ping-pong family (its tags and double buffer) fits too
    targets=("mi355x", "h100-pingpong"), families=(PING_PONG,),
)
