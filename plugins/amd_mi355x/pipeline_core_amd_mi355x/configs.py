"""MI355X pipeline configs and target profiles
(docs/guide/reference-behaviours.md, "MI355X cost models and configs")."""
from __future__ import annotations

from pipeline_core.plugin_api import (BlockSizing, FragOrder, LoopCarried, PipelineConfig,
                                      TargetProfile, WarpStagger)

from pipeline_core_amd_mi355x.cost_models import mi355x_cost_model, mi355x_single_buffer_cost_model
from pipeline_core_amd_mi355x.sync import CLOCK_GHZ, MI355X_SINGLE_BUFFER_SYNC, MI355X_SYNC

#: The reference's mi355x_target() defaults.
DEFAULT_VM_PER_LOAD = 4
DEFAULT_MAX_GLOBALS = 1
#: MMA cycles both configs declare (informational: the cost model times the MMA ops)
MMA_LATENCY = 16


def mi355x_double_buffer(vm_a: int = DEFAULT_VM_PER_LOAD, vm_b: int = DEFAULT_VM_PER_LOAD,
                         max_globals: int = DEFAULT_MAX_GLOBALS) -> PipelineConfig:
    """Two LDS stages, two partitions (warp groups / K-tiles) of a 2x2 MMA quadrant grid: the
    ping-pong family's double buffer with the MI355X's MMA latency and buffer_load ticks."""
    return PipelineConfig.ping_pong_double_buffer(mma_latency=MMA_LATENCY, vm_per_load_a=vm_a,
                                                  vm_per_load_b=vm_b, max_globals=max_globals)


def mi355x_single_buffer() -> PipelineConfig:
    """One LDS stage; fragment 0 is loaded at the end of iteration N for N+1."""
    return PipelineConfig(
        depth=1, prefetch=1, drain_passes=2, prologue_fill=0,
        loop_carried=LoopCarried.fragment_zero(),
        block_sizing=BlockSizing(4, 2, 0),
        frag_order=FragOrder.b_first(),
        m_mmas=2, n_mmas=2, num_partitions=1,
        mma_serial=True, mma_latency=MMA_LATENCY,
        vm_per_load_a=DEFAULT_VM_PER_LOAD, vm_per_load_b=DEFAULT_VM_PER_LOAD,
        ch0_match_field=0, ch1_match_field=1,
        warp_stagger=WarpStagger.none(),
    )


#: CDNA3/4 waves address 512 vector registers (256 architectural + 256 accumulation VGPRs)
VGPRS_PER_WAVE = 512


def mi355x_target(vm_per_load_a: int = DEFAULT_VM_PER_LOAD, vm_per_load_b: int = DEFAULT_VM_PER_LOAD,
                  max_globals: int = DEFAULT_MAX_GLOBALS) -> TargetProfile:
    """Double-buffer MI355X profile (registered as ``mi355x``)."""
    return TargetProfile(mi355x_cost_model(), mi355x_double_buffer(vm_per_load_a, vm_per_load_b,
                                                                   max_globals),
                         sync=MI355X_SYNC, clock_ghz=CLOCK_GHZ, register_budget=VGPRS_PER_WAVE)


def mi355x_single_buffer_target() -> TargetProfile:
    """Single-buffer MI355X profile (registered as ``mi355x-single-buffer``)."""
    return TargetProfile(mi355x_single_buffer_cost_model(), mi355x_single_buffer(),
                         sync=MI355X_SINGLE_BUFFER_SYNC, clock_ghz=CLOCK_GHZ,
                         register_budget=VGPRS_PER_WAVE)


def require_2x2_double_buffer(owner: str, target_name: str, config: PipelineConfig) -> None:
    """The ping-pong-shaped schedules need 2 partitions of a 2x2 MMA grid, double-buffered."""
    from pipeline_core.plugin_api import ConfigError

    if config.depth < 2 or config.num_partitions != 2 or (config.m_mmas, config.n_mmas) != (2, 2):
        raise ConfigError(owner, "target", target_name,
                          "a double-buffer target with 2 partitions of a 2x2 MMA grid "
                          f"(got depth {config.depth}, {config.num_partitions} partitions, "
                          f"{config.m_mmas}x{config.n_mmas}), e.g. mi355x")
