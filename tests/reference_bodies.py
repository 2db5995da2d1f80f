"""Test fixtures: the MI355X cost numbers, configs and bodies the reference tests use.

The MI355X plugin owns the real target and schedules; these are independent,
hand-written copies of the reference's bodies
(docs/guide/reference-behaviours.md, "Ping-pong", "The 4-wave configs", "Single-buffer recipes") so the algorithm layer can be
tested on its own (and cross-checked against the goldens).
"""
from __future__ import annotations

from pipeline_core.config import BlockSizing, FragOrder, LoopCarried, PipelineConfig, WarpStagger
from pipeline_core.costs import CostModel, OpCost, annotate
from pipeline_core.dsl import Pipe
from pipeline_core.ops import KOffset, Op, OpRole, ResourceKind, barrier, logical, op
from pipeline_core.transforms import double_buffer_reorder, single_buffer_reorder

GM, LDS, MMA_UNIT = ResourceKind.GLOBAL_MEM, ResourceKind.LDS, ResourceKind.MMA_UNIT

# --- double-buffer (ping-pong / 4-wave) tags ------------------------------------
LOAD_A, LOAD_B, COMPUTE, MMA_LOAD_A, MMA_LOAD_B, MMA = 0, 1, 2, 3, 4, 5

# --- single-buffer (default matmul) tags ------------------------------------------
LOAD_DRAM, STORE_SMEM, LOAD_FRAG, SB_COMPUTE = 0, 1, 2, 3


def mi355x_cost_model() -> CostModel:
    return CostModel({
        LOAD_A: OpCost(GM, 200, OpRole.GLOBAL_LOAD, name="LOAD_A"),
        LOAD_B: OpCost(GM, 200, OpRole.GLOBAL_LOAD, name="LOAD_B"),
        COMPUTE: OpCost(MMA_UNIT, 16, OpRole.COMPUTE, vgpr_def=4, name="COMPUTE"),
        MMA_LOAD_A: OpCost(LDS, 20, OpRole.FRAGMENT_LOAD, vgpr_def=8, name="MMA_LOAD_A"),
        MMA_LOAD_B: OpCost(LDS, 20, OpRole.FRAGMENT_LOAD, vgpr_def=8, name="MMA_LOAD_B"),
        MMA: OpCost(MMA_UNIT, 16, OpRole.COMPUTE, vgpr_def=4, name="MMA"),
    })


def mi355x_single_buffer_cost_model() -> CostModel:
    return CostModel({
        LOAD_DRAM: OpCost(GM, 200, OpRole.GLOBAL_LOAD, name="LOAD_DRAM"),
        STORE_SMEM: OpCost(LDS, 20, OpRole.SHARED_STORE, name="STORE_SMEM"),
        LOAD_FRAG: OpCost(LDS, 20, OpRole.FRAGMENT_LOAD, vgpr_def=4, name="LOAD_FRAG"),
        SB_COMPUTE: OpCost(MMA_UNIT, 64, OpRole.COMPUTE, vgpr_def=16, name="COMPUTE"),
    })


def mi355x_double_buffer(vm_a: int = 4, vm_b: int = 4, max_globals: int = 1) -> PipelineConfig:
    return PipelineConfig(
        depth=2, prefetch=1, drain_passes=2, prologue_fill=1, loop_carried=LoopCarried.none(),
        block_sizing=BlockSizing(4, 2, max_globals), frag_order=FragOrder.b_first(),
        m_mmas=2, n_mmas=2, num_partitions=2, mma_serial=True, mma_latency=16,
        vm_per_load_a=vm_a, vm_per_load_b=vm_b, ch0_match_field=0, ch1_match_field=1,
        warp_stagger=WarpStagger.auto(), cross_stage_rotation=False)


def mi355x_single_buffer() -> PipelineConfig:
    return PipelineConfig(
        depth=1, prefetch=1, drain_passes=2, prologue_fill=0,
        loop_carried=LoopCarried.fragment_zero(), block_sizing=BlockSizing(4, 2, 0),
        frag_order=FragOrder.b_first(), m_mmas=2, n_mmas=2, num_partitions=1, mma_serial=True,
        mma_latency=16, vm_per_load_a=4, vm_per_load_b=4, ch0_match_field=0, ch1_match_field=1,
        warp_stagger=WarpStagger.none())


# --- op factories with inline costs (the schedules' _load_a, _mma_load_a, ...) ---------

def load_a(stage: int, subtile: int, k: KOffset = KOffset.K0, vm_cost: int = 0) -> Op:
    return op(LOAD_A, GM, 200, OpRole.GLOBAL_LOAD, channel=0, stage=stage, subtile=subtile,
              k_offset=k, vm_cost=vm_cost)


def load_b(stage: int, subtile: int, k: KOffset = KOffset.K0, vm_cost: int = 0) -> Op:
    return op(LOAD_B, GM, 200, OpRole.GLOBAL_LOAD, channel=1, stage=stage, subtile=subtile,
              k_offset=k, vm_cost=vm_cost)


def mma_load_a(stage: int, subtile: int) -> Op:
    return op(MMA_LOAD_A, LDS, 20, OpRole.FRAGMENT_LOAD, channel=0, stage=stage, subtile=subtile)


def mma_load_b(stage: int, subtile: int) -> Op:
    return op(MMA_LOAD_B, LDS, 20, OpRole.FRAGMENT_LOAD, channel=1, stage=stage, subtile=subtile)


def mma(stage: int, subtile: int) -> Op:
    return op(MMA, MMA_UNIT, 16, OpRole.COMPUTE, stage=stage, subtile=subtile)


def load_dram() -> Op:
    return op(LOAD_DRAM, GM, 200, OpRole.GLOBAL_LOAD, channel=0)


def store_smem() -> Op:
    return op(STORE_SMEM, LDS, 20, OpRole.SHARED_STORE, channel=0)


def load_frag(subtile: int) -> Op:
    return op(LOAD_FRAG, LDS, 20, OpRole.FRAGMENT_LOAD, channel=0, subtile=subtile)


def sb_compute(subtile: int) -> Op:
    return op(SB_COMPUTE, MMA_UNIT, 64, OpRole.COMPUTE, subtile=subtile)


def load_frags(start: int, end: int) -> Pipe:
    """LOAD_FRAG subtiles start..end-1 as a Pipe (the schedule's load_frags[start, end])."""
    return Pipe(load_frag(j) for j in range(start, end))


def compute_range(start: int, end: int) -> Pipe:
    return Pipe(sb_compute(j) for j in range(start, end))


# --- logical bodies -----------------------------------------------------------------

def logical_half(h: int) -> list[Op]:
    """Ping-pong logical half h (12 ops): 4 loads, 4 frags, the 2x2 MMA grid."""
    s, os = h, 1 - h
    k_off = KOffset.K1 if h == 1 else KOffset.K0
    k_special = KOffset.K_PREV if h == 0 else KOffset.K0
    return [
        logical(LOAD_A, channel=0, stage=os, subtile=1, k_offset=k_special),
        logical(LOAD_A, channel=0, stage=s, subtile=0, k_offset=k_off),
        logical(LOAD_B, channel=1, stage=s, subtile=0, k_offset=k_off),
        logical(LOAD_B, channel=1, stage=s, subtile=1, k_offset=k_off),
        logical(MMA_LOAD_A, channel=0, stage=s, subtile=0),
        logical(MMA_LOAD_A, channel=0, stage=s, subtile=1),
        logical(MMA_LOAD_B, channel=1, stage=s, subtile=0),
        logical(MMA_LOAD_B, channel=1, stage=s, subtile=1),
        logical(MMA, stage=0, subtile=0),
        logical(MMA, stage=0, subtile=1),
        logical(MMA, stage=1, subtile=0),
        logical(MMA, stage=1, subtile=1),
    ]


def logical_pingpong_body() -> list[Op]:
    return logical_half(0) + logical_half(1)


def pingpong_body(max_globals: int = 1) -> list[Op]:
    """The ping-pong body in execution order (DeclarativeSchedule.build_body)."""
    config = mi355x_double_buffer(max_globals=max_globals)
    return double_buffer_reorder(annotate(logical_pingpong_body(), mi355x_cost_model()), config)


def single_buffer_logical_body(t: int) -> list[Op]:
    """load, store, barrier, T frags, T computes (un-annotated but for the barrier)."""
    return ([logical(LOAD_DRAM, channel=0), logical(STORE_SMEM, channel=0), barrier()]
            + [logical(LOAD_FRAG, channel=0, subtile=j) for j in range(t)]
            + [logical(SB_COMPUTE, subtile=j) for j in range(t)])


def default_matmul_body(t: int) -> list[Op]:
    """The reference tests' ``_default_matmul_body[T]``: inline-cost ops, reordered."""
    ops = ([load_dram(), store_smem(), barrier()] + [load_frag(j) for j in range(t)]
           + [sb_compute(j) for j in range(t)])
    return single_buffer_reorder(ops, mi355x_single_buffer())


def golden_cost_model(d: dict) -> CostModel:
    """The cost model stored in a golden document."""
    return CostModel({c["tag"]: OpCost(c["resource"], c["latency"], c["role"], c["vgpr_def"],
                                       c["vgpr_kill"], c["tag_name"]) for c in d["cost_model"]})
