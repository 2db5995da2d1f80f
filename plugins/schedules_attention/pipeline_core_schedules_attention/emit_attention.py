"""The ``cuda-attention`` emitter: kernel family ``attention`` on ``h100`` -> one CUDA kernel.

It writes the compiled ``flash-attention-fwd`` (docs/guide/attention.md) on the kit's frame, the
GEMM's (``kit_api.agents_kernel_body``: the rings' mbarriers, the roles, ``setmaxnreg``, the
persistent tile loop, whose head and per-tile lines this module gives as a ``DeviceTileLoop``):
every agent's prologue, K loop and epilogue go out step for step (``agent_stretches``), each
ring step's mbarrier code and each named barrier come from the kit (``ring_step_line``,
``consumer_sync_line``), so the kernel carries exactly the waits, arrivals and wgmma group waits
the core derived and proved.  The family's device math is ``attention.cuh`` (package data, pasted
after the kit's headers): device functions in namespace ``pcat`` for S = Q.K_j^T (wgmma SS), the
online softmax in registers (row max, exp2 of the log2e-folded scale, row sum, P packed to 16
bits), the rescale of O, O += P.V_j (wgmma RS, P from registers) and the final O / rowsum with
its clipped store; the header says why each is written as it is.  This module writes the TMA
copies of Q (once per output tile), K_j and V_j, the constants and stage views, one call of the
header per compute op step, and each variant's choices as the calls' template arguments
(:class:`_Variant`): the element type, where P is packed, the masked blocks' mask (keys past the
sequence's end; causal, also past the row's last key, at the plan's alignment) and, for
bottom-right causal, the guard of rows that see no key.  Queries past the end are computed and
not stored.  An output tile with no KV block (KT == 0) runs only the once steps (the frame's
guard, ``DeviceTileLoop.empty_tiles``; docs/guide/agents.md, "Loads issued once").  Q, K and V are
read through rank-4 tensor maps of their own strides at (d, s, h, b) (``layout.py``), K and V
at KV head ``h / group`` (grouped-query attention, the kernel's ``group`` argument;
docs/guide/attention.md, "Grouped-query attention"); O is written through its strides.

Variants emitted: ``intra_overlap`` and ``pingpong``, each on or off.  Under ``intra_overlap``
the plan issues PV_{t-1} after S_t and runs the softmax of t while PV_{t-1} still reads P_{t-1}
from registers (``AgentSpec.lags``; docs/guide/attention.md), so P needs a second buffer: the
softmax leaves P_t in fp32 in S's own registers and the rescale step, which runs after the plan's
``wait_group 0``, packs it into the 16-bit A operand (``pcat::PackP::later``), so no register an
in-flight wgmma reads is ever written (ptxas would serialize the wgmmas otherwise).
One consumer warp group owns 64 query rows (``block_m / consumers == 64``, ``pcat::ROWS``).

``-p varlen`` (packed variable-length batches): the same programs and device code on the tile
loop, loads, finish and signature of ``emit_varlen.py``, which says what differs.
"""
from __future__ import annotations

from typing import Any

import attrs

from pipeline_core.plugin_api import (AgentProgram, CompiledSchedule, EmitterRecord, Param,
                                      ProgramError, Ring, SharedIssue, Step, StepKind,
                                      lead_only)

from pipeline_core_nvidia_h100.kit_api import (TARGET_NAME, WATCHDOG, AgentCode, AgentsFamily,
                                               DeviceTileLoop, KernelSignature, RingState,
                                               TileLoop,
                                               agent_stretches, agents_kernel_body,
                                               consumer_sync_line, declared_geometry,
                                               gemm_call_header_source, header_source,
                                               loop_tile, pasted, render, require_ring_depths,
                                               ring_step_line, wgmma_header_source, wgmma_rs,
                                               wgmma_ss)

from pipeline_core_schedules_attention.decode_tiles import DecodeBounds
from pipeline_core_schedules_attention.decode_tiles import NARROW_ROWS
from pipeline_core_schedules_attention.emit_decode import (NARROW_STATE, decode_compute,
                                                           decode_finish, decode_header,
                                                           decode_load_line, decode_mask,
                                                           decode_op_line, decode_pv_line,
                                                           decode_tile_loop)
from pipeline_core_schedules_attention.emit_varlen import (varlen_finish, varlen_header,
                                                           varlen_tile_loop)
from pipeline_core_schedules_attention.schedule import (KERNEL_FAMILY, NAME, WGMMA_M,
                                                        AttentionGeometry, AttentionTag)
from pipeline_core_schedules_attention.emit_window import (OFFSET, WINDOW_BLOCKS,
                                                          window_mask, window_tile_lines)
from pipeline_core_schedules_attention.signature import (DECODE_SIGNATURE, KERNEL_NAME,
                                                         forward_signature)
from pipeline_core_schedules_attention.tile_order import POSITION, loop_head, order_exprs
from pipeline_core_schedules_attention.tiles import LoopBounds, plan_bounds
from pipeline_core_schedules_attention.varlen_tiles import VarlenBounds

EMITTER_NAME = "cuda-attention"
#: ``-O dtype``: the element type of Q, K, V and O
DTYPE = Param("dtype", str, "bf16", "element type of q, k, v and the output",
              choices=("bf16", "fp16"))
#: the element type's policy in ``attention.cuh`` (how P and O are packed)
ELEM = {"bf16": "pcat::Bf16", "fp16": "pcat::Fp16"}


def geometry_refusal(g: AttentionGeometry) -> str:
    """Why this emitter cannot write geometry ``g`` ("" when it can): what :func:`emit_attention`
    refuses with, and what ``pipeline-core compile`` asks (:func:`refuses`), so a geometry the
    schedule proves but the kernel cannot take is said at compile too."""
    if g.rows != WGMMA_M and not (g.decode and g.rows in NARROW_ROWS):
        return (f"writes {WGMMA_M} query rows per consumer; -p block_m={g.block_m} over "
                f"{g.consumers} consumer{'s' if g.consumers != 1 else ''} gives {g.rows}: set "
                f"-p block_m={WGMMA_M * g.consumers}")
    if g.head_dim % 16:  # QK's k step (a box's columns past D read as zeros: box_cols)
        return f"-p head_dim={g.head_dim} must be a multiple of 16 (QK's k step)"
    if g.block_n % 16:  # the PV wgmma's k steps (the schedule refuses it before; one home)
        return f"-p block_n={g.block_n} must be a multiple of 16 (PV's k step)"
    return ""


def refuses(compiled: CompiledSchedule) -> str:
    """The emitter record's ``refuses``: the geometry's refusal for a compiled schedule."""
    return geometry_refusal(declared_geometry(compiled, KERNEL_FAMILY, AttentionGeometry,
                                              EMITTER_NAME))


def _fail(why: str) -> ProgramError:
    return ProgramError(f"emitter {EMITTER_NAME}: {why}")


#: query head bh's head and batch (its TMA coordinates: layout.bhsd_map's (d, s, h, b); K and
#: V at KV head HEAD / group) and its output rows (the output's own strides, q's layout)
HEAD, BATCH = "bh % H", "bh / H"


@attrs.frozen(kw_only=True)
class _Variant:
    """A kernel's choices among ``attention.cuh``'s device functions, as their template
    arguments: the element type, where P is packed (``intra_overlap``), the masked blocks' mask
    and the guard of rows with no key (causal and its alignment), the per-N wgmma wrappers."""

    elem: str  # pcat::Bf16 or pcat::Fp16
    pack: str  # pcat::PackP::now, or ::later under intra_overlap
    mask: str  # pcat::KeyTail{Sk}, or (causal) pcat::Causal{Sk, the plan's offset}
    guard: bool  # bottom-right causal: a row may see no key
    qk: str  # the SS wrapper of S = Q.K^T (wgmma_m64n{BN}k16)
    pv: str  # the RS wrapper of O += P.V (wgmma_rs_m64n{HDV}k16)
    #: the TMA copies' row of Q's block, the start of K's and V's rows and the batch
    #: coordinate: the fixed-length kernel's, or (varlen) offset by the tile's sequence's
    #: first row in the packed tensors (``q0``, ``k0``) on their maps' batch of one
    q_row: str = "tile_m * BM"
    kv_from: str = ""
    batch: str = BATCH
    #: windowed (emit_window.py): the softmax's KV block is ``KF + t``, its first masked one
    #: ``FM`` but before ``LM`` (the window's left edge)
    window: bool = False
    #: the logit softcap (attention_window.cuh's ``cap`` before the softmax)
    softcap: bool = False
    #: decode (emit_decode.py): its loads, the softmax of KV block ``KF + t`` against the
    #: global ``FM``, and PV clearing V's rows past the end on the tail block
    decode: bool = False
    #: decode's narrow tile (attention_decode.cuh, "Narrow tiles": S^T = K.Q^T, O^T += V^T.P^T)
    narrow: bool = False
    #: decode's producer warps sharing the K/V copies (the plan's record of -p kv_issuers:
    #: the lead, warp 0, alone runs the steps ``lead_only`` picks); None: one thread issues
    shared: SharedIssue | None = None
    #: the head dim QK reads, where it is not the kernel's ``HD`` (Q's and K's boxes' columns:
    #: D=96 runs S over 96 columns); "" where they are one
    cols: str = ""
    #: the head dim the finish stores, where it is not ``HDV`` (V's boxes' columns, O's and
    #: PV's N: D=96 runs O over 128 columns whose last 32 are V's zeros, and stores 96)
    out_cols: str = ""

    def op_line(self, tag: int, stage: str, tile: str) -> str:
        """One call of the header per compute op step (a ring stage's S, PV; a KV block's
        softmax; the rescale)."""
        if self.narrow and tag != AttentionTag.WGMMA_PV:
            return decode_op_line(tag, stage, tile, elem=self.elem, mask=self.mask,
                                  guard=self.guard, qk=self.qk)
        if tag == AttentionTag.WGMMA_S:
            layout = ", KV::PS, KV::GS" if self.decode else ""  # decode's K stage layout
            return (f"pcat::qk<BM, BN, {self.cols or 'HD'}, {self.qk}{layout}>(sacc, q_smem, "
                    f"stage_k({stage}), consumer);")
        if tag == AttentionTag.SOFTMAX:
            block, first = ((f"KF + {tile}", f"KF + {tile} < LM ? 0 : FM") if self.window
                            else (f"KF + {tile}", "FM") if self.decode else (tile, "FM"))
            cap = "pcat::cap<BN>(sacc, softcap_scale); " if self.softcap else ""
            return (f"{cap}pcat::softmax<BN, {self.elem}, {self.pack}, "
                    f"{str(self.guard).lower()}>(sacc, pk, rows, {self.mask}, {block}, {first}, "
                    "scale_log2);")
        if tag == AttentionTag.RESCALE:
            return f"pcat::rescale<HDV, BN, {self.elem}, {self.pack}>(oacc, sacc, pk, rows);"
        assert tag == AttentionTag.WGMMA_PV
        if self.decode:
            return decode_pv_line(self.pv, stage, tile, self.narrow)
        return f"pcat::pv<BN, HDV, {self.pv}>(oacc, pk, stage_v({stage}));"


def _step_line(s: Step, rings: dict[str, Ring], single_issuer: bool, owner: str,
               body_tags: list[int], watchdog: int, variant: _Variant) -> str:
    if s.kind in (StepKind.PHASE_WAIT, StepKind.EXPECT_TX, StepKind.ARRIVE):
        ring = RingState.of(s, rings[s.channel].stages)
        line = ring_step_line(s, ring.stage, ring.parity(s.phase_offset), single_issuer,
                              watchdog)
        assert line is not None
        return _lead_guard(s, rings, single_issuer, variant, line)
    sync = consumer_sync_line(s)  # named barriers, the wgmma group's fence / commit / wait
    if sync is not None:
        return sync
    if s.kind == StepKind.OP:
        tag = body_tags[s.op]
        kstage = RingState.of(s, "STAGES").stage
        if variant.decode and tag in (AttentionTag.TMA_Q, AttentionTag.TMA_K,
                                      AttentionTag.TMA_V):
            return _lead_guard(s, rings, single_issuer, variant,
                               decode_load_line(tag, kstage, rings["q_full"].stages))
        if tag == AttentionTag.TMA_Q:
            qs = rings["q_full"].stages
            return (f"for (int c = 0; c < HD / 64; ++c) pcat::tma_load_4d(stage_q(o % {qs}) + c "
                    f"* BM * 128, &tmQ, q_full_bar(o % {qs}), c * 64, {variant.q_row}, {HEAD}, "
                    f"{variant.batch});")
        if tag in (AttentionTag.TMA_K, AttentionTag.TMA_V):
            x, hd = ("k", "HD") if tag == AttentionTag.TMA_K else ("v", "HDV")
            return (f"for (int c = 0; c < {hd} / 64; ++c) pcat::tma_load_4d(stage_{x}({kstage}) "
                    f"+ c * BN * 128, &tm{x.upper()}, {x}_full_bar({kstage}), c * 64, "
                    f"{variant.kv_from}{loop_tile(s)} * BN, {HEAD} / group, {variant.batch});")
        if tag in _COMPUTE:
            return variant.op_line(tag, kstage, loop_tile(s))
    raise _fail(f"agent {owner}: no CUDA for step {s.kind.value} (tag {s.tag})")


def _lead_guard(s: Step, rings: dict[str, Ring], single_issuer: bool, variant: _Variant,
                line: str) -> str:
    """``line`` as the producer's warps run it: of several issuing warps (the plan's
    ``shared_issue``), the steps ``lead_only`` picks (a stage's byte announcement, Q's copy and
    its ring's steps) under warp 0's test, every other step on each warp's first lane."""
    if variant.shared is not None and single_issuer \
            and lead_only(variant.shared, tuple(rings.values()), s):
        return f"if (wtid == 0) {line}"
    return line


OUT_ROWS = f"O + ({BATCH}) * o_sb + ({HEAD}) * o_sh, o_ss"
#: the varlen kernel's TMA rows and batch (_Variant): from its sequence's first row, on the
#: [1, H, total, D] views' batch 0
_VARLEN_COORDS = {"q_row": "q0 + tile_m * BM", "kv_from": "k0 + ", "batch": "0"}


def _coords(g: AttentionGeometry) -> dict[str, str]:
    """The TMA copies' coordinates (:class:`_Variant`'s): varlen's from its sequence's first
    rows, a window's K and V from its first block ``KF``; both, both."""
    coords = dict(_VARLEN_COORDS) if g.varlen else {}
    if g.windowed:
        coords["kv_from"] = coords.get("kv_from", "") + "KF * BN + "
    return coords


def varlen_tiles(rule: LoopBounds, uniform: bool = False) -> DeviceTileLoop:
    """The varlen kernel's tile loop (emit_varlen.varlen_tile_loop) with the plan's rule as
    its per-tile lines: KT and FM, or windowed emit_window's KF, KT, FM and LM (the producer
    the first two)."""
    if rule.windowed:
        return varlen_tile_loop(True, window_tile_lines(rule), 2, uniform, windowed=True)
    trips, first = tile_bounds_exprs(rule)
    return varlen_tile_loop(rule.causal, (
        f"KT = {trips};  // the plan's VarlenBounds.trips (its sequence's)",
        f"FM = {first};  // the plan's VarlenBounds.first_masked"), 1, uniform)


#: the consumers' op steps, each one call of the header (:meth:`_Variant.op_line`)
_COMPUTE = (AttentionTag.WGMMA_S, AttentionTag.SOFTMAX, AttentionTag.RESCALE,
            AttentionTag.WGMMA_PV)


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
    if g.decode:
        return _emit_decode(compiled, g, watchdog or 0, dtype)
    plan = compiled.plan
    rule = plan_bounds(compiled)
    causal = rule if g.causal else None
    if g.causal and (causal is None or not causal.causal):
        raise _fail("-p causal=true, but the plan records no causal bounds; recompile the "
                    "schedule")
    if rule is None:
        raise _fail("the plan records no loop bounds; recompile the schedule")
    if g.windowed != rule.windowed or rule.start_shift:
        raise _fail("the plan's trip rule is not the window the geometry declares, or carries "
                    "a mutation's start_shift; recompile the schedule")
    bounds = (window_tile_lines(rule) if g.windowed
              else _tile_bounds(causal) if causal is not None else ())
    # a window's tiles differ in cost as causal ones do: the causal order, hg and snake
    order = "const int " + ", ".join(order_exprs(g.causal or g.windowed)) + ";"
    if g.varlen != isinstance(rule, VarlenBounds) or (isinstance(rule, VarlenBounds)
                                                      and rule.kv_shift != 0):
        raise _fail("the plan's trip rule is not -p varlen's as the geometry declares, or "
                    "carries a mutation's kv_shift; recompile the schedule")
    variant = _variant(
        g, dtype,
        mask=window_mask(rule) if g.windowed
        else f"pcat::Causal{{Sk, {OFFSET[causal.align]}}}" if causal is not None
        else "pcat::KeyTail{Sk}",
        guard=g.windowed or (causal is not None and causal.align == "bottom_right"),
        window=g.windowed, softcap=g.softcap, decode=False,
        cols=str(g.head_dim) if g.head_dim != g.box_cols else "",
        out_cols=str(g.v_dim) if g.v_dim != g.v_box_cols else "",
        **_coords(g))
    loop = ("int rb = 0, o = 0;", loop_head("tile < TILES"))
    blocks = WINDOW_BLOCKS if g.windowed else _CAUSAL_BLOCKS if g.causal else _blocks(rule)
    tiles = DeviceTileLoop(
        counts=(f"const int MT = (Sq + BM - 1) / BM, TILES = BH * MT, {blocks};", *POSITION),
        producer=TileLoop(head=loop, tile=(order, *bounds[:2 if g.windowed else 1])),
        consumers=TileLoop(head=loop, tile=(order, *bounds)), empty_tiles=True)
    if g.varlen:  # the sequences' spans on the device, per tile (emit_varlen.py)
        tiles = varlen_tiles(rule, g.uniform_tiles)
    device = pasted(__package__, "attention.cuh")
    if g.windowed or g.softcap:  # the window's mask, the softcap (only where they are taken)
        device += pasted(__package__, "attention_window.cuh")
    about = varlen_header(g.head_dim, g.threads, g.smem_bytes, g.block_m, g.lse) if g.varlen else [
        f"// Q, K, V: rank-4 TMA tensor maps over (D = {g.head_dim}, S, H, B), the tensors' "
        "own strides (box 64 x rows,",
        "// 128-byte swizzle; a box past S reads zeros); query head h of batch b reads KV head "
        "h / group (GQA);",
        "// O: [B, H, Sq, D] at strides (o_sb, o_sh, o_ss, 1) (q's layout); LSE: [B*H*Sq] fp32, "
        "each row's",
        "// log-sum-exp (null: not stored).",
        f"// Launch: block {g.threads} (warp group 0: producer; 1..: consumers), dynamic",
        f"// shared memory {g.smem_bytes} bytes, any grid up to BH * ceil(Sq / {g.block_m}) "
        "CTAs (each runs output tiles",
        "// blockIdx.x, + gridDim.x, ...; causal, in the order hg and snake pick: "
        "tile_order.py)."]
    # the finish's store: its first ``out_cols`` columns where given (V's head dim under its
    # boxes')
    store = f"HDV, {variant.elem}" + (f", {variant.out_cols}" if variant.out_cols else "")
    family = _family(g, finish=varlen_finish(store, g.lse) if g.varlen else
                     f"            pcat::finish<{store}>(oacc, rows, {OUT_ROWS}, "
                     f"{'LSE' if g.lse else 'nullptr'}, bh, Sq);")
    return _source(compiled, g, dtype, variant, tiles, family, device, about, watchdog or 0)


def _variant(g: AttentionGeometry, dtype: str, **rest: Any) -> _Variant:
    """A kernel's :class:`_Variant`: what every kernel picks alike (the element type, where P
    is packed (``intra_overlap``) and the per-N wgmma wrappers of S and PV: PV's N the boxes'
    columns; a narrow decode tile's both N its rows, PV's A transposed, :func:`_wrappers`), and
    the emitter's ``rest``."""
    narrow = g.decode and g.rows in NARROW_ROWS
    return _Variant(elem=ELEM[dtype], pack=f"pcat::PackP::{'later' if g.intra_overlap else 'now'}",
                    qk=f"wgmma_m64n{g.rows if narrow else g.block_n}k16",
                    pv=(f"wgmma_ta_m64n{g.rows}k16" if narrow
                        else f"wgmma_rs_m64n{g.v_box_cols}k16"), **rest)


def _wrappers(g: AttentionGeometry, dtype: str) -> str:
    """The wgmma wrappers :func:`_variant` names: S's SS (its first k step overwrites)
    and PV's RS, or a narrow decode tile's two SS, PV's reading V MN-major (transposed A)."""
    if g.decode and g.rows in NARROW_ROWS:
        return (wgmma_ss(g.rows, dtype, scale_d=True)
                + wgmma_ss(g.rows, dtype, trans_a=1, prefix="wgmma_ta"))
    return wgmma_ss(g.block_n, dtype, scale_d=True) + wgmma_rs(g.v_box_cols, dtype)


def _emit_decode(compiled: CompiledSchedule, g: AttentionGeometry, watchdog: int,
                 dtype: str) -> str:
    """The decode kernel (``-p decode``; emit_decode.py says what it writes differently)."""
    rule = compiled.plan.trip_rule
    if not isinstance(rule, DecodeBounds) or rule.split != g.split_kv or (
            rule.split_shift, rule.page_lag, rule.arrivals_shift, rule.skip_split) != (0, 0, 0, -1):
        raise _fail("the plan's trip rule is not -p decode's as the geometry declares, or "
                    "carries a mutation; recompile the schedule")
    narrow = g.rows in NARROW_ROWS
    variant = _variant(g, dtype, mask=decode_mask(g.causal), guard=g.causal, window=False,
                       softcap=False, decode=True, narrow=narrow,
                       shared=compiled.plan.shared_issue)
    family = _family(g, compute=decode_compute(narrow),
                     issuers=_issuing_warps(compiled.plan.shared_issue),
                     finish=decode_finish(compiled.plan.programs[1:], variant.elem,
                                          EMITTER_NAME, narrow),
                     state=NARROW_STATE if narrow else _STATE)
    device = pasted(__package__, "attention.cuh") + pasted(__package__, "attention_decode.cuh")
    return _source(compiled, g, dtype, variant, decode_tile_loop(g.causal), family, device,
                   decode_header(g.head_dim, g.threads, g.smem_bytes), watchdog)


def _source(compiled: CompiledSchedule, g: AttentionGeometry, dtype: str, variant: _Variant,
            tiles: DeviceTileLoop, family: AgentsFamily, device: str, about: list[str],
            watchdog: int) -> str:
    """The kernel's source: every agent's program step for step on the kit's frame, the
    family's constants, tile loop and device code, the header's comment lines."""
    plan = compiled.plan
    rings = {r.name: r for r in plan.rings}
    tags = [o.tag for o in compiled.body]
    producer, *consumers = plan.programs

    def code(p: AgentProgram, single: bool, label: str) -> AgentCode:
        """An agent's program, and its once steps alone (an output tile with no KV block)."""
        def line(s: Step) -> str:
            return _step_line(s, rings, single, p.name, tags, watchdog, variant)
        return AgentCode(lines=tuple(render(agent_stretches(p, line, label))),
                         once=tuple(line(s) for s in _once_only(p)))

    body = agents_kernel_body(
        rings=plan.rings, producer=code(producer, True, producer.name),
        # one label for every consumer, so consumers that differ in no step share one program
        consumers=[code(c, False, "consumer") for c in consumers], producer_name=producer.name,
        producer_registers="PRODUCER_REGS", consumer_registers="CONSUMER_REGS",
        family=family, tiles=tiles, emitter=EMITTER_NAME, uniform_consumer=True,
        producer_warps=_issuing_warps(plan.shared_issue))
    what = "sequence" if g.varlen else "decode tile" if g.decode else "batch"
    return "\n".join([
        f"// Emitted by pipeline-core (emitter {EMITTER_NAME}) from schedule "
        f"{compiled.schedule_name} on target {compiled.target_name}.",
        f"// O = softmax(Q.K^T * scale) . V per ({what}, "
        f"head), {dtype} in and out, fp32 accumulate.", *about,
        header_source(), wgmma_header_source(), gemm_call_header_source(),
        _wrappers(g, dtype), device,
        f'extern "C" __global__ void __launch_bounds__({g.threads}, 1)',
        f"{KERNEL_NAME}({_signature(g).render()}) {{", body,
        "}", ""])


def _signature(g: AttentionGeometry) -> KernelSignature:
    """The kernel's parameters: decode's, or the prefill forward's (fixed-length or varlen,
    with the softcap's scale where it caps: signature.forward_signature)."""
    if g.decode:
        return DECODE_SIGNATURE
    return forward_signature(varlen=g.varlen, softcap=g.softcap)


#: the consumer's start of an output tile: O cleared, its Q
_COMPUTE_START = ("            pcat::Rows rows = pcat::start<HDV>(oacc, tile_m * BM, consumer);\n"
                  "            const u32 q_smem = stage_q(o % Q_STAGES);  // this output tile's Q")


#: a consumer's O, S and packed P (the fragments of m64 wgmmas over the tile's 64 rows)
_STATE = "        float oacc[HDV / 2], sacc[BN / 2];\n        u32 pk[BN / 4];"


def _issuing_warps(shared: SharedIssue | None) -> int:
    """The producer warps that issue its copies: the plan's shared issue's, else one."""
    return shared.warps if shared is not None else 1


def _family(g: AttentionGeometry, *, finish: str, compute: str = _COMPUTE_START,
            state: str = _STATE, issuers: int = 1) -> AgentsFamily:
    """The kernel's constants (the frame's STAGES, the once ring's Q_STAGES, the roles'
    registers; ``HD`` Q's and K's boxes' columns, ``AttentionGeometry.box_cols``, ``HDV``
    V's and O's, ``v_box_cols``); Q's ring (output
    tile o's Q in stage o % Q_STAGES), then the K and V rings, from
    the frame's ``ring`` (the mbarriers follow them); a consumer's O, S and packed P; per output
    tile ``compute`` (its rows started, O cleared, and its Q), then after its steps
    ``finish``."""
    return AgentsFamily(
        constants=f"    constexpr int BM = {g.block_m}, BN = {g.block_n}, HD = {g.box_cols}, "
                  f"HDV = {g.v_box_cols}, STAGES = {g.stages}, Q_STAGES = {g.q_stages};\n"
                  f"    constexpr int PRODUCER_REGS = {g.producer_registers}, "
                  f"CONSUMER_REGS = {g.consumer_registers};\n"
                  "    constexpr u32 Q_BYTES = BM * HD * 2, K_BYTES = BN * HD * 2, "
                  "V_BYTES = BN * HDV * 2;"
                  # decode's copies per KV block (emit_decode.py), only where it is one
                  + (f"\n    constexpr int CHUNKS = {g.page_chunks};\n"
                     f"    constexpr bool KV_GROUPED = {str(g.kv_grouped).lower()};\n"
                     f"    constexpr int KV_ISSUERS = {issuers};\n"
                     "    using KV = pcat::KvLayout<BN, HD, KV_GROUPED>;" if g.decode else ""),
        ring_bytes="Q_STAGES * Q_BYTES + STAGES * (K_BYTES + V_BYTES)",
        stage_views="    auto stage_q = [&](int s) { return ring + s * Q_BYTES; };\n"
                    "    auto stage_k = [&](int s) { return ring + Q_STAGES * Q_BYTES + s * "
                    "K_BYTES; };\n"
                    "    auto stage_v = [&](int s) { return ring + Q_STAGES * Q_BYTES + STAGES "
                    "* K_BYTES + s * V_BYTES; };",
        consumer_state=state,
        compute=compute, finish=finish, once_stages="Q_STAGES")


def _blocks(b: LoopBounds) -> str:
    """Not causal: every output tile's KV blocks and first masked one (the key tail's), set
    once from the plan's bounds ..."""
    trips, first = tile_bounds_exprs(b)
    return f"KV_BLOCKS = (Sk + BN - 1) / BN, KT = {trips}, FM = {first}"


#: ... or (causal) KT and FM set per output tile from the plan's bounds
_CAUSAL_BLOCKS = "KV_BLOCKS = (Sk + BN - 1) / BN;\n    int KT = KV_BLOCKS, FM = KV_BLOCKS"


def tile_bounds_exprs(b: LoopBounds) -> tuple[str, str]:
    """``LoopBounds.trips`` and ``first_masked`` of output tile ``tile_m`` as C expressions of
    the kernel's ``tile_m, Sq, Sk, BM, BN, KV_BLOCKS`` and ``KT`` (the tile's trips), written
    from the plan's bounds (block_m, block_n, align) so the kernel runs exactly the plan's rule
    (docs/guide/attention.md, "Causal bounds and tails").  C's ``/`` truncates where Python's
    ``//`` floors; the two differ only on negative quotients, which ``max(0, ...)`` clamps."""
    if not b.causal:  # every block, the one holding the key tail masked
        return "KV_BLOCKS", f"max(0, KT - (Sk % {b.block_n} != 0))"
    if b.align not in OFFSET:
        raise _fail(f"no CUDA for causal alignment {b.align!r}")
    off = OFFSET[b.align]
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


EMITTERS = (EmitterRecord(
    EMITTER_NAME, f"standalone CUDA C++ (sm_90a) for {NAME}: TMA producer (Q once, K and V "
    "rings), wgmma consumers (S = Q.K^T, online softmax, O += P.V with P from registers); every "
    "agent's steps one for one", (TARGET_NAME,), emit_attention,
    kernel_families=(KERNEL_FAMILY,), options=(WATCHDOG, DTYPE), refuses=refuses),)
