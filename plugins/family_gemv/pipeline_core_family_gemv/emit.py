"""Emitter ``cuda-gemv``: the compiled ``gemv`` schedule as CUDA C++ on the kit's frame.  The
kit writes the frame (rings, roles, registers, the tile loop) and every synchronization line
from the plan; the family gives its parameters, its constants and stage layout, one line per op
step, and the device math they call (``gemv.cuh``)."""
from __future__ import annotations

from pipeline_core.plugin_api import CompiledSchedule, EmitterRecord, Param, Step

from pipeline_core_nvidia_h100.kit_api import (TARGET_NAME, TENSOR_MAP_TYPE, WATCHDOG,
                                               AgentsFamily, KernelSignature, agent_code,
                                               agents_kernel_body, declared_geometry,
                                               gemm_call_header_source, header_source,
                                               kernel_params, linear_tile_loop,
                                               loop_tile, pasted, require_ring_depths,
                                               wgmma_header_source)

from pipeline_core_family_gemv.schedule import KERNEL_FAMILY, NAME, GemvGeometry, GemvTag

EMITTER_NAME, KERNEL_NAME = "cuda-gemv", "pc_gemv"
#: the kernel's parameters: the emitter writes the list, the call packs by it
SIGNATURE = KernelSignature(kernel=KERNEL_NAME, params=kernel_params(
    ((TENSOR_MAP_TYPE, "tmA", "tensor_map"), (TENSOR_MAP_TYPE, "tmX", "tensor_map")),
    (("unsigned short* __restrict__", "Y", "pointer"), ("int", "M", "int32"),
     ("int", "K", "int32"))))
#: the trip rule on the device: row tiles in order, each visiting every K tile
TILES = linear_tile_loop(("const int KT = (K + BK - 1) / BK, TILES = (M + BM - 1) / BM;",))


def _family(g: GemvGeometry, dtype: str) -> AgentsFamily:
    """Constants, a stage's A tile then x's chunk, each consumer thread's row r and part p (a
    warp covers 32 / PARTS rows, a row's parts 32 / PARTS lanes apart), the sums out."""
    return AgentsFamily(
        constants=f"    constexpr int BM = {g.block_m}, BK = {g.block_k}, STAGES = {g.stages}, "
                  f"PARTS = 128 / BM;\n    constexpr bool BF16 = {str(dtype == 'bf16').lower()};"
                  "\n    constexpr u32 A_BYTES = BM * BK * 2, STAGE_BYTES = A_BYTES + 1024;",
        ring_bytes="STAGES * STAGE_BYTES",
        stage_views="    auto stage_a = [&](int s) { return ring + s * STAGE_BYTES; };\n"
                    "    auto stage_x = [&](int s) { return stage_a(s) + A_BYTES; };",
        consumer_state="        const int r = wtid / 32 * (32 / PARTS) + lane % (32 / PARTS), "
                       "p = lane / (32 / PARTS);\n        float acc;",
        compute="            acc = 0.f;",
        finish="            pcgv::store_row<PARTS, BF16>(acc, Y, tile * BM + r, M, p);")


def _op_line(s: Step, stage: str) -> str:  # A: a 128-byte-swizzled box per 64 columns
    if s.tag == GemvTag.TMA_A:
        return (f"for (int b = 0; b < BK / 64; ++b) tma_load_2d(stage_a({stage}) + b * BM * 128, "
                f"&tmA, full_bar({stage}), {loop_tile(s)} * BK + b * 64, tile * BM);")
    if s.tag == GemvTag.TMA_X:
        return f"tma_load_2d(stage_x({stage}), &tmX, full_bar({stage}), {loop_tile(s)} * BK, 0);"
    return f"pcgv::dot_tile<BM, BK, PARTS, BF16>(acc, stage_a({stage}), stage_x({stage}), r, p);"


def emit_gemv(compiled: CompiledSchedule, *, watchdog: int | None = None,
              dtype: str = "bf16") -> str:
    """CUDA C++ for a compiled schedule of kernel family ``gemv``."""
    g = declared_geometry(compiled, KERNEL_FAMILY, GemvGeometry, EMITTER_NAME)
    plan = compiled.plan
    require_ring_depths(plan.rings, g.stages, g.stages, EMITTER_NAME)
    producer, consumer = (agent_code(p, _op_line, single_issuer=p.role.issuers == 1,
                                     emitter=EMITTER_NAME, watchdog=watchdog or 0)
                          for p in plan.programs)
    body = agents_kernel_body(
        rings=plan.rings, producer=producer, consumers=[consumer],
        producer_name=plan.programs[0].name, family=_family(g, dtype), tiles=TILES,
        producer_registers=plan.programs[0].role.registers,
        consumer_registers=plan.programs[1].role.registers, emitter=EMITTER_NAME)
    device = pasted(__package__, "gemv.cuh")
    return "\n".join([
        f"// Emitted by pipeline-core (emitter {EMITTER_NAME}) from schedule "
        f"{compiled.schedule_name} on target {compiled.target_name}: y = A @ x, {dtype}, fp32 "
        f"accumulate.\n// Launch: block {g.threads}, dynamic shared memory {g.smem_bytes} bytes, "
        "any grid (CTA i runs output tiles i, i + gridDim.x, ...).",
        header_source(), wgmma_header_source(), gemm_call_header_source(), device,
        f'extern "C" __global__ void __launch_bounds__({g.threads}, 1)',
        f"{KERNEL_NAME}({SIGNATURE.render()}) {{", body, "}", ""])


EMITTERS = (EmitterRecord(
    EMITTER_NAME, f"standalone CUDA C++ (sm_90a) for {NAME} on the Hopper kit's frame: a TMA "
    "producer (A's tile, x's chunk), one consumer warp group's fp32 dot products",
    (TARGET_NAME,), emit_gemv, kernel_families=(KERNEL_FAMILY,),
    options=(WATCHDOG, Param("dtype", str, "bf16", "element type of A, x and y",
                             choices=("bf16", "fp16")))),)
