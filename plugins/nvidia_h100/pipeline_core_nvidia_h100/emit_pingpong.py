"""The ``cuda-pingpong`` emitter: kernel family ``gemm-pingpong`` on a ping-pong target -> CUDA C++.

It writes any schedule that declares the family (``pingpong`` today) as one standalone kernel;
the shared skeleton (``skeleton.py``) writes the program part.

8 warps in 2 warp groups of 4.  The CTA tile ``BM`` x ``BN`` is cut into the schedule's 2x2 grid
of quadrants (A subtile i = rows ``i*BM/2 ..``, B subtile j = rows ``j*BN/2 ..`` of B); inside every
quadrant warp group g owns the rows of half g and its warp w the columns of quarter w, so each warp
group computes its half of the CTA tile.  Per K tile (``BK``) a quadrant fragment is the warp's
whole A (or B) slice of that tile, held in registers (ldmatrix.x4), and an MMA entry is the warp's
unrolled m16n8k16 mma.sync block over the tile.  Two shared-memory stages, each ``(BM + BN) x BK``
bf16, 16-byte chunks XOR-swizzled, filled by cp.async.

The entries follow the compiled phases one for one through :data:`DISPATCH`: LOAD_A/B -> the op's
cp.async copies + ``cp.async.commit_group`` (one group per LOAD op, as the h100-pingpong sync
model counts), WAIT_CP_ASYNC n -> ``cp.async.wait_group n``, BARRIER_SYNC -> ``barrier.sync 0``
(non-aligned), MMA_LOAD_A/B -> ldmatrix.x4, MMA -> a quadrant's mma.sync block, WAIT_LGKM /
SET_PRIO / SCHEDULE_BARRIER -> nothing.  The kernel shell is the reference's ping-pong one
(the execution model of pipeline_core/execution.py, which the proof ran): ``prologue[:warp_stagger_index]``, one
extra barrier for warp group 1, the rest of the prologue and a barrier for everyone; the kernel
entries in ``for (k = 2*BK; k < K; k += 2*BK)`` with ``k_base = k``; the epilogue with
``k_base = K``; one extra barrier for warp group 0.  The groups then sit at different barrier
instructions, which is why the barrier is the non-aligned form.

The tile comes from the emitter's options (``-O BM=128 -O BN=128 -O BK=64``, the defaults): the
schedule's ``-p BM/BN/BK`` are the MI355X launch shape, and 256 x 256 would need 256 fp32
accumulators per thread under mma.sync.  Tile multiples only: ``Geometry.check_shape``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from pipeline_core.plugin_api import (Bound, CompiledSchedule, EmitterRecord, Entry, ExecutionModel,
                                      FrameworkTag, KOffset, Param, ProgramError)

from pipeline_core_nvidia_h100.cuda import header_source
from pipeline_core_nvidia_h100.emit_cuda import CTA_SETUP, LOAD_CURSOR
from pipeline_core_nvidia_h100.machine import H100_SXM
from pipeline_core_nvidia_h100.multistage import MMA_M, MMA_N, SWIZZLED_BK, CtaTile
from pipeline_core_nvidia_h100.contracts import MMA_SYNC_CP_ASYNC
from pipeline_core_nvidia_h100.pingpong import TARGET_NAME, WARPS_PER_GROUP, PingPongTag
from pipeline_core_nvidia_h100.retarget import arch_note, renamed, sync_renames
from pipeline_core_nvidia_h100.skeleton import (Stretch, StreamFamily, entry_code, render,
                                                stream_kernel_body)
from pipeline_core_nvidia_h100.sync import (BAR_SYNC_ALIGNED, BARRIER_SYNC_NONALIGNED, HINTS,
                                            TAG_NAMES, WAIT_CP_ASYNC)

EMITTER_NAME = "cuda-pingpong"
SCHEDULE_NAME = "pingpong"
#: The kernel family the ``pingpong`` schedule declares (its ``kernel_launch()``): 2 staggered
#: warp groups over a 2x2 grid of quadrants, double-buffered; its tile is this emitter's -O.
KERNEL_FAMILY = "gemm-pingpong"
KERNEL_NAME = "pc_pingpong_gemm"
WARP_GROUPS = 2
#: fp32 accumulators + fragment registers one thread may hold (the rest of 255 is addresses)
MAX_DATA_REGISTERS = 168
#: The smallest BM and BN the warps cut: BM 2 quadrant rows x 2 warp groups x 16, BN 2
#: quadrant columns x 4 warps x 16 (every BM / BN is a multiple of these).
BM_STEP = 2 * WARP_GROUPS * MMA_M
BN_STEP = 2 * WARPS_PER_GROUP * 2 * MMA_N
#: ``-O BM/BN/BK``: the CTA tile (parsed and bounded by the core; :meth:`Geometry.validate`
#: then checks the multiples, registers and shared memory the kernel needs)
OPTIONS = (Param("BM", int, 128, f"CTA tile rows (a multiple of {BM_STEP})",
                 bound=Bound(low=BM_STEP, high=512)),
           Param("BN", int, 128, f"CTA tile columns (a multiple of {BN_STEP})",
                 bound=Bound(low=BN_STEP, high=512)),
           Param("BK", int, 64, "K per stage", choices=SWIZZLED_BK))
DEFAULTS = {p.name: p.default for p in OPTIONS}


@attrs.frozen(kw_only=True)
class Geometry(CtaTile):
    """The CTA tile of the ping-pong kernel: 2 stages, a 2x2 quadrant grid, 2 x 4 warps."""

    @property
    def threads(self) -> int:
        return WARP_GROUPS * WARPS_PER_GROUP * 32

    @property
    def warp_tile(self) -> tuple[int, int]:
        """One warp's part of one quadrant: half the quadrant's rows, a quarter of its columns."""
        return self.bm // 2 // WARP_GROUPS, self.bn // 2 // WARPS_PER_GROUP

    @property
    def ring_stages(self) -> int:
        return 2

    @property
    def mma_per_entry(self) -> int:
        """mma.sync one warp issues per MMA entry (a quadrant over one K tile)."""
        mi, ni = self.mma_tiles
        return self.k_steps * mi * ni

    @property
    def data_registers(self) -> int:
        """fp32 accumulators of 4 quadrants + the A and B fragments of both subtiles."""
        mi, ni = self.mma_tiles
        return 4 * mi * ni * 4 + 2 * self.k_steps * mi * 4 + 2 * self.k_steps * (ni // 2) * 4

    def validate(self) -> None:
        """Refuse a tile the kernel cannot cut, naming the -O option at fault."""
        def bad(option: str, why: str) -> ProgramError:
            return ProgramError(f"emitter {EMITTER_NAME}: -O {option}: {why}")

        if self.bk not in SWIZZLED_BK:
            raise bad("BK", f"must be 32 or 64 (64- or 128-byte swizzled rows), got {self.bk}")
        if self.bm <= 0 or self.bm % BM_STEP:
            raise bad("BM", f"must be a positive multiple of {BM_STEP} (2 quadrant "
                            f"rows x 2 warp groups x 16), got {self.bm}")
        if self.bn <= 0 or self.bn % BN_STEP:
            raise bad("BN", f"must be a positive multiple of {BN_STEP} "
                            f"(2 quadrant columns x 4 warps x 16), got {self.bn}")
        for option, rows in (("BM", self.bm // 2), ("BN", self.bn // 2)):
            if rows % self.rows_per_pass:
                raise bad(option, f"a subtile of {rows} rows is not a multiple of the "
                                  f"{self.rows_per_pass} rows one cp.async of all "
                                  f"{self.threads} threads covers")
        if self.data_registers > MAX_DATA_REGISTERS:
            raise bad("BM", f"tile {self.bm}x{self.bn}x{self.bk} needs {self.data_registers} "
                            f"accumulator and fragment registers per thread (at most "
                            f"{MAX_DATA_REGISTERS} of 255): shrink BM, BN or BK")
        if self.smem_bytes > H100_SXM.smem_per_cta_optin:
            raise bad("BM", f"2 stages of {self.stage_bytes} bytes exceed the "
                            f"{H100_SXM.smem_per_cta_optin} bytes of shared memory a CTA may use")

    def check_shape(self, m: int, n: int, k: int) -> None:
        """Tile multiples only, and an even number of K tiles (the loop steps 2 x BK)."""
        for name, value, tile in (("M", m, self.bm), ("N", n, self.bn), ("K", k, 2 * self.bk)):
            if value <= 0 or value % tile:
                raise ValueError(f"{name}={value}: the pingpong kernel takes {name} a positive "
                                 f"multiple of {tile}")

    def as_params(self) -> dict[str, int]:
        return {"BM": self.bm, "BN": self.bn, "BK": self.bk, "group_m": self.group_m}


def geometry_from_options(options: Mapping[str, int]) -> Geometry:
    """The tile from the ``-O BM/BN/BK`` values (:data:`OPTIONS`, typed; defaults 128 / 128 /
    64), validated."""
    values = {**DEFAULTS, **options}
    g = Geometry(bm=values["BM"], bn=values["BN"], bk=values["BK"])
    g.validate()
    return g


def _load(operand: str) -> Callable[[Entry], str]:
    def emit(e: Entry) -> str:
        shift = KOffset(e.op.k_offset).signed_bk_multiple
        k = "k_base" if shift == 0 else f"k_base {'+' if shift > 0 else '-'} {abs(shift)} * BK"
        return f"load_{operand}({e.op.stage}, {e.op.subtile}, {k}); cp_async_commit();"
    return emit


def _comment(text: str) -> Callable[[Entry], str]:
    return lambda e: f"/* {text} */"


#: Each barrier kind of the h100 sync model as CUDA.
BARRIER_CODE = {BARRIER_SYNC_NONALIGNED: "barrier_sync<0>();", BAR_SYNC_ALIGNED: "bar_sync_aligned<0>();"}

#: One line of CUDA per entry tag (the ping-pong body's tags, the h100-pingpong sync tags).
DISPATCH: dict[int, Callable[[Entry], str]] = {
    int(PingPongTag.LOAD_A): _load("a"),
    int(PingPongTag.LOAD_B): _load("b"),
    WAIT_CP_ASYNC: lambda e: f"cp_async_wait_group<{e.op.wait_value}>();",
    **{tag: (lambda code: lambda e: code)(code) for tag, code in BARRIER_CODE.items()},
    int(PingPongTag.MMA_LOAD_A): lambda e: f"frag_a({e.op.stage}, {e.op.subtile});",
    int(PingPongTag.MMA_LOAD_B): lambda e: f"frag_b({e.op.stage}, {e.op.subtile});",
    # ch0_match_field 0 / ch1_match_field 1: the MMA's stage field is its A subtile (quadrant
    # row), its subtile field its B subtile (quadrant column)
    int(PingPongTag.MMA): lambda e: f"mma_quadrant({e.op.stage}, {e.op.subtile});",
    int(FrameworkTag.WAIT_LGKM): _comment("WAIT_LGKM: ldmatrix is synchronous"),
    **{tag: _comment(f"{name}: no NVIDIA equivalent") for tag, name in HINTS.items()},
}


def emit_pingpong(compiled: CompiledSchedule, **options: int) -> str:
    """CUDA C++ for a compiled schedule of kernel family ``gemm-pingpong`` on ``h100-pingpong``
    (see the module)."""
    launch = compiled.launch
    if launch is None or launch.kernel_family != KERNEL_FAMILY:
        got = f"kernel family {launch.kernel_family}" if launch else "no kernel family"
        raise ProgramError(f"emitter {EMITTER_NAME}: writes kernel family {KERNEL_FAMILY} "
                           f"only, got schedule {compiled.schedule_name} ({got}) on "
                           f"{compiled.target_name}")
    config = compiled.config
    if (config.ch0_match_field, config.ch1_match_field) != (0, 1):
        raise ProgramError(f"emitter {EMITTER_NAME}: needs ch0_match_field 0 and "
                           "ch1_match_field 1 (MMA stage = A subtile, subtile = B subtile)")
    g = geometry_from_options(options)
    profile = compiled.target_profile
    sync = profile.sync if profile is not None else None
    if sync is None:  # the barrier kind comes from the target (-T barrier=...)
        raise ProgramError(f"emitter {EMITTER_NAME}: schedule {compiled.schedule_name} carries "
                           f"no sync model of target {TARGET_NAME}; compile it with --target "
                           f"{TARGET_NAME}")
    names = {**TAG_NAMES, **sync.tag_names(), **{int(k): v for k, v in compiled.tag_names.items()}}
    code = entry_code(DISPATCH, names, EMITTER_NAME)
    # the target's sync tags in this plugin's terms (the same tags on h100-pingpong)
    renames = sync_renames(sync, EMITTER_NAME)
    # the stagger's barriers: the target's kind
    barrier = BARRIER_CODE[renames.get(sync.barrier.tag, sync.barrier.tag)]
    prologue = renamed(compiled.prologue, renames)
    ind = "    "
    # the stagger (pipeline_core/execution.py): warp group 1 runs the same steps one barrier
    # late, and warp group 0 makes up the count after the epilogue
    head = ("{", ind + "const int k_base = 0;")
    loop = ("}", "for (int k_base = 2 * BK; k_base < K; k_base += 2 * BK) {")
    if ExecutionModel.is_staggered(compiled.warp_stagger_index, len(prologue)):
        split = compiled.warp_stagger_index
        opening = [
            Stretch(steps=prologue[:split], code=code, indent=ind, head=head, tail=(
                ind + f"if (wg == 1) {barrier}  // stagger: warp group 1 one barrier behind",)),
            Stretch(steps=prologue[split:], code=code, indent=ind,
                    tail=(ind + f"{barrier}  // everyone, after the prologue", *loop))]
        tail = f"if (wg == 0) {barrier}  // stagger: warp group 0 matches group 1's count"
    else:
        opening = [Stretch(steps=prologue, code=code, indent=ind, head=head, tail=loop)]
        tail = "// no stagger: no extra barriers"
    body = render([
        *opening,
        Stretch(steps=renamed(compiled.kernel, renames), code=code, indent=ind,
                tail=("}", "{", ind + "const int k_base = K;")),
        Stretch(steps=renamed(compiled.epilogue, renames), code=code, indent=ind,
                tail=("}", tail))])
    mi, ni = g.mma_tiles
    values = dict(cta_setup=CTA_SETUP, load_cursor=LOAD_CURSOR, BM=g.bm, BN=g.bn, BK=g.bk,
                  GROUP_M=g.group_m, THREADS=g.threads, SMEM=g.smem_bytes, MI=mi, NI=ni)
    family = StreamFamily(**{part: text.format(**values) for part, text in FAMILY.items()})
    return _SOURCE.format(header=header_source(), name=KERNEL_NAME,
        body=stream_kernel_body(family, [ind + l for l in body], PROGRAM_NOTE),
        schedule=compiled.schedule_name, target=compiled.target_name,
        barrier_name=sync.barrier.name, stagger=compiled.warp_stagger_index,
        arch_note=arch_note(compiled), **values)


_SOURCE = r"""// Emitted by pipeline-core (emitter cuda-pingpong) from schedule {schedule} on target {target}.
{arch_note}// C[M,N] = A[M,K] . B[N,K]^T: bf16 in (raw u16), fp32 accumulate, bf16 out; both K-contiguous.
// Launch: grid (M/{BM})*(N/{BN}), block {THREADS} (2 warp groups of 4 warps), dynamic shared
// memory {SMEM} bytes.  Tile multiples only: M % {BM} == N % {BN} == K % (2*{BK}) == 0.
// Barriers: {barrier_name} 0; the warp groups run staggered (warp_stagger_index {stagger}).
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
    constexpr int BM = {BM}, BN = {BN}, BK = {BK}, GROUP_M = {GROUP_M}, THREADS = {THREADS};
    constexpr int QM = BM / 2, QN = BN / 2;                     // quadrant (subtile) rows
    constexpr int WTM = QM / 2, WTN = QN / 4;                   // one warp's part of a quadrant
    constexpr int MI = {MI}, NI = {NI}, KS = BK / 16;           // mma tiles per warp, k-steps
    constexpr int RC = BK * 2 / 16;                             // 16-byte chunks per tile row
    constexpr int A_BYTES = BM * BK * 2, STAGE_BYTES = (BM + BN) * BK * 2;
    constexpr int ROWS_PER_PASS = THREADS / RC;                 // rows one cp.async of all threads
    constexpr int PASSES_A = QM / ROWS_PER_PASS, PASSES_B = QN / ROWS_PER_PASS;
    static_assert(WTM == MI * 16 && WTN == NI * 8, "warp tile");

{cta_setup}
    const int wg = warp >> 2, wn = warp & 3;  // warp group (quadrant row half), column quarter""",
    "load": r"""    // LOAD: every thread copies chunk ld_chunk of rows ld_row + p * ROWS_PER_PASS of a subtile;
    // passes and subtiles move by whole swizzle periods, so one swizzled offset serves all.
{load_cursor}

    auto load_a = [&](int stage, int sub, int k) {{
        const u32 s = smem_base + stage * STAGE_BYTES + sub * QM * RC * 16 + ld_off;
#pragma unroll
        for (int p = 0; p < PASSES_A; ++p)
            cp_async_16(s + p * ROWS_PER_PASS * RC * 16,
                        a_g + (size_t)(sub * QM + p * ROWS_PER_PASS) * K + k);
    }};
    auto load_b = [&](int stage, int sub, int k) {{
        const u32 s = smem_base + stage * STAGE_BYTES + A_BYTES + sub * QN * RC * 16 + ld_off;
#pragma unroll
        for (int p = 0; p < PASSES_B; ++p)
            cp_async_16(s + p * ROWS_PER_PASS * RC * 16,
                        b_g + (size_t)(sub * QN + p * ROWS_PER_PASS) * K + k);
    }};""",
    "compute": r"""    // FRAG: ldmatrix.x4 row addresses.  A: lanes 0-15 rows 0-15 of k-half 0, 16-31 k-half 1.
    // B (n-major rows): lanes 0-7 n 0-7 k-half 0, 8-15 n 0-7 k-half 1, 16-23 n 8-15 k-half 0, ...
    // Row offsets are multiples of 16, so the swizzle of a lane's row is that of its lane row.
    const int a_lrow = lane & 15, a_half = lane >> 4;
    const int b_lrow = (lane & 7) + ((lane >> 4) << 3), b_half = (lane >> 3) & 1;
    const int a_swz = swizzle_chunk<RC>(a_lrow, 0), b_swz = swizzle_chunk<RC>(b_lrow, 0);
    const u32 a_off = (wg * WTM + a_lrow) * RC * 16, b_off = A_BYTES + (wn * WTN + b_lrow) * RC * 16;
    u32 af[2][KS][MI][4];         // A fragments of both quadrant rows, the whole K tile
    u32 bf[2][KS][NI / 2][4];     // B fragments of both quadrant columns
    float acc[2][2][MI][NI][4];   // the four quadrants' accumulators
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int m = 0; m < MI; ++m)
#pragma unroll
                for (int n = 0; n < NI; ++n)
#pragma unroll
                    for (int r = 0; r < 4; ++r) acc[i][j][m][n][r] = 0.f;

    auto frag_a = [&](int stage, int sub) {{
        const u32 s = smem_base + stage * STAGE_BYTES + sub * QM * RC * 16 + a_off;
#pragma unroll
        for (int kk = 0; kk < KS; ++kk)
#pragma unroll
            for (int m = 0; m < MI; ++m)
                ldmatrix_x4(af[sub][kk][m], s + m * 16 * RC * 16 + (((kk * 2 + a_half) ^ a_swz) * 16));
    }};
    auto frag_b = [&](int stage, int sub) {{
        const u32 s = smem_base + stage * STAGE_BYTES + sub * QN * RC * 16 + b_off;
#pragma unroll
        for (int kk = 0; kk < KS; ++kk)
#pragma unroll
            for (int n = 0; n < NI / 2; ++n)
                ldmatrix_x4(bf[sub][kk][n], s + n * 16 * RC * 16 + (((kk * 2 + b_half) ^ b_swz) * 16));
    }};
    auto mma_quadrant = [&](int i, int j) {{
#pragma unroll
        for (int kk = 0; kk < KS; ++kk)
#pragma unroll
            for (int m = 0; m < MI; ++m)
#pragma unroll
                for (int n = 0; n < NI; ++n)
                    mma_bf16_16816(acc[i][j][m][n], af[i][kk][m], bf[j][kk][n / 2][(n & 1) * 2],
                                   bf[j][kk][n / 2][(n & 1) * 2 + 1]);
    }};""",
    "finish": r"""    // Every accumulator goes out, bf16x2 per pair of columns.
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int m = 0; m < MI; ++m) {{
                const int row = tile_m * BM + i * QM + wg * WTM + m * 16 + g;
#pragma unroll
                for (int n = 0; n < NI; ++n) {{
                    const int col = tile_n * BN + j * QN + wn * WTN + n * 8 + 2 * t;
                    *reinterpret_cast<u32*>(C + (size_t)row * N + col) =
                        pack_bf16x2(acc[i][j][m][n][0], acc[i][j][m][n][1]);
                    *reinterpret_cast<u32*>(C + (size_t)(row + 8) * N + col) =
                        pack_bf16x2(acc[i][j][m][n][2], acc[i][j][m][n][3]);
                }}
            }}""",
}
#: What the program part of the kernel is, in its heading comment.
PROGRAM_NOTE = "the compiled entries, one line each (stagger split, 2*BK loop)"

EMITTERS = (EmitterRecord(
    EMITTER_NAME, f"standalone CUDA C++ for {SCHEDULE_NAME} on a ping-pong target offering "
    "mma.sync (h100-pingpong; the target's architecture, sm_80 and later): 2 "
    "staggered warp groups, cp.async double buffer, ldmatrix, mma.sync, non-aligned "
    "barrier.sync, entries one for one (-O BM/BN/BK: the tile, default 128x128x64)",
    (), emit_pingpong, kernel_families=(KERNEL_FAMILY,), options=OPTIONS,
    requires=MMA_SYNC_CP_ASYNC),)
