"""The ``cuda`` emitter: kernel family ``gemm-mma-sync`` -> one standalone CUDA C++ kernel.

It serves every target that offers a cp.async ring, ldmatrix and mma.sync (``h100``, and any
target plugin's, sm_80 and later: ``retarget.py`` reads the target's sync tags and architecture).
It writes any schedule that declares the family (``multistage-gemm`` today) and sizes the kernel
by the :class:`~pipeline_core_nvidia_h100.multistage.Geometry` the schedule declared
(``kernel_launch()``); the shared skeleton (``skeleton.py``) writes the program part.  The
prologue, the kernel and the epilogue follow the compiled entries one for one: each entry goes
through :data:`DISPATCH` (LOAD -> address + cp.async, COMMIT -> cp.async.commit_group,
WAIT_CP_ASYNC n -> cp.async.wait_group n, BARRIER -> bar.sync 0 / barrier.sync 0, FRAG ->
ldmatrix.x4, MMA -> an unrolled mma.sync block, AMD hints -> nothing).  The kernel phase is one
period of the ring (S steps): it becomes the body of ``for (base...)``; a last partial period
runs its first steps only (each step is guarded by a CTA-uniform condition, so every thread passes
every barrier and commit), and the epilogue's ring stages are rotated by that remainder.  The device
helpers come from ``cuda/pipeline_h100.cuh``, pasted in, so the file compiles under nvcc and NVRTC
without include paths.  Tile multiples only: the host checks M, N, K (``Geometry.check_shape``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from pipeline_core.plugin_api import (CompiledSchedule, EmitterRecord, Entry, FrameworkTag,
                                      ProgramError)

from pipeline_core_nvidia_h100.contracts import MMA_SYNC_CP_ASYNC
from pipeline_core_nvidia_h100.costs import H100Tag
from pipeline_core_nvidia_h100.cuda import header_source
from pipeline_core_nvidia_h100.multistage import KERNEL_FAMILY, SCHEDULE_NAME, Geometry
from pipeline_core_nvidia_h100.skeleton import (Stretch, StreamFamily, declared_geometry, entry_code,
                                                render, stream_kernel_body)
from pipeline_core_nvidia_h100.retarget import arch_note, renamed, sync_renames
from pipeline_core_nvidia_h100.sync import (BAR_SYNC_ALIGNED, BARRIER_SYNC_NONALIGNED,
                                            COMMIT_CP_ASYNC, HINTS, TAG_NAMES, WAIT_CP_ASYNC)

EMITTER_NAME = "cuda"

#: The CUDA every mma.sync kernel of this plugin opens with: the dynamic shared memory, the
#: grouped raster (this CTA's output tile) and the thread's lane and warp.
CTA_SETUP = """    extern __shared__ __align__(128) unsigned char smem[];
    const u32 smem_base = smem_addr(smem);

    // Grouped raster: GROUP_M tile rows run together and share their B tiles in L2.
    int tile_m, tile_n;
    grouped_tile(blockIdx.x, M / BM, N / BN, GROUP_M, tile_m, tile_n);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;"""
#: Where each thread's cp.async copies of one tile row chunk start: its swizzled shared-memory
#: offset and its A and B rows in global memory (a pass moves by whole swizzle periods).
LOAD_CURSOR = """    const int ld_row = tid / RC, ld_chunk = tid % RC;
    const u32 ld_off = swizzled_offset<RC>(ld_row, ld_chunk);
    const unsigned short* a_g = A + (size_t)(tile_m * BM + ld_row) * K + ld_chunk * 8;
    const unsigned short* b_g = B + (size_t)(tile_n * BN + ld_row) * K + ld_chunk * 8;"""
KERNEL_NAME = "pc_multistage_gemm"


def _stage(entry: Entry, rotated: bool) -> str:
    return f"(({entry.op.stage} + rot) % STAGES)" if rotated else str(entry.op.stage)


def _load(operand: str) -> Callable[[Entry, bool], str]:
    def emit(e: Entry, rotated: bool) -> str:
        return f"load_{operand}({_stage(e, rotated)}, ld_kt);"
    return emit


def _frag(operand: str) -> Callable[[Entry, bool], str]:
    def emit(e: Entry, rotated: bool) -> str:
        return f"frag_{operand}({_stage(e, rotated)}, {e.op.subtile});"
    return emit


#: One line of CUDA per entry tag (kernel tags of H100Tag, the sync tags of the h100 sync model).
DISPATCH: dict[int, Callable[[Entry, bool], str]] = {
    int(H100Tag.LOAD_A): _load("a"),
    int(H100Tag.LOAD_B): _load("b"),
    COMMIT_CP_ASYNC: lambda e, r: "cp_async_commit(); ++ld_kt;",
    WAIT_CP_ASYNC: lambda e, r: f"cp_async_wait_group<{e.op.wait_value}>();",
    BAR_SYNC_ALIGNED: lambda e, r: "bar_sync_aligned<0>();",
    BARRIER_SYNC_NONALIGNED: lambda e, r: "barrier_sync<0>();",
    int(H100Tag.FRAG_A): _frag("a"),
    int(H100Tag.FRAG_B): _frag("b"),
    int(H100Tag.MMA): lambda e, r: "mma_block();",
    **{tag: (lambda name: lambda e, r: f"/* {name}: no NVIDIA equivalent */")(name)
       for tag, name in HINTS.items()},
    int(FrameworkTag.WAIT_LGKM): lambda e, r: "/* WAIT_LGKM: ldmatrix is synchronous */",
}


def split_steps(kernel: Sequence[Entry], sync_tags: set[int]) -> list[list[Entry]]:
    """The kernel period's steps: a step starts at the sync entries ahead of its reads."""
    steps: list[list[Entry]] = []
    for e in kernel:
        if not steps or (e.op.tag in sync_tags and any(x.op.tag not in sync_tags for x in steps[-1])):
            steps.append([])
        steps[-1].append(e)
    return steps


def emit_cuda(compiled: CompiledSchedule) -> str:
    """CUDA C++ for a compiled schedule of kernel family ``gemm-mma-sync`` (see the module); it
    takes no ``-O`` options (its record declares none, so the core refuses any)."""
    g = declared_geometry(compiled, KERNEL_FAMILY, Geometry, EMITTER_NAME)
    profile = compiled.target_profile
    # the target's sync tags in this plugin's terms (the same tags on an h100 target)
    renames = (sync_renames(profile.sync, EMITTER_NAME)
               if profile is not None and profile.sync is not None else {})
    prologue, kernel, epilogue = (renamed(phase, renames) for phase in
                                  (compiled.prologue, compiled.kernel, compiled.epilogue))
    names = {**TAG_NAMES, **{int(k): v for k, v in compiled.tag_names.items()}}
    sync = {WAIT_CP_ASYNC, BAR_SYNC_ALIGNED, BARRIER_SYNC_NONALIGNED}
    steps = split_steps(kernel, sync)
    if len(steps) != g.stages:
        raise ProgramError(f"emitter {EMITTER_NAME}: the kernel phase has {len(steps)} steps, not "
                           f"one per ring stage ({g.stages})")
    ind = "    "

    def entries(rotated: bool) -> Callable[[Entry], str]:
        return entry_code({tag: (lambda fn: lambda e: fn(e, rotated))(fn)
                           for tag, fn in DISPATCH.items()}, names, EMITTER_NAME)

    code, rotated = entries(False), entries(True)
    # the kernel period is one pass of the ring: a loop over whole periods whose step j runs
    # only while K tiles are left, then the epilogue with its stages rotated by the remainder
    body = render([
        Stretch(steps=prologue, code=code, indent=ind, tail=(
            ind + "const int steady = KT - (STAGES - 1);  // K tiles the kernel loop computes",
            ind + "for (int base = 0; base < steady; base += STAGES) {")),
        *(Stretch(steps=tuple(step), code=code, indent=ind * 3, tail=(ind * 2 + "}",),
                  head=(ind * 2 + f"if (base + {j} < steady) {{  // step {j}: K tile base + {j}",))
          for j, step in enumerate(steps)),
        Stretch(steps=epilogue, code=rotated, indent=ind, head=(
            ind + "}",
            ind + "const int rot = steady % STAGES;  // the epilogue's first tile is in stage rot"))])
    values = dict(cta_setup=CTA_SETUP, load_cursor=LOAD_CURSOR, **_constants(g))
    family = StreamFamily(**{part: text.format(**values) for part, text in FAMILY.items()})
    return _SOURCE.format(header=header_source(), name=KERNEL_NAME,
                          body=stream_kernel_body(family, body, PROGRAM_NOTE),
                          schedule=compiled.schedule_name, target=compiled.target_name,
                          arch_note=arch_note(compiled), **values)


def _constants(g: Geometry) -> dict[str, int]:
    return {"BM": g.bm, "BN": g.bn, "BK": g.bk, "WARPS_M": g.warps_m, "WARPS_N": g.warps_n,
            "STAGES": g.stages, "GROUP_M": g.group_m, "THREADS": g.threads,
            "SMEM": g.smem_bytes}


_SOURCE = r"""// Emitted by pipeline-core (emitter cuda) from schedule {schedule} on target {target}.
{arch_note}// C[M,N] = A[M,K] . B[N,K]^T: bf16 in (raw u16), fp32 accumulate, bf16 out; both K-contiguous.
// Launch: grid (M/{BM})*(N/{BN}), block {THREADS}, dynamic shared memory {SMEM} bytes.
// Tile multiples only: M % {BM} == N % {BN} == K % {BK} == 0 and K/{BK} >= {STAGES} - 1.
{header}
extern "C" __global__ void __launch_bounds__({THREADS}, 1)
{name}(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B,
       unsigned short* __restrict__ C, int M, int N, int K) {{
{body}
}}
"""

#: The kernel family's device code (:class:`~pipeline_core_nvidia_h100.skeleton.StreamFamily`),
#: formatted with the kernel's constants: the tile math the skeleton leaves out.
FAMILY = {
    "setup": r"""    using namespace pch100;
    constexpr int BM = {BM}, BN = {BN}, BK = {BK}, STAGES = {STAGES}, GROUP_M = {GROUP_M};
    constexpr int WARPS_M = {WARPS_M}, WARPS_N = {WARPS_N}, THREADS = {THREADS};
    constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;      // warp tile
    constexpr int MI = WTM / 16, NI = WTN / 8;                  // mma tiles per warp and k-step
    constexpr int RC = BK * 2 / 16;                             // 16-byte chunks per tile row
    constexpr int A_BYTES = BM * BK * 2, STAGE_BYTES = (BM + BN) * BK * 2;
    constexpr int ROWS_PER_PASS = THREADS / RC;                 // rows one cp.async of all threads
    constexpr int A_PASSES = BM / ROWS_PER_PASS, B_PASSES = BN / ROWS_PER_PASS;

{cta_setup}
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
    const int KT = K / BK;""",
    "load": r"""    // LOAD: chunk ld_chunk of rows ld_row + p * ROWS_PER_PASS; a pass moves by whole swizzle
    // periods, so one swizzled offset serves every pass.
{load_cursor}
    int ld_kt = 0;  // the K tile the open commit group loads (one group per tile)

    auto load_a = [&](int stage, int kt) {{
        const u32 s = smem_base + stage * STAGE_BYTES + ld_off;
#pragma unroll
        for (int p = 0; p < A_PASSES; ++p)
            cp_async_16(s + p * ROWS_PER_PASS * RC * 16,
                        a_g + (size_t)kt * BK + (size_t)p * ROWS_PER_PASS * K);
    }};
    auto load_b = [&](int stage, int kt) {{
        const u32 s = smem_base + stage * STAGE_BYTES + A_BYTES + ld_off;
#pragma unroll
        for (int p = 0; p < B_PASSES; ++p)
            cp_async_16(s + p * ROWS_PER_PASS * RC * 16,
                        b_g + (size_t)kt * BK + (size_t)p * ROWS_PER_PASS * K);
    }};""",
    "compute": r"""    // FRAG: ldmatrix.x4 row addresses.  A: lanes 0-15 rows 0-15 of k-half 0, 16-31 k-half 1.
    // B (n-major rows): lanes 0-7 n 0-7 k-half 0, 8-15 n 0-7 k-half 1, 16-23 n 8-15 k-half 0, ...
    const int a_row = warp_m * WTM + (lane & 15), a_half = lane >> 4;
    const int b_row = warp_n * WTN + (lane & 7) + ((lane >> 4) << 3), b_half = (lane >> 3) & 1;
    const int a_swz = swizzle_chunk<RC>(a_row, 0), b_swz = swizzle_chunk<RC>(b_row, 0);
    const u32 a_rowoff = a_row * RC * 16, b_rowoff = b_row * RC * 16;
    u32 af[MI][4];
    u32 bf[NI / 2][4];
    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

    auto frag_a = [&](int stage, int kk) {{
        const u32 s = smem_base + stage * STAGE_BYTES + a_rowoff + (((kk * 2 + a_half) ^ a_swz) * 16);
#pragma unroll
        for (int i = 0; i < MI; ++i) ldmatrix_x4(af[i], s + i * 16 * RC * 16);
    }};
    auto frag_b = [&](int stage, int kk) {{
        const u32 s = smem_base + stage * STAGE_BYTES + A_BYTES + b_rowoff +
                      (((kk * 2 + b_half) ^ b_swz) * 16);
#pragma unroll
        for (int j = 0; j < NI / 2; ++j) ldmatrix_x4(bf[j], s + j * 16 * RC * 16);
    }};
    auto mma_block = [&]() {{
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
                mma_bf16_16816(acc[i][j], af[i], bf[j / 2][(j & 1) * 2], bf[j / 2][(j & 1) * 2 + 1]);
    }};""",
    "finish": r"""    // Every accumulator goes out, bf16x2 per pair of columns.
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < MI; ++i) {{
        const int row = tile_m * BM + warp_m * WTM + i * 16 + g;
#pragma unroll
        for (int j = 0; j < NI; ++j) {{
            const int col = tile_n * BN + warp_n * WTN + j * 8 + 2 * t;
            *reinterpret_cast<u32*>(C + (size_t)row * N + col) = pack_bf16x2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<u32*>(C + (size_t)(row + 8) * N + col) =
                pack_bf16x2(acc[i][j][2], acc[i][j][3]);
        }}
    }}""",
}
#: What the program part of the kernel is, in its heading comment.
PROGRAM_NOTE = "the compiled entries, one line each"

EMITTERS = (EmitterRecord(
    EMITTER_NAME, f"standalone CUDA C++ for {SCHEDULE_NAME}, for the target's architecture "
    "(sm_80 and later): cp.async ring, ldmatrix, mma.sync, entries one for one", (), emit_cuda,
    kernel_families=(KERNEL_FAMILY,), options=(), requires=MMA_SYNC_CP_ASYNC),)
