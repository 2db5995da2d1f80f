"""Schedule ``warpspecialized-gemm``: a TMA producer warp group feeding wgmma consumer warp groups.

C[M,N] = A[M,K] . B[N,K]^T, bf16 in, fp32 accumulate.  The body describes one K tile:

* ``TMA_A`` / ``TMA_B`` (agent ``producer``): the tile's bulk tensor copies of A (BM x BK) and B
  (BN x BK) into one stage of an S-stage shared-memory ring, 128-byte swizzled;
* ``WGMMA[c]`` (agent ``consumer<c>``, one per consumer warp group): the group of
  ``BK / 16`` wgmma m64nBNk16 per 64 rows of the consumer's ``BM / consumers`` rows, reading
  both operands from the stage.

The schedule writes no sync at all.  It names the agents, the bytes each copy moves and the
release lag; the core's ``agents`` lowering turns the cross-agent edges into the full/empty
mbarrier rings, injects the producer's acquire / expect-tx and the consumers' wait / fence /
commit / counter wait / release, derives the counter waits, and the proof stage checks the
programs over all timings (docs/guide/agents.md).  The ``cuda-wgmma`` emitter writes the kernel.
"""
from __future__ import annotations

import enum
from typing import Any

import attrs

from pipeline_core.plugin_api import (AgentRole, AgentSpec, Bound, ClusterSpec, CostModel,
                                      DepEdge, KernelLaunch, Op, OpCost, OpRole, OrderSpec, Param,
                                      PipelineConfig, ProgramError, ReductionSpec, ResourceKind,
                                      ScheduleRecord, StoreSpec, TargetProfile, TileSplit, Turn,
                                      annotate, logical)

from pipeline_core_nvidia_h100 import TARGET_NAME
from pipeline_core_nvidia_h100.contracts import WGMMA_TMA
from pipeline_core_nvidia_h100.costs import CP_ASYNC_L2_LATENCY
from pipeline_core_nvidia_h100.gemm_tiles import GroupKTrips, RasterTrips, StreamKTrips
from pipeline_core_nvidia_h100.machine import (H100_AGENT_MACHINE, H100_SXM,
                                                launch_registers, register_split_refusal)
from pipeline_core_nvidia_h100.wgmma_sync import (CP_ASYNC_SYNC, CP_ASYNC_TAG_NAMES,
                                                   DEVICE_MAPS_SYNC, DEVICE_MAPS_TAG_NAMES,
                                                   H100_WGMMA_SYNC, TAG_NAMES)

SCHEDULE_NAME = "warpspecialized-gemm"
#: The kernel family its body is (``EmitterRecord.kernel_families``): a TMA producer feeding
#: wgmma consumers through mbarrier rings; the ``cuda-wgmma`` emitter writes it.
KERNEL_FAMILY = "gemm-wgmma"
ELEM_BYTES = 2
#: wgmma m64nNk16: rows per instruction and K per instruction (bf16).
WGMMA_M, WGMMA_K = 64, 16
#: 128-byte swizzle: a tile row holds at most 64 bf16 of K.
SWIZZLE_BYTES = 128
#: An MN-major tile's rows: 64 elements of M (or N) per 128-byte swizzled row, one TMA box each.
MN_CHUNK = SWIZZLE_BYTES // ELEM_BYTES
#: Registers: the launch gives 65536 / threads each; setmaxnreg moves them between roles.
MAX_REGISTERS = 255


class WgmmaTag(enum.IntEnum):
    """Kernel tags of the wgmma family."""

    TMA_A = 10   #: cp.async.bulk.tensor 2D: A tile into a ring stage
    TMA_B = 11   #: cp.async.bulk.tensor 2D: B tile into a ring stage
    WGMMA = 12   #: one consumer's wgmma group for one K tile (subtile = consumer index)
    #: ``-p load=cp_async``: the producer's 128 threads' 16-byte cp.async copies of the A / B
    #: tile into a ring stage, 128-byte swizzled as TMA writes it (``gemm_cpasync_h100.cuh``)
    CP_A = 13
    CP_B = 14


#: Dense bf16 flop per cycle of one SM's tensor cores at the datasheet peak (989 TFLOPS over 132
#: SMs at 1.83 GHz).  A wgmma group's cost is its flop at this rate; the timing model's
#: ``mma_efficiency`` (calibrated, benchmarks/h100/GEMM_NOTES.md) scales it to what runs.
PEAK_MMA_FLOP_PER_CYCLE = 4096
#: The cost model's default: a 64 x 256 x 64 group (build_body sets each op's own).
WGMMA_GROUP_LATENCY = 2 * 64 * 256 * 64 // PEAK_MMA_FLOP_PER_CYCLE


def wgmma_cost_model() -> CostModel:
    g, mma = ResourceKind.GLOBAL_MEM, ResourceKind.MMA_UNIT
    return CostModel({
        WgmmaTag.TMA_A: OpCost(g, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name="TMA_A"),
        WgmmaTag.TMA_B: OpCost(g, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name="TMA_B"),
        WgmmaTag.WGMMA: OpCost(mma, WGMMA_GROUP_LATENCY, OpRole.COMPUTE, name="WGMMA"),
        WgmmaTag.CP_A: OpCost(g, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name="CP_A"),
        WgmmaTag.CP_B: OpCost(g, CP_ASYNC_L2_LATENCY, OpRole.GLOBAL_LOAD, name="CP_B"),
    })


#: The general kernel's choices (``-p``; docs/guide/matmul.md): what each takes, the first the default.
DTYPES = ("bf16", "fp16", "e4m3")
#: Bytes per input element, and the K one wgmma instruction covers: 32 bytes of K either way
#: (m64nNk16 for the 16-bit types, m64nNk32 for fp8 e4m3, PTX ISA "wgmma.mma_async").
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "e4m3": 1}
DTYPE_WGMMA_K = {"bf16": 16, "fp16": 16, "e4m3": 32}
#: The fused epilogue's scaling (``-p scale``, scaled_mm): ``tensor`` multiplies every
#: accumulator by ``scale_a[0] * scale_b[0]``, ``row`` by ``scale_a[row] * scale_b[col]``
#: (torch._scaled_mm's per-tensor and row-wise scales), before the bias.
SCALES = ("none", "tensor", "row")
#: Which operands carry a batch dimension (``-p batch``, a batched matmul): each such operand is
#: read through a 3-D tensor map at batch ``blockIdx.z``; the output always has one.  The grouped
#: kinds (:data:`GROUPED`) are grouped_mm's instead.
BATCHES = ("none", "a", "b", "ab", "grouped", "grouped_n", "grouped_k")
#: ``-p batch`` of a grouped GEMM (grouped_mm, a mixture of experts' GEMMs in one launch; docs/
#: guide/matmul.md, "Grouped GEMM"): the groups' ends ``offs`` split a jagged dimension, read on
#: the device by the tile scheduler (``kit.tiles.jagged_tile_loop``).  ``grouped``: A's rows
#: (A [sum M_g, K], B one [K, N] per group through a 3-D map at the tile's group, C [sum M_g, N]);
#: ``grouped_n``: B's columns (B [K, sum N_g], A one [M, K] per group, C [M, sum N_g]).  The
#: stores are clipped to the tile's group: with ``-p store=tma`` a consumer whose rows of the
#: tile lie inside its group stores them by TMA, one that crosses the group's end (a TMA box
#: would write into the next group's rows) directly, chosen per tile at run time (the plan's
#: optional store, ``StoreSpec.optional``).
GROUPED = ("grouped", "grouped_n")
#: ``-p batch`` of grouped_mm's 2-D x 2-D (the weight gradient; docs/guide/matmul.md, "Groups
#: along K"): ``offs`` split K, group g's output ``[M, N]`` is ``A[:, k0:k1] . B[k0:k1, :]``; every
#: group has the same output tiles, each its own K tiles, read through the group's tensor maps
#: (written on the device by a pre-pass, ``DEVICE_MAPS_SYNC``), so the last K tile of a group
#: reads zeros past its end; C is ``[G, M, N]``, each group's ``c_batch`` bytes further
GROUPED_K = "grouped_k"
#: The most groups a grouped kernel takes: every CTA keeps the groups' table (each group's first
#: output tile and end, ``gemm_grouped_h100.cuh``) in static shared memory.
MAX_GROUPS = 1024
#: the table's bytes: MAX_GROUPS + 1 tile prefixes and MAX_GROUPS ends, int32, in whole KB (the
#: dynamic shared memory after it starts 1024-byte aligned)
GROUP_TABLE_BYTES = -(-(2 * MAX_GROUPS + 1) * 4 // 1024) * 1024
MAJORS = ("k", "mn")
OUT_DTYPES = ("bf16", "fp16", "fp32")
#: How the producer loads the operands: ``tma`` (one thread's bulk tensor copies, bytes counted
#: on the full barrier) or ``cp_async`` (its 128 threads' 16-byte cp.async copies, each
#: thread's arrival counted on the full barrier once its copies landed): for K-major operands
#: whose row stride is 16-byte but not 128-byte aligned, where every TMA box row straddles two
#: 128-byte lines (docs/guide/matmul.md, "The cp.async producer")
LOADS = ("tma", "cp_async")
BIASES = ("none", "bf16", "fp16", "fp32")
ACTIVATIONS = ("none", "relu", "gelu", "silu")
#: ``direct``: each thread stores its fragment to global memory; ``tma``: through shared-memory
#: staging buffers by TMA stores (docs/guide/matmul.md, "The TMA-store epilogue")
STORES = ("direct", "tma")
#: bytes of each output element type
OUT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
#: The TMA-store epilogue's staging: per consumer, this many buffers of one sub-tile each, a
#: sub-tile being 64 rows (one wgmma m64 block) by one 128-byte swizzled row of columns
STORE_BUFFERS = 2
STORE_ROWS = WGMMA_M
#: The TMA-store sub-tile's row widths, widest first: 128 bytes (128-byte swizzle), else 64
#: (64-byte swizzle) where 128-byte rows do not tile the consumer's columns (BN 160 or 224 of
#: bf16: five or seven 32-column rows)
STORE_ROW_BYTES = (SWIZZLE_BYTES, SWIZZLE_BYTES // 2)


def store_cols(out_dtype: str, bn: int, m_blocks: int,
               buffers: int = STORE_BUFFERS) -> int | None:
    """Columns of one TMA-store sub-tile (64 rows by one swizzled row of the output type) for a
    consumer of ``m_blocks`` 64-row blocks by ``bn`` columns staging through ``buffers``: the
    widest row of :data:`STORE_ROW_BYTES` that tiles ``bn`` in a multiple of ``buffers``
    sub-tiles (the staging buffer is the sub-tile's count modulo ``buffers``, so the count
    must restart with each tile), or None: that tile stores directly.  Why 64-byte rows: the
    direct store measured 1.14-1.16x the TMA store's time at 2000x5000x3072 on an H200
    (benchmarks/results/gemm_wide_tiles_s23_h200.jsonl), which the 256x160 tile needs."""
    for row in STORE_ROW_BYTES:
        cols = row // OUT_BYTES[out_dtype]
        if bn % cols == 0 and m_blocks * (bn // cols) % buffers == 0:
            return cols
    return None


#: Registers a consumer thread needs besides its accumulators (descriptors, addresses, loop
#: state): the 2-consumer 128x160 share of a 256x160 tile builds in its 232 (160 accumulators,
#: 187 used), the 3-consumer 64x256 one (152 each) fails ptxas with C7602.
ADDRESS_REGISTERS = 32
#: the epilogue's own temporaries beside the early bias read (WsGeometry.bias_early): the
#: 128x256 kernel's 128 accumulators and 64 bias values build with no spill at 232 registers
BIAS_EARLY_SLACK = 8

@attrs.frozen(kw_only=True)
class GemmVariant:
    """What the general kernel reads, computes and writes beyond the tile sizes (the ``-p``
    parameters ``dtype``, ``a_major``, ``b_major``, ``out_dtype``, ``bias``, ``activation``,
    ``tails``).  The defaults are the original benchmark kernel (bf16, both operands K-major,
    bf16 out, no epilogue, tile multiples only), emitted byte for byte as before; any other value
    selects the general kernel, which also takes any M, N, K (tile counts rounded up, TMA
    zero-fills the loads out of bounds, the stores are clipped): ``matmul()`` launches it."""

    dtype: str = "bf16"
    #: ``k``: the operand's K is contiguous (A [M,K] row-major; B stored [N,K]); ``mn``: its M
    #: (N) is contiguous, read through wgmma's transpose mode
    a_major: str = "k"
    b_major: str = "k"
    out_dtype: str = "bf16"
    #: the per-column bias's element type, ``none`` without one
    bias: str = "none"
    #: ``gelu`` is the tanh approximation (torch's ``approximate="tanh"``)
    activation: str = "none"
    tails: bool = False
    #: split-K (docs/guide/matmul.md, "Speed"): the grid's second dimension splits the K
    #: tiles; each CTA writes its partial sums to an fp32 workspace and the CTA that finishes an
    #: output tile last adds the slices in split order and runs the epilogue once
    split_k: bool = False
    #: stream-K, the hybrid (docs/guide/matmul.md, "Stream-K"): the persistent grid runs the
    #: whole tiles of the full waves and shares the last, partial wave's tiles by K tiles
    #: (``gemm_tiles.StreamKTrips``); a tile's pieces go to the fp32 workspace and its last CTA
    #: adds them in K order and runs the epilogue once
    stream_k: bool = False
    #: ``tensor`` / ``row``: the accumulators scaled per tensor or per row and column
    #: (:data:`SCALES`)
    scale: str = "none"
    #: the operands with a batch dimension (:data:`BATCHES`); grid z is the batch
    batch: str = "none"
    #: ``tma``: the epilogue writes each 64-row sub-tile to a shared-memory staging buffer and
    #: one thread stores it by TMA (docs/guide/matmul.md, "The TMA-store epilogue")
    store: str = "direct"

    #: consumer ping-pong across output tiles (docs/guide/matmul.md, "Ping-pong"): each consumer
    #: owns a whole BM x BN output tile, the consumers take the CTA's tiles in turn and their
    #: mainloops are ordered by named barriers, so one's epilogue overlaps the other's mainloop
    pingpong: bool = False

    #: CTAs per cluster (docs/guide/matmul.md, "Clusters"): 2 launches CTA pairs on adjacent M
    #: tiles of one N tile; each CTA's producer loads half of the shared B tile and multicasts
    #: it into both CTAs, and each stage is released by the consumers of both
    cluster: int = 1

    #: the producer's loads (:data:`LOADS`): ``cp_async`` for both operands, K-major only
    load: str = "tma"

    #: rows of A's TMA box, 0 for the tile's BM: fewer where the whole of M is one tile
    #: shorter than it (docs/guide/matmul.md, "Decomposition": a box row past M is zero-filled
    #: by TMA, which measured slower than reading a real row); the consumers' wgmma still reads
    #: BM rows, the rows past the box being stale shared memory whose products land only in
    #: accumulator rows past M, which no store writes (a row of A x B is that row's alone)
    a_rows: int = 0

    @property
    def general(self) -> bool:
        """Whether this takes the general kernel (any value off the defaults)."""
        return self != GemmVariant()

    @property
    def grouped(self) -> bool:
        """A grouped GEMM's kernel (:data:`GROUPED`, :data:`GROUPED_K`): its groups come from
        ``offs`` on the device, not from a strided batch."""
        return self.batch in (*GROUPED, GROUPED_K)

    @property
    def strided_batch(self) -> bool:
        """A batch of equal problems at fixed strides (``-p batch=a|b|ab``): the kernel takes
        the batch's strides and count (``gemm_signature.BATCH_PARAMS``)."""
        return self.batch != "none" and not self.grouped


def describe_variant(v: GemmVariant) -> str:
    """The variant in words (the general kernel's header comment, the call's build notice)."""
    return (f"{v.dtype} in, A {v.a_major.upper()}-major, B {v.b_major.upper()}-major, "
            f"{v.out_dtype} out, bias {v.bias}, activation {v.activation}"
            + (", split-K" if v.split_k else "")
            + (", stream-K" if v.stream_k else "")
            + (f", scale {v.scale}" if v.scale != "none" else "")
            + (f", batched {v.batch}" if v.strided_batch else "")
            + (f", grouped along {'N' if v.batch == 'grouped_n' else 'M'} (offs)"
               if v.batch in GROUPED else "")
            + (", grouped along K (offs, per-group tensor maps)" if v.batch == GROUPED_K else "")
            + (", TMA store" if v.store == "tma" else "")
            + (", ping-pong" if v.pingpong else "")
            + (f", cluster {v.cluster} (B multicast)" if v.cluster > 1 else "")
            + (", cp.async loads" if v.load == "cp_async" else "")
            + (f", A boxes of {v.a_rows} rows" if v.a_rows else ""))


def a_rows_clash(v: GemmVariant) -> str | None:
    """The ``-p`` setting of ``v`` that a clipped A box (``-p a_rows``) cannot serve, None where
    it can: the box is a K-major A's, read by TMA into one CTA's tile of one problem.  The one
    rule the schedule's refusal and the call's plan (gemm_call.a_box_rows) read."""
    return ("a_major=mn" if v.a_major == "mn" else "load=cp_async" if v.load == "cp_async"
            else f"cluster={v.cluster}" if v.cluster > 1 else f"batch={v.batch}"
            if v.batch != "none" else "pingpong=true" if v.pingpong else None)


def k_tile(dtype: str) -> int:
    """The K tile of input type ``dtype``: one 128-byte swizzled row (64 bf16, 128 e4m3)."""
    return SWIZZLE_BYTES // DTYPE_BYTES[dtype]


@attrs.frozen(kw_only=True)
class WsGeometry:
    """CTA tile, consumers, ring depth and register split: what the emitted kernel is sized by."""

    bm: int
    bn: int
    bk: int
    consumers: int
    stages: int
    producer_registers: int
    consumer_registers: int
    group_m: int = 8
    variant: GemmVariant = GemmVariant()

    @property
    def consumer_rows(self) -> int:
        """Rows each consumer computes: its share of the tile, or (ping-pong) the whole tile."""
        return self.bm if self.variant.pingpong else self.bm // self.consumers

    @property
    def wgmma_m_blocks(self) -> int:
        """wgmma m64 instructions per k-step per consumer."""
        return self.consumer_rows // WGMMA_M

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.variant.dtype]

    @property
    def wgmma_k(self) -> int:
        """K per wgmma instruction (16 for bf16 / fp16, 32 for e4m3)."""
        return DTYPE_WGMMA_K[self.variant.dtype]

    @property
    def k_steps(self) -> int:
        return self.bk // self.wgmma_k

    @property
    def threads(self) -> int:
        return (self.consumers + 1) * 128

    @property
    def a_bytes(self) -> int:
        """A's share of a stage in shared memory: BM rows whatever its box."""
        return self.bm * self.bk * self.elem_bytes

    @property
    def a_box_rows(self) -> int:
        """Rows one TMA copy of A moves (``-p a_rows``, else BM)."""
        return self.variant.a_rows or self.bm

    @property
    def a_copy_bytes(self) -> int:
        """Bytes one TMA copy of A completes on the stage's barrier (its expect_tx share)."""
        return self.a_box_rows * self.bk * self.elem_bytes

    @property
    def b_bytes(self) -> int:
        return self.bn * self.bk * self.elem_bytes

    @property
    def stage_bytes(self) -> int:
        return self.a_bytes + self.b_bytes

    @property
    def store_buffers(self) -> int:
        """The TMA store's staging buffers per consumer: :data:`STORE_BUFFERS` (a sub-tile's
        staging overlaps the last one's store), or one where a grouped kernel's groups' table
        leaves two no room (128x256 at 4 stages: each sub-tile then waits for the last one's
        store to have read its buffer)."""
        if self.variant.batch in GROUPED and self.variant.store == "tma" and (
                self.stages * self.stage_bytes + 2048 + self._staging(STORE_BUFFERS)
                + GROUP_TABLE_BYTES > H100_SXM.smem_per_cta_optin):
            return 1
        return STORE_BUFFERS

    def _staging(self, buffers: int) -> int:
        return self.consumers * buffers * self.store_subtile_bytes

    @property
    def store_cols(self) -> int | None:
        """Columns of the TMA store's sub-tile (:func:`store_cols`; two buffers' count, which
        a grouped kernel's one buffer divides too), None where none fits."""
        return store_cols(self.variant.out_dtype, self.bn, self.wgmma_m_blocks)

    @property
    def store_subtile_bytes(self) -> int:
        """One staged sub-tile: 64 rows of one swizzled row each (128 bytes where no sub-tile
        fits: the direct store stages nothing)."""
        cols = self.store_cols
        return STORE_ROWS * (SWIZZLE_BYTES if cols is None else
                             cols * OUT_BYTES[self.variant.out_dtype])

    @property
    def staging_bytes(self) -> int:
        """The TMA-store epilogue's staging buffers, all consumers' (0 for the direct store)."""
        if self.variant.store != "tma":
            return 0
        return self._staging(self.store_buffers)

    @property
    def smem_bytes(self) -> int:
        """The ring, its 2 x stages mbarriers (3 x in a cluster: the relay ring's, docs/guide/
        agents.md, "Clusters"), and 1 KB for aligning the ring to the swizzle atom; with the TMA
        store, the barriers get a 1 KB block and the staging buffers follow it (1024-byte
        aligned, as the 128-byte swizzle wants)."""
        if self.variant.store == "tma":
            return self.stages * self.stage_bytes + 2048 + self.staging_bytes
        rings = 3 if self.variant.cluster > 1 else 2
        return self.stages * self.stage_bytes + 1024 + rings * self.stages * 8

    @property
    def accumulators(self) -> int:
        """fp32 accumulator registers per consumer thread."""
        return self.wgmma_m_blocks * self.bn // 2

    @property
    def bias_early(self) -> bool:
        """Whether the TMA-store epilogue reads the thread's bias (``bn / 4`` floats: two a
        quad of columns) before its sub-tiles, where the consumer's registers hold them beside
        the accumulators and ADDRESS_REGISTERS: each sub-tile meets its warp group before it
        is written, and a read inside waited for its load there, one latency a sub-tile (a
        bias cost 128x256 1.7-4.1 K tiles on an H200, session 26).  128x256, 128x192 and the
        smaller tiles take it; 256x160 and ping-pong's 128x192 (160 and 192 accumulators)
        read it per sub-tile (ping-pong's epilogue runs under the other consumer's mainloop)."""
        v = self.variant
        return (v.general and v.store == "tma" and v.bias != "none"
                and self.accumulators + self.bn // 4 + ADDRESS_REGISTERS + BIAS_EARLY_SLACK
                <= self.consumer_registers)

    def validate(self, who: str = f"schedule {SCHEDULE_NAME}") -> None:
        def bad(param: str, why: str) -> ProgramError:
            return ProgramError(f"{who}: -p {param}: {why}")

        if self.bk * self.elem_bytes != SWIZZLE_BYTES:
            raise bad("BK", f"must be {k_tile(self.variant.dtype)} for -p dtype="
                            f"{self.variant.dtype} (one 128-byte swizzled row), got {self.bk}")
        v = self.variant
        if v.dtype == "e4m3" and "mn" in (v.a_major, v.b_major):
            which = "a_major" if v.a_major == "mn" else "b_major"
            raise bad(which, "fp8 wgmma reads both operands K-major (no transpose mode for "
                             "e4m3): -p a_major=k -p b_major=k")
        if v.grouped and v.split_k:
            raise bad("split_k", f"true with -p batch={v.batch}: a grouped kernel's tiles are "
                                 "its groups' (no K split): -p split_k=false")
        if v.batch == "grouped_n" and v.store == "tma":
            # proven, but its first GPU run (H200) stopped on an illegal instruction at a
            # group along N of a 96-row C (benchmarks/grouped_mm_call.py --store tma, case 4):
            # not offered until that is found (docs/guide/matmul.md, "Grouped GEMM")
            raise bad("store", "tma with -p batch=grouped_n: groups along N store directly "
                               "(their TMA store failed on the GPU): -p store=direct")
        if v.batch != "none" and v.split_k:
            raise bad("split_k", "a batched kernel (-p batch) runs the batch on grid z and "
                                 "does not split K: -p split_k=false")
        if v.stream_k and (v.split_k or v.batch != "none" or v.store == "tma" or v.pingpong
                           or v.cluster > 1):
            other = ("split_k=true" if v.split_k else f"batch={v.batch}" if v.batch != "none"
                     else "store=tma" if v.store == "tma" else "pingpong=true" if v.pingpong
                     else f"cluster={v.cluster}")
            raise bad("stream_k", f"true and -p {other} don't combine: a stream-K tile's CTAs "
                                  "reduce through the workspace and its last CTA stores it "
                                  "directly; drop one of them")
        if v.strided_batch and v.store == "tma":
            raise bad("store", "tma with -p batch: C's tensor map is one [m, n] matrix, and a "
                               "batched kernel offsets C per batch (grid z): -p store=direct")
        if v.pingpong:
            if v.split_k or v.batch != "none" or v.dtype == "e4m3":
                other = ("split_k=true" if v.split_k
                         else f"batch={v.batch}" if v.batch != "none" else "dtype=e4m3")
                raise bad("pingpong", f"ping-pong and -p {other} don't combine yet: drop one "
                                      "of them")
            if self.consumers < 2:
                raise bad("pingpong", f"takes 2 consumers or more (-p consumers=2), got "
                                      f"{self.consumers}")
        if v.load == "cp_async":
            if "mn" in (v.a_major, v.b_major) or v.batch != "none" or v.cluster > 1:
                other = ("a_major=mn" if v.a_major == "mn" else "b_major=mn"
                         if v.b_major == "mn" else f"batch={v.batch}" if v.batch != "none"
                         else f"cluster={v.cluster}")
                raise bad("load", f"cp_async loads K-major operands of one CTA, without a "
                                  f"batch (-p {other}): pass -p load=tma")
        if self.bm % (1 if v.pingpong else self.consumers) or self.consumer_rows % WGMMA_M:
            raise bad("BM", f"{self.bm} rows over {self.consumers} consumers is not a multiple "
                            f"of {WGMMA_M} rows per consumer")
        if self.bn % 16 or not 16 <= self.bn <= 256:
            raise bad("BN", f"must be a multiple of 16 in 16..256 (wgmma N), got {self.bn}")
        for param, major, tile, rows in (("a_major", self.variant.a_major, "BM", self.bm),
                                         ("b_major", self.variant.b_major, "BN", self.bn)):
            if major == "mn" and rows % MN_CHUNK:
                raise bad(param, f"an MN-major operand is read {MN_CHUNK} rows per box: its "
                                 f"tile -p {tile}={rows} must be a multiple of {MN_CHUNK} (-p "
                                 f"{tile}={-(-rows // MN_CHUNK) * MN_CHUNK})")
        if self.bm > 256:
            raise bad("BM", f"at most 256 rows (one TMA box dimension), got {self.bm}")
        if v.a_rows:
            if v.a_rows % 8 or not 8 <= v.a_rows < self.bm:
                raise bad("a_rows", f"{v.a_rows}: a multiple of 8 below -p BM={self.bm} (0: "
                                    "BM, the whole tile)")
            clash = a_rows_clash(v)
            if clash is not None:
                raise bad("a_rows", f"{v.a_rows} clips the TMA box of a K-major A of one "
                                    f"CTA's tile, not with -p {clash}; pass -p a_rows=0")
        if self.accumulators > 192 and self.variant.pingpong:
            raise bad("pingpong", f"each consumer holds a whole {self.bm} x {self.bn} tile: "
                                  f"{self.accumulators} fp32 accumulators per thread leave too "
                                  "few of 255 registers; shrink the tile (-p BN=128)")
        if self.variant.cluster > 1:
            if self.variant.split_k:
                raise bad("cluster", f"{self.variant.cluster} with -p split_k=true: a split-K "
                                     "tile's CTAs reduce through global memory, not a cluster; "
                                     "pass -p cluster=1 or -p split_k=false")
            v = self.variant
            if v.store == "tma" or v.pingpong or v.batch != "none" or v.dtype == "e4m3":
                other = ("store=tma" if v.store == "tma" else "pingpong=true" if v.pingpong
                         else f"batch={v.batch}" if v.batch != "none" else "dtype=e4m3")
                raise bad("cluster", f"{v.cluster} and -p {other} don't combine yet: pass "
                                     "-p cluster=1 or drop the other")
            half = self.bn // self.variant.cluster
            step = MN_CHUNK if self.variant.b_major == "mn" else 8
            if half % step:
                raise bad("cluster", f"each CTA multicasts {half} of B's -p BN={self.bn} rows, "
                                     f"not a multiple of {step} (a swizzle atom"
                                     f"{' of an MN-major box' if step == MN_CHUNK else ''}); "
                                     f"pass -p BN={2 * step * -(-self.bn // (2 * step))} or "
                                     "-p cluster=1")
        if self.accumulators > 192:
            raise bad("BM", f"{self.accumulators} fp32 accumulators per consumer thread leave too "
                            "few of 255 registers; add consumers or shrink BN")
        split = register_split_refusal(self.producer_registers, self.consumers,
                                       self.consumer_registers)
        if split is not None:
            raise bad(*split)
        launch = launch_registers(self.threads)
        if self.accumulators + ADDRESS_REGISTERS > self.consumer_registers:
            # ptxas allocates a consumer's code after its setmaxnreg.inc up to that count (the
            # 256 x 160 tile's consumers use 187 registers under a 384-thread launch's 168); a
            # tile past it fails ptxas (C7602 "Insufficient registers": 3 consumers of 64 x 256
            # at 152 each)
            raise bad("consumers", f"{self.consumers} consumers of {self.threads} threads get "
                                   f"{self.consumer_registers} registers each from setmaxnreg, "
                                   f"under the {self.accumulators} accumulators + "
                                   f"{ADDRESS_REGISTERS} a consumer needs; use fewer consumers "
                                   f"or a narrower tile (-p BN)")
        if self.producer_registers > launch:
            raise bad("producer_registers", f"the producer gives registers back: at most the "
                                            f"{launch} each thread starts with")
        if self.variant.store == "tma":
            if self.variant.split_k:
                raise bad("store", "tma with -p split_k=true: the split-K tile is stored by its "
                                   "last CTA's direct epilogue; pass -p store=direct")
            if self.store_cols is None:
                cols = SWIZZLE_BYTES // 2 // OUT_BYTES[self.variant.out_dtype]
                raise bad("store", f"tma stores sub-tiles of 64 rows x one 128- or 64-byte row "
                                   f"of {self.variant.out_dtype} through {self.store_buffers} "
                                   f"buffers: a consumer's {self.consumer_rows} x {self.bn} "
                                   f"tile must hold a multiple of {self.store_buffers} of them "
                                   f"(-p BN a multiple of {cols * self.store_buffers}, or pass "
                                   "-p store=direct)")
        if v.batch in GROUPED and self.smem_bytes + GROUP_TABLE_BYTES > H100_SXM.smem_per_cta_optin:
            raise ProgramError(f"{who}: -T stages: {self.stages} stages need {self.smem_bytes} "
                               f"bytes of shared memory and the groups' table {GROUP_TABLE_BYTES}"
                               f" more, over the {H100_SXM.smem_per_cta_optin} a CTA may use"
                               + (f" (with {self.staging_bytes} bytes of TMA-store staging)"
                                  if self.staging_bytes else "")
                               + f"; pass -T stages={self.stages - 1}"
                               + (" or -p store=direct" if self.staging_bytes else ""))
        if self.smem_bytes > H100_SXM.smem_per_cta_optin:
            raise ProgramError(f"{who}: -T stages: {self.stages} stages of {self.stage_bytes} "
                               f"bytes (the BM x BK and BN x BK tiles) need {self.smem_bytes} bytes of shared memory, over the "
                               f"{H100_SXM.smem_per_cta_optin} a CTA may use"
                               + (f" (with {self.staging_bytes} bytes of TMA-store staging)"
                                  if self.staging_bytes else ""))

    def check_shape(self, m: int, n: int, k: int) -> None:
        for name, value, tile in (("M", m, self.bm), ("N", n, self.bn), ("K", k, self.bk)):
            if value <= 0 or value % tile:
                raise ValueError(f"{name}={value}: the warp-specialized kernel takes tile "
                                 f"multiples only ({name} a positive multiple of {tile})")

    def as_params(self) -> dict[str, Any]:
        return {"BM": self.bm, "BN": self.bn, "BK": self.bk, "consumers": self.consumers,
                "producer_registers": self.producer_registers,
                "consumer_registers": self.consumer_registers, "group_m": self.group_m}


PARAMS = (
    Param("BM", int, 128, "CTA tile rows (M), split over the consumers",
          bound=Bound(low=64, high=256)),
    Param("BN", int, 256, "CTA tile columns (N) = the wgmma N", bound=Bound(low=16, high=256)),
    Param("BK", int, 64, "K tile depth: one 128-byte swizzled row (64 bf16 / fp16, 128 e4m3)",
          bound=Bound(low=64, high=128)),
    Param("consumers", int, 2, "consumer warp groups", bound=Bound(low=1, high=3)),
    Param("producer_registers", int, 40, "setmaxnreg of the producer warp group",
          bound=Bound(low=24, high=256)),
    Param("consumer_registers", int, 232, "setmaxnreg of each consumer warp group",
          bound=Bound(low=24, high=256)),
    Param("release_lag", int, 1, "K tiles a consumer keeps a stage before releasing it "
                                 "(wgmma groups left in flight)", bound=Bound(low=0, high=4)),
    Param("group_m", int, 8, "grouped raster: CTA rows that share B tiles in L2",
          bound=Bound(low=1, high=64)),
    Param("dtype", str, "bf16", "input element type (fp32 accumulate)", choices=DTYPES),
    Param("a_major", str, "k", "A's contiguous dimension: k (A [M,K] row-major) or mn",
          choices=MAJORS),
    Param("b_major", str, "k", "B's contiguous dimension: k (B stored [N,K]) or mn "
                               "(B [K,N] row-major)", choices=MAJORS),
    Param("out_dtype", str, "bf16", "output element type", choices=OUT_DTYPES),
    Param("bias", str, "none", "fused per-column bias: its element type, or none",
          choices=BIASES),
    Param("activation", str, "none", "fused activation after the bias (gelu: tanh "
                                     "approximation)", choices=ACTIVATIONS),
    Param("tails", bool, False, "any M, N, K: tile counts rounded up, loads zero-filled out of "
                                "bounds, stores clipped (any other option off its default "
                                "implies it)"),
    Param("split_k", bool, False, "split the K tiles over the grid's second dimension: "
                                  "partial sums in an fp32 workspace, reduced in split order "
                                  "by the tile's last CTA, epilogue once (implies tails)"),
    Param("stream_k", bool, False, "stream-K hybrid: whole tiles for the full waves, the "
                                   "last partial wave's tiles shared by every CTA by K tiles, "
                                   "their pieces reduced in K order by each tile's last CTA, "
                                   "epilogue once (implies tails)"),
    Param("scale", str, "none", "fused scaling of the accumulators before the bias: "
                                "tensor (scale_a[0] * scale_b[0]) or row (scale_a[row] * "
                                "scale_b[col]), as torch._scaled_mm", choices=SCALES),
    Param("batch", str, "none", "batched matmul: the operands with a batch dimension "
                                "(3-D tensor maps, grid z the batch); grouped / grouped_n: "
                                "grouped_mm's groups along M / N, read from offs on the device",
          choices=BATCHES),
    Param("store", str, "direct", "the epilogue's store: direct (each thread to global "
                                  "memory) or tma (sub-tiles through shared-memory staging "
                                  "buffers by TMA stores that overlap the next tile)",
          choices=STORES),
    Param("pingpong", bool, False, "consumer ping-pong: each consumer owns a whole BM x BN "
                                   "tile, the consumers take output tiles in turn, their "
                                   "mainloops ordered by named barriers (with -p BN=128; "
                                   "implies tails)"),
    Param("load", str, "tma", "the producer's loads: tma (one thread's tensor copies) or "
                              "cp_async (its 128 threads' 16-byte copies, for K-major rows "
                              "not 128-byte aligned; implies tails)", choices=LOADS),
    Param("cluster", int, 1, "CTAs per cluster: 2 pairs CTAs on adjacent M tiles that "
                             "multicast halves of their shared B tile (implies tails)",
          bound=Bound(low=1, high=2)),
    Param("a_rows", int, 0, "rows of A's TMA box where all of M is one shorter tile (0: BM); "
                            "the rows past it are never loaded (implies tails)",
          bound=Bound(low=0, high=256)),
)


def ws_geometry_of(params: dict[str, Any], stages: int) -> WsGeometry:
    return WsGeometry(bm=params["BM"], bn=params["BN"], bk=params["BK"],
                      consumers=params["consumers"], stages=stages,
                      producer_registers=params["producer_registers"],
                      consumer_registers=params["consumer_registers"], group_m=params["group_m"],
                      variant=GemmVariant(**{f.name: params[f.name]
                                             for f in attrs.fields(GemmVariant)}))


def wgmma_profile(pipeline: PipelineConfig, clock_ghz: float | None,
                  load: str = "tma", batch: str = "none") -> TargetProfile:
    """The h100 target's wgmma family: the same ring depth, the TMA/wgmma costs and sync model
    (``load`` ``cp_async``: the sync model whose copies complete by the producer threads'
    arrivals, ``wgmma_sync.CP_ASYNC_SYNC``)."""
    sync = (CP_ASYNC_SYNC if load == "cp_async" else DEVICE_MAPS_SYNC if batch == GROUPED_K
            else H100_WGMMA_SYNC)
    return TargetProfile(wgmma_cost_model(), pipeline, sync=sync, clock_ghz=clock_ghz,
                         agent_machine=H100_AGENT_MACHINE)


class WarpSpecializedGemm:
    """One K tile: TMA_A, TMA_B (producer), WGMMA per consumer (agents lowering)."""

    name = SCHEDULE_NAME

    def __init__(self, target: TargetProfile, geometry: WsGeometry, release_lag: int) -> None:
        self.target = target
        self.geometry = geometry
        self.release_lag = release_lag

    def config(self) -> PipelineConfig:
        return self.target.pipeline

    def lowering(self) -> str:
        return "agents"

    def build_body(self) -> list[Op]:
        cp = self.geometry.variant.load == "cp_async"
        ops = [logical(WgmmaTag.CP_A if cp else WgmmaTag.TMA_A, channel=0),
               logical(WgmmaTag.CP_B if cp else WgmmaTag.TMA_B, channel=1)]
        ops += [logical(WgmmaTag.WGMMA, subtile=c) for c in range(self.geometry.consumers)]
        g = self.geometry
        # fp8 e4m3 runs twice the 16-bit types' flop per cycle (1979 dense TFLOPS)
        group = 2 * g.consumer_rows * g.bn * g.bk // (PEAK_MMA_FLOP_PER_CYCLE * 2 // g.elem_bytes)
        return [o.evolve(latency=group) if o.tag == WgmmaTag.WGMMA else o
                for o in annotate(ops, self.target.cost_model)]

    def derive_edges(self, body: list[Op]) -> list[DepEdge]:
        """Each consumer reads both copies of its tile; the copies S tiles later overwrite them."""
        loads = [i for i, o in enumerate(body) if o.tag in (WgmmaTag.TMA_A, WgmmaTag.TMA_B,
                                                            WgmmaTag.CP_A, WgmmaTag.CP_B)]
        mmas = [i for i, o in enumerate(body) if o.tag == WgmmaTag.WGMMA]
        stages = self.geometry.stages
        return ([DepEdge.flow(p, c) for c in mmas for p in loads]
                + [DepEdge.anti(c, p, stages) for c in mmas for p in loads])

    def agents(self) -> AgentSpec:
        g = self.geometry
        # cp.async: every thread of the producer warp group issues copies and arrives
        roles = [AgentRole(name="producer", ops=(0, 1), warps=4,
                           issuers=128 if g.variant.load == "cp_async" else 1,
                           registers=g.producer_registers)]
        roles += [AgentRole(name=f"consumer{c}", ops=(2 + c,), warps=4, issuers=128,
                            registers=g.consumer_registers) for c in range(g.consumers)]
        # split-K: the consumers' sums are reduced across the CTAs of the output tile
        # (docs/guide/agents.md, "Cross-CTA reductions")
        # (the timing model charges a consumer's fp32 slice: docs/guide/agents.md, "Timing model")
        reduction = (ReductionSpec(name="stream_k" if g.variant.stream_k else "split_k",
                                   slice_bytes=g.consumer_rows * g.bn * 4)
                     if g.variant.split_k or g.variant.stream_k else None)
        # the TMA-store epilogue (docs/guide/agents.md, "Bulk stores"): per consumer, sub-tiles
        # of STORE_ROWS rows x one 128- or 64-byte swizzled row each (validate refused a tile
        # neither tiles)
        # (a grouped kernel's tile that crosses its group's end skips it: stored directly)
        cols = g.store_cols
        store = (StoreSpec(buffers=g.store_buffers,
                           subtiles=g.consumer_rows // STORE_ROWS * (g.bn // cols),
                           subtile_bytes=g.store_subtile_bytes,
                           optional=g.variant.batch in GROUPED)
                 if g.variant.store == "tma" and cols is not None else None)
        # a cluster: each CTA multicasts its half of the B tile (op 1) into every CTA of the
        # pair (docs/guide/agents.md, "Clusters")
        cluster = (ClusterSpec(ctas=g.variant.cluster, multicast=(1,))
                   if g.variant.cluster > 1 else None)
        # every output tile visits every K tile: uniform, so the proof runs one count at a time
        # (stream-K: units of uneven K ranges, whose fixup the core proves from the rule)
        trips: RasterTrips | GroupKTrips | StreamKTrips = (
            GroupKTrips(block_m=g.bm, block_n=g.bn, block_k=g.bk) if g.variant.batch == GROUPED_K
            else StreamKTrips(block_m=g.bm, block_n=g.bn, block_k=g.bk) if g.variant.stream_k
            else RasterTrips(block_m=g.bm, block_n=g.bn, block_k=g.bk))
        if not g.variant.pingpong:
            return AgentSpec(roles=roles, op_bytes={0: g.a_copy_bytes, 1: g.b_bytes},
                             release_lag=self.release_lag, reduction=reduction, store=store,
                             cluster=cluster, trip_rule=trips)
        # ping-pong: the consumers take output tiles in turn, their mainloops in tile order
        # (docs/guide/agents.md, "Tile splits")
        consumers = tuple(r.name for r in roles[1:])
        order = OrderSpec(name="mainloop", scope="output_tile",
                          turns=[Turn(agent=r.name, ops=r.ops) for r in roles[1:]])
        return AgentSpec(roles=roles, op_bytes={0: g.a_copy_bytes, 1: g.b_bytes},
                         release_lag=self.release_lag, reduction=reduction, store=store,
                         split=TileSplit(agents=consumers), orders=[order], trip_rule=trips)

    def tag_names(self) -> dict[int, str]:
        sync = (CP_ASYNC_TAG_NAMES if self.geometry.variant.load == "cp_async" else
                DEVICE_MAPS_TAG_NAMES if self.geometry.variant.batch == GROUPED_K else TAG_NAMES)
        return {**self.target.cost_model.tag_names(), **sync}

    def kernel_launch(self) -> KernelLaunch:
        """Kernel family ``gemm-wgmma`` sized by the geometry built and validated once."""
        return KernelLaunch(kernel_family=KERNEL_FAMILY, geometry=self.geometry)


def _build(ctx: Any) -> WarpSpecializedGemm:
    base = ctx.make_target()
    params = dict(ctx.params)
    target = wgmma_profile(base.pipeline, base.clock_ghz, params["load"], params["batch"])
    geometry = ws_geometry_of(params, target.pipeline.depth)
    geometry.validate()
    lag = params["release_lag"]
    if lag >= geometry.stages:
        raise ProgramError(f"schedule {SCHEDULE_NAME}: -p release_lag: {lag} must be below the "
                           f"ring depth (-T stages={geometry.stages}): a consumer holding "
                           f"{lag} stages leaves the producer none to fill")
    if geometry.variant.stream_k and lag > 1:
        raise ProgramError(f"schedule {SCHEDULE_NAME}: -p release_lag: {lag} with -p "
                           "stream_k=true: a stream-K unit may visit a single K tile, and a "
                           f"consumer keeping {lag} stages needs {lag}; pass -p release_lag=1")
    return WarpSpecializedGemm(target, geometry, lag)


SCHEDULES = (ScheduleRecord(
    SCHEDULE_NAME, "C = A.B^T, bf16 in / fp32 accumulate on Hopper's own path: a TMA producer "
    "warp group feeds wgmma consumer warp groups through an S-stage mbarrier ring (-T stages); "
    "the agents' programs, rings and waits are derived and proven by the core", _build,
    params=PARAMS, default_target=TARGET_NAME,
    # the wgmma sync model and H100 machine replace the target's own: only h100 runs this kernel
    # (the name narrows the contract, which a target without TMA and wgmma is refused by)
    targets=(TARGET_NAME,), requires=WGMMA_TMA),)
