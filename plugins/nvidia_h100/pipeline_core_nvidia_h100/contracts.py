"""The capability contracts of this plugin's schedules and emitters, and what its targets offer.

A contract names what a kernel needs of the machine, not which machine (pipeline_core/
capabilities.py): ``multistage-gemm`` and the ``cuda`` emitter need a cp.async ring (sync channel
``cp_async``, counted in commit groups) feeding ldmatrix and mma.sync, which sm_80 and later
offer, so a target plugin for an sm_80, sm_86 or sm_89 GPU that offers it compiles and emits them
for its own architecture (``TargetProfile.arch``).  ``warpspecialized-gemm`` needs Hopper's TMA
(``cp.async.bulk.tensor``), mbarrier rings and wgmma.
"""
from __future__ import annotations

from pipeline_core.plugin_api import Capabilities

from pipeline_core_nvidia_h100.sync import CP_ASYNC
from pipeline_core_nvidia_h100.wgmma_sync import MBARRIER, WGMMA

#: a cp.async ring feeding ldmatrix + mma.sync: multistage-gemm, pingpong's CUDA, their emitters
MMA_SYNC_CP_ASYNC = Capabilities(channels=(CP_ASYNC,), instructions=("ldmatrix", "mma.sync"),
                                 copies=("cp.async",))
#: TMA feeding wgmma through mbarrier rings: warpspecialized-gemm and its emitter
WGMMA_TMA = Capabilities(channels=(MBARRIER, WGMMA), instructions=("wgmma",),
                         copies=("cp.async.bulk.tensor",))
#: what the H100 (sm_90a) offers: both
H100_OFFERS = Capabilities(
    channels=MMA_SYNC_CP_ASYNC.channels | WGMMA_TMA.channels,
    instructions=MMA_SYNC_CP_ASYNC.instructions | WGMMA_TMA.instructions,
    copies=MMA_SYNC_CP_ASYNC.copies | WGMMA_TMA.copies)
#: the architecture this plugin's targets build for
H100_ARCH = "sm_90a"
