"""The target record this plugin registers: ``h100`` (mma.sync family, an S-stage cp.async ring)."""
from __future__ import annotations

from pipeline_core.plugin_api import (COPY_RING, Bound, Param, PipelineConfig, TargetProfile,
                                      TargetRecord, WarpStagger)

from pipeline_core_nvidia_h100 import TARGET_NAME
from pipeline_core_nvidia_h100.contracts import H100_ARCH, H100_OFFERS
from pipeline_core_nvidia_h100.costs import MMA_LATENCY, h100_cost_model
from pipeline_core_nvidia_h100.machine import H100_SXM
from pipeline_core_nvidia_h100.sync import H100_SYNC

#: Ring depths a schedule on this target may take (``-T stages``): the multistage plan's
#: cp.async ring and the warp-specialized TMA ring.  Up to the core's PipelineConfig depth (8):
#: the small-M GEMM streams B through eight (wave_cost.SMALL_TILES); shared memory bounds each
#: geometry's depth on its own (WsGeometry.validate refuses a ring that does not fit).
STAGES = Bound(low=2, high=8)
DEFAULT_STAGES = 3


def h100_target(stages: int = DEFAULT_STAGES) -> TargetProfile:
    """An S-stage cp.async ring on one H100 SM; one commit group per k-tile."""
    pipeline = PipelineConfig(
        depth=stages, prefetch=stages - 1, prologue_fill=stages - 1, drain_passes=stages - 1,
        m_mmas=1, n_mmas=1, num_partitions=1, mma_latency=MMA_LATENCY,
        vm_per_load_a=1, vm_per_load_b=1, lgkm_per_load_a=0, lgkm_per_load_b=0,
        warp_stagger=WarpStagger.none())
    return TargetProfile(h100_cost_model(), pipeline, sync=H100_SYNC, clock_ghz=H100_SXM.clock_ghz,
                         arch=H100_ARCH, smem_per_cta=H100_SXM.smem_per_cta_optin)


TARGETS: tuple[TargetRecord, ...] = (
    TargetRecord(
        name=TARGET_NAME,
        description="NVIDIA H100 (sm_90a), mma.sync family: cp.async commit groups, ldmatrix, "
                    "bar.sync / barrier.sync",
        factory=h100_target,
        family=COPY_RING, offers=H100_OFFERS,
        params=(Param("stages", int, DEFAULT_STAGES, "shared-memory stages of the cp.async ring",
                      bound=STAGES),),
    ),
)
