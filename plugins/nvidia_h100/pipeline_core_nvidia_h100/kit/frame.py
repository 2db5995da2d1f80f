"""The warp-specialized kernel frame, the one module that writes it for every family (issue 34):
the rings' mbarriers carved after their stages and initialised, the start barrier, the role
split (warp group 0 the producer, warp groups 1.. the consumers), ``setmaxnreg`` moving
registers between the roles, and each role's program inside its persistent tile loop.

The cut is ThunderKittens' ``lcf`` template's (common setup, the producer's load, the consumer's
setup / compute / finish) and CUTLASS's (the ring's acquire / wait / release apart from the
collective mainloop, the tile scheduler apart from both): a family gives its device code
(:class:`AgentsFamily`), its tile scheduler's device loop (:class:`~.tiles.DeviceTileLoop`) and
its agents' compiled programs as lines (:class:`AgentCode`); the frame owns the rest.  The GEMM
(``emit_wgmma``) and attention (``schedules_attention``'s ``emit_attention``) both stand on it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from pipeline_core.plugin_api import AgentProgram, Cluster, ProgramError, Ring, Step, StepKind

from pipeline_core_nvidia_h100.kit.rings import RingState
from pipeline_core_nvidia_h100.kit.tiles import DeviceTileLoop, TileLoop
from pipeline_core_nvidia_h100.skeleton import (agent_stretches, consumer_branches,
                                                consumer_sync_line, merged_consumer_lines, render,
                                                ring_step_line, role_mark, section_mark)

#: the kernel constant every family names its K-loop rings' depth by
STAGES = "STAGES"
_IND = "    "


@attrs.frozen(kw_only=True)
class AgentsFamily:
    """A warp-specialized kernel family's device code, each a block of CUDA lines: what the
    frame (:func:`agents_kernel_body`) does not write.  The family owns the tile math, the frame
    the rings, the roles and the tile loop."""

    #: the kernel's constants (tile, stage bytes, :data:`STAGES`), first in the body
    constants: str
    #: the bytes of the rings' stages from the shared memory's base ``ring`` (a C expression):
    #: the mbarriers follow them
    ring_bytes: str
    #: where each operand of a ring stage lies in shared memory (``ring`` is the rings' base)
    stage_views: str
    #: what a consumer holds across output tiles (its accumulators)
    consumer_state: str
    #: per output tile, before the consumer's steps: accumulators cleared, the MMA helper its
    #: compute steps call
    compute: str
    #: per output tile, after the consumer's steps: the accumulators out
    finish: str
    #: once after the consumer's last output tile, before it ends (a bulk store's drain; ""
    #: for none)
    consumer_exit: str = ""
    #: the constant naming the depth of the rings loaded once per output tile (attention's Q:
    #: ``Q_STAGES``); "" for a family with none
    once_stages: str = ""


@attrs.frozen(kw_only=True)
class AgentCode:
    """An agent's compiled program as CUDA lines (``skeleton.agent_stretches``), and ``once``:
    the lines it runs on an output tile with no K tile (its once steps alone, in program order;
    read only where the tile loop has such tiles, :attr:`DeviceTileLoop.empty_tiles`)."""

    lines: tuple[str, ...]
    once: tuple[str, ...] = ()


def agent_code(program: AgentProgram, op_line: Callable[[Step, str], str], *,
                single_issuer: bool, emitter: str, watchdog: int = 0) -> AgentCode:
    """An agent's program as the frame takes it, for a family whose rings are all
    :data:`STAGES` deep: every synchronization step written by the kit (a ring's wait, expected
    bytes and arrival at its :class:`~.rings.RingState`; a named barrier; the wgmma group's
    fence, commit and wait), each op step by the family's ``op_line(step, stage)``."""
    def line(s: Step) -> str:
        state = RingState.of(s, STAGES)
        ring = ring_step_line(s, state.stage, state.parity(s.phase_offset), single_issuer,
                              watchdog)
        sync = ring if ring is not None else consumer_sync_line(s)
        if sync is not None:
            return sync
        if s.kind != StepKind.OP:
            raise ProgramError(f"emitter {emitter}: agent {program.name}: no CUDA for step "
                               f"{s.kind.value}")
        return op_line(s, state.stage)
    return AgentCode(lines=tuple(render(agent_stretches(program, line, program.name))))


def _ring_depth(r: Ring, family: AgentsFamily, emitter: str) -> str:
    if not r.once:
        return STAGES
    if not family.once_stages:
        raise ProgramError(f"emitter {emitter}: the plan's ring {r.name} is loaded once per "
                           "output tile, and the kernel family names no depth for such rings "
                           "(AgentsFamily.once_stages)")
    return family.once_stages


def ring_barriers(rings: Sequence[Ring], depths: Sequence[str]) -> list[str]:
    """Each ring's mbarrier address by stage (``{ring}_bar(s)``), the rings' barriers one after
    another from ``bars`` in the plan's order: a ring's offset is the sum of the earlier rings'
    depths (``s``, ``(STAGES + s)``, ``(2 * Q_STAGES + s)``), so each ring has its own depth."""
    out: list[str] = []
    seen: dict[str, int] = {}  # the earlier rings' count by depth
    for r, depth in zip(rings, depths):
        terms = [d if n == 1 else f"{n} * {d}" for d, n in seen.items()]
        offset = f"({' + '.join(terms)} + s)" if terms else "s"
        out.append(f"auto {r.name}_bar = [&](int s) {{ return bars + 8u * {offset}; }};")
        seen[depth] = seen.get(depth, 0) + 1
    return out


def ring_inits(rings: Sequence[Ring], depths: Sequence[str]) -> list[str]:
    """Every mbarrier initialised with its ring's arrival count: the rings of one depth in one
    loop over their stages."""
    out: list[str] = []
    for depth in dict.fromkeys(depths):
        out += [f"for (int s = 0; s < {depth}; ++s) {{",
                *(_IND + f"mbar_init({r.name}_bar(s), {r.arrivals});"
                  for r, d in zip(rings, depths) if d == depth),
                "}"]
    return out


def once_steps(program: AgentProgram) -> list[Step]:
    """An agent's steps on an output tile with no K tile: its once steps alone, in program
    order (:attr:`AgentCode.once`)."""
    return [s for it in (*program.prologue, program.kernel, *program.epilogue) for s in it
            if s.once]


def once_guard(code: AgentCode) -> list[str]:
    """An agent's program on a tile loop with empty output tiles: on a tile with no K tile
    (``KT == 0``) its once steps alone (a ``once`` section, which ``sync_skeleton`` checks), else
    the whole program."""
    return (["if (KT == 0) {  // an output tile with no K tile: the once steps alone"]
            + [_IND + x for x in [section_mark("once"), *code.once, section_mark("end")]]
            + ["} else {"] + [_IND + x for x in code.lines] + ["}"])


def _side_agent(loop: TileLoop, warp: int, name: str, program: Sequence[str],
                ind: str) -> list[str]:
    """A side agent's branch: warp ``warp`` of warp group 0, all its lanes, in the producer's
    tile loop."""
    head, body = _role_loop(loop, program, 3)
    return [ind * 2 + f"if (wtid / 32 == {warp}) {{  // ---- agent {name} ----",
            ind * 3 + role_mark(name), *head, *body, ind * 3 + "}", ind * 2 + "}"]


def _role_loop(loop: TileLoop, program: Sequence[str], level: int,
               between: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """A role's tile loop at indentation ``level`` (in steps of four spaces): its head, then each
    tile's first lines, ``between`` (the family's blocks, indented already) and the program;
    returned as (the head, the body): the caller closes the loop."""
    inner = _IND * (level + 1 if loop.nested else level)
    head = [_IND * level + x for x in loop.head] + [inner + x for x in loop.tile]
    return head, [*between, *(inner + x for x in program)]


def agents_kernel_body(*, rings: Sequence[Ring], producer: AgentCode,
                       consumers: Sequence[AgentCode], producer_name: str,
                       producer_registers: int | str, consumer_registers: int | str,
                       family: AgentsFamily, tiles: DeviceTileLoop, emitter: str,
                       tile_split: bool = False, consumer_after: Sequence[str] = (),
                       cluster: Cluster | None = None, relay: Sequence[str] = (),
                       producer_threads: int = 1, producer_warps: int = 1,
                       side_agents: Sequence[tuple[str, Sequence[str]]] = (),
                       uniform_consumer: bool = False) -> str:
    """The body of a warp-specialized kernel: warp group 0 the producer (one elected thread runs
    its program), warp groups 1.. the consumers (one program; the consumer index is a run-time
    value, so ``setmaxnreg`` sees each role as one branch of a single if/else), ``setmaxnreg``
    moving registers between the roles (numbers, or the family's constants), one mbarrier per
    ring and stage (each ring its own depth: :data:`STAGES`, or the family's once depth), and
    each role's program inside the tile loop ``tiles`` gives.  On a tile loop with empty output
    tiles each program is guarded by :func:`once_guard`.

    ``tile_split``: the consumers are a tile split's (docs/guide/agents.md, "Tile splits"): their
    programs run as one, branching on the consumer index only around their named barriers
    (``skeleton.merged_consumer_lines``), and the consumer index is read through a warp shuffle,
    so ptxas knows it is the same in every thread of a warp: a tile loop whose bounds depend on
    it otherwise puts the wgmma groups on a path ptxas takes as divergent, and it serializes
    every wgmma there (C7520).  ``uniform_consumer``: the consumer index read through the warp
    shuffle without a tile split too, so ptxas keeps what it derives from it (the wgmma
    descriptors of the consumer's rows) in uniform registers instead of building them on the
    vector pipe and moving each (R2UR) before its wgmma: the attention kernels' (measured on an
    H200: the backward 1.03-1.07x, the forward up to 1.10x causal; the GEMM's kernels gained
    nothing and its 1 x 4096 x 4096 split-K kernel lost 3.5%, so it keeps the plain index;
    docs/guide/attention.md, "How fast a consumer issues its wgmmas").
    ``consumer_after``: the consumers' lines after their tile loop.
    ``cluster``: the plan's cluster (docs/guide/agents.md, "Clusters"): its start barrier after
    the initialisation and its end barrier before the exit; ``relay``: the program of its relay
    agent, which warp 1 of warp group 0 runs (one thread) in the producer's tile loop.
    ``producer_threads``: 1, the producer's program runs on thread 0 of its warp group; 128,
    on every thread of it (a producer whose every thread issues copies, ``AgentRole.issuers``).
    ``producer_warps`` N > 1 (with one producer thread): the program runs on the first lane of
    each of the warp group's first N warps, every one running its waits, the family's lines
    sharing out the copies and keeping the once-a-stage steps (the expected bytes) to warp 0
    (decode's ``-p kv_issuers``: one thread's copy issue bounded a stream of small copies).
    ``side_agents``: (name, program) of agents that each run on a whole warp of warp group 0,
    from warp 1 on, in the producer's tile loop (they join named barriers, which count whole
    warps: the attention backward's dQ writers); not beside a relay."""
    depths = [_ring_depth(r, family, emitter) for r in rings]
    if producer_warps != 1 and (producer_threads != 1 or not 1 <= producer_warps <= 4):
        raise ProgramError(f"emitter {emitter}: producer_warps={producer_warps} runs a one-thread "
                           "producer on the first lane of up to 4 warps; give it a producer of "
                           f"one thread (producer_threads={producer_threads}) and 1..4 warps")
    if relay and side_agents:
        raise ProgramError(f"emitter {emitter}: a relay and side agents both take warp 1 of the "
                           "producer warp group; give the kernel one or the other")
    ind = _IND

    def program(code: AgentCode) -> list[str]:
        return once_guard(code) if tiles.empty_tiles else list(code.lines)

    texts = ["\n".join(program(c)) for c in consumers]
    # a tile split's consumers run one program, branching on the consumer index only around
    # their named barriers (skeleton.merged_consumer_lines says why)
    consumer = (merged_consumer_lines([t.split("\n") for t in texts], emitter) if tile_split
                else consumer_branches(texts))
    start = (ind + "cluster_sync();  // the cluster's start barrier: every CTA's mbarriers "
                   "initialised first"
             if cluster is not None and cluster.start_barrier else ind + "__syncthreads();")
    end = ([ind + "cluster_sync();  // the cluster's end barrier: no CTA exits while a peer "
                  "may still signal it"]
           if cluster is not None and cluster.end_barrier else [])
    names = ", then ".join(f"{r.name}[0..{d})" for r, d in zip(rings, depths))
    p_head, p_body = _role_loop(tiles.producer, program(producer), 3)
    r_head, r_body = _role_loop(tiles.producer, relay, 3)
    c_head, c_body = _role_loop(tiles.consumers, consumer, 2, [family.compute])
    lines = [ind + "using namespace pcwg;", family.constants, "",
             ind + "extern __shared__ __align__(1024) unsigned char smem_raw[];",
             ind + "const u32 ring = (pch100::smem_addr(smem_raw) + 1023u) & ~1023u;  "
                   "// the 128B-swizzle atom",
             ind + f"const u32 bars = ring + {family.ring_bytes};  // {names}",
             *(ind + x for x in ring_barriers(rings, depths)),
             family.stage_views, "",
             *(ind + x for x in tiles.counts),
             ind + "const int wg = threadIdx.x / 128, wtid = threadIdx.x % 128, "
                   "lane = threadIdx.x % 32;", "",
             ind + "if (threadIdx.x == 0) {",
             *(ind * 2 + x for x in ring_inits(rings, depths)),
             ind * 2 + "mbar_init_fence();",
             ind + "}",
             start, "",
             ind + "if (wg == 0) {",
             ind * 2 + f"// ---- agent {producer_name} (its compiled program, one line per step) ----",
             ind * 2 + role_mark("producer"),
             ind * 2 + f"setmaxnreg_dec<{producer_registers}>();",
             ind * 2 + ("if (wtid == 0) {" if producer_threads == 1 and producer_warps == 1 else
                        f"if (lane == 0 && wtid < {32 * producer_warps}) {{  // the first lane "
                        f"of warps 0..{producer_warps - 1}: they share the copies"
                        if producer_threads == 1 else
                        "{  // every thread of the warp group issues the producer's program"),
             *p_head, *p_body,
             ind * 3 + "}",
             ind * 2 + "}",
             *([ind * 2 + "if (wtid == 32) {  // ---- agent relay: the peers' releases ----",
                ind * 3 + role_mark("relay"),
                *r_head, *r_body,
                ind * 3 + "}",
                ind * 2 + "}"] if relay else []),
             *(x for w, (name, lines) in enumerate(side_agents, start=1)
               for x in _side_agent(tiles.producer, w, name, lines, ind)),
             ind + "} else {",
             ind * 2 + "// ---- agents consumer0.. (one program; the consumer index picks the rows) ----",
             ind * 2 + role_mark("consumers"),
             ind * 2 + f"setmaxnreg_inc<{consumer_registers}>();",
             ind * 2 + ("[[maybe_unused]] const int consumer = __shfl_sync(0xffffffffu, wg - 1, "
                        "0);  // warp-uniform: ptxas keeps what it derives in uniform registers"
                        if tile_split or uniform_consumer
                        else "[[maybe_unused]] const int consumer = wg - 1;"),
             family.consumer_state,
             *c_head, *c_body,
             family.finish,
             ind * 2 + "}  // next output tile",
             *(ind * 2 + x for x in consumer_after),
             *([family.consumer_exit] if family.consumer_exit else []),
             ind * 2 + role_mark("end"),
             ind + "}",
             *end]
    return "\n".join(lines)
