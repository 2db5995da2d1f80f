"""Schedule ``flash-attention-bwd``: one query block of a FlashAttention-3-style backward, H100.

The output tile is one KV block (``block_n`` keys of one KV head); its K tiles are the query
blocks (``block_m`` rows) of every query head of the KV head's group (bwd_tiles.py).  The body
is one query block i:

* agent ``producer``: the TMA copies of K and V (once per output tile, ``AgentSpec.once``, as
  the forward's Q), Q_i with LSE_i on ring ``q`` and dO_i with delta_i on ring ``do``.  LSE and
  delta ride the rings rather than being loaded by the consumers: every consumer needs all
  ``block_m`` of them, the TMA brings them once for both with the stage they belong to, and the
  consumers' critical path has no global load;
* per consumer warp group c (its own ``block_n / consumers`` keys K_c, V_c): S^T = K_c Q^T and
  dP^T = V_c dO^T (wgmma, both operands in shared memory), the gradient step (registers:
  P = exp2(S * scale * log2e - LSE * log2e), dS = P * (dP - delta), dS written to shared memory
  for the two GEMMs that read it), dV_c += P^T dO (P from registers), dK_c += dS^T Q (dS from
  shared memory), the dQ partial dQ_c = dS_c K_c (dS from shared memory), staged (consumer 0)
  or added (later consumers, ``DQ_ADD``) into the dQ buffer (``st.shared``), 64 columns of the
  head at a time (``dq_parts``: a consumer holds dK, dV and one 64 x 64 part of dQ, which is
  what fits hd128 in 240
  registers);
* agent ``dq_writer0`` (a warp beside the producer): the CTA's one dQ buffer, where consumer 0
  staged its partial and consumer 1 added its own (``DQ_ADD``), reduce-added into the fp32 dQ
  accumulator in global memory (``cp.reduce.async.bulk ... add.f32``).

The schedule writes no sync.  The core derives the rings, the chained wgmma waits (the gradient
step waits for S and dP; the staging for dQ, which retires dV and dK too), the early releases of
``q`` and ``do``, K and V's releases after the loop, and the dQ hand-off: ordering ``dq0`` (the
turns consumer 0's stagings, consumer 1's adds, then the writer's reduce) puts each turn after
the previous one's, and the derived hand-over steps (docs/guide/agents.md, "Hand-overs between
turns") put each consumer's ``fence.proxy.async`` after its turn and the writer's
``cp.async.bulk.wait_group.read`` before it hands the buffer back.  The proof checks every one
of them over all timings.

One buffer and one bulk reduce per query block (``shared_dq``, the default), not one per
consumer: the timing model prefers a writer per consumer (3766 cycles per query block at hd128
causal against 4044: the consumers never wait on each other), but on the H200 the two reduces'
read-modify-writes held L2 at 81% of its throughput (Nsight Compute, D 128, S 4k), and one
reduce ran 1.00-1.16x faster on most timed configurations (docs/guide/attention.md).
``-p shared_dq=false`` builds the per-consumer cut, proven alike.  Grouped-query heads run inside
the output tile: dK and dV sum in registers over the group with no workspace and no second
reduce.

``-p deterministic=true`` declares the reduces ordered (``AgentSpec.turns``): the core puts
each writer's reduce between a turn wait and, once the reduce completed, a turn release on the
query block's counter (docs/guide/agents.md, "Turn-ordered adds"), KV block by KV block (and,
with ``-p shared_dq=false``, consumer 0's writer before consumer 1's;
``BackwardTrips.turn_rank``), and proves it; dQ's fp32 sums are then the same bits every run.
The non-deterministic variant is built without them.
"""
from __future__ import annotations

import enum
from typing import Any

import attrs

from pipeline_core.plugin_api import (AgentRole, AgentSpec, Bound, BuildContext, CostModel,
                                      DepEdge, Op, OpCost, OpRole, OrderSpec, Param,
                                      PipelineConfig, ProgramError, ResourceKind, RingSpec,
                                      ScheduleRecord, TargetProfile, Turn, TurnSpec, annotate,
                                      logical)

from pipeline_core_nvidia_h100.kit_api import (BULK_REDUCE_OPERAND, BULK_TAG_NAMES,
                                               CP_ASYNC_L2_LATENCY, H100_BULK_REDUCE_SYNC,
                                               H100_ORDERED_REDUCE_SYNC, H100_SXM,
                                               STAGE_OPERAND, TARGET_NAME, WGMMA_TMA,
                                               AgentsSchedule, family_profile,
                                               register_split_refusal)

from pipeline_core_schedules_attention.bwd_tiles import BackwardTrips
from pipeline_core_schedules_attention.schedule import (ALIGN, ELEM_BYTES,
                                                        PEAK_MMA_FLOP_PER_CYCLE, WGMMA_M,
                                                        WarpGroupTiles, register_params)

NAME = "flash-attention-bwd"
#: The head dims the backward is written and tiled for (the forward's: schedule.HEAD_DIMS; a
#: call that needs a gradient at another is refused before its forward runs, call.no_backward)
BWD_HEAD_DIMS = (64, 128)
OWNER = f"schedule {NAME}"
#: The kernel family the schedule declares (``kernel_launch()``); emit_attention_bwd.py writes it.
KERNEL_FAMILY = "attention_bwd"
#: fp32 LSE, delta and dQ
F32_BYTES = 4
#: Registers a consumer thread needs beyond its tiles (as the forward's estimate).
CONSUMER_OVERHEAD_REGISTERS = 24


class BackwardTag(enum.IntEnum):
    """Kernel tags of the attention backward (the forward's are 20-26)."""

    TMA_Q = 30      #: cp.async.bulk.tensor: Q_i into a q ring stage
    TMA_LSE = 31    #: cp.async.bulk.tensor: LSE_i (fp32) beside it
    TMA_DO = 32     #: cp.async.bulk.tensor: dO_i into a do ring stage
    TMA_DELTA = 33  #: cp.async.bulk.tensor: delta_i (fp32) beside it
    TMA_K = 34      #: cp.async.bulk.tensor: the output tile's K block, once
    TMA_V = 35      #: cp.async.bulk.tensor: the output tile's V block, once
    WGMMA_S = 36    #: S^T = K_c Q_i^T (SS)
    WGMMA_DP = 37   #: dP^T = V_c dO_i^T (SS)
    GRAD = 38       #: P from LSE, dS = P (dP - delta) (registers; dS to shared memory)
    WGMMA_DV = 39   #: dV_c += P^T dO_i (P from registers)
    WGMMA_DK = 40   #: dK_c += dS^T Q_i (dS from shared memory; with -p dk_rs from registers)
    WGMMA_DQ = 41   #: dQ_c = dS K_c (dS from shared memory)
    DQ_STAGE = 42   #: dQ_c's registers into the consumer's dQ buffer (st.shared)
    DQ_REDUCE = 43  #: cp.reduce.async.bulk add.f32 of a dQ buffer into the dQ accumulator
    DQ_ADD = 44     #: a later consumer's dQ_c added into the staged buffer (ld/st.shared)
    PROB = 45       #: with -p split_grad: P from S and LSE (registers), before dS = P (dP - delta)


#: SFU exp2 and the element-wise gradient of one tile per warp group (cycles per element).
GRAD_CYCLES_PER_ELEMENT = 1 / 8
STAGE_CYCLES_PER_ELEMENT = 1 / 32
#: an add's cost against a staging's: it reads the buffer back before it writes
ADD_PER_STAGE = 2
#: the reduce's issue (the copy engine does the rest while the writer waits)
REDUCE_ISSUE_CYCLES = 32


#: a staging's cost in the cost model (build_body sets its size-dependent latency)
STAGE_ISSUE = 128


def backward_cost_model() -> CostModel:
    """The backward's tags with H100 figures; build_body sets the size-dependent latencies."""
    g, mma, valu = ResourceKind.GLOBAL_MEM, ResourceKind.MMA_UNIT, ResourceKind.VALU
    t = BackwardTag
    loads = {tag: OpCost(g, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name=tag.name)
             for tag in (t.TMA_Q, t.TMA_LSE, t.TMA_DO, t.TMA_DELTA, t.TMA_K, t.TMA_V)}
    mmas = {tag: OpCost(mma, 256, OpRole.COMPUTE, name=tag.name)
            for tag in (t.WGMMA_S, t.WGMMA_DP, t.WGMMA_DV, t.WGMMA_DK, t.WGMMA_DQ)}
    return CostModel({**loads, **mmas,
                      t.GRAD: OpCost(valu, 512, OpRole.VALU_COMPUTE, name="GRAD"),
                      t.PROB: OpCost(valu, 512, OpRole.VALU_COMPUTE, name="PROB"),
                      t.DQ_STAGE: OpCost(valu, STAGE_ISSUE, OpRole.VALU_COMPUTE, name="DQ_STAGE"),
                      t.DQ_ADD: OpCost(valu, ADD_PER_STAGE * STAGE_ISSUE, OpRole.VALU_COMPUTE,
                                       name="DQ_ADD"),
                      t.DQ_REDUCE: OpCost(g, REDUCE_ISSUE_CYCLES, OpRole.COMPUTE,
                                          name="DQ_REDUCE")})


def backward_profile(pipeline: PipelineConfig, clock_ghz: float | None,
                     deterministic: bool = False) -> TargetProfile:
    """The h100 target as the backward sees it: its costs on the wgmma sync model with the
    bulk-reduce channel (the dQ hand-off), its reduces ordered across CTAs where
    ``deterministic``."""
    sync = H100_ORDERED_REDUCE_SYNC if deterministic else H100_BULK_REDUCE_SYNC
    return family_profile(backward_cost_model(), pipeline, clock_ghz, sync)


@attrs.frozen(kw_only=True)
class BackwardGeometry(WarpGroupTiles):
    """The tile sizes and register split the backward is built and checked for (the producer
    warp group holds the TMA warp and the dQ writers)."""

    #: one dQ buffer for the CTA (consumer 0 stages its partial, each later consumer adds its
    #: own into it, one writer reduces the sum: one bulk reduce per query block) instead of a
    #: buffer, a writer and a reduce per consumer
    shared_dq: bool = True
    #: how the consumers share dQ = dS K: "keys" (each its own keys' partial over every head
    #: column, the later ones adding theirs into the buffer: DQ_ADD) or "columns"
    #: (FlashAttention-3's cut: each its own 64 head columns over every key of the tile, reading
    #: every consumer's dS once the consumers' join ``ds`` published it; no add, each consumer
    #: stages its own columns).  One dS buffer is enough: a consumer's next gradient step
    #: comes after the dQ join, which every consumer reaches only once its dQ wgmma (the read
    #: of the others' dS) retired; the proof checks it
    dq_cut: str = "keys"
    #: the gradient step in two ops, as FlashAttention-3 orders them: P from S (PROB) as soon
    #: as S's wgmma retired, while dP's still runs, then dV's wgmma (it reads P) issued before
    #: dS = P (dP - delta) (GRAD), which runs beside it
    split_grad: bool = False
    #: dK's wgmma reads dS from registers (packed as P is for dV: the same fragment) and is
    #: issued after dQ's, FlashAttention-3's order at D 128: the staging of dQ then waits for
    #: dQ's wgmma alone and runs beside dK's, and no consumer gathers its own dS on a barrier
    #: of its own (the join ``ds`` publishes it to dQ's wgmmas).  The columns or rows cut only
    #: (their join is what publishes dS), with one dQ part
    dk_rs: bool = False

    @property
    def slots(self) -> tuple[int, ...]:
        """A consumer's ops before its dQ parts, in issue order (the module's S, DP, PROB,
        GRAD, DV, DK; without DK with ``dk_rs``, which comes between dQ and its staging)."""
        first = (S, DP, PROB, DV, GRAD) if self.split_grad else (S, DP, GRAD, DV)
        return first if self.dk_rs else (*first, DK)

    @property
    def by_columns(self) -> bool:
        return self.dq_cut == "columns"

    @property
    def by_rows(self) -> bool:
        """FlashAttention-3's cut at D 64: each consumer its own 64 query rows of dQ, every
        column, over every key (block_m = 64 x consumers)."""
        return self.dq_cut == "rows"

    @property
    def joined(self) -> bool:
        """The consumers exchange dS (joins ``ds`` and ``dq0``): the columns or rows cut."""
        return self.by_columns or self.by_rows

    @property
    def dq_row_blocks(self) -> int:
        """Blocks of 64 query rows of dQ a consumer holds: its own one (rows), else all."""
        return 1 if self.by_rows else self.block_m // 64

    def part(self, consumer: int, p: int) -> int:
        """The 64 head columns (``dq_parts``' p) consumer ``consumer``'s dQ op computes."""
        return consumer if self.by_columns else p

    def adds(self, consumer: int) -> bool:
        """Whether ``consumer`` adds its partial into what an earlier consumer staged."""
        return not self.joined and self.writer_of(consumer) != consumer

    @property
    def dq_buffers(self) -> int:
        """The dQ buffers, each with its writer and its bulk reduce per query block."""
        return 1 if self.shared_dq else self.consumers

    @property
    def dq_stages(self) -> int:
        """Copies of each dQ buffer: two with the columns or rows cut, whose consumers and
        writer meet (join ``dq0``) instead of taking turns, so the consumers stage query block
        i + 1 into the other copy while the writer's reduce still reads block i's; else one."""
        return 2 if self.joined else 1

    def writer_of(self, consumer: int) -> int:
        """The writer (and buffer) consumer ``consumer``'s dQ partial goes to."""
        return 0 if self.shared_dq else consumer

    @property
    def keys(self) -> int:
        """Keys per consumer warp group (its rows of K, V, dK and dV)."""
        return self.block_n // self.consumers

    @property
    def row_bytes(self) -> int:
        """One query block's LSE (or delta): fp32 per row."""
        return self.block_m * F32_BYTES

    @property
    def ds_bytes(self) -> int:
        """Every consumer's dS tile (block_m x its keys, 16-bit)."""
        return self.block_m * self.block_n * ELEM_BYTES

    @property
    def dq_bytes(self) -> int:
        """One dQ buffer (block_m x head_dim fp32)."""
        return self.block_m * self.head_dim * F32_BYTES

    @property
    def smem_bytes(self) -> int:
        """The q and do rings (with LSE and delta), K and V, dS, the dQ buffers, the mbarriers
        and 1 KB to align the tiles to the swizzle atom."""
        return (2 * self.stages * (self.q_bytes + self.row_bytes) + 2 * self.kv_bytes
                + self.ds_bytes + self.dq_stages * self.dq_buffers * self.dq_bytes + 1024
                + 8 * (4 * self.stages + 4))

    @property
    def consumer_registers_needed(self) -> int:
        """fp32 tiles per thread (a warp group's 128 threads hold rows x cols / 128 each): S^T
        and dP^T beside dV and dK, or, later, one part of dQ beside dV and dK; plus the
        overhead."""
        sp = 2 * self.keys * self.block_m // 128
        acc = 2 * self.keys * self.head_dim // 128
        # with dk_rs, dS packed to 16 bits stays beside dQ until dK's wgmma retired
        dq = self.dq_row_blocks * 64 * 64 // 128 + (self.keys * self.block_m // 256
                                                     if self.dk_rs else 0)
        return acc + max(sp, dq) + CONSUMER_OVERHEAD_REGISTERS

    @property
    def dq_parts(self) -> int:
        """A consumer's dQ wgmmas and stagings per query block: one per 64 columns of the head,
        so a consumer holds 64 x 64 of dQ at a time beside its dK and dV (hd128's registers);
        one with the columns cut (its own 64 columns)."""
        return 1 if self.by_columns else self.head_dim // 64

    @property
    def flop(self) -> int:
        """One consumer's GEMM of its keys by the query block over head_dim."""
        return 2 * self.keys * self.block_m * self.head_dim

    def validate(self) -> None:
        def bad(param: str, why: str) -> ProgramError:
            return ProgramError(f"{OWNER}: -p {param}: {why}")

        if self.block_n % self.consumers or self.keys % WGMMA_M:
            raise bad("block_n", f"{self.block_n} keys over {self.consumers} consumers is not a "
                                 f"multiple of {WGMMA_M} keys per consumer (wgmma m64 of S^T)")
        if self.block_m % WGMMA_M:
            raise bad("block_m", f"must be a multiple of {WGMMA_M} (wgmma m64 of dQ), got "
                                 f"{self.block_m}")
        if self.align_refusal is not None:
            raise bad("align", self.align_refusal)
        if self.by_columns and (self.head_dim != 64 * self.consumers or not self.shared_dq):
            raise bad("dq_cut", f"columns gives each of the {self.consumers} consumers 64 head "
                                f"columns and one shared dQ buffer; head_dim {self.head_dim} "
                                f"with shared_dq {str(self.shared_dq).lower()} needs "
                                "-p dq_cut=keys")
        if self.dk_rs and not (self.joined and self.dq_parts == 1):
            raise bad("dk_rs", "dK from registers, after dQ, needs the join that publishes dS "
                               "to dQ's wgmmas and one dQ part: add -p dq_cut=columns (D 128) "
                               "or -p dq_cut=rows (D 64)")
        if self.by_rows and (self.block_m != 64 * self.consumers or not self.shared_dq):
            raise bad("dq_cut", f"rows gives each of the {self.consumers} consumers 64 query "
                                f"rows and one shared dQ buffer; block_m {self.block_m} with "
                                f"shared_dq {str(self.shared_dq).lower()} needs -p "
                                f"block_m={64 * self.consumers} or -p dq_cut=keys")
        need = self.consumer_registers_needed
        if need > self.consumer_registers:
            raise bad("block_m", f"head_dim {self.head_dim} with block_m {self.block_m} and "
                                 f"{self.keys} keys per consumer needs about {need} registers "
                                 f"per consumer thread over -p consumer_registers="
                                 f"{self.consumer_registers}; lower -p block_m")
        split = register_split_refusal(self.producer_registers, self.consumers,
                                       self.consumer_registers)
        if split is not None:
            raise bad(*split)
        if self.smem_bytes > H100_SXM.smem_per_cta_optin:
            raise ProgramError(f"{OWNER}: -T stages: {self.stages} stages of Q and dO "
                               f"({self.q_bytes} bytes each), K and V ({self.kv_bytes} each), "
                               f"dS ({self.ds_bytes}) and {self.dq_buffers} dQ buffers "
                               f"({self.dq_bytes} each) need {self.smem_bytes} bytes of shared "
                               f"memory, over the {H100_SXM.smem_per_cta_optin} a CTA may use; "
                               "lower -T stages or -p block_m")


#: the producer's copies, then per consumer c its ops from FIRST + c * per_consumer(g): S, dP,
#: the gradient, dV, dK, then per dQ part p (64 columns of the head each) its dQ and staging;
#: then each writer's reduce of its buffer (``dq_buffers`` of them)
Q, LSE, DO, DELTA, K, V = range(6)
FIRST = 6
S, DP, GRAD, DV, DK, PROB = range(6)


def per_consumer(g: BackwardGeometry) -> int:
    return len(g.slots) + 2 * g.dq_parts + g.dk_rs


def consumer_op(g: BackwardGeometry, c: int, which: int) -> int:
    """Consumer c's op ``which`` (S, DP, PROB, GRAD, DV or DK; its place: ``g.slots``, or with
    ``dk_rs`` DK's right after the dQ wgmma)."""
    if which == DK and g.dk_rs:
        return dq_op(g, c, 0) + 1
    return FIRST + per_consumer(g) * c + g.slots.index(which)


def dq_op(g: BackwardGeometry, c: int, part: int) -> int:
    """Consumer c's dQ wgmma of head columns ``64 part ..`` (its staging is the next op)."""
    return FIRST + per_consumer(g) * c + len(g.slots) + 2 * part


def stage_op(g: BackwardGeometry, c: int, part: int) -> int:
    return dq_op(g, c, part) + 1 + g.dk_rs


def dq_part(g: BackwardGeometry, op: int) -> int:
    """The dQ part of a dQ or staging op (the emitter's column offset; ``dk_rs`` has one)."""
    return 0 if g.dk_rs else (op - FIRST) % per_consumer(g) - len(g.slots) >> 1


def reduce_op(g: BackwardGeometry, w: int) -> int:
    """Writer w's bulk reduce of its dQ buffer."""
    return FIRST + per_consumer(g) * g.consumers + w


class FlashAttentionBackward(AgentsSchedule):
    """One query block of a KV block's backward: TMA K, V (once), Q with LSE, dO with delta
    (producer); S, dP, the gradient, dV, dK, dQ and its staging per consumer; the bulk reduce of
    each dQ buffer (dq_writer0; and dq_writer1 with shared_dq false)."""

    name = NAME
    family = KERNEL_FAMILY
    geometry: BackwardGeometry

    def __init__(self, target: TargetProfile, geometry: BackwardGeometry,
                 deterministic: bool = False) -> None:
        super().__init__(target, geometry)
        self.deterministic = deterministic

    def tag_names(self) -> dict[int, str]:
        return {**self.target.cost_model.tag_names(), **BULK_TAG_NAMES}

    def build_body(self) -> list[Op]:
        g, t = self.geometry, BackwardTag
        ops = [logical(t.TMA_Q, channel=0), logical(t.TMA_LSE, channel=0),
               logical(t.TMA_DO, channel=1), logical(t.TMA_DELTA, channel=1),
               logical(t.TMA_K, channel=2), logical(t.TMA_V, channel=3)]
        for c in range(g.consumers):
            # columns: dS, stored by st.shared (the generic proxy), is read by other agents
            grad = (logical(t.GRAD, subtile=c, channel=STAGE_OPERAND) if g.joined
                    else logical(t.GRAD, subtile=c))
            one = {S: logical(t.WGMMA_S, subtile=c), DP: logical(t.WGMMA_DP, subtile=c),
                   PROB: logical(t.PROB, subtile=c), GRAD: grad,
                   DV: logical(t.WGMMA_DV, subtile=c), DK: logical(t.WGMMA_DK, subtile=c)}
            ops += [one[w] for w in g.slots]
            stage = t.DQ_ADD if g.adds(c) else t.DQ_STAGE
            for _ in range(g.dq_parts):
                ops += [logical(t.WGMMA_DQ, subtile=c),
                        *((one[DK],) if g.dk_rs else ()),
                        logical(stage, subtile=c, channel=STAGE_OPERAND)]
        ops += [logical(t.DQ_REDUCE, subtile=w, channel=BULK_REDUCE_OPERAND)
                for w in range(g.dq_buffers)]
        gemm = max(1, g.flop // PEAK_MMA_FLOP_PER_CYCLE)
        tile = g.keys * g.block_m
        latency = {t.WGMMA_S: gemm, t.WGMMA_DP: gemm, t.WGMMA_DV: gemm, t.WGMMA_DK: gemm,
                   t.WGMMA_DQ: max(1, gemm // g.dq_parts),
                   t.GRAD: max(1, int(tile * GRAD_CYCLES_PER_ELEMENT
                                      / (3 if g.split_grad else 1))),
                   t.PROB: max(1, int(tile * GRAD_CYCLES_PER_ELEMENT * 2 / 3)),
                   t.DQ_STAGE: max(1, int(g.block_m * 64 * STAGE_CYCLES_PER_ELEMENT)),
                   t.DQ_ADD: max(1, int(ADD_PER_STAGE * g.block_m * 64
                                        * STAGE_CYCLES_PER_ELEMENT))}
        return [o.evolve(latency=latency[BackwardTag(o.tag)]) if o.tag in latency else o
                for o in annotate(ops, self.target.cost_model)]

    def derive_edges(self, body: list[Op]) -> list[DepEdge]:
        """Shared memory: S reads Q_i and K, dP reads dO_i and V, the gradient reads LSE_i and
        delta_i, dV reads dO_i, dK reads Q_i, dQ reads K (and dS, its own write); the copies
        ``stages`` query blocks later (K and V: the next output tile's) overwrite them.  The
        dQ buffer: the staging writes it, the writer's reduce reads it, the next staging
        overwrites it.  Registers: the gradient reads S and dP and writes P and dS, dV reads P,
        dK reads dS, the staging reads dQ; the next query block's S, dP, gradient and dQ
        overwrite what those read."""
        g = self.geometry
        out: list[DepEdge] = []
        for c in range(g.consumers):
            s, dp, gr, dv, dk = (consumer_op(g, c, w) for w in (S, DP, GRAD, DV, DK))
            # the op that turns S into P (dV's operand): the gradient step, or split, PROB
            pr = consumer_op(g, c, PROB) if g.split_grad else gr
            red = reduce_op(g, g.writer_of(c))
            out += [DepEdge.flow(Q, s), DepEdge.flow(K, s), DepEdge.flow(DO, dp),
                    DepEdge.flow(V, dp), DepEdge.flow(s, pr), DepEdge.flow(dp, gr),
                    DepEdge.flow(LSE, pr), DepEdge.flow(DELTA, gr), DepEdge.flow(pr, dv),
                    DepEdge.flow(DO, dv), DepEdge.flow(gr, dk), DepEdge.flow(Q, dk),
                    # the rings' stages, reused ``stages`` query blocks later
                    DepEdge.anti(s, Q, g.stages), DepEdge.anti(dk, Q, g.stages),
                    DepEdge.anti(pr, LSE, g.stages), DepEdge.anti(dp, DO, g.stages),
                    DepEdge.anti(dv, DO, g.stages), DepEdge.anti(gr, DELTA, g.stages),
                    # K and V, overwritten by the next output tile's
                    DepEdge.anti(s, K, 1), DepEdge.anti(dp, V, 1),
                    # registers and dS, overwritten by the next query block
                    DepEdge.anti(gr, s, 1), DepEdge.anti(gr, dp, 1), DepEdge.anti(dv, pr, 1),
                    DepEdge.anti(dk, gr, 1)]
            if g.split_grad:  # P, in S's registers, read by the gradient step
                out += [DepEdge.flow(pr, gr), DepEdge.anti(pr, s, 1)]
            # dS: the consumer's own, or (columns) every consumer's, rewritten by their next
            # gradient steps
            grads = ([consumer_op(g, o, GRAD) for o in range(g.consumers)] if g.joined
                     else [gr])
            for p in range(g.dq_parts):
                dq, st = dq_op(g, c, p), stage_op(g, c, p)
                out += [*(DepEdge.flow(w, dq) for w in grads),
                        *(DepEdge.anti(dq, w, 1) for w in grads),
                        DepEdge.flow(K, dq), DepEdge.flow(dq, st),
                        DepEdge.flow(st, red), DepEdge.anti(dq, K, 1),
                        DepEdge.anti(st, dq, 1),
                        # the dQ buffer, written again by the staging dq_stages query blocks on
                        DepEdge.anti(red, st, g.dq_stages)]
                if g.adds(c):  # the add reads the previous consumer's partial
                    out.append(DepEdge.flow(stage_op(g, c - 1, p), st))
        return out

    def agents(self) -> AgentSpec:
        g = self.geometry
        roles = [AgentRole(name="producer", ops=(Q, LSE, DO, DELTA, K, V), warps=1, issuers=1,
                           registers=g.producer_registers)]
        for c in range(g.consumers):
            roles.append(AgentRole(name=f"consumer{c}",
                                   ops=tuple(range(FIRST + per_consumer(g) * c,
                                                   FIRST + per_consumer(g) * (c + 1))),
                                   warps=4, issuers=128, registers=g.consumer_registers))
        for w in range(g.dq_buffers):
            roles.append(AgentRole(name=f"dq_writer{w}", ops=(reduce_op(g, w),), warps=1,
                                   issuers=1, registers=g.producer_registers))
        # ordering dq{w}: the stagings (and adds) of the consumers writer w serves, in consumer
        # order, then its reduce; with the columns cut, a join of them instead: each consumer
        # meets the others after staging its columns, the writer first in its K tile, before
        # its reduce of them (no consumer waits for another's staging)
        scope = "join" if g.joined else "k_tile"
        orders = tuple(OrderSpec(name=f"dq{w}", scope=scope, turns=(
            *(Turn(agent=f"consumer{c}", ops=tuple(stage_op(g, c, p) for p in range(g.dq_parts)))
              for c in range(g.consumers) if g.writer_of(c) == w),
            Turn(agent=f"dq_writer{w}",
                 ops=() if g.joined else (reduce_op(g, w),)))) for w in range(g.dq_buffers))
        if g.joined:
            # every consumer's dS, published to all before their dQ wgmmas: the consumers meet
            # after their gradient step and their dV and dK wgmmas are issued (which only need
            # their own dS), so a consumer's tensor-core work runs on while it waits (dK's
            # comes after dQ's with dk_rs)
            before = (GRAD, DV) if g.dk_rs else (GRAD, DV, DK)
            orders += (OrderSpec(name="ds", scope="join", turns=tuple(
                Turn(agent=f"consumer{c}", ops=tuple(consumer_op(g, c, w) for w in before))
                for c in range(g.consumers))),)
        # Q (with LSE) and dO (with delta) are released as soon as the reads of them retired
        rings = (RingSpec(name="q", ops=(Q, LSE), release_lag=0),
                 RingSpec(name="do", ops=(DO, DELTA), release_lag=0),
                 RingSpec(name="k", ops=(K,)), RingSpec(name="v", ops=(V,)))
        return AgentSpec(roles=roles,
                         op_bytes={Q: g.q_bytes, LSE: g.row_bytes, DO: g.q_bytes,
                                   DELTA: g.row_bytes, K: g.kv_bytes, V: g.kv_bytes},
                         rings=rings, once=(K, V),
                         orders=orders,
                         turns=(TurnSpec(name="dq", ops=tuple(reduce_op(g, w)
                                                              for w in range(g.dq_buffers)))
                                if self.deterministic else None),
                         trip_rule=self.bounds())

    def bounds(self) -> BackwardTrips:
        """The query blocks each KV block visits (causal: from the diagonal on) and those whose
        gradient step masks (bwd_tiles.py); the body stays one query block."""
        g = self.geometry
        return BackwardTrips(causal=g.causal, block_m=g.block_m, block_n=g.block_n,
                             align=g.align, grouped=not self.deterministic,
                             masked_ops=tuple(consumer_op(g, c, PROB if g.split_grad else GRAD)
                                              for c in range(g.consumers)))


PARAMS = (
    Param("head_dim", int, 128, "head dimension D (64, 128)", choices=BWD_HEAD_DIMS),
    Param("block_m", int, 0, "query rows per K tile (0: the default, 64)",
          bound=Bound(low=0, high=256)),
    Param("block_n", int, 128, "keys per output tile, split over the consumers",
          bound=Bound(low=64, high=256)),
    Param("consumers", int, 2, "consumer warp groups", bound=Bound(low=1, high=2)),
    Param("causal", bool, False, "causal mask: query blocks above the diagonal skipped, the "
                                 "diagonal ones masked (the loop bounds; the body is the same)"),
    ALIGN, *register_params(0, 0, " (0: DEFAULT_REGISTERS's)"),
    Param("shared_dq", bool, True, "one dQ buffer, writer and bulk reduce per query block (the "
                                   "consumers' partials summed in shared memory, consumer by "
                                   "consumer); false: one of each per consumer"),
    Param("deterministic", bool, False, "dQ's adds made in one fixed order (KV block, then "
                                        "consumer): the same bits every run"),
    Param("split_grad", bool, False, "the gradient step in two ops (FlashAttention-3's order): "
                                     "P from S while dP's wgmma runs, dV's wgmma issued before "
                                     "dS is computed beside it"),
    Param("dk_rs", bool, False, "dK's wgmma reads dS from registers and is issued after dQ's, "
                                "whose staging then runs beside it (FlashAttention-3's order; "
                                "with -p dq_cut=columns or rows)"),
    Param("dq_cut", str, "keys", "how the consumers share dQ = dS K: keys (each its keys' "
                                 "partial, added in shared memory), columns (each its 64 "
                                 "head columns over every key, after a join of the consumers "
                                 "publishes every dS; D 128) or rows (each its 64 query rows; "
                                 "block_m 128)", choices=("keys", "columns", "rows")),
)

#: query rows per K tile by head dim: 64 (FA3 takes 128 at D 64, where ptxas spills this
#: kernel's gradient step: S^T, dP^T, dK and dV of 128 queries fill 240 registers)
DEFAULT_BLOCK_M = {64: 64, 128: 64}
#: the setmaxnreg split (producer, consumer), where the forward's is 24 / 240: the producer warp
#: group (the TMA producer and the dQ writers, with the deterministic turns, the strided
#: coordinates and, dQ cut by columns, the writer's join and double buffer) spilled at 24 at D 64
#: causal, at D 128 with dQ cut by columns, and (once the consumer index was read through a
#: warp shuffle, kit/frame.py's uniform_consumer) in the deterministic D 128 causal kernel with
#: dQ cut by keys; the consumers fit 232 with none, at D 128 too.  With -p split_grad the
#: consumers hold P beside dP and need 240 (at 232 they spilled 236 bytes; at 24 / 240 the
#: producer group spilled one value until the descriptors moved to uniform registers in session
#: 18, none since)
DEFAULT_REGISTERS = (40, 232)
SPLIT_GRAD_REGISTERS = (24, 240)
#: the q and do rings' depth unless ``-T stages`` says otherwise
DEFAULT_STAGES = 2


def make_attention_bwd(ctx: BuildContext) -> FlashAttentionBackward:
    base = ctx.make_target(stages=DEFAULT_STAGES)
    p: dict[str, Any] = dict(ctx.params)
    target = backward_profile(base.pipeline, base.clock_ghz, bool(p["deterministic"]))
    registers = (SPLIT_GRAD_REGISTERS if p["split_grad"] and p["dq_cut"] == "columns" else
                 DEFAULT_REGISTERS)
    geometry = BackwardGeometry(
        head_dim=p["head_dim"], block_m=p["block_m"] or DEFAULT_BLOCK_M[p["head_dim"]],
        block_n=p["block_n"], stages=target.pipeline.depth, consumers=p["consumers"],
        causal=bool(p["causal"]), align=p["align"],
        producer_registers=p["producer_registers"] or registers[0],
        consumer_registers=p["consumer_registers"] or registers[1],
        shared_dq=bool(p["shared_dq"]), dq_cut=p["dq_cut"], split_grad=bool(p["split_grad"]),
        dk_rs=bool(p["dk_rs"]))
    geometry.validate()
    return FlashAttentionBackward(target, geometry, bool(p["deterministic"]))


RECORD = ScheduleRecord(
    NAME, "FlashAttention-3-style backward, one query block per iteration of a KV block: a TMA "
    "producer (K, V once; Q with LSE and dO with delta on rings) feeding wgmma consumer warp "
    "groups (S, dP, dS, dV, dK, dQ), each dQ block handed through shared memory to a writer "
    "that reduce-adds it into global memory; every sync derived and proven by the core",
    make_attention_bwd, params=PARAMS,
    # the name keeps the H100's machine; the contract names what any other target lacks
    default_target=TARGET_NAME, targets=(TARGET_NAME,), requires=WGMMA_TMA)
