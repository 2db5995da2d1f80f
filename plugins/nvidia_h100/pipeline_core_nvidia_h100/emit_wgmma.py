"""The ``cuda-wgmma`` emitter: kernel family ``gemm-wgmma`` on ``h100`` -> one standalone CUDA kernel.

It writes any schedule that declares the family (``warpspecialized-gemm`` today) and sizes the
kernel by the :class:`WsGeometry` the schedule declared (``kernel_launch()``).  Every agent's
program goes out step for step through the shared skeleton (``skeleton.agent_stretches``,
docs/guide/agents.md): warp group 0 is the
producer (its elected thread issues the TMA copies), warp groups 1.. are the consumers.  Each
program's prologue iterations, its kernel loop over the K tiles and its epilogue iterations are
written as the compiled plan has them; a step with lag L serves tile ``t - L``, its ring stage is
that tile modulo the ring depth and its phase parity comes from the tile and the step's phase
offset, so the kernel text carries exactly the waits, arrivals and counter waits the core derived
and proved.  The consumers' programs must be the same up to which op they issue (the consumer
index is a run-time value), because ``setmaxnreg`` needs each role to be one branch of a single
if/else.  Tile multiples only (``WsGeometry.check_shape``).
"""
from __future__ import annotations

from pipeline_core.agents import AgentProgram, Step, StepKind
from pipeline_core.compiler import CompiledSchedule
from pipeline_core.emitters import EmitterRecord
from pipeline_core.errors import ProgramError
from pipeline_core.limits import Bound
from pipeline_core.schedule import Param

from pipeline_core_nvidia_h100 import TARGET_NAME
from pipeline_core_nvidia_h100.cuda import header_source, wgmma_header_source
from pipeline_core_nvidia_h100.skeleton import (AgentsFamily, agent_stretches, agents_kernel_body,
                                                consumer_branches, declared_geometry,
                                                named_step_line, render, ring_step_line)
from pipeline_core_nvidia_h100.warpspecialized import (KERNEL_FAMILY, SCHEDULE_NAME, WGMMA_M,
                                                       WgmmaTag, WsGeometry)

EMITTER_NAME = "cuda-wgmma"
KERNEL_NAME = "pc_ws_gemm"
#: ``-O watchdog=N``: polls of one mbarrier wait before it traps (0, the default: no bound).
#: The kernel counts polls in an ``unsigned long long`` and traps on ``++polls > N``, so N
#: stays below ULLONG_MAX (which the counter could never exceed); 2**63 - 1 polls is
#: centuries of polling anyway
WATCHDOG = Param("watchdog", int, 0, "polls of one mbarrier wait before the kernel traps "
                 "(omit: no bound)", bound=Bound(low=1, high=2**63 - 1))


def wgmma_instruction(n: int) -> str:
    """The device function issuing one ``wgmma.mma_async m64nNk16`` bf16 -> f32 (both K-major)."""
    regs = n // 2
    outs = ", ".join(f"%{i}" for i in range(regs))
    bind = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return (
        f"__device__ __forceinline__ void wgmma_m64n{n}k16(float (&d)[{regs}], pcwg::u64 da, "
        f"pcwg::u64 db) {{\n"
        f'    asm volatile("{{\\n .reg .pred p;\\n setp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
        f'                 " wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 "\n'
        f'                 "{{{outs}}}, %{regs}, %{regs + 1}, p, 1, 1, 0, 0;\\n}}\\n"\n'
        f"                 : {bind}\n"
        f'                 : "l"(da), "l"(db), "r"(1));\n'
        f"}}\n")


def _tile(s: Step) -> str:
    return f"(t - {s.lag})" if s.lag else "t"


def _ring(s: Step) -> str:
    """The step's position in the ring's life: K tiles this CTA ran before this output tile
    (``rb``) plus the K tile the step serves, so stages and parities run on across tiles."""
    return f"(rb + t - {s.lag})" if s.lag else "(rb + t)"


def _stage(s: Step) -> str:
    return f"({_ring(s)} % STAGES)"


def _step_line(s: Step, single_issuer: bool, owner: str, watchdog: int = 0) -> str:
    stage = _stage(s)
    parity = f"(({_ring(s)} / STAGES + ({s.phase_offset})) & 1)"
    ring = ring_step_line(s, stage, parity, single_issuer, watchdog)
    if ring is not None:
        return ring
    named = named_step_line(s)
    if named is not None:
        return named
    # the family's steps: the wgmma async group's fence / commit / counter wait, the ops
    if s.kind == StepKind.FENCE:
        return "wgmma_fence();"
    if s.kind == StepKind.COMMIT:
        return "wgmma_commit();"
    if s.kind == StepKind.COUNTER_WAIT:
        return f"wgmma_wait<{s.value}>();"
    if s.kind == StepKind.OP:
        if s.tag == WgmmaTag.TMA_A:
            return (f"tma_load_2d(stage_a({stage}), &tmA, full_bar({stage}), {_tile(s)} * BK, "
                    "tile_m * BM);")
        if s.tag == WgmmaTag.TMA_B:
            return (f"tma_load_2d(stage_b({stage}), &tmB, full_bar({stage}), {_tile(s)} * BK, "
                    "tile_n * BN);")
        if s.tag == WgmmaTag.WGMMA:
            return f"wgmma_tile({stage});"
    raise ProgramError(f"emitter {EMITTER_NAME}: agent {owner}: no CUDA for step {s.kind.value} "
                       f"(tag {s.tag})")


def emit_wgmma(compiled: CompiledSchedule, *, watchdog: int = 0) -> str:
    """CUDA C++ for a compiled schedule of kernel family ``gemm-wgmma`` (see the module).

    ``-O watchdog=N`` (:data:`WATCHDOG`, parsed and bounded by the core): every mbarrier wait
    traps after N polls, so a schedule that deadlocks (emitted with ``--allow-unsafe``) fails
    its launch instead of hanging the GPU; 0: unbounded waits.
    """
    g = declared_geometry(compiled, KERNEL_FAMILY, WsGeometry, EMITTER_NAME)
    plan = compiled.agents
    if plan is None:
        raise ProgramError(f"emitter {EMITTER_NAME}: writes the agents' programs of kernel family "
                           f"{KERNEL_FAMILY}, but schedule {compiled.schedule_name} compiled none")
    producer, *consumers = plan.programs
    if producer.role.issuers != 1 or not consumers:
        raise ProgramError(f"emitter {EMITTER_NAME}: expects a single-issuer producer agent "
                           f"followed by consumer agents, got {[p.name for p in plan.programs]}")

    def lines(p: AgentProgram, single_issuer: bool, label: str) -> list[str]:
        return render(agent_stretches(
            p, lambda s: _step_line(s, single_issuer, p.name, watchdog), label))

    texts = ["\n".join(lines(c, False, "consumer")) for c in consumers]
    constants = _constants(g)
    family = AgentsFamily(**{part: text.format(**constants) for part, text in FAMILY.items()})
    body = agents_kernel_body(
        rings=plan.rings, producer=lines(producer, True, producer.name),
        consumer=consumer_branches(texts), producer_name=producer.name,
        producer_registers=g.producer_registers, consumer_registers=g.consumer_registers,
        family=family)
    return _SOURCE.format(header=header_source(), wgmma_header=wgmma_header_source(),
        wgmma_fn=wgmma_instruction(g.bn), name=KERNEL_NAME, schedule=compiled.schedule_name,
        target=compiled.target_name, body=body, **constants)


def _constants(g: WsGeometry) -> dict[str, int]:
    return {"BM": g.bm, "BN": g.bn, "BK": g.bk, "STAGES": g.stages, "GROUP_M": g.group_m,
            "THREADS": g.threads, "SMEM": g.smem_bytes, "CONSUMER_ROWS": g.consumer_rows,
            "MBLOCKS": g.wgmma_m_blocks, "KSTEPS": g.k_steps, "ACC": g.bn // 2,
            "PRODUCER_REGS": g.producer_registers, "CONSUMER_REGS": g.consumer_registers,
            "WGMMA_M": WGMMA_M}


_SOURCE = r"""// Emitted by pipeline-core (emitter cuda-wgmma) from schedule {schedule} on target {target}.
// C[M,N] = A[M,K] . B[N,K]^T: bf16 in (raw u16), fp32 accumulate, bf16 out; both K-contiguous.
// A and B come as TMA tensor maps (2D, bf16, box {BK} x rows, 128-byte swizzle).
// Launch: block {THREADS} (warp group 0: producer; 1..: consumers), dynamic shared memory {SMEM}
// bytes, any grid up to (M/{BM})*(N/{BN}) CTAs: each CTA runs output tiles blockIdx.x,
// blockIdx.x + gridDim.x, ... with its ring's stages and phases running on across them (a grid
// of one CTA per SM is the persistent kernel).  Tile multiples only.
{header}
{wgmma_header}
{wgmma_fn}
extern "C" __global__ void __launch_bounds__({THREADS}, 1)
{name}(const __grid_constant__ pcwg::TensorMap tmA, const __grid_constant__ pcwg::TensorMap tmB,
       unsigned short* __restrict__ C, int M, int N, int K) {{
{body}
}}
"""

#: The gemm-wgmma family's device code (:class:`~pipeline_core_nvidia_h100.skeleton.
#: AgentsFamily`), formatted with :func:`_constants`: the tile math the skeleton leaves out.
FAMILY = {
    "constants": r"""    constexpr int BM = {BM}, BN = {BN}, BK = {BK}, STAGES = {STAGES}, GROUP_M = {GROUP_M};
    constexpr int CONSUMER_ROWS = {CONSUMER_ROWS}, MBLOCKS = {MBLOCKS}, KSTEPS = {KSTEPS};
    constexpr int ACC = {ACC};
    constexpr u32 A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;""",
    "stage_views": r"""    auto stage_a = [&](int s) {{ return ring + s * STAGE_BYTES; }};
    auto stage_b = [&](int s) {{ return ring + s * STAGE_BYTES + A_BYTES; }};""",
    "consumer_state": r"""        float acc[MBLOCKS][ACC];""",
    "compute": r"""#pragma unroll
        for (int mb = 0; mb < MBLOCKS; ++mb)
#pragma unroll
            for (int i = 0; i < ACC; ++i) acc[mb][i] = 0.f;
        auto wgmma_tile = [&](int s) {{
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk)
#pragma unroll
                for (int mb = 0; mb < MBLOCKS; ++mb)
                    wgmma_m64n{BN}k16(acc[mb],
                        smem_desc_sw128(stage_a(s) + (consumer * CONSUMER_ROWS + mb * {WGMMA_M}) * 128 + kk * 32),
                        smem_desc_sw128(stage_b(s) + kk * 32));
        }};""",
    "finish": r"""#pragma unroll
        for (int mb = 0; mb < MBLOCKS; ++mb)
#pragma unroll
            for (int i = 0; i < ACC; ++i) fence_operand(acc[mb][i]);

        // Every accumulator goes out, bf16x2 per pair of columns (the m64nN fragment layout).
        const int w = wtid / 32, g = lane / 4, q = lane % 4;
#pragma unroll
        for (int mb = 0; mb < MBLOCKS; ++mb) {{
            const int row = tile_m * BM + consumer * CONSUMER_ROWS + mb * {WGMMA_M} + w * 16 + g;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {{
                const int col = tile_n * BN + j * 8 + 2 * q;
                *reinterpret_cast<u32*>(C + (size_t)row * N + col) =
                    pch100::pack_bf16x2(acc[mb][4 * j], acc[mb][4 * j + 1]);
                *reinterpret_cast<u32*>(C + (size_t)(row + 8) * N + col) =
                    pch100::pack_bf16x2(acc[mb][4 * j + 2], acc[mb][4 * j + 3]);
            }}
        }}""",
}

EMITTERS = (EmitterRecord(
    EMITTER_NAME, f"standalone CUDA C++ (sm_90a) for {SCHEDULE_NAME}: TMA producer, wgmma "
    "consumers, mbarrier rings, setmaxnreg; every agent's steps one for one", (TARGET_NAME,),
    emit_wgmma, kernel_families=(KERNEL_FAMILY,), options=(WATCHDOG,)),)
