"""The kernel skeleton the CUDA emitters of this plugin share.

Emitters are keyed by (target, kernel family), not by schedule name (issue 24): a kernel is the
family's device code (load / compute / finish: the tile math, in each emitter's template) around
the compiled program, and this module writes the program part.  It walks the program's stretches
(each agent's prologue iterations, its loop over the K tiles, its epilogue iterations; for a
single-stream program its prologue, kernel period and epilogue) and asks the family's code for
one line per step.  What a family decides is only how a stretch opens and closes (the loop
header, which K tile an iteration binds) and the line of each step, as ThunderKittens'
``lcf.cuh`` template takes ``load`` / ``compute`` / ``finish`` from a kernel family and CUTLASS
keeps the ring's acquire / commit / wait / release apart from the collective mainloop.

The geometry an emitter sizes the kernel by is the one the schedule declared once
(``CompiledSchedule.launch``, pipeline_core/launch.py): :func:`declared_geometry` reads it.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

import attrs

from pipeline_core.plugin_api import (AgentProgram, Cluster, CompiledSchedule, Entry, ProgramError,
                                      Ring, Step, StepKind)

S = TypeVar("S")
G = TypeVar("G")

#: The comment that opens a role's region of a warp-specialized kernel (``// pc:role producer``,
#: ``relay``, ``consumers``; ``end``: no role's program from here on) and the one that opens a
#: section of a role's program (``// pc:section kernel``, ``prologue 0``, ``epilogue 1``,
#: ``once``, ``after``, ``finish``, ``store``, ``drain``; ``end`` closes it): comments only, so
#: the machine code is the same with them; ``sync_skeleton`` reads the kernel's synchronization
#: by them and checks it against the plan's steps (issue 33).
ROLE_MARK = "// pc:role"
SECTION_MARK = "// pc:section"


def role_mark(role: str) -> str:
    """The comment line opening ``role``'s region (:data:`ROLE_MARK`)."""
    return f"{ROLE_MARK} {role}"


def section_mark(section: str) -> str:
    """The comment line opening (``end``: closing) a section of a program (:data:`SECTION_MARK`)."""
    return f"{SECTION_MARK} {section}"


@attrs.frozen(kw_only=True)
class Stretch(Generic[S]):
    """One stretch of a program as CUDA: ``head`` lines, one line per step (``code`` writes it,
    ``indent`` puts it under the head), then ``tail`` lines."""

    steps: tuple[S, ...]
    code: Callable[[S], str]
    head: tuple[str, ...] = ()
    tail: tuple[str, ...] = ()
    indent: str = ""


def render(stretches: Iterable[Stretch[S]]) -> list[str]:
    """The lines of a program's stretches, in order."""
    lines: list[str] = []
    for s in stretches:
        lines += s.head
        lines += [s.indent + s.code(step) for step in s.steps]
        lines += s.tail
    return lines


def entry_code(dispatch: Mapping[int, Callable[[Entry], str]], names: Mapping[int, str],
               emitter: str) -> Callable[[Entry], str]:
    """A family's code for the entries of a single-stream program: the line ``dispatch`` has for
    the entry's tag and a comment naming the entry (``// kernel[3] MMA``); an entry whose tag
    the family has no CUDA for is refused naming the emitter, the entry and its tag."""
    def code(e: Entry) -> str:
        fn = dispatch.get(e.op.tag)
        name = names.get(e.op.tag, str(e.op.tag))
        if fn is None:
            raise ProgramError(f"emitter {emitter}: {e.phase.name.lower()}[{e.time_slot}] "
                               f"{name}: no CUDA for this entry's tag")
        return f"{fn(e)}  // {e.phase.name.lower()}[{e.time_slot}] {name}"
    return code


def agent_stretches(program: AgentProgram, code: Callable[[Step], str],
                    label: str, indent: str = "    ") -> list[Stretch[Step]]:
    """An agent's program as stretches (docs/guide/agents.md): each prologue iteration a block
    binding its K tile ``t``, the kernel a loop over the K tiles the prologue left, each epilogue
    iteration a block binding ``t = KT + j``; a step with lag L serves tile ``t - L``."""
    def block(steps: Sequence[Step], t: str, what: str) -> Stretch[Step]:
        section = section_mark(what.replace(" iteration", ""))
        return Stretch(steps=tuple(steps), code=code, indent=indent,
                       head=(section, f"{{  // {label} {what}", f"{indent}const int t = {t};"),
                       tail=("}", section_mark("end")))

    first = len(program.prologue)
    return [*(block(steps, str(i), f"prologue iteration {i}")
              for i, steps in enumerate(program.prologue)),
            Stretch(steps=tuple(program.kernel), code=code, indent=indent,
                    tail=("}", section_mark("end")),
                    head=(section_mark("kernel"),
                          f"for (int t = {first}; t < KT; ++t) {{  // {label} kernel")),
            *(block(steps, f"KT + {j}", f"epilogue iteration {j}")
              for j, steps in enumerate(program.epilogue))]


def declared_geometry(compiled: CompiledSchedule, family: str, kind: type[G],
                      emitter: str) -> G:
    """The launch geometry a compiled schedule declared for kernel family ``family``
    (``kernel_launch()``, pipeline_core/launch.py), refused naming the emitter when the schedule
    declared another family or no geometry of the family's type."""
    launch = compiled.launch
    if launch is None or launch.kernel_family != family:
        got = f"kernel family {launch.kernel_family}" if launch else "no kernel family"
        raise ProgramError(f"emitter {emitter}: writes kernel family {family}, but schedule "
                           f"{compiled.schedule_name} declares {got}")
    if not isinstance(launch.geometry, kind):
        raise ProgramError(f"emitter {emitter}: schedule {compiled.schedule_name} declares no "
                           f"{kind.__name__} for kernel family {family} (kernel_launch() gave "
                           f"{type(launch.geometry).__name__})")
    return launch.geometry


@attrs.frozen(kw_only=True)
class RingState:
    """A step's place on its ring as C expressions, the one statement of it for every family
    (CUTLASS's ``PipelineState``: index and phase in one object).  ``position`` counts the
    ring's life: a once step's the CTA's output tiles (``o``), a K-loop step's the K tiles
    this CTA ran before this output tile (``rb``) plus the one it serves (``t`` minus its lag),
    so stages and parities run on across output tiles; ``depth`` is the ring's stage count (a
    kernel constant or the plan ring's number)."""

    position: str
    depth: str

    @classmethod
    def of(cls, s: Step, depth: str | int) -> "RingState":
        position = "o" if s.once else f"(rb + t - {s.lag})" if s.lag else "(rb + t)"
        return cls(position=position, depth=str(depth))

    @property
    def stage(self) -> str:
        return f"({self.position} % {self.depth})"

    def parity(self, phase_offset: int) -> str:
        """The parity of the phase ``phase_offset`` from the one this position fills."""
        return f"(({self.position} / {self.depth} + ({phase_offset})) & 1)"


def loop_tile(s: Step) -> str:
    """The K tile (a KV block) a loop step serves: ``t`` minus its lag."""
    return f"(t - {s.lag})" if s.lag else "t"


def require_ring_depths(rings: Sequence[Ring], stages: int, once_stages: int,
                        emitter: str) -> None:
    """Refuse a plan whose ``rings`` the proof ran at another depth than the kernel's buffers
    (``stages`` for the K-loop rings, ``once_stages`` for rings loaded once per output tile):
    the kernel indexes its buffers by its geometry, so a ring proven deeper or shallower is a
    ring nobody proved (and a full ring deeper than its buffers would overwrite one still
    read)."""
    for r in rings:
        want = once_stages if r.once else stages
        if r.stages != want:
            raise ProgramError(f"emitter {emitter}: the plan's ring {r.name} was proven "
                               f"{r.stages} stages deep and the kernel's geometry has {want}; "
                               "recompile the schedule (-T stages sets both)")


# --- the warp-specialized kernel: rings, roles, the persistent tile loop -------------------------

@attrs.frozen(kw_only=True)
class AgentsFamily:
    """A warp-specialized kernel family's device code, each a block of CUDA lines: what the
    skeleton (:func:`agents_kernel_body`) does not write.  The cut is ThunderKittens' ``lcf``
    template's (common setup, the producer's load, the consumer's setup / compute / finish) and
    CUTLASS's (the ring's acquire / wait / release apart from the collective mainloop): the
    family owns the tile math, the skeleton the rings, the roles and the tile loop."""

    #: the kernel's constants (tile, stage bytes), first in the body
    constants: str
    #: where each operand of a ring stage lies in shared memory (``ring`` is the ring's base)
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


def ring_step_line(s: Step, stage: str, parity: str, single_issuer: bool,
                   watchdog: int = 0) -> str | None:
    """The mbarrier code of a ring step (wait on a phase, expect the bytes, arrive), None for a
    step of another kind (the family writes those).  ``single_issuer``: one thread runs the
    program; else one arrival per warp (``AgentRole.release_arrivals``), each after the warp's
    own counter wait; ``watchdog`` N > 0: a wait traps after N polls."""
    bar = f"{s.channel}_bar({stage})"
    if s.kind == StepKind.PHASE_WAIT:
        if watchdog:
            return f"mbar_wait_bounded({bar}, {parity}, {watchdog}ull);"
        return f"mbar_wait({bar}, {parity});"
    if s.kind == StepKind.EXPECT_TX:
        return f"mbar_expect_tx({bar}, {s.value}u);"
    if s.kind == StepKind.ARRIVE:
        return f"mbar_arrive({bar});" if single_issuer else f"if (lane == 0) mbar_arrive({bar});"
    return None


def named_step_line(s: Step) -> str | None:
    """The PTX of a named-barrier step (``bar.sync id, count`` / ``bar.arrive id, count``, the
    plugin's README.md, "Sync model, wgmma family"), None for a step of another kind."""
    if s.kind == StepKind.NAMED_SYNC:
        return f'asm volatile("bar.sync {s.barrier}, {s.value};\\n" ::: "memory");'
    if s.kind == StepKind.NAMED_ARRIVE:
        return f'asm volatile("bar.arrive {s.barrier}, {s.value};\\n" ::: "memory");'
    return None


def wgmma_group_line(s: Step) -> str | None:
    """The wgmma async group's own steps (``wgmma.fence``, ``commit_group``, ``wait_group N``:
    the plugin's README.md, "Sync model, wgmma family") as the device helpers' calls, None for
    a step of another kind; every family whose consumers issue wgmma emits them this way."""
    if s.kind == StepKind.FENCE:
        return "wgmma_fence();"
    if s.kind == StepKind.COMMIT:
        return "wgmma_commit();"
    if s.kind == StepKind.COUNTER_WAIT:
        return f"wgmma_wait<{s.value}>();"
    return None


def consumer_sync_line(s: Step) -> str | None:
    """A consumer's synchronisation step that is no ring's: a named barrier
    (:func:`named_step_line`) or the wgmma async group's (:func:`wgmma_group_line`); None for
    any other step (a ring's, the family's ops)."""
    named = named_step_line(s)
    return named if named is not None else wgmma_group_line(s)


def consumer_branches(texts: Sequence[str], indent: str = "    ") -> list[str]:
    """The consumers' programs as the one consumer branch runs them: one program when they are
    the same (the consumer index picks the rows), else one block per consumer index (consumers
    that differ only in their named-barrier steps, docs/guide/agents.md, "Named barriers")."""
    if len(set(texts)) == 1:
        return texts[0].split("\n")
    out: list[str] = []
    for i, text in enumerate(texts):
        out.append(("if" if i == 0 else "} else if") + f" (consumer == {i}) {{")
        out += [indent + line for line in text.split("\n")]
    return out + ["}"]


def merged_consumer_lines(texts: Sequence[Sequence[str]], emitter: str) -> list[str]:
    """The consumers' programs as one program the consumer branch runs, for consumers that
    differ only in their named-barrier lines (a tile split's turns: each syncs on its own
    barrier and arrives on the next one's, docs/guide/agents.md, "Tile splits"): each line that
    differs becomes a branch on the consumer index around that barrier alone.  Their wgmma
    groups then sit outside any branch on the consumer index: ptxas serializes every wgmma of a
    group it finds on such a (possibly divergent) path (C7520), which halves the tensor cores'
    rate (benchmarks/results/matmul_pingpong_h100.jsonl)."""
    if len({len(t) for t in texts}) != 1:
        raise ProgramError(f"emitter {emitter}: the consumers' programs differ in length "
                           f"({', '.join(str(len(t)) for t in texts)} lines); a tile split's "
                           "consumers must run the same steps")
    out: list[str] = []
    for lines in zip(*texts):
        if len(set(lines)) == 1:
            out.append(lines[0])
            continue
        if not all("bar.sync" in x or "bar.arrive" in x for x in lines):
            raise ProgramError(f"emitter {emitter}: the consumers' programs differ in "
                               f"{lines[0].strip()!r} / {lines[1].strip()!r}; a tile split's "
                               "consumers may differ only in their named barriers")
        indent = lines[0][:len(lines[0]) - len(lines[0].lstrip())]
        out.append(indent + " else ".join(f"if (consumer == {i}) {{ {x.strip()} }}"
                                          for i, x in enumerate(lines)))
    return out


def _bar_offset(index: int) -> str:
    return "s" if index == 0 else "(STAGES + s)" if index == 1 else f"({index} * STAGES + s)"


def tile_loop(indent: str, inner: str, cluster: int = 1) -> list[str]:
    """The persistent tile loop's head: this CTA runs output tiles ``blockIdx.x``, ``+
    gridDim.x``, ... with its rings' stages and phases running on across them (``rb``).  In a
    cluster (docs/guide/matmul.md, "Clusters") the CTAs of one cluster walk the same tile
    pairs, as many as each other: pair ``blockIdx.x / CLUSTER``, ``+ gridDim.x / CLUSTER``, ...,
    each CTA the pair's M tile of its rank (past M on a pair's odd end: it still loads and
    multicasts its half of B and releases every stage; its loads of A are zero-filled and its
    stores clipped)."""
    if cluster > 1:
        return [indent + "int rb = 0;  // K tiles this CTA's ring has served before this output "
                         "tile",
                indent + "for (int tile = blockIdx.x / CLUSTER; tile < TILES; "
                         "tile += gridDim.x / CLUSTER, rb += KT) {",
                inner + "int tile_m, tile_n;",
                inner + "pch100::grouped_tile(tile, MP, N / BN, GROUP_M, tile_m, tile_n);",
                inner + "tile_m = tile_m * CLUSTER + (int)crank;  // the pair's adjacent M tiles"]
    return [indent + "int rb = 0;  // K tiles this CTA's ring has served before this output tile",
            indent + "for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x, rb += KT) {",
            inner + "int tile_m, tile_n;",
            inner + "pch100::grouped_tile(tile, M / BM, N / BN, GROUP_M, tile_m, tile_n);"]


def split_tile_loop(indent: str, agents: int) -> list[str]:
    """The tile loop of a consumer of a tile split (docs/guide/agents.md, "Tile splits"):
    consumer c of ``agents`` runs the CTA's output tiles at positions c, c + agents, ...; its
    ring positions (``rb``) count the K tiles of every earlier output tile of the CTA, the
    other consumers' too.  ``tile`` outlives the loop: the steps after it read where it ended."""
    return [indent + "int rb = consumer * KT;  // ring positions count every earlier output "
                     "tile of the CTA, whoever ran it",
            indent + "int tile = blockIdx.x + consumer * (int)gridDim.x;",
            indent + f"for (; tile < TILES; tile += {agents} * (int)gridDim.x, "
                     f"rb += {agents} * KT) {{",
            indent + "int tile_m, tile_n;",
            indent + "pch100::grouped_tile(tile, M / BM, N / BN, GROUP_M, tile_m, tile_n);"]


def agents_kernel_body(*, rings: Sequence[Ring], producer: Sequence[str],
                       consumer: Sequence[str], producer_name: str, producer_registers: int,
                       consumer_registers: int, family: AgentsFamily,
                       consumer_loop: Sequence[str] | None = None,
                       consumer_after: Sequence[str] = (), uniform_consumer: bool = False,
                       cluster: Cluster | None = None, relay: Sequence[str] = ()) -> str:
    """The body of a warp-specialized kernel: warp group 0 the producer (one elected thread runs
    its program), warp groups 1.. the consumers (one program; the consumer index is a run-time
    value), ``setmaxnreg`` moving registers between the roles, one mbarrier per ring and stage,
    and each role's program inside the persistent tile loop.  ``consumer_loop``: the consumers'
    tile loop head (None: every output tile, :func:`tile_loop`; a tile split's:
    :func:`split_tile_loop`), ``consumer_after``: lines after it.  ``uniform_consumer``: the
    consumer index is read through a warp shuffle, so ptxas knows it is the same in every
    thread of a warp: a tile loop whose bounds depend on it otherwise puts the wgmma groups on
    a path ptxas takes as divergent, and it serializes every wgmma there (C7520).  ``cluster``:
    the plan's cluster (docs/guide/agents.md, "Clusters"): its start barrier after the
    initialisation, its end barrier before the exit, and the tile loop over the cluster's tile
    pairs; ``relay``: the program of its relay agent, which warp 1 of warp group 0 runs (one
    thread)."""
    ind = "    "
    ctas = cluster.ctas if cluster is not None else 1
    start = (ind + "cluster_sync();  // the cluster's start barrier: every CTA's mbarriers "
                   "initialised first"
             if cluster is not None and cluster.start_barrier else ind + "__syncthreads();")
    tiles = (ind + "const int KT = K / BK, TILES = (M / BM) * (N / BN);" if cluster is None else
             ind + f"constexpr int CLUSTER = {ctas};\n"
             + ind + "const u32 crank = cluster_ctarank();  // this CTA's rank in its cluster\n"
             + ind + "const int KT = K / BK, MP = (M / BM + CLUSTER - 1) / CLUSTER, "
                     "TILES = MP * (N / BN);  // the cluster's tile pairs")
    end = ([ind + "cluster_sync();  // the cluster's end barrier: no CTA exits while a peer "
                  "may still signal it"]
           if cluster is not None and cluster.end_barrier else [])
    names = ", then ".join(f"{r.name}[0..STAGES)" for r in rings)
    lines = [ind + "using namespace pcwg;", family.constants, "",
             ind + "extern __shared__ __align__(1024) unsigned char smem_raw[];",
             ind + "const u32 ring = (pch100::smem_addr(smem_raw) + 1023u) & ~1023u;  "
                   "// the 128B-swizzle atom",
             ind + f"const u32 bars = ring + STAGES * STAGE_BYTES;  // {names}",
             *(ind + f"auto {r.name}_bar = [&](int s) {{ return bars + 8u * {_bar_offset(i)}; }};"
               for i, r in enumerate(rings)),
             family.stage_views, "",
             tiles,
             ind + "const int wg = threadIdx.x / 128, wtid = threadIdx.x % 128, "
                   "lane = threadIdx.x % 32;", "",
             ind + "if (threadIdx.x == 0) {",
             ind * 2 + "for (int s = 0; s < STAGES; ++s) {",
             *(ind * 3 + f"mbar_init({r.name}_bar(s), {r.arrivals});" for r in rings),
             ind * 2 + "}",
             ind * 2 + "mbar_init_fence();",
             ind + "}",
             start, "",
             ind + "if (wg == 0) {",
             ind * 2 + f"// ---- agent {producer_name} (its compiled program, one line per step) ----",
             ind * 2 + role_mark("producer"),
             ind * 2 + f"setmaxnreg_dec<{producer_registers}>();",
             ind * 2 + "if (wtid == 0) {",
             *tile_loop(ind * 3, ind * 4, ctas),
             *(ind * 4 + l for l in producer),
             ind * 3 + "}",
             ind * 2 + "}",
             *([ind * 2 + "if (wtid == 32) {  // ---- agent relay: the peers' releases ----",
                ind * 3 + role_mark("relay"),
                *tile_loop(ind * 3, ind * 4, ctas),
                *(ind * 4 + l for l in relay),
                ind * 3 + "}",
                ind * 2 + "}"] if relay else []),
             ind + "} else {",
             ind * 2 + "// ---- agents consumer0.. (one program; the consumer index picks the rows) ----",
             ind * 2 + role_mark("consumers"),
             ind * 2 + f"setmaxnreg_inc<{consumer_registers}>();",
             ind * 2 + ("const int consumer = __shfl_sync(0xffffffffu, wg - 1, 0);  "
                        "// warp-uniform (C7520)" if uniform_consumer
                        else "const int consumer = wg - 1;"),
             family.consumer_state,
             *(tile_loop(ind * 2, ind * 2, ctas) if consumer_loop is None else consumer_loop),
             family.compute,
             *(ind * 2 + l for l in consumer),
             family.finish,
             ind * 2 + "}  // next output tile",
             *(ind * 2 + l for l in consumer_after),
             *([family.consumer_exit] if family.consumer_exit else []),
             ind * 2 + role_mark("end"),
             ind + "}",
             *end]
    return "\n".join(lines)


# --- the single-stream kernel: every warp runs the one program ----------------------------------

@attrs.frozen(kw_only=True)
class StreamFamily:
    """A single-stream kernel family's device code, each a block of CUDA lines (the same cut as
    :class:`AgentsFamily`): ``setup`` (constants, shared memory, this CTA's tile and the thread's
    coordinates), ``load`` (the helpers a load entry calls), ``compute`` (fragments and MMA
    helpers, accumulators), ``finish`` (the accumulators out)."""

    setup: str
    load: str
    compute: str
    finish: str


def stream_kernel_body(family: StreamFamily, program: Sequence[str], note: str) -> str:
    """The body of a single-stream kernel: the family's setup, load and compute code, the
    compiled program (``note`` says how it is laid out), the family's finish."""
    return "\n\n".join([family.setup, family.load, family.compute,
                        "\n".join([f"    // ---- {note} ----", *program]), family.finish])
