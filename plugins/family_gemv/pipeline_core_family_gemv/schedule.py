"""Schedule ``gemv``: one K tile (``block_k`` columns) of one output tile (``block_m`` rows) of
``y = A @ x`` on the H100, the Hopper kit's worked family (docs/guide/kernel-family.md): agent
``producer`` copies A's tile and x's chunk with TMA, agent ``consumer`` (a warp group) reads
them into fp32 dot products.  The core derives and proves every wait and release."""
from __future__ import annotations

import enum
from typing import Any

import attrs

from pipeline_core.plugin_api import (AgentRole, AgentSpec, BuildContext, CostModel,
                                      DepEdge, Op, OpCost, OpRole, Param, ProgramError,
                                      ResourceKind, ScheduleRecord, UniformTrips, annotate,
                                      logical)

from pipeline_core_nvidia_h100.kit_api import (CP_ASYNC_L2_LATENCY, H100_SXM, TARGET_NAME,
                                               WGMMA_TMA, AgentsSchedule, family_profile)

NAME = KERNEL_FAMILY = "gemv"
#: columns per K tile: x's chunk is one TMA box (at most 256), A's tile 4 boxes of 64 columns
BLOCK_K = 256


class GemvTag(enum.IntEnum):
    """The family's kernel tags (numbered per family: docs/guide/target-plugin.md)."""

    TMA_A = 30  #: cp.async.bulk.tensor: A's block_m x block_k tile
    TMA_X = 31  #: cp.async.bulk.tensor: x's block_k chunk
    DOT = 32    #: each consumer thread's dot products over the K tile (fp32 FMA)


@attrs.frozen(kw_only=True)
class GemvTrips(UniformTrips):
    """The family's trip rule for problem (M, K): output tiles of ``block_m`` rows, each
    visiting every K tile (uniform: the proof runs no tiles of different counts; none masked:
    TMA zero-fills A and x past K)."""

    block_m: int
    block_k: int

    def trip_counts(self, problem: tuple[int, int]) -> tuple[int, ...]:
        return (-(-problem[1] // self.block_k),) * -(-problem[0] // self.block_m)


@attrs.frozen(kw_only=True)
class GemvGeometry:
    """The tile and ring depth (128 / block_m consumer threads share a row)."""

    block_m: int
    stages: int
    block_k = BLOCK_K
    threads = 256  # the producer's warp group and the consumer's

    @property
    def smem_bytes(self) -> int:
        """Per stage A's tile and x's chunk (1 KB), their mbarriers, 1 KB of alignment."""
        return self.stages * (self.block_m * self.block_k * 2 + 1024 + 16) + 1024

    def validate(self) -> None:
        if self.smem_bytes > H100_SXM.smem_per_cta_optin:
            raise ProgramError(f"schedule {NAME}: -T stages={self.stages}: {self.smem_bytes} "
                               f"bytes of shared memory, over {H100_SXM.smem_per_cta_optin}; "
                               "lower -T stages or -p block_m")


A, X, DOT = 0, 1, 2


class Gemv(AgentsSchedule):
    """One K tile: TMA A and x (producer), the dot products (consumer)."""

    name = family = NAME

    def build_body(self) -> list[Op]:
        # the dot: one FMA per element per thread, a floor under its shared-memory reads
        dot = self.geometry.block_m * self.geometry.block_k // 128
        ops = [logical(GemvTag.TMA_A, channel=0), logical(GemvTag.TMA_X, channel=1),
               logical(GemvTag.DOT)]
        return [o.evolve(latency=dot) if o.tag == GemvTag.DOT else o
                for o in annotate(ops, self.target.cost_model)]

    def derive_edges(self, body: list[Op]) -> list[DepEdge]:
        """The dot reads both copies; the copies ``stages`` K tiles later overwrite them."""
        s = self.geometry.stages
        return [DepEdge.flow(A, DOT), DepEdge.flow(X, DOT), DepEdge.anti(DOT, A, s),
                DepEdge.anti(DOT, X, s)]

    def agents(self) -> AgentSpec:
        g = self.geometry
        return AgentSpec(
            roles=[AgentRole(name="producer", ops=(A, X), warps=4, issuers=1, registers=40),
                   AgentRole(name="consumer", ops=(DOT,), warps=4, issuers=128, registers=232)],
            op_bytes={A: g.block_m * g.block_k * 2, X: g.block_k * 2},
            # the dot's reads end before it does (its FMAs consume them): release right after
            release_lag=0, trip_rule=GemvTrips(block_m=g.block_m, block_k=g.block_k))


def make_gemv(ctx: BuildContext) -> Gemv:
    base = ctx.make_target()
    load, valu = ResourceKind.GLOBAL_MEM, ResourceKind.VALU
    costs = CostModel({  # the dot's latency is set per geometry (build_body)
        GemvTag.TMA_A: OpCost(load, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name="TMA_A"),
        GemvTag.TMA_X: OpCost(load, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name="TMA_X"),
        GemvTag.DOT: OpCost(valu, 64, OpRole.VALU_COMPUTE, name="DOT")})
    target = family_profile(costs, base.pipeline, base.clock_ghz)
    p: dict[str, Any] = dict(ctx.params)
    geometry = GemvGeometry(block_m=p["block_m"], stages=target.pipeline.depth)
    geometry.validate()
    return Gemv(target, geometry)


RECORD = ScheduleRecord(
    NAME, "y = A @ x, one K tile per iteration: a TMA producer (A's tile, x's chunk) feeding one "
    "consumer warp group's fp32 dot products; the Hopper kit's worked family", make_gemv,
    params=(Param("block_m", int, 64, "rows of y per output tile", choices=(32, 64, 128)),),
    # the name keeps the H100's machine; the contract names what any other target lacks
    default_target=TARGET_NAME, targets=(TARGET_NAME,), requires=WGMMA_TMA)
