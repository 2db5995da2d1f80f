"""H100 cost model: latencies and issue intervals measured on our H100.

Every number is copied from ``benchmarks/results/h100_microbench.json`` (measured by
``benchmarks/h100/run_microbench.py``; benchmarks/h100/README.md explains each) and named after
the measurement it comes from; the tests read that file and check the copies.  Cycles are SM
cycles.  The JSON is not read at run time because an installed plugin has no repository beside it.
"""
from __future__ import annotations

import enum

import attrs

from pipeline_core.plugin_api import CostModel, OpCost, OpRole, ResourceKind


class H100Tag(enum.IntEnum):
    """Kernel tags of the mma.sync family on this target."""

    LOAD_A = 0   #: cp.async 16 B global -> shared, operand A
    LOAD_B = 1   #: cp.async 16 B global -> shared, operand B
    FRAG_A = 2   #: ldmatrix.x4, operand A
    FRAG_B = 3   #: ldmatrix.x4, operand B
    MMA = 4      #: a block of mma.sync m16n8k16 bf16 -> f32


# Latencies (cycles from issue to a usable result).
#: cp_async_model {source L2, threads 256, ctas 132}: the latency term of the fit, all SMs loading
CP_ASYNC_L2_LATENCY = 322
#: cp_async_latency {source L2, lanes 32}: one warp, issue to wait_group 0 return
CP_ASYNC_L2_LATENCY_ONE_WARP = 321
#: cp_async_latency {source DRAM, lanes 32}
CP_ASYNC_DRAM_LATENCY = 796
#: ldmatrix_latency {variant x4}: the dependent chain LDSM + one IADD3
LDMATRIX_X4_LATENCY = 34
#: mma_latency: m16n8k16 bf16 -> f32 chained through its accumulator
MMA_LATENCY = 24


@attrs.frozen(kw_only=True)
class IssueRates:
    """How often each op can issue: per warp, and for the whole SM at saturation (cycles)."""

    #: ldmatrix_throughput {x4, warps_per_sm 1}: back-to-back independent ldmatrix.x4 of one warp
    ldmatrix_x4_per_warp: float = 9.55
    #: ldmatrix_throughput {x4, warps_per_sm 8}: 128 B/clk of shared memory per SM
    ldmatrix_x4_per_sm: float = 4.0
    #: mma_throughput {warps_per_sm 1, chains 8}: one warp with 8 independent accumulators
    mma_per_warp: float = 7.13
    #: mma_throughput {warps_per_sm 8, chains 8, ctas 132}: 2731 flop/clk/SM
    mma_per_sm: float = 1.5
    #: cp_async_model {L2, threads 256, ctas 132}: sustained bytes per cycle per SM
    cp_async_l2_bytes_per_cycle_per_sm: float = 30.9
    #: cp_async_model {DRAM, threads 256, ctas 132}
    cp_async_dram_bytes_per_cycle_per_sm: float = 9.1
    #: bar_sync {threads 128} / {threads 256}: back-to-back bar.sync 0
    bar_sync_128: float = 20.6
    bar_sync_256: float = 28.6
    #: cp_async_wait_empty {wait_group 0, threads 128}: a wait with nothing pending
    wait_group_nothing_pending: float = 4.75
    #: cp_async_wait_empty {commit_group + wait_group 0}: waiting on a group just committed
    commit_then_wait: float = 41.6


ISSUE_RATES = IssueRates()

#: A pipelined mma.sync GEMM issues its mma at this share of the SM's measured peak rate
#: (``mma_per_sm``): measured / modelled cycles per K tile, the median over the four compiled
#: multistage-gemm variants of the issue 19 run (benchmarks/h100/calibrate.py: factor 1.553).
MMA_SYNC_GEMM_EFFICIENCY = 0.644


def h100_cost_model() -> CostModel:
    """Costs of the mma.sync family's tags (global loads assumed to hit L2, as in a tiled GEMM);
    ``interval`` is what multistage-gemm costs a whole CTA's instructions of a tag by."""
    g, smem, mma = ResourceKind.GLOBAL_MEM, ResourceKind.LDS, ResourceKind.MMA_UNIT
    return CostModel({
        H100Tag.LOAD_A: OpCost(g, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name="LOAD_A"),
        H100Tag.LOAD_B: OpCost(g, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name="LOAD_B"),
        # ldmatrix.x4 fills 4 registers per thread; the SM issues one every ldmatrix_x4_per_sm
        H100Tag.FRAG_A: OpCost(smem, LDMATRIX_X4_LATENCY, OpRole.FRAGMENT_LOAD, vgpr_def=4,
                               name="FRAG_A", interval=ISSUE_RATES.ldmatrix_x4_per_sm),
        H100Tag.FRAG_B: OpCost(smem, LDMATRIX_X4_LATENCY, OpRole.FRAGMENT_LOAD, vgpr_def=4,
                               name="FRAG_B", interval=ISSUE_RATES.ldmatrix_x4_per_sm),
        # m16n8k16 writes 4 fp32 accumulator registers per thread; a pipelined GEMM issues one
        # every mma_per_sm / MMA_SYNC_GEMM_EFFICIENCY cycles
        H100Tag.MMA: OpCost(mma, MMA_LATENCY, OpRole.COMPUTE, vgpr_def=4, name="MMA",
                            interval=ISSUE_RATES.mma_per_sm / MMA_SYNC_GEMM_EFFICIENCY),
    })
