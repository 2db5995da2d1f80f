"""Schedule ``flash-attention-fwd``: one KV block of a FlashAttention-3-style forward, H100.

The body is one K tile (here: one KV block j of ``block_n`` keys) of one output tile (``block_m``
queries of one head):

* agent ``producer``: the TMA copies of Q (once per output tile, ``AgentSpec.once``), K_j and V_j;
* per consumer warp group c (``block_m / consumers`` query rows each): S_j = Q.K_j^T (wgmma, both
  operands in shared memory), the online softmax (row max, exp2, row sum: S_j -> P_j in
  registers, and the correction factor), the rescale of O by that factor, and O += P_j.V_j
  (wgmma, P from registers).

The schedule writes no sync.  The core's ``agents`` lowering derives the Q ring, separate K and V
rings (a consumer waits on V only before PV, so V may still land while S_j runs), every wgmma
fence / commit / wait (the chained waits before the softmax reads S and before the rescale reads
O), the releases, and the named barriers of ``pingpong``; the proof checks them over all timings
(docs/guide/attention.md).  The two overlaps of FlashAttention-3 are switches:

* ``intra_overlap``: O += P_{j-1}.V_{j-1} is issued right after S_j (``AgentSpec.lags``: PV one
  K tile late), so the softmax of S_j runs while PV_{j-1} is on the tensor cores; P is then
  double-buffered in registers (PV_{j-1} still reads P_{j-1} while the softmax writes P_j);
* ``pingpong``: the consumers take turns issuing their GEMMs through named barriers
  (``AgentSpec.orders``), so one warp group's GEMMs run while the other computes its softmax:
  S_j alone, or under ``intra_overlap`` S_j and the lagged PV_{j-1} together (FA3's and FA4's
  scheduler barrier: one turn brackets what one loop iteration issues).
"""
from __future__ import annotations

import enum
from typing import Any

import attrs

from pipeline_core.plugin_api import (AgentRole, AgentSpec, Bound, BuildContext, CostModel,
                                      DepEdge, Op, OpCost, OpRole, OrderSpec, Param,
                                      PipelineConfig, ProgramError, ReductionSpec, ResourceKind,
                                      RingSpec, ScheduleRecord, SharedIssue, TargetProfile,
                                      Turn, annotate, logical)

from pipeline_core_nvidia_h100.kit_api import (CP_ASYNC_L2_LATENCY, H100_SXM, TARGET_NAME,
                                               WGMMA_TMA, AgentsSchedule, family_profile,
                                               register_split_refusal)

from pipeline_core_schedules_attention.decode_tiles import (DECODE_ROWS, NARROW_ROWS,
                                                            DecodeBounds)
from pipeline_core_schedules_attention.layout import BOX_COLS
from pipeline_core_schedules_attention.tiles import LoopBounds
from pipeline_core_schedules_attention.varlen_tiles import VarlenBounds
from pipeline_core_schedules_attention.window_args import MAX_REACH

NAME = "flash-attention-fwd"
OWNER = f"schedule {NAME}"
#: The kernel family the schedule declares (``kernel_launch()``); emit_attention.py writes it.
KERNEL_FAMILY = "attention"
ELEM_BYTES = 2
#: The head dims the forward's kernels are written for: whole boxes, and D=96 (a box and a half:
#: the second box's columns past D read as zeros; :attr:`WarpGroupTiles.box_cols`).
HEAD_DIMS = (64, 96, 128, 192, 256)
#: wgmma m64: each consumer warp group owns 64 query rows per instruction row block.
WGMMA_M = 64
#: Dense bf16 flop per cycle of one SM's tensor cores at the datasheet peak (as the GEMM's).
PEAK_MMA_FLOP_PER_CYCLE = 4096
#: Registers a consumer thread needs beyond its tiles: row max and sum, addresses, loop state
#: (an estimate; the emitter slice measures the real count with ptxas).
CONSUMER_OVERHEAD_REGISTERS = 24
#: The FA3 paper's register split: a 24-register producer, 240 per consumer (2 consumers).
PRODUCER_REGISTERS, CONSUMER_REGISTERS = 24, 240
#: decode's producer reads a group of page-table entries ahead of their copies
#: (attention_decode.cuh's decode_kv_load): it spills under 120 registers (ptxas), and one
#: consumer leaves the SM's registers to spare (128 x (120 + 240) of 65536)
DECODE_PRODUCER_REGISTERS = 120


class AttentionTag(enum.IntEnum):
    """Kernel tags of the attention family (docs/guide/target-plugin.md, "Tag numbering": tags
    are numbered per family; these follow the wgmma GEMM family's 10-12)."""

    TMA_Q = 20      #: cp.async.bulk.tensor: the output tile's Q block, once
    TMA_K = 21      #: cp.async.bulk.tensor: K_j into a K ring stage
    TMA_V = 22      #: cp.async.bulk.tensor: V_j into a V ring stage
    WGMMA_S = 23    #: S_j = Q.K_j^T, one consumer's wgmma group (SS)
    SOFTMAX = 24    #: row max, exp2, row sum: S_j -> P_j and the correction factor (registers)
    RESCALE = 25    #: O *= correction (registers)
    WGMMA_PV = 26   #: O += P_j.V_j, one consumer's wgmma group (P from registers)


#: SFU exp2 and the row reductions of one 64 x block_n tile per warp group: 16 exp2 per cycle
#: per SM quarter (an estimate until the emitter slice measures it); cycles per element.
SOFTMAX_CYCLES_PER_ELEMENT = 1 / 16
RESCALE_CYCLES_PER_ELEMENT = 1 / 64


def attention_cost_model() -> CostModel:
    """The family's tags with H100 figures; build_body sets the size-dependent latencies."""
    g, mma, valu = ResourceKind.GLOBAL_MEM, ResourceKind.MMA_UNIT, ResourceKind.VALU
    return CostModel({
        AttentionTag.TMA_Q: OpCost(g, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name="TMA_Q"),
        AttentionTag.TMA_K: OpCost(g, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name="TMA_K"),
        AttentionTag.TMA_V: OpCost(g, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name="TMA_V"),
        AttentionTag.WGMMA_S: OpCost(mma, 256, OpRole.COMPUTE, name="WGMMA_S"),
        AttentionTag.SOFTMAX: OpCost(valu, 512, OpRole.VALU_COMPUTE, name="SOFTMAX"),
        AttentionTag.RESCALE: OpCost(valu, 64, OpRole.VALU_COMPUTE, name="RESCALE"),
        AttentionTag.WGMMA_PV: OpCost(mma, 256, OpRole.COMPUTE, name="WGMMA_PV"),
    })


def attention_profile(pipeline: PipelineConfig, clock_ghz: float | None) -> TargetProfile:
    """The h100 target as the attention family sees it: the ring depth of ``-T stages``, this
    family's costs, the wgmma sync model (mbarrier rings, wgmma groups, named barriers) and the
    H100 agents machine.  The family's contract lives with its only schedule, as the GEMM's
    does in ``warpspecialized.py``, so the H100 plugin needs no record for it."""
    return family_profile(attention_cost_model(), pipeline, clock_ghz)


class ValueHeadDim:
    """V's (and the output's) head dim where it may differ from Q's and K's (DeepSeek's MLA
    prefill: 192 for Q and K, 128 for V): ``head_dim_v`` 0 means Q's.  The one rule the
    forward's geometry and the calls' plans (call.AttentionCall, varlen_call.VarlenCall) read;
    each declares the two fields."""

    __slots__ = ()
    head_dim: int
    head_dim_v: int

    @property
    def v_dim(self) -> int:
        """V's and the output's head dim."""
        return self.head_dim_v or self.head_dim


@attrs.frozen(kw_only=True)
class WarpGroupTiles:
    """What attention's geometries (the forward's, the backward's ``BackwardGeometry``) say
    alike: the head dim, the tile, the ring depth, the consumer warp groups and their register
    split, the causal diagonal's alignment; the threads and the 16-bit Q and K (or V) blocks."""

    head_dim: int
    block_m: int
    block_n: int
    stages: int
    consumers: int
    causal: bool
    producer_registers: int
    consumer_registers: int
    #: where the causal diagonal sits when the query and key lengths differ (LoopBounds.align)
    align: str = "top_left"

    @property
    def threads(self) -> int:
        """The producer warp group and one warp group per consumer."""
        return 128 * (1 + self.consumers)

    @property
    def align_refusal(self) -> str | None:
        """Why ``-p align`` is refused (a diagonal's place on a schedule with no diagonal), or
        None: both directions' ``validate`` say it alike."""
        if self.align != "top_left" and not self.causal:
            return (f"{self.align} places the causal diagonal, and the schedule is not causal; "
                    "add -p causal=true or drop -p align")
        return None

    @property
    def box_cols(self) -> int:
        """The head dim's columns in shared memory: whole TMA boxes of :data:`BOX_COLS` (one
        128-byte swizzled row each), so head_dim rounded up; the columns past head_dim are read
        past the tensor's D, which TMA fills with zeros (D=96: two boxes, the second half zero;
        docs/guide/attention.md, "Head dims")."""
        return -(-self.head_dim // BOX_COLS) * BOX_COLS

    @property
    def q_bytes(self) -> int:
        """One query block: block_m rows of :attr:`box_cols`."""
        return self.block_m * self.box_cols * ELEM_BYTES

    @property
    def kv_bytes(self) -> int:
        """One K (or V) block: block_n keys of :attr:`box_cols`."""
        return self.block_n * self.box_cols * ELEM_BYTES


@attrs.frozen(kw_only=True)
class AttentionGeometry(WarpGroupTiles, ValueHeadDim):
    """The tile sizes, overlaps and register split the schedule is built and checked for."""

    intra_overlap: bool
    pingpong: bool
    #: stages of Q's ring: with 2, output tile o + 1's Q (and the K and V blocks behind it) is
    #: loaded while tile o still runs, where one buffer waits for o's last release
    #: (docs/guide/attention.md, "A double-buffered Q")
    q_stages: int = 1
    #: packed variable-length batches: each output tile a (sequence, head, query block), its KV
    #: blocks its own sequence's (varlen_tiles.VarlenBounds; docs/guide/attention.md, "Packed
    #: variable-length batches")
    varlen: bool = False
    #: whether the kernel stores each row's log-sum-exp: False compiles the store out, for calls
    #: that need none (no gradient, no ``return_lse``; call.py and varlen_call.py build both;
    #: docs/guide/attention.md, "The LSE only when asked")
    lse: bool = True
    #: whether the packed kernel's consumers declare each tile's KV counts warp-uniform
    #: (-p varlen only; emit_varlen.UNIFORM says what it changes; varlen_call picks it where it
    #: measured faster)
    uniform_tiles: bool = False
    #: the sliding window's reach left and right of the diagonal in keys, -1 unbounded
    #: (LoopBounds.window_left, window_right; docs/guide/attention.md, "Sliding windows and
    #: softcap")
    window_left: int = -1
    window_right: int = -1
    #: the logit softcap: S' = softcap * tanh(S * scale / softcap) before the softmax, the
    #: value the kernel's ``softcap_scale`` argument (attention_window.cuh)
    softcap: bool = False
    #: decoding over a KV cache: an output tile is (sequence, KV head, head chunk, token
    #: block), the GQA group's heads and the tokens packed into one consumer's 64 rows, its KV
    #: blocks gathered from the cache's pages (decode_tiles.DecodeBounds; docs/guide/
    #: attention.md, "Decoding over a KV cache")
    decode: bool = False
    #: decode's split-KV: several CTAs share an output tile's KV blocks, the last to finish
    #: combines their partial outputs (the cross-CTA reduction ``split_kv``)
    split_kv: bool = False
    #: decode's copies per KV block (each one page's share of it, block_n / page_chunks rows):
    #: compiled in, so the producer's single thread issues a fixed, unrolled count
    page_chunks: int = 1
    #: decode's K/V stage layout: 8-row groups, each holding its rows' 64-column parts side by
    #: side, so one copy a page chunk brings every part (a rank-5 map that folds the KV heads
    #: and the parts into one dimension: the cache's heads dense in a row); else each part's
    #: rows together, one copy a part (attention_decode.cuh, KvLayout)
    kv_grouped: bool = False
    #: decode's K/V copies issued by this many producer warps (their first lanes), each its
    #: share of a block's copies; the stage's expected bytes and Q's copy stay warp 0's
    #: (attention_decode.cuh, decode_kv_load)
    kv_issuers: int = 1
    #: V's (and the output's) head dim where it is not Q's and K's (0: the same), e.g.
    #: DeepSeek's MLA prefill, 192 for Q and K and 128 for V: V's ring, O and the PV wgmma's N
    #: are :attr:`v_box_cols` wide (docs/guide/attention.md, "Head dims")
    head_dim_v: int = 0

    @property
    def v_box_cols(self) -> int:
        """V's columns in shared memory, O's per row and the PV wgmma's N: :attr:`v_dim` in
        whole TMA boxes (:attr:`box_cols`'s rule)."""
        return -(-self.v_dim // BOX_COLS) * BOX_COLS

    @property
    def v_bytes(self) -> int:
        """One V block: block_n keys of :attr:`v_box_cols`."""
        return self.block_n * self.v_box_cols * ELEM_BYTES

    @property
    def windowed(self) -> bool:
        """Whether a sliding window bounds the keys (LoopBounds.windowed)."""
        return self.window_left >= 0 or (self.window_right >= 0 and not self.causal)

    @property
    def rows(self) -> int:
        """Query rows per consumer warp group."""
        return self.block_m // self.consumers

    @property
    def smem_bytes(self) -> int:
        """Q's ring, the K and V rings, their mbarriers (full and empty per stage) and 1 KB to
        align the tiles to the swizzle atom."""
        return (self.q_stages * self.q_bytes + self.stages * (self.kv_bytes + self.v_bytes)
                + 1024 + 8 * (4 * self.stages + 2 * self.q_stages))

    @property
    def consumer_registers_needed(self) -> int:
        """fp32 O and S per thread (a warp group's 128 threads hold rows x cols / 128 each; O
        over :attr:`v_box_cols`, the PV wgmma's N), and under ``intra_overlap`` P_{j-1} packed to
        16 bits (half of S) beside S_j, since PV_{j-1}
        still reads it while the softmax of j runs (P converted in place from its S without the
        overlap), plus :data:`CONSUMER_OVERHEAD_REGISTERS`."""
        o = self.rows * self.v_box_cols // 128
        s = self.rows * self.block_n // 128
        return o + s + (s // 2 if self.intra_overlap else 0) + CONSUMER_OVERHEAD_REGISTERS

    @property
    def flop_s(self) -> int:
        """One consumer's S_j in flop."""
        return 2 * self.rows * self.block_n * self.head_dim

    @property
    def flop_pv(self) -> int:
        """One consumer's PV_j in flop (V's head dim)."""
        return 2 * self.rows * self.block_n * self.v_dim

    def validate(self) -> None:
        def bad(param: str, why: str) -> ProgramError:
            return ProgramError(f"{OWNER}: -p {param}: {why}")

        narrow = self.decode and self.block_m in NARROW_ROWS  # decode's narrow tiles
        if self.block_m % self.consumers or (self.rows % WGMMA_M and not narrow):
            raise bad("block_m", f"{self.block_m} query rows over {self.consumers} consumers is "
                                 f"not a multiple of {WGMMA_M} rows per consumer (wgmma m64)")
        if self.block_n % 16:
            raise bad("block_n", f"must be a multiple of 16 (wgmma N), got {self.block_n}")
        if self.align_refusal is not None and not self.windowed:
            raise bad("align", self.align_refusal)
        for side, reach in (("window_left", self.window_left),
                            ("window_right", self.window_right)):
            if reach < -1:
                raise bad(side, f"{reach}; pass a reach in keys >= 0, or -1 for unbounded")
        if self.causal and self.window_right != -1:
            raise bad("window_right", "the causal mask is a right reach of 0; leave "
                                      "-p window_right at -1 with -p causal=true")
        if self.uniform_tiles and not self.varlen:
            raise bad("uniform_tiles", "is built for -p varlen only (the fixed-length kernels' "
                                       "counts are uniform already); drop it or add "
                                       "-p varlen=true")
        if not self.lse and self.decode:
            raise bad("lse", "false is not built for -p decode (its splits combine through their "
                             "LSEs); drop -p lse")
        if self.head_dim_v and (self.head_dim_v % 16 or self.head_dim_v > 4 * BOX_COLS):
            raise bad("head_dim_v", f"{self.head_dim_v}: V's head dim is the PV wgmma's N in "
                                    f"16-column steps, at most {4 * BOX_COLS}; pass a multiple "
                                    "of 16 up to 256, or 0 for head_dim's")
        if self.head_dim_v and self.decode:
            raise bad("head_dim_v", "is built for the prefill forwards only (fixed-length and "
                                    "-p varlen), not -p decode; drop it")
        if self.decode:
            self._validate_decode(bad)
        elif self.split_kv or self.page_chunks != 1 or self.kv_grouped or self.kv_issuers != 1:
            raise bad("split_kv" if self.split_kv else "page_chunks" if self.page_chunks != 1
                      else "kv_grouped" if self.kv_grouped else "kv_issuers",
                      "is decode's; add -p decode=true or drop it")
        if self.pingpong and self.consumers < 2:
            raise bad("pingpong", "needs two consumer warp groups or more to take turns; set "
                                  "-p consumers=2 or -p pingpong=false")
        need = self.consumer_registers_needed
        if need > self.consumer_registers:
            raise bad("head_dim", f"head_dim {self.head_dim} with block_n {self.block_n} needs "
                                  f"about {need} registers per consumer thread (O, S"
                                  f"{' and P (intra_overlap)' if self.intra_overlap else ''}) "
                                  f"over -p consumer_registers={self.consumer_registers}; "
                                  f"lower -p block_n or -p block_m, or set "
                                  f"-p intra_overlap=false")
        split = register_split_refusal(self.producer_registers, self.consumers,
                                       self.consumer_registers)
        if split is not None:
            raise bad(*split)
        if self.smem_bytes > H100_SXM.smem_per_cta_optin:
            qs = f"{self.q_stages} x " if self.q_stages > 1 else ""
            kv = (f"{self.kv_bytes} bytes each" if self.v_bytes == self.kv_bytes
                  else f"{self.kv_bytes} and {self.v_bytes} bytes")
            raise ProgramError(f"{OWNER}: -T stages: Q ({qs}{self.q_bytes} bytes) "
                               f"and {self.stages} "
                               f"stages of K and V ({kv}) need "
                               f"{self.smem_bytes} bytes of shared memory, over the "
                               f"{H100_SXM.smem_per_cta_optin} a CTA may use; lower -T stages "
                               f"or -p block_n{' or -p q_stages' if self.q_stages > 1 else ''}")

    def _validate_decode(self, bad: Any) -> None:
        """Decode's tile: one consumer of :data:`DECODE_ROWS` rows (heads and tokens packed),
        no other variant of the forward's tile loop, the diagonal bottom-right (its own)."""
        if self.head_dim % BOX_COLS:
            raise bad("head_dim", f"{self.head_dim}: decode reads whole {BOX_COLS}-column boxes; "
                                  "pass -p head_dim=64 or 128")
        if self.block_m not in (DECODE_ROWS, *NARROW_ROWS) or self.consumers != 1:
            raise bad("block_m", f"decode packs a GQA group's heads and tokens into one "
                                 f"consumer's {DECODE_ROWS} rows (or a narrow tile's "
                                 f"{' or '.join(map(str, NARROW_ROWS))}); set -p "
                                 f"block_m={DECODE_ROWS} "
                                 "-p consumers=1 -p pingpong=false")
        for name, on in (("varlen", self.varlen), ("window_left", self.windowed),
                         ("softcap", self.softcap)):
            if on:
                raise bad(name, "is not built for -p decode; drop it")
        if self.kv_issuers > 1 and self.page_chunks % self.kv_issuers:
            raise bad("kv_issuers", f"{self.kv_issuers} issuing warps share {self.page_chunks} "
                                    "copies a block unevenly (a warp with none would wait on "
                                    "the ring without gating it); pass -p kv_issuers=1 or "
                                    "page chunks a multiple of it")
        if self.block_n % (8 * self.page_chunks):
            raise bad("page_chunks", f"{self.page_chunks} copies of a {self.block_n}-key block "
                                     "are not whole 8-row atoms of a 128-byte swizzled box; "
                                     f"pass a divisor of {self.block_n // 8}")
        if self.producer_registers < DECODE_PRODUCER_REGISTERS:
            raise bad("producer_registers", f"{self.producer_registers}: decode's producer "
                                            "reads page-table entries ahead of its copies and "
                                            "spills below "
                                            f"{DECODE_PRODUCER_REGISTERS}; set -p "
                                            f"producer_registers={DECODE_PRODUCER_REGISTERS}")
        if self.align != "top_left":
            raise bad("align", "decode aligns the causal diagonal bottom-right, always (the "
                               "last query token is the newest key); drop -p align")


#: op indices: the producer's copies, then per consumer c the four ops at 3 + 4c
Q, K, V = 0, 1, 2
S, SOFTMAX, RESCALE, PV = 0, 1, 2, 3


def consumer_op(c: int, which: int) -> int:
    return 3 + 4 * c + which


class FlashAttentionForward(AgentsSchedule):
    """One KV block: TMA Q (once), K, V (producer); S, softmax, rescale, PV per consumer
    (kernel family ``attention``, sized by the geometry built and validated once)."""

    name = NAME
    family = KERNEL_FAMILY
    geometry: AttentionGeometry

    def build_body(self) -> list[Op]:
        g = self.geometry
        ops = [logical(AttentionTag.TMA_Q, channel=2), logical(AttentionTag.TMA_K, channel=0),
               logical(AttentionTag.TMA_V, channel=1)]
        for c in range(g.consumers):
            ops += [logical(AttentionTag.WGMMA_S, subtile=c),
                    logical(AttentionTag.SOFTMAX, subtile=c),
                    logical(AttentionTag.RESCALE, subtile=c),
                    logical(AttentionTag.WGMMA_PV, subtile=c, channel=1)]
        tile = g.rows * g.block_n
        latency = {AttentionTag.WGMMA_S: g.flop_s // PEAK_MMA_FLOP_PER_CYCLE,
                   AttentionTag.WGMMA_PV: g.flop_pv // PEAK_MMA_FLOP_PER_CYCLE,
                   AttentionTag.SOFTMAX: max(1, int(tile * SOFTMAX_CYCLES_PER_ELEMENT)),
                   AttentionTag.RESCALE: max(1, int(g.rows * g.v_dim
                                                    * RESCALE_CYCLES_PER_ELEMENT))}
        return [o.evolve(latency=latency[AttentionTag(o.tag)]) if o.tag in latency else o
                for o in annotate(ops, self.target.cost_model)]

    def derive_edges(self, body: list[Op]) -> list[DepEdge]:
        """Shared memory: S reads Q and K_j, PV reads V_j; the next output tile's Q and the
        copies ``stages`` blocks later overwrite them.  Registers: softmax reads S, PV reads P,
        the rescale and PV read and write O; S_{j+1} overwrites the S the softmax read, the
        softmax of a later block overwrites the P that PV read (P double-buffered under
        ``intra_overlap``: two blocks later)."""
        g = self.geometry
        p_buffers = 2 if g.intra_overlap else 1
        out: list[DepEdge] = []
        for c in range(g.consumers):
            s, sm, rs, pv = (consumer_op(c, w) for w in (S, SOFTMAX, RESCALE, PV))
            out += [DepEdge.flow(Q, s), DepEdge.flow(K, s), DepEdge.flow(V, pv),
                    DepEdge.flow(s, sm), DepEdge.flow(sm, rs), DepEdge.flow(sm, pv),
                    DepEdge.flow(rs, pv), DepEdge.flow(pv, rs, 1),
                    DepEdge.anti(s, K, g.stages), DepEdge.anti(pv, V, g.stages),
                    DepEdge.anti(s, Q, 1), DepEdge.anti(sm, s, 1),
                    DepEdge.anti(pv, sm, p_buffers)]
        return out

    def agents(self) -> AgentSpec:
        g = self.geometry
        roles = [AgentRole(name="producer", ops=(Q, K, V), warps=4, issuers=1,
                           registers=g.producer_registers)]
        for c in range(g.consumers):
            s, sm, rs, pv = (consumer_op(c, w) for w in (S, SOFTMAX, RESCALE, PV))
            # intra_overlap: S_j, then PV_{j-1}, then the softmax of S_j under PV_{j-1}
            ops = (s, pv, sm, rs) if g.intra_overlap else (s, sm, rs, pv)
            roles.append(AgentRole(name=f"consumer{c}", ops=ops, warps=4, issuers=128,
                                   registers=g.consumer_registers))
        lags = ({consumer_op(c, PV): 1 for c in range(g.consumers)} if g.intra_overlap else {})
        orders: tuple[OrderSpec, ...] = ()
        if g.pingpong:  # under intra_overlap a turn issues S_j and PV_{j-1} back to back
            gemms = (S, PV) if g.intra_overlap else (S,)
            orders = (OrderSpec(name="pingpong", turns=tuple(
                Turn(agent=f"consumer{c}", ops=tuple(consumer_op(c, w) for w in gemms))
                for c in range(g.consumers))),)
        # K is released as soon as S_j retired, V once PV_j did (FA3's early releases)
        rings = (RingSpec(name="q", ops=(Q,), stages=g.q_stages),
                 RingSpec(name="k", ops=(K,), release_lag=0),
                 RingSpec(name="v", ops=(V,), release_lag=0))
        # split-KV: each consumer's partial output (fp32 rows) and its log-sum-exp handed over
        reduction = (ReductionSpec(name="split_kv", slice_bytes=g.rows * (g.head_dim + 1) * 4)
                     if g.split_kv else None)
        # decode's -p kv_issuers: producer warps sharing K's and V's copies, Q warp 0's alone
        shared = (SharedIssue(agent="producer", warps=g.kv_issuers, lead=(Q,))
                  if g.kv_issuers > 1 else None)
        return AgentSpec(roles=roles, op_bytes={Q: g.q_bytes, K: g.kv_bytes, V: g.v_bytes},
                         rings=rings, once=(Q,), orders=orders, lags=lags,
                         trip_rule=self.bounds(), reduction=reduction, shared_issue=shared)

    def bounds(self) -> LoopBounds | DecodeBounds:
        """The causal or windowed loop bounds and the masked KV blocks (the diagonal's, the
        window's edges and the key tail's),
        applied by each consumer's softmax; the body stays one KV block
        (docs/guide/attention.md, "Causal bounds and tails"); ``-p varlen``: the same per
        sequence of a packed batch."""
        g = self.geometry
        masked = tuple(consumer_op(c, SOFTMAX) for c in range(g.consumers))
        if g.decode:
            return DecodeBounds(causal=g.causal, block_n=g.block_n, split=g.split_kv,
                                chunks=g.page_chunks, masked_ops=masked)
        rule = VarlenBounds if g.varlen else LoopBounds
        window = ({"window_left": g.window_left, "window_right": g.window_right}
                  if g.windowed else {})
        return rule(causal=g.causal, block_m=g.block_m, block_n=g.block_n, align=g.align,
                    masked_ops=masked, **window)



#: the parameters attention's schedules (the forward, the backward) share
ALIGN = Param("align", str, "top_left", "where the causal diagonal sits when the query and key "
                                        "lengths differ: top_left (torch's is_causal) or "
                                        "bottom_right (FlashAttention's; rows that see no key "
                                        "give 0)", choices=("top_left", "bottom_right"))


def register_params(producer: int, consumer: int, why: str = "") -> tuple[Param, Param]:
    """The setmaxnreg split's two parameters with their defaults (0 where a schedule picks one
    per variant: ``why`` says how)."""
    low = 0 if 0 in (producer, consumer) else 24
    return (Param("producer_registers", int, producer,
                  "setmaxnreg of the producer warp group" + why, bound=Bound(low=low, high=256)),
            Param("consumer_registers", int, consumer,
                  "setmaxnreg of each consumer warp group" + why, bound=Bound(low=low, high=256)))


REGISTERS = register_params(PRODUCER_REGISTERS, CONSUMER_REGISTERS)

PARAMS = (
    Param("head_dim", int, 128, "head dimension D (96: two TMA boxes, the second half zeros; "
                                "192 and 256 where their tiles' registers and shared memory fit)",
          choices=HEAD_DIMS),
    Param("head_dim_v", int, 0, "V's and the output's head dim where it differs from Q's and "
                                "K's (0: head_dim's; DeepSeek's MLA prefill: -p head_dim=192 "
                                "-p head_dim_v=128)", choices=(0, *HEAD_DIMS)),
    Param("block_m", int, 128, "query rows per output tile, split over the consumers (8, 16: "
                               "decode's narrow tiles, the queries wgmma's N)",
          bound=Bound(low=8, high=256)),
    Param("block_n", int, 128, "keys per KV block (the K tile)", bound=Bound(low=16, high=256)),
    Param("consumers", int, 2, "consumer warp groups", bound=Bound(low=1, high=3)),
    Param("causal", bool, False, "causal mask: KV blocks above the diagonal skipped, the "
                                 "diagonal block masked (the loop bounds; the body is the same)"),
    ALIGN,
    Param("intra_overlap", bool, True, "issue O += P_{j-1}.V_{j-1} right after S_j, the "
                                       "softmax of S_j running under it (FA3's two-stage "
                                       "pipeline inside a warp group)"),
    Param("pingpong", bool, True, "consumers take turns issuing S_j (and, under "
                                  "intra_overlap, PV_{j-1}) through named barriers (FA3's "
                                  "inter-warp-group ping-pong)"),
    Param("q_stages", int, 1, "stages of Q's ring (2: the next output tile's Q loads while this "
                              "one runs)", bound=Bound(low=1, high=2)),
    Param("varlen", bool, False, "packed variable-length batches: each output tile one "
                                 "sequence's query block, visiting that sequence's KV blocks"),
    Param("lse", bool, True, "store each row's log-sum-exp (false: the store compiled out, "
                             "for calls that need none)"),
    Param("uniform_tiles", bool, False, "the packed kernel's consumers declare each tile's KV "
                                        "counts warp-uniform (-p varlen only), so its KV loop "
                                        "keeps the ring in uniform registers"),
    Param("window_left", int, -1, "sliding window: keys a row sees left of its diagonal "
                                  "(-1: unbounded)", bound=Bound(low=-1, high=MAX_REACH)),
    Param("window_right", int, -1, "sliding window: keys a row sees right of its diagonal "
                                   "(-1: unbounded; causal is 0)",
          bound=Bound(low=-1, high=MAX_REACH)),
    Param("softcap", bool, False, "logit softcap: softcap * tanh(S / softcap) before the "
                                  "softmax (the value a kernel argument)"),
    Param("decode", bool, False, "decoding over a KV cache: a GQA group's heads and a few "
                                 "tokens in one 64-row tile (or 8 or 16 rows: -p block_m), KV "
                                 "blocks gathered from pages "
                                 "(needs -p block_m=64 -p consumers=1 -p pingpong=false)"),
    Param("split_kv", bool, False, "decode's split-KV: CTAs share a tile's KV blocks, the last "
                                   "to finish combines their partials (a cross-CTA reduction)"),
    Param("page_chunks", int, 1, "decode's copies per KV block, each one page's share (pages "
                                 "smaller than a block: block_n / page_size)",
          choices=(1, 2, 4, 8, 16)),
    Param("kv_grouped", bool, False, "decode's K/V stages in 8-row groups of every 64-column "
                                     "part: one copy a page chunk, not one a part (the "
                                     "cache's KV heads dense in a row)"),
    Param("kv_issuers", int, 1, "decode's producer warps issuing a block's K/V copies, each "
                                "its share (the first lane of each)", choices=(1, 2, 4)),
    *REGISTERS,
)


def make_attention(ctx: BuildContext) -> FlashAttentionForward:
    base = ctx.make_target()
    target = attention_profile(base.pipeline, base.clock_ghz)
    p: dict[str, Any] = dict(ctx.params)
    geometry = AttentionGeometry(
        head_dim=p["head_dim"], block_m=p["block_m"], block_n=p["block_n"],
        stages=target.pipeline.depth, consumers=p["consumers"], causal=bool(p["causal"]),
        intra_overlap=bool(p["intra_overlap"]), pingpong=bool(p["pingpong"]),
        producer_registers=p["producer_registers"], consumer_registers=p["consumer_registers"],
        align=p["align"], q_stages=p["q_stages"], varlen=bool(p["varlen"]), lse=bool(p["lse"]),
        uniform_tiles=bool(p["uniform_tiles"]),
        window_left=p["window_left"], window_right=p["window_right"],
        softcap=bool(p["softcap"]), decode=bool(p["decode"]), split_kv=bool(p["split_kv"]),
        page_chunks=p["page_chunks"], kv_grouped=bool(p["kv_grouped"]),
        kv_issuers=p["kv_issuers"], head_dim_v=p["head_dim_v"])
    geometry.validate()
    return FlashAttentionForward(target, geometry)


RECORD = ScheduleRecord(
    NAME, "FlashAttention-3-style forward, one KV block per iteration: a TMA producer (Q once, "
    "K and V rings) feeding wgmma consumer warp groups (S = Q.K^T, online softmax, O += P.V); "
    "intra-warp-group overlap and ping-pong derived and proven by the core", make_attention,
    params=PARAMS,
    # the name keeps the H100's machine; the contract names what any other target lacks
    default_target=TARGET_NAME, targets=(TARGET_NAME,), requires=WGMMA_TMA)
