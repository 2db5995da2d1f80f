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

import math
from string import Template
from collections.abc import Mapping, Sequence

from pipeline_core.plugin_api import (CLUSTER_RELAY, AgentProgram, Bound, CompiledSchedule,
                                      EmitterRecord, Param, ProgramError, Step, StepKind)

from pipeline_core_nvidia_h100 import TARGET_NAME
from pipeline_core_nvidia_h100.cuda import (cluster_header_source, gemm_call_header_source,
                                            gemm_group_k_header_source,
                                            gemm_grouped_header_source,
                                            gemm_cpasync_header_source,
                                            gemm_scale_batch_header_source,
                                            gemm_stream_k_header_source,
                                            gemm_wgmma_header_source, header_source,
                                            wgmma_header_source)
from pipeline_core_nvidia_h100.kit.frame import AgentCode, AgentsFamily, agents_kernel_body
from pipeline_core_nvidia_h100.kit.rings import RingState, loop_tile, require_ring_depths
from pipeline_core_nvidia_h100.kit.tiles import (grouped_tile_loop, jagged_tile_loop,
                                                  k_group_tile_loop, stream_k_tile_loop)
from pipeline_core_nvidia_h100.kit.wgmma import wgmma_ss
from pipeline_core_nvidia_h100.skeleton import (agent_stretches, consumer_branches,
                                                consumer_sync_line, declared_geometry, render,
                                                ring_step_line, section_mark)
from pipeline_core_nvidia_h100.gemm_signature import (DEFAULT_SIGNATURE, KERNEL_NAME,
                                                      gemm_signature)
from pipeline_core_nvidia_h100.warpspecialized import (DTYPE_WGMMA_K, ELEM_BYTES, GROUPED,
                                                       GROUPED_K,
                                                       KERNEL_FAMILY, MAX_GROUPS, MN_CHUNK,
                                                       SCHEDULE_NAME,
                                                       WGMMA_M, GemmVariant,
                                                       WgmmaTag, WsGeometry, describe_variant)
from pipeline_core_nvidia_h100.wgmma_sync import NAMED_BARRIERS

EMITTER_NAME = "cuda-wgmma"
#: ``-O watchdog=N``: polls of one mbarrier wait before it traps (omitted, the default: no
#: bound; no default value is declared, so the listing shows none outside the range).
#: The kernel counts polls in an ``unsigned long long`` and traps on ``++polls > N``, so N
#: stays below ULLONG_MAX (which the counter could never exceed); 2**63 - 1 polls is
#: centuries of polling anyway
WATCHDOG = Param("watchdog", int, None, "polls of one mbarrier wait before the kernel traps "
                 "(omit: no bound)", bound=Bound(low=1, high=2**63 - 1))


def _stage(s: Step) -> str:
    return RingState.of(s, "STAGES").stage


#: The cp.async producer's loads (``-p load=cp_async``): each of its 128 threads copies its
#: chunks of A's and B's tile (``pcgc::CpAsyncOperand``, gemm_cpasync_h100.cuh); the stage's
#: full barrier is the step after (its ``cp_async_arrive``), not an argument.
_CP_ASYNC_LOADS: dict[int, str] = {
    WgmmaTag.CP_A: "LoadA::load(stage_a({stage}), a_ptr, a_ld, m, k_bytes, {t}, KT, "
                   "tile_m * BM, wtid);",
    WgmmaTag.CP_B: "LoadB::load(stage_b({stage}), b_ptr, b_ld, n, k_bytes, {t}, KT, "
                   "tile_n * BN, wtid);"}


#: grouped_mm's 2-D x 2-D (``-p batch=grouped_k``): the copies read through the tile's group's
#: own tensor maps (``maps``: A's, then B's, per group, written on the device), K from the group's
#: start
_GROUP_K_LOADS: dict[int, str] = {
    WgmmaTag.TMA_A: "LoadA::load(stage_a({stage}), maps + 2 * group, full_bar({stage}), {t}, "
                    "KT, tile_m * BM);",
    WgmmaTag.TMA_B: "LoadB::load(stage_b({stage}), maps + 2 * group + 1, full_bar({stage}), {t}, "
                    "KT, tile_n * BN);"}


def _general_loads(cluster: bool, grouped: bool = False, stream_k: bool = False
                   ) -> dict[int, str]:
    """The general kernel's TMA copies of A's and B's tiles (the producer's op steps), each one
    call of its ``pcgc::Operand`` (``gemm_wgmma_h100.cuh``: the major mode, split-K's first K
    tile, the batch, B's multicast share are its template arguments); formatted with the
    step's ``stage`` and loop tile ``t``.  A ``cluster``'s B load takes the CTA's rank; a
    ``grouped`` kernel's loads (``pcgc::GroupOperand``) read the tile's rows and columns from
    its corner, its batched operand at the tile's group (``kit.tiles.jagged_tile_loop``); a
    ``stream_k`` unit's K tiles start at its first, ``k0`` (``kit.tiles.stream_k_tile_loop``)."""
    if grouped:
        return {WgmmaTag.TMA_A: "LoadA::load(stage_a({stage}), &tmA, full_bar({stage}), {t}, "
                                "row0, group);",
                WgmmaTag.TMA_B: "LoadB::load(stage_b({stage}), &tmB, full_bar({stage}), {t}, "
                                "col0, group);"}
    t = "k0 + {t}" if stream_k else "{t}"
    return {WgmmaTag.TMA_A: "LoadA::load(stage_a({stage}), &tmA, full_bar({stage}), " + t
                            + ", KT, tile_m * BM);",
            WgmmaTag.TMA_B: "LoadB::load(stage_b({stage}), &tmB, full_bar({stage}), " + t
                            + ", KT, tile_n * BN" + (", crank);" if cluster else ");")}


def _step_line(s: Step, single_issuer: bool, owner: str, watchdog: int = 0,
               loads: Mapping[int, str] | None = None) -> str:
    state = RingState.of(s, "STAGES")
    stage, parity = state.stage, state.parity(s.phase_offset)
    if s.kind == StepKind.PHASE_WAIT and s.scope == "cluster":  # a peer completes the phase
        bound = f", {watchdog}ull" if watchdog else ""
        return f"mbar_wait_cluster({s.channel}_bar({stage}), {parity}{bound});"
    if s.kind == StepKind.ARRIVE and s.peer:  # a peer CTA's stage (docs/guide/agents.md)
        fn = "mbar_arrive_peer" if s.scope == "cluster" else "mbar_arrive_peer_cta"
        call = f"{fn}({s.channel}_bar({stage}), (crank + {s.peer}) % CLUSTER);"
        return call if single_issuer else f"if (lane == 0) {call}"
    ring = ring_step_line(s, stage, parity, single_issuer, watchdog)
    if ring is not None:
        return ring
    sync = consumer_sync_line(s)  # named barriers, the wgmma group's fence / commit / wait
    if sync is not None:
        return _first_tiles_guard(s) + sync
    if s.kind == StepKind.DESCRIPTOR_ACQUIRE:  # the tile's group's maps (gemm_group_k_h100.cuh)
        return "pcgk::acquire_maps(maps + 2 * group);"
    if s.kind == StepKind.OP:
        if loads is not None and s.tag in loads:
            return loads[s.tag].format(stage=stage, t=loop_tile(s))
        if s.tag == WgmmaTag.TMA_A:
            return (f"tma_load_2d(stage_a({stage}), &tmA, full_bar({stage}), {loop_tile(s)} * BK, "
                    "tile_m * BM);")
        if s.tag == WgmmaTag.TMA_B:
            return (f"tma_load_2d(stage_b({stage}), &tmB, full_bar({stage}), {loop_tile(s)} * BK, "
                    "tile_n * BN);")
        if s.tag == WgmmaTag.WGMMA:
            return f"wgmma_tile({stage});"
    raise ProgramError(f"emitter {EMITTER_NAME}: agent {owner}: no CUDA for step {s.kind.value} "
                       f"(tag {s.tag})")


def _first_tiles_guard(s: Step) -> str:
    """A named wait that fills an earlier output tile's generation (``Step.output_lag`` L, an
    ordering over output tiles: docs/guide/agents.md, "Tile splits") has none to wait for on
    the CTA's first L output tiles: it is guarded by the tile's position."""
    if not s.output_lag:
        return ""
    return f"if (tile >= (int)blockIdx.x + {s.output_lag} * (int)gridDim.x) "


def _after_tiles(consumers: Sequence[AgentProgram]) -> list[str]:
    """After a split consumer's tile loop: the named waits of its output-tile ordering that
    fill the CTA's last output tile's generation, run by the consumer whose turn would come
    next (``tile`` ended one position past the CTA's last tile), so each barrier ends the
    kernel balanced (docs/guide/agents.md, "Tile splits")."""
    texts = []
    for c in consumers:
        steps = [s for it in c.prologue for s in it if s.output_lag] + [
            s for s in c.kernel if s.output_lag]
        lines = [f"if (tile >= (int)blockIdx.x + {s.output_lag} * (int)gridDim.x && "
                 f"tile - {s.output_lag} * (int)gridDim.x < TILES) {named}"
                 for s in steps for named in [consumer_sync_line(s)] if named is not None]
        texts.append("\n".join(["// the last output tile's turn, taken by the next consumer",
                                 section_mark("after"), *lines, section_mark("end")]))
    return consumer_branches(texts)


def emit_wgmma(compiled: CompiledSchedule, *, watchdog: int | None = None) -> str:
    """CUDA C++ for a compiled schedule of kernel family ``gemm-wgmma`` (see the module).

    ``-O watchdog=N`` (:data:`WATCHDOG`, parsed and bounded by the core): every mbarrier wait
    traps after N polls, so a schedule that deadlocks (emitted with ``--allow-unsafe``) fails
    its launch instead of hanging the GPU; None: unbounded waits.
    """
    g = declared_geometry(compiled, KERNEL_FAMILY, WsGeometry, EMITTER_NAME)
    plan = compiled.plan
    if plan.lockstep:
        raise ProgramError(f"emitter {EMITTER_NAME}: writes the agents' programs of kernel family "
                           f"{KERNEL_FAMILY}, but schedule {compiled.schedule_name} compiled a "
                           "lockstep plan (one program every warp group runs)")
    # a cluster's relay agent (docs/guide/agents.md, "Clusters") runs on warp 1 of warp group 0
    relays = [p for p in plan.programs if p.name == CLUSTER_RELAY]
    producer, *consumers = [p for p in plan.programs if p.name != CLUSTER_RELAY]
    require_ring_depths(plan.rings, g.stages, g.stages, EMITTER_NAME)  # the GEMM has no once ring
    v = g.variant
    grouped = v.batch in GROUPED
    loads = (_general_loads(plan.cluster is not None, grouped, v.stream_k) if v.general
             else None)
    cp_async = v.load == "cp_async"
    if cp_async:  # (a stream-K unit's K tiles from its first, k0)
        loads = ({tag: line.replace("{t}", "k0 + {t}") for tag, line in _CP_ASYNC_LOADS.items()}
                 if v.stream_k else _CP_ASYNC_LOADS)
    if v.batch == GROUPED_K:
        loads = _GROUP_K_LOADS
    if producer.role.issuers != (128 if cp_async else 1) or not consumers:
        raise ProgramError(f"emitter {EMITTER_NAME}: expects a producer agent issued by "
                           f"{'its 128 threads (-p load=cp_async)' if cp_async else 'one thread'}"
                           f" followed by consumer agents, got "
                           f"{[(p.name, p.role.issuers) for p in plan.programs]}")

    if v.batch in GROUPED and v.store == "tma" and not (plan.store and plan.store.optional):
        raise ProgramError(f"emitter {EMITTER_NAME}: -p batch={v.batch} -p store=tma chooses "
                           "per tile between the TMA store and the direct one, but the plan's "
                           "store was proven staged on every tile: declare StoreSpec(optional="
                           "True)")

    def lines(p: AgentProgram, single_issuer: bool, label: str) -> list[str]:
        return render(agent_stretches(
            p, lambda s: _step_line(s, single_issuer, p.name, watchdog or 0, loads), label))

    constants = _constants(g)
    parts = {**FAMILY, **general_family(v, consumers)} if v.general else FAMILY
    family = AgentsFamily(**{part: fill(text, constants) for part, text in parts.items()})
    split = plan.split is not None  # a tile split (ping-pong): each consumer its own tiles
    body = agents_kernel_body(
        rings=plan.rings,
        producer=AgentCode(lines=tuple(lines(producer, not cp_async, producer.name))),
        consumers=[AgentCode(lines=tuple(lines(c, False, "consumer"))) for c in consumers],
        producer_name=producer.name, producer_registers=g.producer_registers,
        consumer_registers=g.consumer_registers, family=family, emitter=EMITTER_NAME,
        tiles=(jagged_tile_loop(MAX_GROUPS, v.batch == "grouped_n") if grouped else
               k_group_tile_loop() if v.batch == GROUPED_K else
               stream_k_tile_loop() if v.stream_k else
               grouped_tile_loop(plan.cluster.ctas if plan.cluster is not None else 1,
                                 len(plan.split.agents) if plan.split is not None else 0)),
        tile_split=split, consumer_after=_after_tiles(consumers) if split else (),
        cluster=plan.cluster, relay=[line for r in relays for line in lines(r, True, r.name)],
        producer_threads=producer.role.issuers)
    return _kernel_source(compiled, g, body)


def _kernel_source(compiled: CompiledSchedule, g: WsGeometry, body: str) -> str:
    """The kernel's source around the frame's ``body``: what it computes and how it launches,
    the device headers (the general kernel's device math among them), its wgmma wrapper, the
    kernel with its signature's parameter list (gemv's emitter assembles its source alike)."""
    v, cluster = g.variant, compiled.plan.cluster
    launch = (f"// Launch: block {g.threads} (warp group 0: producer; 1..: consumers), dynamic "
              f"shared memory {g.smem_bytes}\n// bytes, any grid up to (M/{g.bm})*(N/{g.bn}) "
              "CTAs: CTA i runs output tiles i, i + gridDim.x, ... with\n// its ring's stages and "
              "phases running on across them.")
    head = [f"// Emitted by pipeline-core (emitter {EMITTER_NAME}) from schedule "
            f"{compiled.schedule_name} on target {compiled.target_name}."]
    if not v.general:  # the default kernel (the benchmarks' WsLauncher): tile multiples only
        return "\n".join([
            *head, "// C[M,N] = A[M,K] . B[N,K]^T: bf16 in (raw u16), fp32 accumulate, bf16 out; "
            f"both K-contiguous.\n// A and B: TMA tensor maps (2D, box {g.bk} x rows, 128-byte "
            "swizzle).  Tile multiples only.", launch, header_source(), wgmma_header_source(),
            wgmma_ss(g.bn), f'extern "C" __global__ void __launch_bounds__({g.threads}, 1)',
            f"{KERNEL_NAME}({DEFAULT_SIGNATURE.render()}) {{", body, "}", ""])
    return "\n".join([
        *head, f"// The general kernel: C[m,n] = epilogue(A[m,K] . B[K,n]), {describe_variant(v)}; "
        "fp32 accumulate.\n// A and B: TMA tensor maps (2D, 128-byte swizzle; K-major: box "
        f"{g.bk} x rows; MN-major: 64 x {g.bk}\n// per 64 rows).  M, N, K: the sizes rounded up "
        f"to whole {g.bm} x {g.bn} x {g.bk} tiles; m, n: C's own\n// (stores clipped, row "
        "stride ldc); the tensor maps carry the true extents (TMA zero-fills past them).",
        launch, header_source(), wgmma_header_source(), gemm_call_header_source(),
        gemm_scale_batch_header_source(), cluster_header_source(), gemm_wgmma_header_source(),
        *([gemm_grouped_header_source()] if v.batch in GROUPED else []),
        *([gemm_group_k_header_source()] if v.batch == GROUPED_K else []),
        *([gemm_cpasync_header_source()] if v.load == "cp_async" else []),
        *([gemm_stream_k_header_source()] if v.stream_k else []),
        wgmma_ss(g.bn, v.dtype, int(v.a_major == "mn"), int(v.b_major == "mn")),
        f'extern "C" __global__ void __launch_bounds__({g.threads}, 1)'
        + (f" __cluster_dims__({cluster.ctas}, 1, 1)" if cluster is not None else ""),
        f"{KERNEL_NAME}({gemm_signature(v).render()}) {{", body, "}", ""])


def fill(text: str, constants: Mapping[str, int | str]) -> str:
    """The family's CUDA ``text`` with each ``${NAME}`` the kernel's constant (:func:`_constants`):
    ``string.Template``, so the C text keeps its own braces single."""
    return Template(text).substitute(constants)


def _constants(g: WsGeometry) -> dict[str, int | str]:
    return {"BM": g.bm, "BN": g.bn, "BK": g.bk, "STAGES": g.stages, "GROUP_M": g.group_m,
            "THREADS": g.threads, "SMEM": g.smem_bytes, "CONSUMER_ROWS": g.consumer_rows,
            "MBLOCKS": g.wgmma_m_blocks, "KSTEPS": g.k_steps, "ACC": g.bn // 2,
            "PRODUCER_REGS": g.producer_registers, "CONSUMER_REGS": g.consumer_registers,
            "WGMMA_M": WGMMA_M, "CHUNK_BYTES": MN_CHUNK * g.bk * ELEM_BYTES,
            "CONSUMER_THREADS": 128 * g.consumers, "SPLIT_BAR": SPLIT_BARRIER,
            "ELEM": g.elem_bytes, "WGMMA_K": g.wgmma_k,
            "SPLIT_CHUNK": math.gcd(g.bn // 2, SPLIT_CHUNK),
            "SCOLS": g.store_cols or 0, "SBUF": g.store_buffers,
            "BIAS_EARLY": str(g.bias_early).lower(),
            "SBUF_BYTES": g.store_subtile_bytes,
            "A_MN": str(g.variant.a_major == "mn").lower(),
            "B_MN": str(g.variant.b_major == "mn").lower(),
            "SPLIT": str(g.variant.split_k).lower(), "CLUSTER": g.variant.cluster,
            "BATCH_A": str(g.variant.batch in ("a", "ab", "grouped_n")).lower(),
            "BATCH_B": str(g.variant.batch in ("b", "ab", "grouped")).lower(),
            # the consumer's first row in the tile: its share, or (ping-pong) the whole tile
            "ROW0": "0" if g.variant.pingpong else "consumer * CONSUMER_ROWS"}


#: The gemm-wgmma family's device code (:class:`~pipeline_core_nvidia_h100.skeleton.
#: AgentsFamily`), filled by :func:`fill`: the tile math the skeleton leaves out.
def _compute(a_desc: str, b_desc: str) -> str:
    """The consumers' mainloop body: zero the accumulators, then one wgmma per k step and M
    block of a stage, reading A and B through the given shared-memory descriptors (the
    K-major ones of the default kernel, or the MN-major ones of the general call)."""
    return r"""#pragma unroll
        for (int mb = 0; mb < MBLOCKS; ++mb)
#pragma unroll
            for (int i = 0; i < ACC; ++i) acc[mb][i] = 0.f;
        auto wgmma_tile = [&](int s) {
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk)
#pragma unroll
                for (int mb = 0; mb < MBLOCKS; ++mb)
                    wgmma_m64n${BN}k${WGMMA_K}(acc[mb],
                        """ + a_desc + """,
                        """ + b_desc + """);
        };"""


FAMILY = {
    "constants": r"""    constexpr int BM = ${BM}, BN = ${BN}, BK = ${BK}, STAGES = ${STAGES}, GROUP_M = ${GROUP_M};
    constexpr int CONSUMER_ROWS = ${CONSUMER_ROWS}, MBLOCKS = ${MBLOCKS}, KSTEPS = ${KSTEPS};
    constexpr int ACC = ${ACC};
    constexpr u32 A_BYTES = BM * BK * ${ELEM}, B_BYTES = BN * BK * ${ELEM}, STAGE_BYTES = A_BYTES + B_BYTES;""",
    "ring_bytes": "STAGES * STAGE_BYTES",
    "stage_views": r"""    auto stage_a = [&](int s) { return ring + s * STAGE_BYTES; };
    auto stage_b = [&](int s) { return ring + s * STAGE_BYTES + A_BYTES; };""",
    "consumer_state": r"""        float acc[MBLOCKS][ACC];""",
    "compute": _compute(
        "smem_desc_sw128(stage_a(s) + (${ROW0} + mb * ${WGMMA_M}) * 128 + kk * 32)",
        "smem_desc_sw128(stage_b(s) + kk * 32)"),
    "finish": r"""#pragma unroll
        for (int mb = 0; mb < MBLOCKS; ++mb)
#pragma unroll
            for (int i = 0; i < ACC; ++i) fence_operand(acc[mb][i]);

        // Every accumulator goes out, bf16x2 per pair of columns (the m64nN fragment layout).
        const int w = wtid / 32, g = lane / 4, q = lane % 4;
#pragma unroll
        for (int mb = 0; mb < MBLOCKS; ++mb) {
            const int row = tile_m * BM + ${ROW0} + mb * ${WGMMA_M} + w * 16 + g;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int col = tile_n * BN + j * 8 + 2 * q;
                *reinterpret_cast<u32*>(C + (size_t)row * N + col) =
                    pch100::pack_bf16x2(acc[mb][4 * j], acc[mb][4 * j + 1]);
                *reinterpret_cast<u32*>(C + (size_t)(row + 8) * N + col) =
                    pch100::pack_bf16x2(acc[mb][4 * j + 2], acc[mb][4 * j + 3]);
            }
        }""",
}

#: The named barrier the split-K finish syncs the consumer warp groups on: the target's last id
#: (0 is __syncthreads; the agents lowering hands out the free ids from 1 up, docs/guide/agents.md,
#: "Named barriers", and this schedule's plan takes none).
SPLIT_BARRIER = NAMED_BARRIERS.ids - 1
#: Accumulators the split-K reduction reads per slice before adding (the loads in flight; more
#: spill at the compile-time register budget of 65536 / THREADS).
SPLIT_CHUNK = 32

#: split-K's finish, before the epilogue (docs/guide/matmul.md, "Speed"): the consumers'
#: ``finish`` steps, the cross-CTA reduction the agents lowering placed and the checker proved
#: (docs/guide/agents.md, "Cross-CTA reductions"), one block each (:data:`_SPLIT_STEPS`) inside
#: the tile's scope: this CTA's partial sums go to its workspace slice (``me``: the thread's
#: place among the consumers, so each store instruction is one coalesced row); the CTA whose
#: arrival on the tile's counter is the last reads every slice back in split order 0, 1, ...
#: (the same sum whichever CTA is last: the result is deterministic; one slice's loads all in
#: flight at once), resets the counter for its next use and runs the epilogue once.
_SPLIT_OPEN = r"""
        {  // split-K: partial sums out, the tile's last CTA reduces them
            __shared__ int split_last;
            const int me = consumer * 128 + wtid;
            const size_t slice = (size_t)TILES * (BM * BN);
            constexpr int SPLIT_CHUNK = ${SPLIT_CHUNK};  // loads in flight per slice read
            float* part = ws + (size_t)tile * (BM * BN) + me;
            """ + section_mark("finish") + """
"""
_SPLIT_CLOSE = "            " + section_mark("end") + "\n        }\n"


def counter_steps(*, me: str, counter: str, last: str, barrier: str | int,
                  threads: str | int) -> dict[StepKind, str]:
    """The cross-CTA reduction's counter steps as a kernel writes them, one home for every
    kernel that hands partial tiles over (split-K, stream-K, split-KV decoding): the release
    fence; the arrival (the reducing threads meet on named barrier ``barrier`` of ``threads``,
    thread ``me == 0`` adds 1 to counter ``counter`` and learns whether it was the arrival
    ``last`` counts from 0, they meet again so all read ``split_last``); the acquire (every other
    CTA goes on to its next tile); the reset after the reads (they meet first, so every read is
    done before the counter's next use).  ``me`` and ``counter`` are C expressions of the
    kernel's; ``barrier`` and ``threads`` numbers or template fields."""
    meet = f'            asm volatile("bar.sync {barrier}, {threads};\\n" ::: "memory");\n'
    return {
        StepKind.RELEASE_FENCE: "            __threadfence();\n",
        StepKind.COUNT_ARRIVE: (meet + f"            if ({me} == 0) split_last = atomicAdd("
                                f"counters + {counter}, 1u) == {last};\n" + meet),
        StepKind.COUNT_ACQUIRE: ("            if (!split_last) continue;  // another split's CTA "
                                 "finishes this tile\n            __threadfence();\n"),
        # every consumer's reads are done before the counter's next use may begin
        StepKind.COUNT_RESET: meet + f"            if ({me} == 0) counters[{counter}] = 0u;\n",
    }


_SPLIT_STEPS = {
    StepKind.SLICE_STORE: ("            pcgc::slice_store<MBLOCKS, ACC, ${CONSUMER_THREADS}>(acc, "
                           "part + blockIdx.y * slice);\n"),
    StepKind.SLICE_READ: ("            pcgc::slice_read<MBLOCKS, ACC, ${CONSUMER_THREADS}, "
                          "SPLIT_CHUNK>(acc, part, slice, gridDim.y);\n"),
    **counter_steps(me="me", counter="tile", last="gridDim.y - 1", barrier="${SPLIT_BAR}",
                    threads="${CONSUMER_THREADS}"),
}


def split_finish(consumers: Sequence[AgentProgram], stream_k: bool = False) -> str:
    """The split-K kernel's finish: each of the consumers' ``finish`` steps as its block, in
    the order the plan has them (a plan whose consumers reduce differently, or not at all, has
    no such kernel); ``stream_k``: the stream-K kernel's (:data:`_STREAM_K_STEPS` where they
    differ), run only on a unit whose tile other CTAs share."""
    steps = consumers[0].finish
    if any(c.finish != steps for c in consumers) or not steps:
        raise ProgramError(f"emitter {EMITTER_NAME}: -p split_k=true needs the consumers' "
                           "cross-CTA reduction steps, the same in every consumer "
                           "(AgentSpec.reduction); got "
                           + "; ".join(f"{c.name}: {[s.kind.value for s in c.finish]}"
                                       for c in consumers))
    code = []
    for s in steps:
        if s.kind not in _SPLIT_STEPS:
            raise ProgramError(f"emitter {EMITTER_NAME}: no CUDA for finish step "
                               f"{s.kind.value}")
        code.append(_STREAM_K_STEPS.get(s.kind, _SPLIT_STEPS[s.kind]) if stream_k
                    else _SPLIT_STEPS[s.kind])
    if stream_k:
        return _STREAM_K_OPEN + "".join(code) + _SPLIT_CLOSE
    return _SPLIT_OPEN + "".join(code) + _SPLIT_CLOSE


#: stream-K's finish (docs/guide/matmul.md, "Stream-K"), where it differs from split-K's: only
#: a unit whose tile other CTAs share (``w.parts`` > 1) hands over; its piece goes to its
#: CTA's workspace slot (``w.slot``: ``me`` the thread's place, each store one coalesced row),
#: the count its arrival is compared with is the tile's CTAs, the last arriver adds the pieces
#: in K order (``pcsk::fixup_read``), and the counters are the stream-K tiles' (at most the
#: grid's, zero between launches).
_STREAM_K_OPEN = r"""
        if (w.parts > 1) {  // stream-K: a shared tile's piece out, its last CTA adds them all
            __shared__ int split_last;
            const int me = consumer * 128 + wtid;
            constexpr size_t slice = (size_t)BM * BN;  // one workspace slot
            constexpr int SPLIT_CHUNK = ${SPLIT_CHUNK};  // loads in flight per slice read
            const int sk_tile = tile - (TILES - sk.sk);  // among the stream-K tiles
            float* part = ws + me;
            """ + section_mark("finish") + """
"""
_STREAM_K_STEPS = {
    StepKind.SLICE_STORE: ("            pcgc::slice_store<MBLOCKS, ACC, ${CONSUMER_THREADS}>(acc, "
                           "part + w.slot * slice);\n"),
    StepKind.SLICE_READ: ("            pcsk::fixup_read<MBLOCKS, ACC, ${CONSUMER_THREADS}, "
                          "SPLIT_CHUNK>(acc, part, slice, sk, sk_tile);\n"),
    **counter_steps(me="me", counter="sk_tile", last="(unsigned)w.parts - 1u",
                    barrier="${SPLIT_BAR}", threads="${CONSUMER_THREADS}"),
}


_OUT = {"bf16": "pcgc::OutBf16", "fp16": "pcgc::OutF16", "fp32": "pcgc::OutF32"}
_BIAS = {"none": "pcgc::BiasNone", "bf16": "pcgc::BiasBf16", "fp16": "pcgc::BiasF16",
         "fp32": "pcgc::BiasF32"}
_ACT = {"none": "pcgc::ActNone", "relu": "pcgc::ActRelu", "gelu": "pcgc::ActGelu",
        "silu": "pcgc::ActSilu"}
#: ``-p scale`` (docs/guide/matmul.md "scaled_mm"): each accumulator times its row's scale_a and
#: its column's scale_b (per tensor: element 0 of each) before the bias, as torch._scaled_mm
_SCALE = {"none": "pcgc::ScaleNone", "tensor": "pcgc::ScaleTensor", "row": "pcgc::ScaleRow"}
#: The batched kernel's output: batch ``blockIdx.z``'s [m, n] starts c_batch bytes further.
_BATCH_OUTPUT = ("\n    C = static_cast<char*>(C) + (size_t)blockIdx.z * c_batch;  "
                 "// this batch's output")


#: the cp.async producer's loads in their place (``gemm_cpasync_h100.cuh``)
_CP_ASYNC_CONSTANTS = ("\n    using LoadA = pcgc::CpAsyncOperand<BM, ${SPLIT}>;  // the cp.async "
                       "loads\n    using LoadB = pcgc::CpAsyncOperand<BN, ${SPLIT}>;")


def _epilogue(v: GemmVariant) -> tuple[str, str]:
    """The variant's fused epilogue (``gemm_wgmma_h100.cuh``'s ``pcgc::Epilogue``): its type,
    the traits picked by name, among the constants, and the consumer's object of it, over the
    scales the kernel takes or none (the kernel's signature says which)."""
    params = {p.name for p in gemm_signature(v).params}
    scales = [name if name in params else "nullptr" for name in ("scale_a", "scale_b")]
    bounds = "m, n"
    if v.batch in GROUPED:  # the stores stop at the tile's group; its own scales (one per group)
        bounds = "m_end, n_end"
        if v.scale != "none":
            scales[v.batch == "grouped"] += " + (size_t)group * scale_group"
    return (f"\n    using Epi = pcgc::Epilogue<{_OUT[v.out_dtype]}, {_BIAS[v.bias]}, "
            f"{_ACT[v.activation]}, {_SCALE[v.scale]}>;  // the variant's fused epilogue",
            f"        const Epi epi(bias, {', '.join(scales)}, {bounds}, wtid, lane);")


def general_family(v: GemmVariant, consumers: Sequence[AgentProgram] = ()) -> dict[str, str]:
    """The general kernel's device code where it differs from :data:`FAMILY`: each operand's
    descriptor by its major mode (``pcgc::operand_desc``), split-K's finish from the
    ``consumers``' steps, and the fused epilogue (``pcgc::Epilogue``: bias, activation, output
    type, scales; stored directly or through the TMA store's staging buffers).  Filled by
    :func:`fill` like FAMILY."""
    epi_type, epi = _epilogue(v)
    store = ("\n    constexpr int SCOLS = ${SCOLS}, SBUF = ${SBUF};"
             "  // TMA-store sub-tiles: 64 rows x SCOLS, SBUF buffers per consumer"
             "\n    constexpr u32 SBUF_BYTES = ${SBUF_BYTES};  // 64 rows of one swizzled row"
             if v.store == "tma" else "")
    grouped = v.batch in GROUPED
    operands = (("GroupOperand<A_MN, BM, BK, CHUNK_BYTES, ${BATCH_A}>", "GroupOperand<B_MN, BN, "
                 "BK, CHUNK_BYTES, ${BATCH_B}>;  // the operands' TMA loads at the tile's group")
                if grouped else
                ("Operand<A_MN, BM, BK, CHUNK_BYTES, false, false, 1>", "Operand<B_MN, BN, BK, "
                 "CHUNK_BYTES, false, false, 1>;  // the operands' TMA loads, through the group's "
                 "maps") if v.batch == GROUPED_K else
                ("Operand<A_MN, BM, BK, CHUNK_BYTES, ${SPLIT}, ${BATCH_A}, 1>", "Operand<B_MN, "
                 "BN, BK, CHUNK_BYTES, ${SPLIT}, ${BATCH_B}, ${CLUSTER}>;  // the operands' TMA "
                 "loads"))
    family = {
        "constants": FAMILY["constants"] + "\n    constexpr u32 CHUNK_BYTES = ${CHUNK_BYTES};"
                     "  // one MN-major box: 64 rows x BK"
                     "\n    constexpr bool A_MN = ${A_MN}, B_MN = ${B_MN};  // the operands' major"
                     + (_CP_ASYNC_CONSTANTS if v.load == "cp_async" else
                        f"\n    using LoadA = pcgc::{operands[0]};\n    using LoadB = "
                        f"pcgc::{operands[1]}")
                     + epi_type
                     + (_BATCH_OUTPUT if v.strided_batch else "")
                     + store,
        "compute": _compute("pcgc::operand_desc<A_MN, CHUNK_BYTES>(stage_a(s), ${ROW0} + mb * "
                            "${WGMMA_M}, kk)", "pcgc::operand_desc<B_MN, CHUNK_BYTES>(stage_b(s), "
                            "0, kk)"),
        "finish": _FENCE + (split_finish(consumers) if v.split_k else
                            split_finish(consumers, stream_k=True) if v.stream_k else "")
                  + "\n" + epi + "\n"
                  + (_tma_store_finish(consumers, v) if v.store == "tma" else
                     _GROUPED_FINISH if grouped else
                     _GROUP_K_FINISH if v.batch == GROUPED_K else _DIRECT_FINISH),
    }
    if v.store == "tma":  # the staging buffers: after the barriers' 1 KB (WsGeometry.smem_bytes)
        family["stage_views"] = (FAMILY["stage_views"] + "\n    const u32 staging = bars + 1024u;"
                                 "  // consumer c's SBUF staging buffers: c * SBUF ...")
        family["consumer_exit"] = _store_drain(consumers)
    return family


#: the accumulators' last wgmma writes complete before the finish reads them
_FENCE = r"""#pragma unroll
        for (int mb = 0; mb < MBLOCKS; ++mb)
#pragma unroll
            for (int i = 0; i < ACC; ++i) fence_operand(acc[mb][i]);
"""
#: The direct store (-p store=direct): every thread writes its fragments to C, the epilogue
#: applied, two columns per store where aligned, clipped to m x n.
_DIRECT_FINISH = ("        epi.store<MBLOCKS, ACC, ${WGMMA_M}>(acc, C, ldc, tile_m * BM + ${ROW0}, "
                  "tile_n * BN);  // the fused epilogue, stored directly")
#: A grouped kernel's (-p batch=grouped / grouped_n): from the tile's corner, clipped to its group
#: (the epilogue's bounds are the group's end, ``_epilogue``)
_GROUPED_FINISH = ("        epi.store<MBLOCKS, ACC, ${WGMMA_M}>(acc, C, ldc, row0 + ${ROW0}, col0);"
                   "  // the fused epilogue, stored directly, clipped to the tile's group")

#: grouped_mm's 2-D x 2-D (-p batch=grouped_k): the tile's group's [M, N] output, c_batch bytes
#: per group further (an empty group's tiles store the zeroed accumulators)
_GROUP_K_FINISH = ("        epi.store<MBLOCKS, ACC, ${WGMMA_M}>(acc, static_cast<char*>(C) + "
                   "(size_t)group * c_batch, ldc, tile_m * BM + ${ROW0}, tile_n * BN);  // the "
                   "group's output, stored directly")


#: The TMA-store epilogue's steps (the consumers' ``store`` steps, docs/guide/agents.md, "Bulk
#: stores"), each as its CUDA inside the loop over a consumer's sub-tiles (``mb``: its 64-row
#: block, ``s``: its SCOLS-column slice; ``buf``: the sub-tile's staging buffer); the issuer is
#: the consumer's thread 0, the named barrier the consumer's own (``store_bar``).
_STORE_STEPS = {
    StepKind.STORE_WAIT: "if (wtid == 0) pcgc::bulk_wait_read<${value}>();",
    StepKind.NAMED_SYNC: 'asm volatile("bar.sync %0, ${value};\\n" :: "r"(store_bar) : "memory");',
    StepKind.PROXY_FENCE: "pcgc::fence_proxy_async_shared();",
    StepKind.STORE_ISSUE: ("if (wtid == 0) ${store}(&tmC, buf, ${col} + s * SCOLS, "
                           "${row} + ${ROW0} + mb * ${WGMMA_M}${batch});"),
    StepKind.STORE_COMMIT: "if (wtid == 0) pcgc::bulk_commit();",
    StepKind.STORE_DRAIN: "if (wtid == 0) pcgc::bulk_wait<0>();",
    # the thread's part of sub-tile (mb, s), the epilogue applied, into the staging buffer
    StepKind.STAGE_WRITE: ("epi.stage<SCOLS, ${BIAS_EARLY}>(acc[mb], buf, s, ${row} + ${ROW0} "
                           "+ mb * ${WGMMA_M}, ${col}, bias_pre);"),
}
#: Where the TMA store's sub-tiles go, by the kernel's tile loop: the tile's first row and
#: column of C, the store and its coordinates past them.  The raster's (and split-K's): C's 2-D
#: map at the tile's place; a grouped kernel's (``kit.tiles.jagged_tile_loop``): at its corner;
#: groups along K: C [G, M, N] through a 3-D map, its group the outer coordinate (TMA clips each
#: group's M and N tails itself, so every tile is stored so).
_STORE_AT = {"raster": dict(row="tile_m * BM", col="tile_n * BN", store="pcgc::tma_store_2d",
                            batch=""),
             "grouped": dict(row="row0", col="col0", store="pcgc::tma_store_2d", batch=""),
             GROUPED_K: dict(row="tile_m * BM", col="tile_n * BN", store="pcgk::tma_store_3d",
                             batch=", group")}


def _store_at(v: GemmVariant) -> dict[str, str]:
    return _STORE_AT["grouped" if v.batch in GROUPED else
                     GROUPED_K if v.batch == GROUPED_K else "raster"]


def _store_line(s: Step, at: Mapping[str, str] = _STORE_AT["raster"]) -> str:
    """A bulk-store step's CUDA with its value (a wait's groups left, a barrier's threads) and
    its place (``at``: :data:`_STORE_AT`); the kernel's constants stay for :func:`fill`."""
    return Template(_STORE_STEPS[s.kind]).safe_substitute(value=s.value, **at)


def _store_program(consumers: Sequence[AgentProgram], section: str) -> tuple:
    """The consumers' bulk-store steps of ``section`` (``store`` / ``drain``), which every
    consumer must run alike (the barrier id aside: each consumer meets on its own)."""
    def shape(p: AgentProgram) -> list[tuple]:
        return [(s.kind, s.value) for s in getattr(p, section)]

    steps = getattr(consumers[0], section) if consumers else ()
    if not steps or any(shape(c) != shape(consumers[0]) for c in consumers):
        raise ProgramError(f"emitter {EMITTER_NAME}: -p store=tma needs the consumers' "
                           f"bulk-store {section} steps, the same in every consumer "
                           "(AgentSpec.store); got " + "; ".join(
                               f"{c.name}: {[k.value for k, _ in shape(c)]}" for c in consumers))
    for s in steps:
        if s.kind not in _STORE_STEPS:
            raise ProgramError(f"emitter {EMITTER_NAME}: no CUDA for {section} step "
                               f"{s.kind.value}")
    return steps


#: A grouped kernel's choice per tile (-p batch=grouped / grouped_n with -p store=tma): whether
#: the consumer's rows of the tile lie inside the tile's group (or end at C's own edge, where the
#: TMA store clips), so a TMA box writes nothing another group owns
_WHOLE = {"grouped": "row0 + ${ROW0} + CONSUMER_ROWS <= m_end || m_end == m",
          "grouped_n": "col0 + BN <= n_end || n_end == n"}
_WHOLE_OPEN = r"""// A consumer whose rows of the tile cross its group's end stores them directly, clipped
        // (a TMA box would write the next group's); its sub-tiles skip the staging (the plan's
        // optional store: StoreSpec.optional)
        if (${whole}) {"""
_WHOLE_CLOSE = r"""
        } else {
    """ + _GROUPED_FINISH + """
        }"""


def _tma_store_finish(consumers: Sequence[AgentProgram], v: GemmVariant = GemmVariant()) -> str:
    """The TMA-store epilogue (-p store=tma): per 64-row x SCOLS sub-tile, the consumers'
    ``store`` steps in the plan's order; the sub-tile's staging buffer is its running count
    modulo SBUF (a tile's sub-tiles are a multiple of SBUF, so the count restarts with it).  A
    grouped kernel's consumer takes it only where its rows of the tile lie inside the group
    (:data:`_WHOLE`), and stores directly otherwise: the plan's store must say a tile may skip
    it (``BulkStore.optional``), or the choice is not what was proven."""
    steps = _store_program(consumers, "store")
    bars = [next(s.barrier for s in c.store if s.kind == StepKind.NAMED_SYNC)
            for c in consumers]
    pick = " : ".join(f"consumer == {i} ? {b}" for i, b in enumerate(bars[:-1]))
    at = _store_at(v)
    body = "\n".join("                " + _store_line(s, at) for s in steps)
    text = (r"""        // The fused epilogue through shared memory (docs/guide/matmul.md,
        // "The TMA-store epilogue"): each 64-row x SCOLS sub-tile, + bias[col], activation,
        // cast, goes to a 128-byte swizzled staging buffer of this consumer's; its thread 0
        // stores it by TMA (clipped to m x n) while the consumer goes on.
        const int store_bar = """ + (f"{pick} : {bars[-1]}" if pick else str(bars[-1]))
        + r""";  // the consumer's named barrier (the plan's)
        // the bias of the thread's columns, read before the sub-tiles where the registers hold
        // it (WsGeometry.bias_early), else per sub-tile
        float bias_pre[${BIAS_EARLY} ? ACC / 4 : 1][2];
        if constexpr (${BIAS_EARLY}) epi.bias_of(bias_pre, """ + at["col"] + r""");
        """ + section_mark("store") + r"""
#pragma unroll
        for (int mb = 0; mb < MBLOCKS; ++mb) {
#pragma unroll
            for (int s = 0; s < BN / SCOLS; ++s) {
                const u32 buf = staging + (consumer * SBUF + (mb * (BN / SCOLS) + s) % SBUF)
                                * SBUF_BYTES;
""" + body + r"""
            }
        }
        """ + section_mark("end"))
    if v.batch not in GROUPED:
        return text
    head, loop = text.split(section_mark("store"), 1)
    return (head + Template(_WHOLE_OPEN).safe_substitute(whole=_WHOLE[v.batch]) + "\n        "
            + section_mark("store") + loop + _WHOLE_CLOSE)


def _store_drain(consumers: Sequence[AgentProgram]) -> str:
    """The consumers' ``drain`` after their last output tile (every store complete)."""
    return "\n".join("        " + line for line in [
        section_mark("drain"), *(_store_line(s) for s in _store_program(consumers, "drain")),
        section_mark("end")])


EMITTERS = (EmitterRecord(
    EMITTER_NAME, f"standalone CUDA C++ (sm_90a) for {SCHEDULE_NAME}: TMA producer, wgmma "
    "consumers, mbarrier rings, setmaxnreg; every agent's steps one for one", (TARGET_NAME,),
    emit_wgmma, kernel_families=(KERNEL_FAMILY,), options=(WATCHDOG,)),)
