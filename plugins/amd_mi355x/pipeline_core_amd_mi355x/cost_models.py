"""MI355X cost models
(docs/guide/reference-behaviours.md, "MI355X cost models and configs"):
what each kernel tag costs on this GPU.

Latencies are the reference's cycle estimates (global ~200, LDS ~20, MFMA 16 for
the ping-pong/4-wave quadrant, 64 for the single-buffer 32x32x16 BF16 MFMA).
vgpr_def: one FP8 16x16x128 quadrant fragment (num_k_mmas 2) is 8 VGPRs, one
MMA writes 4 VGPRs of f32 accumulator; the single-buffer fragment is 4 VGPRs
and its MMA 16.
"""
from __future__ import annotations

from pipeline_core.plugin_api import CostModel, OpCost, OpRole, ResourceKind

from pipeline_core_amd_mi355x.tags import DoubleBufferTag as DB
from pipeline_core_amd_mi355x.tags import SingleBufferTag as SB

GLOBAL_LATENCY = 200
LDS_LATENCY = 20
MFMA_QUADRANT_LATENCY = 16
MFMA_32X32X16_LATENCY = 64


def mi355x_cost_model() -> CostModel:
    """The double-buffer model (ping-pong / 4-wave tags)."""
    g, lds, mma = ResourceKind.GLOBAL_MEM, ResourceKind.LDS, ResourceKind.MMA_UNIT
    return CostModel({
        DB.LOAD_A: OpCost(g, GLOBAL_LATENCY, OpRole.GLOBAL_LOAD, name="LOAD_A"),
        DB.LOAD_B: OpCost(g, GLOBAL_LATENCY, OpRole.GLOBAL_LOAD, name="LOAD_B"),
        DB.COMPUTE: OpCost(mma, MFMA_QUADRANT_LATENCY, OpRole.COMPUTE, vgpr_def=4, name="COMPUTE"),
        DB.MMA_LOAD_A: OpCost(lds, LDS_LATENCY, OpRole.FRAGMENT_LOAD, vgpr_def=8, name="MMA_LOAD_A"),
        DB.MMA_LOAD_B: OpCost(lds, LDS_LATENCY, OpRole.FRAGMENT_LOAD, vgpr_def=8, name="MMA_LOAD_B"),
        DB.MMA: OpCost(mma, MFMA_QUADRANT_LATENCY, OpRole.COMPUTE, vgpr_def=4, name="MMA"),
    })


def mi355x_single_buffer_cost_model() -> CostModel:
    """The single-buffer model (default matmul tags)."""
    return CostModel({
        SB.LOAD_DRAM: OpCost(ResourceKind.GLOBAL_MEM, GLOBAL_LATENCY, OpRole.GLOBAL_LOAD,
                             name="LOAD_DRAM"),
        SB.STORE_SMEM: OpCost(ResourceKind.LDS, LDS_LATENCY, OpRole.SHARED_STORE, name="STORE_SMEM"),
        SB.LOAD_FRAG: OpCost(ResourceKind.LDS, LDS_LATENCY, OpRole.FRAGMENT_LOAD, vgpr_def=4,
                             name="LOAD_FRAG"),
        SB.COMPUTE: OpCost(ResourceKind.MMA_UNIT, MFMA_32X32X16_LATENCY, OpRole.COMPUTE,
                           vgpr_def=16, name="COMPUTE"),
    })
