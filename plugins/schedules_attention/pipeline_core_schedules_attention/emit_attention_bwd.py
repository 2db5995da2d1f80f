"""The ``cuda-attention-bwd`` emitter: kernel family ``attention_bwd`` on ``h100`` -> one CUDA
kernel, the attention backward's main kernel.

It writes the compiled ``flash-attention-bwd`` (docs/guide/attention.md, "The backward") on the
kit's frame (``kit_api.agents_kernel_body``: the rings' mbarriers, the roles, ``setmaxnreg``, the
persistent tile loop): every agent's prologue, K loop and epilogue go out step for step
(``agent_stretches``), each ring step's mbarrier code, each named barrier and each wgmma group
step from the kit (``ring_step_line``, ``consumer_sync_line``), so the kernel carries exactly
the waits, arrivals, fences and group waits the core derived and proved.  The dQ writer's bulk
group steps (its commit and ``wait_group.read``, on its one issuing lane) and the ops are this
module's; the device math is ``attention_bwd.cuh`` (package data, pasted after the forward's
``attention.cuh``, whose element types and ``ex2_approx`` it uses).

The output tile is (KV head ``bhk``, KV block ``nb``), at the launch position the plan's
:attr:`~.bwd_tiles.BackwardTrips.grouped` says: the call's (the forward's map of tile_order.py,
``hg`` heads side by side, their KV blocks heaviest first: ``hg`` = 1 without the mask, a head's
KV blocks back to back, so the CTAs in flight share few heads whose Q, dO and dQ accumulator
rows stay in L2, where heads innermost put 64 heads of 4 MB each in flight at S 4k, D 128 and
Nsight Compute read 42% of DRAM bandwidth and a 56% L2 hit rate), or, deterministic, heads
innermost (:meth:`~.bwd_tiles.BackwardTrips.position`, which the turns' proof reads).  Its K
tiles ``u`` are query block
``first + u % mper`` of query head ``bhk * group + u / mper``, with ``first`` and the masked
blocks from the plan's :class:`~.bwd_tiles.BackwardTrips` written as C expressions.  Writer
w (``dq_writer{w}``: one, or one per consumer with ``-p shared_dq=false``) is warp 1 + w of the
producer warp group (the frame's side agents), its whole warp joining ordering ``dq{w}``'s
barriers.

A plan with turn-ordered reduces (``-p deterministic=true``, ``Plan.turns``) takes the turn
counters ``dQsem`` (``bwd_signature.ORDERED_SIGNATURE``) and pastes ``attention_bwd_turns.cuh``:
the writer's turn steps wait for turn ``writers * nb + slot`` on its query block's counter
(:meth:`~.bwd_tiles.BackwardTrips.turn_rank`: the KV block's index), drain, fence and release
it.  A plan without them is written exactly as before.
"""
from __future__ import annotations

from pipeline_core.plugin_api import (AgentProgram, CompiledSchedule, EmitterRecord, Param,
                                      ProgramError, Ring, Step, StepKind, Turns)

from pipeline_core_nvidia_h100.kit_api import (TARGET_NAME, WATCHDOG, AgentCode, AgentsFamily,
                                               DeviceTileLoop, RingState, TileLoop,
                                               agent_stretches, agents_kernel_body,
                                               consumer_sync_line, declared_geometry,
                                               gemm_call_header_source, header_source,
                                               loop_tile, once_steps, pasted, render,
                                               require_ring_depths,
                                               ring_step_line, wgmma_header_source, wgmma_rs,
                                               wgmma_ss)

from pipeline_core_schedules_attention.bwd_schedule import (KERNEL_FAMILY, NAME,
                                                            BackwardGeometry, BackwardTag,
                                                            dq_part)
from pipeline_core_schedules_attention.bwd_signature import (KERNEL_NAME, ORDERED_SIGNATURE,
                                                             SIGNATURE)
from pipeline_core_schedules_attention.bwd_tiles import BackwardTrips
from pipeline_core_schedules_attention.tile_order import POSITION, loop_head, order_exprs
from pipeline_core_schedules_attention.emit_attention import ELEM
from pipeline_core_schedules_attention.emit_window import OFFSET

EMITTER_NAME = "cuda-attention-bwd"
DTYPE = Param("dtype", str, "bf16", "element type of q, k, v, do and the dk, dv outputs",
              choices=("bf16", "fp16"))
#: the wrapper names of dQ's wgmma (B, the K block, read MN-major) and dK's (A, dS^T, too)
_DQ_PREFIX, _DK_PREFIX = "wgmma_kmn", "wgmma_mn"


def _fail(why: str) -> ProgramError:
    return ProgramError(f"emitter {EMITTER_NAME}: {why}")


def geometry_refusal(g: BackwardGeometry) -> str:
    """Why this emitter cannot write geometry ``g`` ("" when it can)."""
    if g.keys != 64:
        return (f"writes 64 keys per consumer; -p block_n={g.block_n} over {g.consumers} "
                f"consumers gives {g.keys}: set -p block_n={64 * g.consumers}")
    if g.head_dim % 64:
        return f"-p head_dim={g.head_dim} must be a multiple of 64 (one 128-byte swizzled row)"
    return ""


def refuses(compiled: CompiledSchedule) -> str:
    return geometry_refusal(declared_geometry(compiled, KERNEL_FAMILY, BackwardGeometry,
                                              EMITTER_NAME))


def tile_exprs(rule: BackwardTrips, *, whole_warps: bool = True) -> tuple[str, ...]:
    """The per-output-tile lines: the output tile's KV head and block, the first query block
    it visits and how many from it are masked (:meth:`BackwardTrips.first_block`,
    :meth:`~BackwardTrips.masked_blocks` as C of ``nb, Sq, Sk, BM, BN, MB``), its K tiles
    ``KT`` and the masked test of a K tile (those and the tails).  ``whole_warps``: every lane
    of the warp runs these lines (the consumers, the dQ writers), so they may be read through a
    full-warp shuffle; the producer runs them on one thread, where a ``shfl.sync`` naming the
    whole warp is an illegal instruction (measured: the H200 faulted at the first launch)."""
    if rule.start_shift:
        raise _fail(f"the plan's trip rule moves the diagonal start by {rule.start_shift}; "
                    "recompile the schedule")
    off = OFFSET[rule.align]
    if rule.causal:
        first = f"min(MB, max(0, nb * {rule.block_n} - {off}) / {rule.block_m})"
        limit = f"(min((nb + 1) * {rule.block_n}, Sk) - 1 - {off})"
        # ceil(limit / BM) for a positive limit, else 0 (C's / truncates; max(0, ...) keeps
        # every quotient non-negative, where it agrees with Python's //)
        nmask = (f"max(0, min(MB, max(0, {limit} + {rule.block_m} - 1) / {rule.block_m}) "
                 "- first)")
    else:
        first, nmask = "0", "0"
    # read through a warp shuffle: ptxas then knows they are warp-uniform, and the K loop
    # they bound is no divergent path for the wgmmas in it (C7520; the frame's consumer index)
    def uniform(expr: str) -> str:
        return f"__shfl_sync(0xffffffffu, {expr}, 0)" if whole_warps else expr

    # the call's order (groups of hg heads, each group's KV blocks heaviest first; tile_order.py
    # names the heaviest-first rank a query block's, NB - 1 - rank the KV block), or the rule's
    order = (("const int " + ", ".join(order_exprs(True, head="bhk", block="rank", heads="BHK",
                                                   blocks="NB")) + ";",
              "const int nb = NB - 1 - rank;") if rule.grouped else (rule.TILE_C,))
    return (*order,
            f"const int first = {uniform(first)};  // the plan's BackwardTrips.first_block",
            f"const int nmask = {uniform(nmask)};  // the plan's BackwardTrips.masked_blocks",
            "const int mper = MB - first;",
            "KT = group * mper;",
            "auto qhead = [&](int u) { return bhk * group + u / mper; };",
            "auto qblock = [&](int u) { return first + u % mper; };",
            "auto masked = [&](int u) { const int m = qblock(u); return m < first + nmask || "
            "(Sq % BM != 0 && m == MB - 1) || (Sk % BN != 0 && nb == NB - 1); };")


_T = BackwardTag
#: each op's CUDA, one call per op step, over its ring stage ``{s}``, K tile ``{u}``, the
#: consumer it reduces ``{c}`` (the writer), dQ part ``{p}``, the element type ``{elem}``, the
#: query block ``{bm}`` and head dim ``{hd}``
_OPS = {
    # Q, dO, K, V: rank-4 maps of the tensors' own strides at (d, s, h, b) (layout.bhsd_map):
    # query head qhead of B*Hq is head qhead % (HKV * group) of batch qhead / (HKV * group)
    _T.TMA_Q: "for (int c = 0; c < HD / 64; ++c) pcat::tma_load_4d(stage_q({s}) + c * BM * 128, "
              "&tmQ, q_full_bar({s}), c * 64, qblock({u}) * BM, qhead({u}) % (HKV * group), "
              "qhead({u}) / (HKV * group));",
    _T.TMA_DO: "for (int c = 0; c < HD / 64; ++c) pcat::tma_load_4d(stage_do({s}) + c * BM * "
               "128, &tmDO, do_full_bar({s}), c * 64, qblock({u}) * BM, qhead({u}) % (HKV * "
               "group), qhead({u}) / (HKV * group));",
    # LSE and delta rows are padded per head to SQP (a multiple of the query block): a TMA
    # box's inner coordinate must start on 16 bytes, which qhead * Sq does not (measured: an
    # illegal instruction on the H200 at Sq = 77)
    _T.TMA_LSE: "tma_load_2d(stage_lse({s}), &tmLSE, q_full_bar({s}), "
                "qhead({u}) * SQP + qblock({u}) * BM, 0);",
    _T.TMA_DELTA: "tma_load_2d(stage_delta({s}), &tmDelta, do_full_bar({s}), "
                  "qhead({u}) * SQP + qblock({u}) * BM, 0);",
    _T.TMA_K: "for (int c = 0; c < HD / 64; ++c) pcat::tma_load_4d(k_smem + c * BN * 128, &tmK, "
              "k_full_bar({s}), c * 64, nb * BN, bhk % HKV, bhk / HKV);",
    _T.TMA_V: "for (int c = 0; c < HD / 64; ++c) pcat::tma_load_4d(v_smem + c * BN * 128, &tmV, "
              "v_full_bar({s}), c * 64, nb * BN, bhk % HKV, bhk / HKV);",
    _T.WGMMA_S: "pcab::st<BM, BN, HD, wgmma_m64n{bm}k16>(sacc, k_smem, stage_q({s}), consumer);",
    _T.WGMMA_DP: "pcab::st<BM, BN, HD, wgmma_m64n{bm}k16>(dpacc, v_smem, stage_do({s}), "
                 "consumer);",
    _T.GRAD: "pcab::grad<BM, {elem}, {gather}>(sacc, dpacc, pp, dsp, stage_lse({s}), "
             "stage_delta({s}), "
             "ds_smem(consumer), masked({u}), mask, qblock({u}) * BM, "
             "nb * BN + consumer * pcab::KEYS, scale, scale_log2, DS_BAR + consumer);",
    # -p split_grad: P first (S's wgmma retired, dP's may run), dS after dV's wgmma was issued
    _T.PROB: "pcab::prob<BM, {elem}>(sacc, pp, stage_lse({s}), masked({u}), mask, "
             "qblock({u}) * BM, nb * BN + consumer * pcab::KEYS, scale_log2);",
    # dV += P^T.dO is the forward's O += P.V: A from registers, B a block of BM rows MN-major
    _T.WGMMA_DV: "pcat::pv<BM, HD, wgmma_rs_m64n{hd}k16>(dvacc, pp, stage_do({s}));",
    _T.WGMMA_DK: "pcab::dk<BM, HD, " + _DK_PREFIX + "_m64n{hd}k16>(dkacc, "
                 "ds_smem(consumer), stage_q({s}));",
    _T.WGMMA_DQ: "pcab::dq<BM, BN, " + _DQ_PREFIX + "_m64n64k16>(dqacc, ds_smem(consumer), "
                 "k_smem + {p} * BN * 128, consumer);  // head columns {p} * 64..",
    _T.DQ_STAGE: "pcab::stage<DQ_RB, HD, false>(dqacc, dq_at(rb + {u}, {w}), {p}{mi0});",
    _T.DQ_ADD: "pcab::stage<DQ_RB, HD, true>(dqacc, dq_at(rb + {u}, 0), {p});",
    _T.DQ_REDUCE: "if (lane == 0) pcab::reduce_add(dQacc + ((size_t)qhead({u}) * SQP + "
                  "qblock({u}) * BM) * HD, dq_at(rb + {u}, {c}), DQ_BYTES);",
}


#: the gradient step's second half with -p split_grad: dS from P (in S's registers) and dP
_SPLIT_GRAD = ("pcab::dscore<BM, {elem}, {gather}>(sacc, dpacc, dsp, stage_delta({s}), "
               "ds_smem(consumer), scale, DS_BAR + consumer);")

#: dK += dS^T.Q with -p dk_rs: dS packed in registers (the gradient step's ``dsp``, the
#: fragment P is for dV), so the op is dV's with Q's stage for dO's
_DK_RS = "pcat::pv<BM, HD, wgmma_rs_m64n{hd}k16>(dkacc, dsp, stage_q({s}));"

#: dQ cut by columns or rows (``BackwardGeometry.dq_cut``): 64 head columns over every
#: consumer's dS (the plan's join ``ds`` published them), for every row block (columns) or the
#: consumer's own (rows, ``{mi0}`` its first)
_JOINED_OPS = {
    **_OPS,
    _T.WGMMA_DQ: "pcab::dq_all<DQ_RB, BN, DS_BYTES, " + _DQ_PREFIX + "_m64n64k16>(dqacc, "
                 "ds_smem(0){rows}, k_smem + {p} * BN * 128);  // head columns {p} * 64..",
}


#: the writer's turn steps (its issuing lane's; ``{turn}`` the add's turn, ``{value}`` the
#: groups a drain leaves pending), on its query block's counter
_COUNTER = "dQsem + (size_t)qhead({u}) * MB + qblock({u})"
_TURNS = {
    StepKind.TURN_WAIT: "if (lane == 0) pcab::turn_wait(" + _COUNTER + ", {turn}); __syncwarp();",
    StepKind.TURN_DRAIN: "if (lane == 0) pcgc::bulk_wait<{value}>();",
    StepKind.TURN_FENCE: "if (lane == 0) pcab::turn_fence();",
    StepKind.TURN_RELEASE: "if (lane == 0) pcab::turn_release(" + _COUNTER + ");",
}


def _turn_line(s: Step, turns: Turns | None, owner: str) -> str:
    """A turn step of the writer ``owner``: its slot among the CTA's adds after the KV block's
    rank (BackwardTrips.turn_rank) times the adds per KV block."""
    if turns is None or owner not in turns.agents:
        raise _fail(f"agent {owner}: a {s.kind.value} step outside Plan.turns' agents")
    return _TURNS[s.kind].format(u=loop_tile(s), value=s.value,
                                 turn=f"{turns.slots} * {BackwardTrips.TURN_RANK_C} + {s.value}")


def _step_line(s: Step, rings: dict[str, Ring], single: bool, owner: str, body: list,
               watchdog: int, elem: str, g: BackwardGeometry, turns: Turns | None = None,
               joins: frozenset[str] = frozenset()) -> str:
    if s.kind in _TURNS:
        return _turn_line(s, turns, owner)
    if s.kind in (StepKind.PHASE_WAIT, StepKind.EXPECT_TX, StepKind.ARRIVE):
        ring = RingState.of(s, "K_STAGES" if rings[s.channel].once else "STAGES")
        line = ring_step_line(s, ring.stage, ring.parity(s.phase_offset), single, watchdog)
        assert line is not None
        return line
    if s.channel == "bulk":  # the dQ writer's bulk async-group, its issuing lane's own
        if s.kind == StepKind.COMMIT:
            return "if (lane == 0) pcgc::bulk_commit();"
        if s.kind == StepKind.COUNTER_WAIT:
            return f"if (lane == 0) pcgc::bulk_wait_read<{s.value}>(); __syncwarp();"
    # a join's parts sync from different code (each consumer's branch, the dQ writer):
    # barrier.sync, where bar.sync (barrier.sync.aligned) must be one instruction for every
    # thread that reaches it (compute-sanitizer's synccheck flagged the consumers' two)
    sync = consumer_sync_line(s, aligned=s.channel not in joins)
    if sync is not None:
        return sync
    if s.kind == StepKind.OP:
        once = rings["k_full"].once
        stage = RingState.of(s, "K_STAGES" if s.once and once else "STAGES").stage
        op = body[s.op]
        ops = _JOINED_OPS if g.joined else _OPS
        if g.split_grad:
            ops = {**ops, _T.GRAD: _SPLIT_GRAD}
        if g.dk_rs:
            ops = {**ops, _T.WGMMA_DK: _DK_RS}
        if op.tag not in ops:
            raise _fail(f"no CUDA for op tag {op.tag}")
        # the part a literal: a run-time consumer index in dQ's and the staging's addresses
        # (one program for both consumers) made ptxas spill 80 bytes at D 128
        rows = g.by_rows  # the consumer's own block of 64 query rows
        return ops[BackwardTag(op.tag)].format(s=stage, u=loop_tile(s), c=op.subtile,
                                               w=g.writer_of(op.subtile),
                                               p=g.part(op.subtile, dq_part(g, s.op)),
                                               rows=f" + {op.subtile} * 64 * 128" if rows else "",
                                               mi0=f", {op.subtile}" if rows else "",
                                               elem=elem, bm=g.block_m, hd=g.head_dim,
                                               gather=str(not g.dk_rs).lower())
    raise _fail(f"agent {owner}: no CUDA for step {s.kind.value} (tag {s.tag})")


def _checked(compiled: CompiledSchedule) -> tuple[BackwardGeometry, BackwardTrips]:
    """The plan's geometry and trip rule, each refused in one line where this emitter cannot
    write it (a geometry, rings proven at other depths, a rule of another geometry)."""
    g = declared_geometry(compiled, KERNEL_FAMILY, BackwardGeometry, EMITTER_NAME)
    refusal = geometry_refusal(g)
    if refusal:
        raise _fail(refusal)
    require_ring_depths(compiled.plan.rings, g.stages, 1, EMITTER_NAME)
    rule = compiled.plan.trip_rule
    if not isinstance(rule, BackwardTrips) or rule.causal != g.causal:
        raise _fail("the plan records no backward trip rule of its geometry; recompile the "
                    "schedule")
    turns = compiled.plan.turns
    if turns is not None and (turns.first or rule.turn_shift):
        raise _fail(f"the plan's turns start at {turns.first} and its trip rule moves the turn "
                    f"rank by {rule.turn_shift}: this emitter writes turn writers * nb + slot; "
                    "recompile the schedule")
    return g, rule


def emit_attention_bwd(compiled: CompiledSchedule, *, watchdog: int | None = None,
                       dtype: str = "bf16") -> str:
    """CUDA C++ for a compiled schedule of kernel family ``attention_bwd`` (see the module)."""
    g, rule = _checked(compiled)
    plan = compiled.plan
    rings = {r.name: r for r in plan.rings}
    progs = {p.name: p for p in plan.programs}
    body = list(compiled.body)
    elem = ELEM[dtype]
    wd = watchdog or 0
    # the consumers' dS barriers: the ids after the plan's orderings'
    ds_bar = 1 + max((b for o in plan.orders for b in o.barriers), default=0)

    turns = plan.turns
    joins = frozenset(o.name for o in plan.orders if o.scope == "join")

    def code(p: AgentProgram, single: bool, label: str) -> AgentCode:
        def line(s: Step) -> str:
            return _step_line(s, rings, single, p.name, body, wd, elem, g, turns, joins)
        return AgentCode(lines=tuple(render(agent_stretches(p, line, label))),
                         once=tuple(line(s) for s in once_steps(p)))

    loop = ("int rb = 0, o = 0;", loop_head("tile < TILES"))
    lines = tile_exprs(rule)
    tiles = DeviceTileLoop(
        counts=("const int NB = (Sk + BN - 1) / BN, MB = (Sq + BM - 1) / BM, TILES = BHK * NB;",
                "int KT = 0;", *POSITION,
                f"const pcab::Mask mask{{Sq, Sk, {OFFSET[rule.align]}, "
                f"{str(rule.causal).lower()}}};"),
        producer=TileLoop(head=loop, tile=tile_exprs(rule, whole_warps=False)),
        consumers=TileLoop(head=loop, tile=lines),
        empty_tiles=g.causal)
    def writer(c: int) -> tuple[str, list[str]]:
        """Consumer c's dQ writer (an empty output tile: it has no once step, nothing runs)."""
        lines = list(code(progs[f"dq_writer{c}"], False, f"dq_writer{c}").lines)
        return f"dq_writer{c}", (["if (KT > 0) {"] + ["    " + x for x in lines] + ["}"]
                                 if g.causal else lines)

    frame = agents_kernel_body(
        rings=plan.rings, producer=code(progs["producer"], True, "producer"),
        consumers=[code(progs[f"consumer{c}"], False, "consumer") for c in range(g.consumers)],
        producer_name="producer", producer_registers="PRODUCER_REGS",
        consumer_registers="CONSUMER_REGS", family=_family(g, elem, ds_bar), tiles=tiles,
        emitter=EMITTER_NAME, side_agents=[writer(w) for w in range(g.dq_buffers)],
        uniform_consumer=True)
    device = "\n".join(pasted(__package__, f) for f in (
        "attention.cuh", "dq_layout.cuh", "attention_bwd.cuh",
        *(("attention_bwd_turns.cuh",) if turns else ())))
    signature = ORDERED_SIGNATURE if turns else SIGNATURE
    wrappers = (wgmma_ss(g.block_m, dtype, scale_d=True)
                + wgmma_ss(64, dtype, trans_b=1, scale_d=True, prefix=_DQ_PREFIX)
                + wgmma_ss(g.head_dim, dtype, trans_a=1, trans_b=1, prefix=_DK_PREFIX)
                + wgmma_rs(g.head_dim, dtype))
    return "\n".join([
        f"// Emitted by pipeline-core (emitter {EMITTER_NAME}) from schedule "
        f"{compiled.schedule_name} on target {compiled.target_name}.",
        f"// The attention backward's main kernel: dK, dV ({dtype}) and dQ added into its fp32 "
        "accumulator, per KV block.",
        f"// Q, dO, K, V: rank-4 tensor maps over (D = {g.head_dim}, S, H, B), the tensors' own "
        "strides (box 64 x rows, 128-byte swizzle);",
        "// LSE, delta: over every row of [B*Hq, SQP] fp32 (each head's rows padded); dQacc "
        "[B*Hq, SQP, HD] fp32 in dq_layout.cuh's order; dK, dV: [B, Hkv, Sk, HD] at their "
        "strides.",
        *(["// dQsem: [B*Hq, MB] int32 zeroed, each query block's turn counter: its dQ adds "
           "made in KV-block order."] if turns else []),
        f"// Launch: block {g.threads} (warp group 0: producer, warps 1.. the dQ writers; 1..: "
        f"consumers), dynamic shared memory {g.smem_bytes} bytes, any grid.",
        header_source(), wgmma_header_source(), gemm_call_header_source(), wrappers, device,
        f'extern "C" __global__ void __launch_bounds__({g.threads}, 1)',
        f"{KERNEL_NAME}({signature.render()}) {{", frame, "}", ""])


def _family(g: BackwardGeometry, elem: str, ds_bar: int) -> AgentsFamily:
    """The constants, the shared memory (the q and do rings, K, V, each consumer's dS box and
    dQ buffer, LSE and delta beside their rings' stages), a consumer's accumulators, per output
    tile dK and dV cleared and then stored."""
    return AgentsFamily(
        constants=f"    constexpr int BM = {g.block_m}, BN = {g.block_n}, HD = {g.head_dim}, "
                  f"STAGES = {g.stages}, K_STAGES = 1, CONSUMERS = {g.consumers}, "
                  f"DQ_BUFFERS = {g.dq_buffers}, DQ_STAGES = {g.dq_stages}, "
                  f"DQ_RB = {g.dq_row_blocks};\n"
                  f"    constexpr int PRODUCER_REGS = {g.producer_registers}, "
                  f"CONSUMER_REGS = {g.consumer_registers}, DS_BAR = {ds_bar};\n"
                  "    constexpr u32 Q_BYTES = BM * HD * 2, KV_BYTES = BN * HD * 2, "
                  "DS_BYTES = BM * 128, DQ_BYTES = BM * HD * 4, ROW_BYTES = BM * 4;",
        ring_bytes="2 * STAGES * Q_BYTES + 2 * KV_BYTES + CONSUMERS * DS_BYTES "
                   "+ DQ_STAGES * DQ_BUFFERS * DQ_BYTES "
                   "+ 2 * STAGES * ROW_BYTES",
        stage_views="    auto stage_q = [&](int s) { return ring + s * Q_BYTES; };\n"
                    "    auto stage_do = [&](int s) { return ring + (STAGES + s) * Q_BYTES; };\n"
                    "    const u32 k_smem = ring + 2 * STAGES * Q_BYTES, v_smem = k_smem + "
                    "KV_BYTES;\n"
                    "    auto ds_smem = [&](int c) { return v_smem + KV_BYTES + c * DS_BYTES; };\n"
                    "    // writer w's dQ buffer of K tile x (DQ_STAGES copies of every writer's)\n"
                    "    auto dq_at = [&](int x, int w) { return ds_smem(CONSUMERS) + "
                    "((x % DQ_STAGES) * DQ_BUFFERS + w) * DQ_BYTES; };\n"
                    "    auto stage_lse = [&](int s) { return ds_smem(CONSUMERS) + DQ_STAGES * "
                    "DQ_BUFFERS * DQ_BYTES + s * ROW_BYTES; };\n"
                    "    auto stage_delta = [&](int s) { return stage_lse(STAGES) + s * ROW_BYTES; };",
        consumer_state="        float dkacc[HD / 2], dvacc[HD / 2], sacc[BM / 2], dpacc[BM / 2];\n"
                       "        float dqacc[DQ_RB][32];\n"
                       "        u32 pp[BM / 4], dsp[BM / 4];",
        compute="            pcab::start<HD>(dkacc, dvacc);",
        finish=f"            pcab::finish<HD, {elem}>(dkacc, dvacc, dK + (bhk / HKV) * dk_sb + "
               "(bhk % HKV) * dk_sh, dk_ss, dV + (bhk / HKV) * dv_sb + (bhk % HKV) * dv_sh, "
               "dv_ss, nb * BN + consumer * pcab::KEYS, Sk);",
        once_stages="K_STAGES")


EMITTERS = (EmitterRecord(
    EMITTER_NAME, f"standalone CUDA C++ (sm_90a) for {NAME}: TMA producer (K, V once; Q with "
    "LSE and dO with delta on rings), wgmma consumers (S, dP, dS, dV, dK, dQ), a dQ writer per "
    "consumer reduce-adding its dQ block into global memory; every agent's steps one for one",
    (TARGET_NAME,), emit_attention_bwd, kernel_families=(KERNEL_FAMILY,),
    options=(WATCHDOG, DTYPE), refuses=refuses),)
