"""The ``cuda-attention`` emitter: kernel family ``attention`` on ``h100`` -> one CUDA kernel.

It writes the compiled ``flash-attention-fwd`` (docs/guide/attention.md) on the kit's frame, the
GEMM's (``kit_api.agents_kernel_body``: the rings' mbarriers, the roles, ``setmaxnreg``, the
persistent tile loop, whose head and per-tile lines this module gives as a ``DeviceTileLoop``):
every agent's prologue, K loop and epilogue go out step for step (``agent_stretches``), each
ring step's mbarrier code and each named barrier come from the kit (``ring_step_line``,
``consumer_sync_line``), so the kernel carries exactly the waits, arrivals and wgmma group waits
the core derived and proved.  This module owns only the family's device code: the TMA copies of
Q (once per output tile), K_j and V_j; S = Q.K_j^T (wgmma SS); the online softmax in registers
(row max, exp2 of the log2e-folded scale, row sum, P packed to 16 bits); the rescale of O; O +=
P.V_j (wgmma RS, P from registers); the final O / rowsum and the clipped store.  Keys past the
sequence's end get -inf before the softmax; queries past it are computed and not stored.  An
output tile with no KV block (KT == 0) runs only the once steps (the frame's guard,
``DeviceTileLoop.empty_tiles``; docs/guide/agents.md, "Loads issued once").  Causal masks are
written for both alignments of the plan's bounds; bottom-right adds the guard for rows that see
no key (``_NO_KEY_GUARD``).  K and V are read at KV head ``bh / group`` (grouped-query attention,
the kernel's ``group`` argument; docs/guide/attention.md, "Grouped-query attention").

Variants emitted: ``intra_overlap`` and ``pingpong``, each on or off.  Under ``intra_overlap``
the plan issues PV_{t-1} after S_t and runs the softmax of t while PV_{t-1} still reads P_{t-1}
from registers (``AgentSpec.lags``; docs/guide/attention.md), so P needs a second buffer: the
softmax leaves P_t in fp32 in S's own registers and the rescale step, which runs after the plan's
``wait_group 0``, packs it into the 16-bit A operand.  S's registers are free until S_{t+1} is
issued, and the packed P is written only when no PV reads it, so no register an in-flight wgmma
reads is ever written (ptxas would serialize the wgmmas otherwise).
One consumer warp group owns 64 query rows (``block_m / consumers == 64``).
"""
from __future__ import annotations

from pipeline_core.plugin_api import (AgentProgram, CompiledSchedule, EmitterRecord, Param,
                                      ProgramError, Ring, Step, StepKind)

from pipeline_core_nvidia_h100.kit_api import (TARGET_NAME, WATCHDOG, AgentCode, AgentsFamily,
                                               DeviceTileLoop, RingState, TileLoop,
                                               agent_stretches, agents_kernel_body,
                                               consumer_sync_line, declared_geometry,
                                               gemm_call_header_source, header_source,
                                               loop_tile, render, require_ring_depths,
                                               ring_step_line, wgmma_header_source, wgmma_rs,
                                               wgmma_ss)

from pipeline_core_schedules_attention.schedule import (KERNEL_FAMILY, NAME, WGMMA_M,
                                                        AttentionGeometry, AttentionTag)
from pipeline_core_schedules_attention.signature import KERNEL_NAME, SIGNATURE
from pipeline_core_schedules_attention.tile_order import order_exprs
from pipeline_core_schedules_attention.tiles import LoopBounds, plan_bounds

EMITTER_NAME = "cuda-attention"
#: ``-O dtype``: the element type of Q, K, V and O
DTYPE = Param("dtype", str, "bf16", "element type of q, k, v and the output",
              choices=("bf16", "fp16"))
_PACK = {"bf16": "pch100::pack_bf16x2", "fp16": "pack_f16x2"}


def geometry_refusal(g: AttentionGeometry) -> str:
    """Why this emitter cannot write geometry ``g`` ("" when it can): what :func:`emit_attention`
    refuses with, and what ``pipeline-core compile`` asks (:func:`refuses`), so a geometry the
    schedule proves but the kernel cannot take is said at compile too."""
    if g.rows != WGMMA_M:
        return (f"writes {WGMMA_M} query rows per consumer; -p block_m={g.block_m} over "
                f"{g.consumers} consumer{'s' if g.consumers != 1 else ''} gives {g.rows}: set "
                f"-p block_m={WGMMA_M * g.consumers}")
    if g.head_dim % 64:
        return f"-p head_dim={g.head_dim} must be a multiple of 64 (one 128-byte swizzled row)"
    if g.block_n % 16:  # the PV wgmma's k steps (the schedule refuses it before; one home)
        return f"-p block_n={g.block_n} must be a multiple of 16 (PV's k step)"
    return ""


def refuses(compiled: CompiledSchedule) -> str:
    """The emitter record's ``refuses``: the geometry's refusal for a compiled schedule."""
    return geometry_refusal(declared_geometry(compiled, KERNEL_FAMILY, AttentionGeometry,
                                              EMITTER_NAME))


def _fail(why: str) -> ProgramError:
    return ProgramError(f"emitter {EMITTER_NAME}: {why}")


def _step_line(s: Step, rings: dict[str, Ring], single_issuer: bool, owner: str,
               body_tags: list[int], watchdog: int) -> str:
    if s.kind in (StepKind.PHASE_WAIT, StepKind.EXPECT_TX, StepKind.ARRIVE):
        ring = RingState.of(s, rings[s.channel].stages)
        line = ring_step_line(s, ring.stage, ring.parity(s.phase_offset), single_issuer,
                              watchdog)
        assert line is not None
        return line
    sync = consumer_sync_line(s)  # named barriers, the wgmma group's fence / commit / wait
    if sync is not None:
        return sync
    if s.kind == StepKind.OP:
        tag = body_tags[s.op]
        kstage = RingState.of(s, "STAGES").stage
        if tag == AttentionTag.TMA_Q:
            qs = rings["q_full"].stages
            return (f"for (int c = 0; c < HD / 64; ++c) tma_load_2d(stage_q(o % {qs}) + c * BM * "
                    f"128, &tmQ, q_full_bar(o % {qs}), c * 64, bh * Sq + tile_m * BM);")
        if tag in (AttentionTag.TMA_K, AttentionTag.TMA_V):
            x = "k" if tag == AttentionTag.TMA_K else "v"
            return (f"for (int c = 0; c < HD / 64; ++c) tma_load_2d(stage_{x}({kstage}) + c * BN "
                    f"* 128, &tm{x.upper()}, {x}_full_bar({kstage}), c * 64, (bh / group) * Sk + "
                    f"{loop_tile(s)} * BN);")
        if tag == AttentionTag.WGMMA_S:
            return f"wgmma_s({kstage});"
        if tag == AttentionTag.SOFTMAX:
            return f"softmax({loop_tile(s)});"
        if tag == AttentionTag.RESCALE:
            return "rescale();"
        if tag == AttentionTag.WGMMA_PV:
            return f"wgmma_pv({kstage});"
    raise _fail(f"agent {owner}: no CUDA for step {s.kind.value} (tag {s.tag})")


def _once_only(p: AgentProgram) -> list[Step]:
    """An agent's steps at 0 KV blocks: its once steps alone, in program order."""
    return [s for it in (*p.prologue, p.kernel, *p.epilogue) for s in it if s.once]


def emit_attention(compiled: CompiledSchedule, *, watchdog: int | None = None,
                   dtype: str = "bf16") -> str:
    """CUDA C++ for a compiled schedule of kernel family ``attention`` (see the module)."""
    g = declared_geometry(compiled, KERNEL_FAMILY, AttentionGeometry, EMITTER_NAME)
    why = geometry_refusal(g)
    if why:
        raise _fail(why)
    require_ring_depths(compiled.plan.rings, g.stages, g.q_stages, EMITTER_NAME)
    plan = compiled.plan
    rule = plan_bounds(compiled)
    causal = rule if g.causal else None
    if g.causal and (causal is None or not causal.causal):
        raise _fail("-p causal=true, but the plan records no causal bounds; recompile the "
                    "schedule")
    bounds = _tile_bounds(causal) if causal is not None else ()
    order = "const int " + ", ".join(order_exprs(g.causal)) + ";"
    if rule is None:
        raise _fail("the plan records no loop bounds; recompile the schedule")
    rings = {r.name: r for r in plan.rings}
    tags = [o.tag for o in compiled.body]
    producer, *consumers = plan.programs
    wd = watchdog or 0

    def code(p: AgentProgram, single: bool, label: str) -> AgentCode:
        """An agent's program, and its once steps alone (an output tile with no KV block)."""
        def line(s: Step) -> str:
            return _step_line(s, rings, single, p.name, tags, wd)
        return AgentCode(lines=tuple(render(agent_stretches(p, line, label))),
                         once=tuple(line(s) for s in _once_only(p)))

    loop = ("int rb = 0, o = 0;", "for (int tile = blockIdx.x; tile < TILES; "
            "tile += gridDim.x, rb += KT, ++o) {")
    tiles = DeviceTileLoop(
        counts=(f"const int MT = (Sq + BM - 1) / BM, TILES = BH * MT, "
                f"{_CAUSAL_BLOCKS if g.causal else _blocks(rule)};",),
        producer=TileLoop(head=loop, tile=(order, *bounds[:1])),
        consumers=TileLoop(head=loop, tile=(order, *bounds)), empty_tiles=True)
    family = AgentsFamily(
        constants=_CONSTANTS.format(BM=g.block_m, BN=g.block_n, HD=g.head_dim, STAGES=g.stages,
                                    QSTAGES=g.q_stages, PREGS=g.producer_registers,
                                    CREGS=g.consumer_registers),
        ring_bytes="Q_STAGES * Q_BYTES + 2 * STAGES * KV_BYTES", stage_views=_STAGE_VIEWS,
        consumer_state="        float oacc[HD / 2], sacc[BN / 2];\n        u32 pk[BN / 4];",
        compute=_consumer_tile(g.intra_overlap, g.causal,
                               causal is not None and causal.align == "bottom_right"),
        finish=_FINISH, once_stages="Q_STAGES")
    body = agents_kernel_body(
        rings=plan.rings, producer=code(producer, True, producer.name),
        # one label for every consumer, so consumers that differ in no step share one program
        consumers=[code(c, False, "consumer") for c in consumers], producer_name=producer.name,
        producer_registers="PRODUCER_REGS", consumer_registers="CONSUMER_REGS", family=family,
        tiles=tiles, emitter=EMITTER_NAME)
    return _SOURCE.format(
        header=header_source(), wgmma_header=wgmma_header_source(),
        call_header=gemm_call_header_source(),
        wgmma_fns=wgmma_ss(g.block_n, dtype, scale_d=True) + wgmma_rs(g.head_dim, dtype),
        name=KERNEL_NAME, params=SIGNATURE.render(), schedule=compiled.schedule_name, target=compiled.target_name,
        threads=g.threads, smem=g.smem_bytes, dtype=dtype, BM=g.block_m, HD=g.head_dim,
        body=body.replace("PACK_", _PACK[dtype])
        .replace("OFFSET_", _OFFSET[causal.align] if causal is not None else "")
        .replace("wgmma_ss_nBN_", f"wgmma_m64n{g.block_n}k16")
        .replace("wgmma_rs_nHD_", f"wgmma_rs_m64n{g.head_dim}k16")
        .replace("pcgc_desc_mn", "pcgc::smem_desc_sw128_mn<BN * 128>"))


def _blocks(b: LoopBounds) -> str:
    """Not causal: every output tile's KV blocks and first masked one (the key tail's), set
    once from the plan's bounds ..."""
    trips, first = tile_bounds_exprs(b)
    return f"KV_BLOCKS = (Sk + BN - 1) / BN, KT = {trips}, FM = {first}"


#: ... or (causal) KT and FM set per output tile from the plan's bounds
_CAUSAL_BLOCKS = "KV_BLOCKS = (Sk + BN - 1) / BN;\n    int KT = KV_BLOCKS, FM = KV_BLOCKS"
#: LoopBounds.offset per alignment, in the kernel's arguments
_OFFSET = {"top_left": "0", "bottom_right": "(Sk - Sq)"}


def tile_bounds_exprs(b: LoopBounds) -> tuple[str, str]:
    """``LoopBounds.trips`` and ``first_masked`` of output tile ``tile_m`` as C expressions of
    the kernel's ``tile_m, Sq, Sk, BM, BN, KV_BLOCKS`` and ``KT`` (the tile's trips), written
    from the plan's bounds (block_m, block_n, align) so the kernel runs exactly the plan's rule
    (docs/guide/attention.md, "Causal bounds and tails").  C's ``/`` truncates where Python's
    ``//`` floors; the two differ only on negative quotients, which ``max(0, ...)`` clamps."""
    if not b.causal:  # every block, the one holding the key tail masked
        return "KV_BLOCKS", f"max(0, KT - (Sk % {b.block_n} != 0))"
    if b.align not in _OFFSET:
        raise _fail(f"no CUDA for causal alignment {b.align!r}")
    off = _OFFSET[b.align]
    trips = (f"max(0, min(KV_BLOCKS, (min((tile_m + 1) * {b.block_m}, Sq) - 1 + {off} + 1 "
             f"+ {b.block_n} - 1) / {b.block_n}))")
    first = (f"max(0, min(min(KT - (Sk % {b.block_n} != 0), "
             f"max(0, (tile_m * {b.block_m} + {off} + 1) / {b.block_n})), KT))")
    return trips, first


def _tile_bounds(b: LoopBounds) -> tuple[str, ...]:
    """The per-output-tile lines setting KT (and, for the consumers, FM) from the plan."""
    trips, first = tile_bounds_exprs(b)
    return (f"KT = {trips};  // the plan's LoopBounds.trips",
            f"FM = {first};  // the plan's LoopBounds.first_masked")


_SOURCE = r"""// Emitted by pipeline-core (emitter cuda-attention) from schedule {schedule} on target {target}.
// O = softmax(Q.K^T * scale) . V per (batch, head), {dtype} in and out, fp32 accumulate.
// Q, K, V: TMA tensor maps over [B*H*S, {HD}] (box 64 x rows, 128-byte swizzle), K and V over
// B*Hkv heads: query head bh reads KV head bh / group (grouped-query attention, group = H / Hkv);
// O: [B*H*Sq, {HD}].  Launch: block {threads} (warp group 0: producer; 1..: consumers), dynamic
// shared memory {smem} bytes, any grid up to BH * ceil(Sq / {BM}) CTAs (each runs output tiles
// blockIdx.x, + gridDim.x, ...; causal, in the order hg and snake pick: tile_order.py).
{header}
{wgmma_header}
{call_header}
// 2^x on the MUFU alone (FA3's softmax): exp2f's accurate path adds a compare and two multiplies
// around each MUFU.EX2 on the FP32 pipe the softmax shares with the rescale.  ftz: an input that
// underflows gives 0, which a probability past the row max's range is anyway.
__device__ __forceinline__ float ex2_approx(float x) {{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}}
// Two fp32 values as one f16x2 word (as pch100::pack_bf16x2); `lo` goes to the lower address.
__device__ __forceinline__ pcwg::u32 pack_f16x2(float lo, float hi) {{
    pcwg::u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}}
{wgmma_fns}
extern "C" __global__ void __launch_bounds__({threads}, 1)
{name}({params}) {{
{body}
}}
"""

#: the kernel's constants (the frame's STAGES, the once ring's Q_STAGES, the roles' registers)
_CONSTANTS = r"""    constexpr int BM = {BM}, BN = {BN}, HD = {HD}, STAGES = {STAGES}, Q_STAGES = {QSTAGES};
    constexpr int ROWS = 64;
    constexpr int PRODUCER_REGS = {PREGS}, CONSUMER_REGS = {CREGS};
    constexpr u32 Q_BYTES = BM * HD * 2, KV_BYTES = BN * HD * 2;"""
#: Q's ring (output tile o's Q in stage o % Q_STAGES), then the K and V rings, from the frame's
#: ``ring`` (the mbarriers follow them: AgentsFamily.ring_bytes)
_STAGE_VIEWS = r"""    auto stage_q = [&](int s) { return ring + s * Q_BYTES; };
    auto stage_k = [&](int s) { return ring + Q_STAGES * Q_BYTES + s * KV_BYTES; };
    auto stage_v = [&](int s) { return ring + Q_STAGES * Q_BYTES + (STAGES + s) * KV_BYTES; };"""

#: per output tile, before the consumer's steps: O and the row statistics cleared, the helpers
#: its op steps call.
_CONSUMER_TILE = r"""            float m0 = -INFINITY, m1 = -INFINITY;  // row max (log2 units) of rows g, g + 8
            float l0 = 0.f, l1 = 0.f, c0 = 0.f, c1 = 0.f;  // row sums, the last correction
#pragma unroll
            for (int i = 0; i < HD / 2; ++i) oacc[i] = 0.f;
            const int w = wtid / 32, g = lane / 4, q = lane % 4;
            const u32 q_smem = stage_q(o % Q_STAGES);  // this output tile's Q
            auto wgmma_s = [&](int s) {
#pragma unroll
                for (int kk = 0; kk < HD / 16; ++kk)
                    wgmma_ss_nBN_(sacc,
                        smem_desc_sw128(q_smem + (kk / 4) * BM * 128 + consumer * ROWS * 128
                                        + (kk % 4) * 32),
                        smem_desc_sw128(stage_k(s) + (kk / 4) * BN * 128 + (kk % 4) * 32), kk > 0);
            };
            auto softmax = [&](int j) {
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) fence_operand(sacc[i]);
                float x0 = -INFINITY, x1 = -INFINITY;  // the block's row max of the raw scores
SCALE_MAX_                x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
                x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
                x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
                x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
                x0 = fmaxf(m0, x0 * scale_log2);  // the running max, in log2 units (scale > 0)
                x1 = fmaxf(m1, x1 * scale_log2);
GUARD_                c0 = ex2_approx(m0 - MX0_);
                c1 = ex2_approx(m1 - MX1_);
                m0 = x0;
                m1 = x1;
                float s0 = 0.f, s1 = 0.f;
#pragma unroll
                for (int c = 0; c < BN / 8; ++c) {  // p = 2^(s * scale_log2 - max): one FFMA, one MUFU
                    const float p0 = ex2_approx(fmaf(sacc[4 * c], scale_log2, -MX0_));
                    const float p1 = ex2_approx(fmaf(sacc[4 * c + 1], scale_log2, -MX0_));
                    const float p2 = ex2_approx(fmaf(sacc[4 * c + 2], scale_log2, -MX1_));
                    const float p3 = ex2_approx(fmaf(sacc[4 * c + 3], scale_log2, -MX1_));
                    s0 += p0 + p1;
                    s1 += p2 + p3;
                    KEEP_P_
                }
                l0 = l0 * c0 + s0;
                l1 = l1 * c1 + s1;
            };
            auto rescale = [&]() {
#pragma unroll
                for (int i = 0; i < HD / 2; ++i) fence_operand(oacc[i]);
#pragma unroll
                for (int c = 0; c < HD / 8; ++c) {
                    oacc[4 * c] *= c0; oacc[4 * c + 1] *= c0;
                    oacc[4 * c + 2] *= c1; oacc[4 * c + 3] *= c1;
                }PACK_P_
            };
            auto wgmma_pv = [&](int s) {
#pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk)
                    wgmma_rs_nHD_(oacc, pk[4 * kk], pk[4 * kk + 1], pk[4 * kk + 2],
                                  pk[4 * kk + 3],
                        pcgc_desc_mn(stage_v(s) + kk * 2048));
            };"""

#: the softmax packs P_t at once (no PV in flight reads the packed P) ...
_PACK_NOW = ("pk[2 * c] = PACK_(p0, p1);\n"
             "                    pk[2 * c + 1] = PACK_(p2, p3);")
#: ... or, under intra_overlap, keeps it in fp32 in S's registers (PV_{t-1} still reads pk) ...
_KEEP_FP32 = ("sacc[4 * c] = p0; sacc[4 * c + 1] = p1;\n"
              "                    sacc[4 * c + 2] = p2; sacc[4 * c + 3] = p3;")
#: ... and the rescale, after the plan's wait_group 0, packs it for PV_t
#: scale and row max of a KV block: every key kept, or keys past the end -inf (not causal) ...
_SCALE_MAX = r"""#pragma unroll
                for (int c = 0; c < BN / 8; ++c) {
KEY_#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        IN_
                        sacc[4 * c + e] = IN0_ ? sacc[4 * c + e] : -INFINITY;
                        sacc[4 * c + 2 + e] = IN1_ ? sacc[4 * c + 2 + e] : -INFINITY;
                        x0 = fmaxf(x0, sacc[4 * c + e]);
                        x1 = fmaxf(x1, sacc[4 * c + 2 + e]);
                    }
                }
"""
_TAIL_MASK = ("const bool in = key + e < Sk;  // keys past the end: -inf", "in", "in")
#: ... or (causal) the plan's mask on the masked blocks only: a key past the row's last one
#: (row + offset) or past the end is -inf (plan.LoopBounds, docs/guide/attention.md "Causal
#: bounds and tails"); the blocks before the first masked one keep every key
_NO_MASK = ("// an unmasked KV block (before the plan's first_masked): every key kept",
            "true", "true")
_CAUSAL_MASK = ("const bool in0 = key + e < Sk && key + e <= lim0, "
                "in1 = key + e < Sk && key + e <= lim1;", "in0", "in1")


def _scale_max(mask: tuple[str, str, str]) -> str:
    key = "" if mask is _NO_MASK else "                    const int key = j * BN + c * 8 + 2 * q;\n"
    return (_SCALE_MAX.replace("KEY_", key).replace("IN_", mask[0]).replace("IN0_", mask[1])
            .replace("IN1_", mask[2]))


def _masked_scale_max(causal: bool) -> str:
    """The softmax's branch: the mask's path only from the tile's first masked block (FM, the
    plan's ``LoopBounds.first_masked``): the diagonal's and the key tail's (causal) or the key
    tail's alone; the blocks before it keep every key with no compare."""
    lim = ("                    const int lim0 = tile_m * BM + consumer * ROWS + w * 16 "
           "+ g + OFFSET_, lim1 = lim0 + 8;\n") if causal else ""
    return ("                if (j >= FM) {  // a masked KV block\n" + lim
            + _scale_max(_CAUSAL_MASK if causal else _TAIL_MASK)
            + "                } else {\n" + _scale_max(_NO_MASK) + "                }\n")

_PACK_LATER = r"""
#pragma unroll
                for (int c = 0; c < BN / 8; ++c) {
                    pk[2 * c] = PACK_(sacc[4 * c], sacc[4 * c + 1]);
                    pk[2 * c + 1] = PACK_(sacc[4 * c + 2], sacc[4 * c + 3]);
                }"""


#: bottom-right causal (LoopBounds.align): the rows before Sq - Sk see no key, so their row max
#: stays -inf and exp2(-inf - -inf) would be NaN; such a row's exponentials are taken against 0
#: instead, so its P, row sum and O stay 0 and the finish stores 0 (FlashAttention's output for
#: a row with no key; docs/guide/attention.md "Bottom-right causal").  Top-left and unmasked
#: rows always see key 0, so their kernels carry no guard.
_NO_KEY_GUARD = ("                const float z0 = x0 == -INFINITY ? 0.f : x0, "
                 "z1 = x1 == -INFINITY ? 0.f : x1;  // a row with no key yet: 0, not NaN\n")


def _consumer_tile(intra_overlap: bool, causal: bool, guard: bool = False) -> str:
    """The consumer's per-tile helpers; where P is packed depends on ``intra_overlap`` (see the
    module docstring), where keys are masked on ``causal``, and ``guard`` (bottom-right causal)
    adds :data:`_NO_KEY_GUARD`."""
    return (_CONSUMER_TILE.replace("GUARD_", _NO_KEY_GUARD if guard else "")
            .replace("MX0_", "z0" if guard else "x0").replace("MX1_", "z1" if guard else "x1")
            .replace("KEEP_P_", _KEEP_FP32 if intra_overlap else _PACK_NOW)
            .replace("PACK_P_", _PACK_LATER if intra_overlap else "")
            .replace("SCALE_MAX_", _masked_scale_max(causal)))


#: per output tile, after the consumer's steps: O / rowsum out, rows past Sq not stored
_FINISH = r"""#pragma unroll
            for (int i = 0; i < HD / 2; ++i) fence_operand(oacc[i]);
            l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
            l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
            l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
            l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
            const float r0 = l0 > 0.f ? 1.f / l0 : 0.f, r1 = l1 > 0.f ? 1.f / l1 : 0.f;
            const int row = tile_m * BM + consumer * ROWS + w * 16 + g;
            unsigned short* out = O + ((size_t)bh * Sq) * HD;
#pragma unroll
            for (int c = 0; c < HD / 8; ++c) {
                const int col = c * 8 + 2 * q;
                if (row < Sq)
                    *reinterpret_cast<u32*>(out + (size_t)row * HD + col) =
                        PACK_(oacc[4 * c] * r0, oacc[4 * c + 1] * r0);
                if (row + 8 < Sq)
                    *reinterpret_cast<u32*>(out + (size_t)(row + 8) * HD + col) =
                        PACK_(oacc[4 * c + 2] * r1, oacc[4 * c + 3] * r1);
            }"""

EMITTERS = (EmitterRecord(
    EMITTER_NAME, f"standalone CUDA C++ (sm_90a) for {NAME}: TMA producer (Q once, K and V "
    "rings), wgmma consumers (S = Q.K^T, online softmax, O += P.V with P from registers); every "
    "agent's steps one for one", (TARGET_NAME,), emit_attention,
    kernel_families=(KERNEL_FAMILY,), options=(WATCHDOG, DTYPE), refuses=refuses),)
