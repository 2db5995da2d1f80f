"""The agents checker: a warp-specialized plan proven safe over all timings, or its hazards.

Why happens-before and not a simulation: the agents run unsynchronised except through the
rings and the counter waits, so any interleaving the sync allows can happen.  The checker
unrolls every agent for several K-tile counts, builds the happens-before graph of the step
instances and of the events the hardware adds (a copy landing, a wgmma group retiring, a ring
stage completing a phase), and asks of every dependence whether the graph orders it
(docs/guide/agents.md, "What the checker proves"):

* **SMEM_RAW**: every FLOW edge's write completes before the read issues, and the reader is
  entitled to see it (a phase channel's results reach the agents that waited on the phase
  holding them; a counter channel's only its issuer);
* **SMEM_WAR**: every ANTI edge's reads end (a counter wait retires the group, for effects that
  resolve "both"; a synchronous read at once) before the overwrite issues, and every release
  of a stage follows the end of the releasing agent's reads of that tile;
* **PHASE_PARITY** / **PHASE_LAG** / **PHASE_OVERRUN**: a wait names the phase that holds its
  tile (counted from the arrivals), starts after the phase before it completed (else the stale
  parity passes it) and before the phase after it completes (a waiter lags at most one phase);
  an arrival or a copy for phase k comes after phase k - 1 completed;
* **DEADLOCK**: a wait whose phase never completes (arrivals or bytes missing), or a cycle;
* **ACC_RAW**: every group is retired before the agent ends (the accumulators are read after
  the loop), a fence precedes the first group, and a fence lies between a register access of
  the agent's threads and a later group op that uses those registers (the PTX ISA's wgmma
  fence rule); **WAIT_RANGE**: counter waits fit ``0 .. Channel.max_wait``;
* **ORDER**: every ordering between consumer groups the schedule declares holds: each turn's
  ops of a K tile are issued after the previous turn's (named barriers: a ``named_sync`` passes
  when its generation's threads all arrived, a ``named_arrive`` does not block; each barrier's
  generations are counted by tile, and a generation must get exactly its count, from arrivals
  that come after the generation before it completed: **DEADLOCK** otherwise);
* **MISSING_PRODUCT** / **DUPLICATE_PRODUCT**: every body op runs exactly once for each K tile
  of the loop, on its own agent (a dropped wgmma step leaves its accumulator a K tile short, and
  no ordering rule can see a step that is not there).

A plan with a cross-CTA reduction (split-K) hands results between the CTAs of an output tile:
:mod:`pipeline_core.agents.prove_reduction` proves its ``finish`` steps over the CTAs, and its
findings join these (docs/guide/agents.md, "Cross-CTA reductions").  A plan with a staged bulk
store (a TMA-store epilogue): :mod:`pipeline_core.agents.prove_store` proves its ``store`` and
``drain`` steps over its staging buffers' reuse (docs/guide/agents.md, "Bulk stores").

Before any of it, :mod:`pipeline_core.agents.records` refuses (**UNPROVEN**) a step no proof
would read: one a record (``Plan.store``, ``.reduction``, ``.split``) should list and does not,
one in a section of another kind, one naming what the plan or target lacks, one whose tag is not
what its kind lowers to, one with a field its kind does not read.

A persistent kernel runs its rings on across output tiles (a stage's phases count every K tile
it ever held), so every ring must also end the loop balanced: each K tile brings its stage all
its arrivals, whether or not a wait of the same output tile tests them (**DEADLOCK** otherwise).
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import networkx as nx

from pipeline_core.agents.cluster import Expansion, expand
from pipeline_core.agents.shared_issue import expand as expand_shared_issue
from pipeline_core.agents.shared_issue import shared_issue_assumptions
from pipeline_core.agents.prove_fixup import fixup_assumptions, prove_fixups
from pipeline_core.agents.prove_reduction import (prove_reduction, prove_turns,
                                                  reduction_assumptions, turn_assumptions)
from pipeline_core.agents.prove_store import prove_store, store_assumptions
from pipeline_core.agents.records import unrecorded
from pipeline_core.check.verdict import Fix, HazardKind, Site, Verdict, Violation
from pipeline_core.edges import DepEdge
from pipeline_core.ops import DepKind, Op, tag_name
from pipeline_core.plan import AgentProgram, PlacedStep, Plan, Ring, Step, StepKind
from pipeline_core.sync.model import ChannelKind, Effect, SyncModel
from pipeline_core.tiles import varies

if TYPE_CHECKING:
    from pipeline_core.compiled import CompiledSchedule, Proof

#: the order hazards are reported in: root causes first (a deadlock, a wrong phase), then data
PRIORITY = {HazardKind.DEADLOCK: 0, HazardKind.PHASE_PARITY: 1, HazardKind.SMEM_WAR: 2,
            HazardKind.SMEM_RAW: 3, HazardKind.ACC_RAW: 4, HazardKind.MISSING_PRODUCT: 5,
            HazardKind.DUPLICATE_PRODUCT: 6, HazardKind.PHASE_OVERRUN: 7,
            HazardKind.PHASE_LAG: 8, HazardKind.WAIT_RANGE: 9, HazardKind.ORDER: 10,
            HazardKind.ADD_ORDER: 11, HazardKind.UNPROVEN: -1}

#: what every agents verdict assumes (docs/guide/agents.md, "What the checker assumes")
ASSUMPTIONS = (
    "a release is one arrival per warp, each after that warp's own counter wait",
    "every agent that waits on a phase sees the copies that completed it (acquire)",
    "the copies and the async reads are in one (async) proxy: no proxy fence",
)
#: in place of the last assumption, for a sync model whose effects name memory proxies
PROXY_ASSUMPTION = ("a write of one memory proxy read by another is seen through a proxy fence "
                    "between them (checked: SMEM_RAW without one)")


def assumptions(sync: SyncModel) -> tuple[str, ...]:
    """The checker's assumptions under ``sync``: the last one states the proxies it checks
    when the model tells proxies apart (``Effect.proxy``)."""
    if sync.tells_proxies_apart:
        return (*ASSUMPTIONS[:-1], PROXY_ASSUMPTION)
    return ASSUMPTIONS

#: output tiles one CTA runs back to back in a proof: one, and two whose hand-over (the
#: rings' stages and phases running on, ``rb`` in the emitted kernel) is proven too; a third
#: hand-over repeats the second's, as every output tile runs the same programs
#: (:func:`output_tiles` adds a run for a once ring of several stages)
OUTPUT_TILES = (1, 2)

#: K-tile counts of consecutive output tiles one CTA runs, for a plan whose output tiles visit
#: different counts (a :class:`~pipeline_core.tiles.TripRule` that is not uniform): an
#: empty output tile between two others, empty tiles first, a short tile before a long one, and
#: ``S`` (the deepest ring) for a tile shorter than the ring before an empty one and a long one
#: (docs/guide/agents.md, "Output tiles of different lengths")
TRIP_SEQUENCES = ((3, 0, 2), (0, 0, 1), (1, 5), ("S-1", 0, "S+1"))

START = ("start",)
Node = tuple


def tile_counts(plan: Plan) -> list[int]:
    """The K-tile counts a proof unrolls: the shortest valid loops, and one long enough for the
    prologue, two ring wraps and the epilogue at every residue modulo the ring depth (so a
    tail of KT not a multiple of the stages is covered).  A plan with copies issued once per
    output tile is also proven at 0 K tiles: an output tile with no K tile to visit (attention's
    query tile with no valid key) still loads, waits on and releases its once copies
    (docs/guide/agents.md, "Loads issued once")."""
    depths = {plan.stages, *(r.stages for r in plan.rings)}
    base = plan.min_tiles + 2 * max(depths) + 2
    period = math.lcm(*depths)  # rings of different depths: every pair of residues
    empty = {0} if any(r.once for r in plan.rings) else set()
    return sorted({*empty, plan.min_tiles, plan.min_tiles + 1,
                   *(base + r for r in range(period))})


def output_tiles(plan: Plan) -> tuple[int, ...]:
    """The output-tile counts a proof unrolls: :data:`OUTPUT_TILES`, and for a once ring of S
    stages (a double-buffered Q) S + 1, the first run whose last output tile reuses a stage:
    its copy must wait for the release of output tile 0 (docs/guide/agents.md, "Loads issued
    once")."""
    reuse = max((r.stages + 1 for r in plan.rings if r.once), default=0)
    return tuple(sorted({*OUTPUT_TILES, reuse} - {0}))


def trip_sequences(plan: Plan) -> list[tuple[int, ...]]:
    """The K-tile counts of the output tiles each extra run chains (:data:`TRIP_SEQUENCES`,
    ``S`` the deepest ring), for a plan whose :attr:`~pipeline_core.plan.Plan.trip_rule` is not
    uniform or with a :attr:`~pipeline_core.plan.Plan.split` (which also gets n + 1 and 2n
    output tiles of one count, n its agents); none for one whose output tiles all visit the
    same count and run on every agent (the GEMM: its proofs stay as they were); a split's runs
    are also of S + 1 K tiles each, long enough for a wait to meet a stale parity.
    A count below :attr:`~pipeline_core.plan.Plan.min_tiles` other than 0 is raised to it."""
    if not varies(plan.trip_rule) and plan.split is None:
        return []
    deepest = max({plan.stages, *(r.stages for r in plan.rings)})
    at = {"S-1": deepest - 1, "S+1": deepest + 1}
    out: list[tuple[int, ...]] = []
    sequences: list[tuple[int | str, ...]] = list(TRIP_SEQUENCES)
    if plan.split is not None:  # every agent of the split runs a tile after another's, twice
        # of S + 1 K tiles: an agent's second tile then starts on a stage whose phase the
        # other agents' tiles moved on by more than one, so a wait that passes on the stale
        # parity is seen (of fewer, every stage's phase differs by one at most)
        n = len(plan.split.agents)
        for count in (plan.min_tiles + 1, max(plan.min_tiles + 1, deepest + 1)):
            sequences += [(count,) * (n + 1), (count,) * (2 * n)]
    for seq in sequences:
        counts = tuple(at[x] if isinstance(x, str) else x for x in seq)
        counts = tuple(c and max(c, plan.min_tiles) for c in counts)
        if counts not in out:
            out.append(counts)
    return out


@attrs.frozen(kw_only=True)
class _Inst:
    agent: int
    n: int  #: position in the agent's unrolled program
    placed: PlacedStep  #: its ``t`` runs on across output tiles, as the ring position does
    output: int = 0  #: which of the CTA's output tiles (a persistent kernel runs several)
    base: int = 0  #: the K tiles the ring served before this output tile (``rb`` in the kernel)

    @property
    def node(self) -> Node:
        return ("step", self.agent, self.n)

    @property
    def step(self) -> Step:
        return self.placed.step

    @property
    def tile(self) -> int:
        """The ring position: the K tile within the output tile plus :attr:`base`."""
        return self.placed.tile

    @property
    def local(self) -> int:
        """The K tile within this output tile."""
        return self.placed.tile - self.base

    @property
    def key_tile(self) -> int:
        """What keys this op instance (``_Run.op_at``): its K tile, or the output tile for a
        once step (an output tile with no K tile has the same base as the next one)."""
        return self.output if self.step.once else self.placed.tile

    @property
    def pos(self) -> int:
        """The ring position: :attr:`tile`, or the output tile for a step run once per output
        tile (its ring's stages and phases count output tiles)."""
        return self.output if self.step.once else self.placed.tile

    @property
    def generation(self) -> int:
        """The named-barrier generation a named step fills: its K tile, or for a once step (an
        ordering over output tiles) its output tile less its ``output_lag``."""
        return self.output - self.step.output_lag if self.step.once else self.placed.tile


class _Run:
    """One unrolled run of output tiles of ``trips[o]`` K tiles each, back to back on one CTA
    with the rings running on (the persistent kernel): the graph, its events and the checks on
    it.  Ring stages and phases count the K tiles of every output tile (a step's
    :attr:`_Inst.tile`); the data of output tile o is its K tiles 0 .. trips[o] - 1.  An agent
    whose :attr:`~pipeline_core.plan.AgentProgram.min_trips` raises a count runs (and counts
    its ring positions) by its own, which the others do not expect."""

    def __init__(self, plan: Plan, body: Sequence[Op], edges: Sequence[DepEdge],
                 sync: SyncModel, names: Mapping[int, str], trips: Sequence[int],
                 cluster: Expansion | None = None) -> None:
        self.plan, self.body, self.edges, self.sync = plan, body, edges, sync
        #: a cluster's CTAs instantiated as one (agents/cluster.py); None: one CTA
        self.cluster = cluster
        self.names, self.trips, self.outputs = names, tuple(trips), len(trips)
        #: the K tiles the rings served before each output tile (``rb`` in the kernel)
        self.bases = tuple(sum(self.trips[:o]) for o in range(self.outputs))
        #: the run's length in the findings' order: its longest output tile
        self.tiles = max(self.trips)
        self.depths = {r.name: r.stages for r in plan.rings}
        #: copies issued once per output tile (their instance's tile is the output's first)
        self.once_ops = {op for r in plan.rings if r.once for op in r.ops}
        #: once copy -> its ring's depth: the output tiles before its stage is written again
        self.once_depth = {op: r.stages for r in plan.rings if r.once for op in r.ops}
        self.bound = sync.bind()
        self.kinds = {c.name: c for c in sync.channels}
        self.g: nx.DiGraph = nx.DiGraph()
        self.g.add_node(START)
        self.out: list[Violation] = []
        self.insts: list[list[_Inst]] = []
        #: op instance (agent, op, tile) -> its step instance
        self.op_at: dict[tuple[int, int, int], _Inst] = {}
        #: op instance -> the event that completes it; -> the event that ends its reads
        self.done: dict[tuple[int, int, int], Node | None] = {}
        self.reads_end: dict[tuple[int, int, int], Node | None] = {}
        #: (agent, channel) -> committed groups: (commit instance, op keys)
        self.groups: dict[tuple[int, str], list[tuple[_Inst, list[tuple[int, int, int]]]]] = {}
        self.group_of: dict[tuple[int, int, int], tuple[int, str, int]] = {}
        #: (ring, stage) -> [(inst, units, bytes)], the ring's signals in tile order
        self.signals: dict[tuple[str, int], list[tuple[_Inst, int, int]]] = defaultdict(list)
        self.copies: dict[tuple[str, int], list[tuple[_Inst, int]]] = defaultdict(list)
        self.waits: list[tuple[_Inst, str, int, int]] = []  # (inst, ring, stage, phase)
        self.phase_of_unit: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.phases: dict[tuple[str, int, int], dict[str, Any]] = {}
        self.cover: dict[tuple[int, str, int], _Inst] = {}  # group -> first wait retiring it
        #: (ring, stage) -> tile -> the phase its signals complete
        self.tile_phase_by_ring: dict[tuple[str, int], dict[int, int]] = {}
        #: named barrier id -> its syncs and arrives; generation node -> what fills it
        self.named: dict[int, list[_Inst]] = defaultdict(list)
        self.gens: dict[Node, _Generation] = {}
        #: copies completed by arrival (``Effect.completes``): agent -> its copies no async
        #: arrival of its threads tracks yet; (agent, n) -> the arrival event of that step; an
        #: agent's latest arrival event (each tracks every copy issued before it)
        self.untracked: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        self.arrival_event: dict[tuple[int, int], Node] = {}
        self.last_arrival: dict[int, Node] = {}
        #: agent -> its proxy fences in the K loop (each orders what its thread sees before)
        self.proxy_fences: dict[int, list[_Inst]] = defaultdict(list)
        #: agent -> its acquires of device-written tensor maps (``Effect.descriptor``)
        self.descriptor_acquires: dict[int, list[_Inst]] = defaultdict(list)

    def S(self, ring: str) -> int:
        """The depth of ring ``ring`` (each ring has its own)."""
        return self.depths.get(ring, self.plan.stages)

    # --- naming ---------------------------------------------------------------------
    def agent_name(self, a: int) -> str:
        return self.plan.programs[a].name

    def step_text(self, inst: _Inst) -> str:
        s, who, u = inst.step, self.agent_name(inst.agent), inst.pos
        tag = tag_name(s.tag, self.names) if s.tag >= 0 else s.kind.value.upper()
        after_loop = (inst.placed.section == "epilogue" and inst.output < self.outputs
                      and inst.local >= self.trips_of(inst.agent)[inst.output])
        when = ("after the loop" if after_loop else "before the loop" if s.once
                else f"for tile {inst.local}")
        when += _of_output(inst.output)
        if s.kind == StepKind.OP:
            return f"{who} {tag_name(self.body[s.op].tag, self.names)} {when}"
        if s.kind == StepKind.COUNTER_WAIT:
            return f"{who} {tag}({s.value}) {when}"
        if s.kind == StepKind.PHASE_WAIT:
            k = u // self.S(s.channel) + s.phase_offset
            return (f"{who} {tag} {s.channel}[{u % self.S(s.channel)}] phase {k} "
                    f"(parity {k & 1}) {when}")
        if s.kind in (StepKind.ARRIVE, StepKind.EXPECT_TX, StepKind.ASYNC_ARRIVE):
            return f"{who} {tag} {s.channel}[{u % self.S(s.channel)}] {when}"
        nb = self.sync.named_barriers
        if s.kind in (StepKind.NAMED_SYNC, StepKind.NAMED_ARRIVE) and nb is not None:
            text = nb.text(arrive=s.kind == StepKind.NAMED_ARRIVE, id=s.barrier, count=s.value)
            return f"{who} {text} {when}"
        return f"{who} {tag} {when}"

    def site(self, inst: _Inst) -> Site:
        p = inst.placed
        return Site(p.section, p.position, inst.local, inst.agent, op=self.step_text(inst),
                    agent=self.agent_name(inst.agent))

    def report(self, kind: HazardKind, inst: _Inst | None, message: str,
               other: _Inst | None = None, fix: Fix | None = None, rank: int = 0,
               site: Site | None = None) -> None:
        """One finding; ``rank`` orders findings of one kind (a direct cause first); ``site``
        replaces ``inst``'s own (a step that is missing is reported where it belongs, and
        ``inst`` is None when no agent runs a step to anchor it)."""
        where = site if site is not None else self.site(inst) if inst is not None else None
        assert where is not None, "a finding needs a step or a site"
        agent, n = (inst.agent, inst.n) if inst is not None else (where.group, 0)
        self.out.append(Violation(kind, where, message,
                                  self.site(other) if other is not None else None, fix,
                                  order=(PRIORITY[kind], self.outputs, rank, self.trips,
                                         agent, n)))

    def missing_site(self, agent: int, wanted: Callable[[Step], bool], tile: int,
                     text: str, output: int = 0) -> tuple[Site, _Inst | None]:
        """Where the step ``wanted`` picks would run for ``tile`` of ``output`` had it not been
        left out: its section and position (found from where the step sits elsewhere in the
        agent's program), and the instance just before it (the finding's anchor)."""
        prog = self.plan.programs[agent]
        lists = [prog.kernel, *prog.prologue, *prog.epilogue]
        ref = next((steps for steps in lists if any(wanted(x) for x in steps)), ())
        at = next((i for i, x in enumerate(ref) if wanted(x)), len(ref))
        lag = ref[at].lag if at < len(ref) else 0
        t = max(tile + lag, 0)  # a step moved to a negative lag still belongs to the loop
        section, iteration, steps = _section_at(prog, t, self.trips[output])
        before = {_shape(x) for x in ref[:at]}  # counter wait values differ by position
        position = sum(1 for x in steps if _shape(x) in before)
        # an agent that runs no step at all is anchored where the others run
        insts = self.insts[agent] or [i for xs in self.insts for i in xs]
        base = self.bases[output]
        anchor = next((i for i in reversed(insts) if i.placed.t <= base + t),
                      insts[0] if insts else None)
        name = self.agent_name(agent)
        return Site(section, position, tile, agent,
                    op=f"{name} {text} for tile {tile}{_of_output(output)} (missing)",
                    agent=name), anchor

    # --- a cluster's CTAs (agents/cluster.py; docs/guide/agents.md, "Clusters") ----------
    def landings(self, op: int) -> tuple[tuple[str, int], ...]:
        """The full rings copy ``op`` completes bytes on, and how many on each: a cluster's
        multicast copy its share on every CTA's, any other copy all its bytes on its own ring."""
        if self.cluster is not None:
            return tuple(self.cluster.landings.get(op, ()))
        ring = self.plan.ring_of(op, "full")
        return ((ring.name, self.plan.op_bytes.get(op, 0)),) if ring is not None else ()

    def landing_ring(self, op: int, reader: int) -> Ring | None:
        """The full ring of ``op``'s copy that agent ``reader`` waits on (its own CTA's)."""
        name = self.agent_name(reader)
        for ring_name, _ in self.landings(op):
            ring = self.plan.ring(ring_name)
            if name in ring.waiters:
                return ring
        return self.plan.ring_of(op, "full")

    def cta_of(self, inst: _Inst) -> int:
        return self.cluster.agent_cta[inst.agent] if self.cluster is not None else 0

    def unreleased(self, inst: _Inst) -> bool:
        """An arrival on a peer CTA's barrier at a scope that does not release to the peer's
        waiters (``ClusterSync.release_scopes``: a CTA-scope arrive, NVIDIA/cutlass#3324)."""
        s = inst.step
        c = self.cluster
        return (c is not None and s.kind == StepKind.ARRIVE and s.peer % c.ctas != 0
                and (s.scope or "cta") not in c.release_scopes)

    def _cluster_nodes(self, c: Expansion) -> None:
        """Each CTA initialises its barriers (``init``) before its agents begin; the start
        barrier joins every CTA's initialisation before any CTA's agents begin.  Each CTA exits
        after its agents ended; the end barrier joins every CTA's agents before any CTA exits."""
        for r in range(c.ctas):
            self.g.add_edge(START, ("init", r))
            for q in range(c.ctas) if c.start_barrier else (r,):
                self.g.add_edge(("init", q), ("begin", r))
        ends = [("end", a, self.outputs - 1) for a in range(len(self.plan.programs))]
        for r in range(c.ctas):
            for a, end in enumerate(ends):
                if c.end_barrier or c.agent_cta[a] == r:
                    self.g.add_edge(end, ("exit", r))

    def _signals_into(self, c: Expansion) -> list[tuple[_Inst, Node, int, str]]:
        """Every action of one CTA on another's barriers or shared memory: (step, the event,
        the CTA it acts on, what it does)."""
        out: list[tuple[_Inst, Node, int, str]] = []
        for insts in self.insts:
            for inst in insts:
                s, mine = inst.step, c.agent_cta[inst.agent]
                if s.kind == StepKind.ARRIVE and c.ring_cta.get(s.channel, mine) != mine:
                    out.append((inst, inst.node, c.ring_cta[s.channel],
                                f"arrives on {s.channel}"))
                elif s.kind == StepKind.OP:
                    for ring_name, _ in c.landings.get(s.op, ()):
                        if c.ring_cta[ring_name] != mine:
                            r = c.ring_cta[ring_name]
                            out.append((inst, ("land", inst.agent, inst.n), r,
                                        f"copies into CTA {r} (on {ring_name})"))
        return out

    def _cluster_rules(self, c: Expansion) -> None:
        """A peer arrival releases at cluster scope; every action on a peer CTA comes after the
        peer initialised its barriers and before it exits (docs/guide/agents.md, "Clusters")."""
        peer_rings = {s.channel for insts in self.insts for i in insts
                      for s in (i.step,) if s.kind == StepKind.ARRIVE
                      and c.ring_cta.get(s.channel, c.agent_cta[i.agent]) != c.agent_cta[i.agent]}
        for insts in self.insts:
            wait = next((i for i in insts if i.step.kind == StepKind.PHASE_WAIT
                         and i.step.channel in peer_rings
                         and (i.step.scope or "cta") not in c.release_scopes), None)
            if wait is not None:
                self.report(HazardKind.SMEM_WAR, wait,
                            f"acquires {wait.step.channel} at {wait.step.scope or 'cta'} scope, "
                            "but a peer CTA's arrival completes its phase: the peer's release "
                            "reaches only a cluster-scope acquire, so this agent's next write "
                            "may overtake the peer's reads (NVIDIA/cutlass#3324)",
                            fix=Fix("review", wait.placed.section, wait.placed.position,
                                    "wait at cluster scope (mbarrier.try_wait.parity.acquire."
                                    "cluster)"), rank=0)
            inst = next((i for i in insts if self.unreleased(i)), None)
            if inst is not None:
                self.report(HazardKind.SMEM_WAR, inst,
                            f"arrives on a peer CTA's barrier at {inst.step.scope or 'cta'} "
                            "scope: it counts towards the phase but releases nothing to the "
                            "peer's waiters, so the peer's copy may overwrite the stage while "
                            "this CTA's reads are in flight (NVIDIA/cutlass#3324)",
                            fix=Fix("review", inst.placed.section, inst.placed.position,
                                    "arrive at cluster scope (mbarrier.arrive.release.cluster."
                                    "shared::cluster)"), rank=0)
        started: set[int] = set()
        exited: set[int] = set()
        for inst, node, r, what in self._signals_into(c):
            if node in self.dead:
                continue
            if r not in started and not self.hb(("init", r), inst.node):
                started.add(r)
                self.report(HazardKind.PHASE_OVERRUN, inst,
                            f"{what} before CTA {r} may have initialised its barriers: no "
                            "cluster barrier orders every CTA's mbarrier initialisation before "
                            "a peer's first signal",
                            fix=Fix("review", inst.placed.section, inst.placed.position,
                                    "restore the start barrier (fence.mbarrier_init.release."
                                    "cluster; barrier.cluster.arrive/wait)"))
            if r not in exited and ("exit", r) not in self.dead and not self.hb(node, ("exit", r)):
                exited.add(r)
                self.report(HazardKind.SMEM_WAR, inst,
                            f"{what}, and CTA {r} may have exited by then: its shared memory "
                            "and barriers may belong to the next CTA on that SM",
                            fix=Fix("review", inst.placed.section, inst.placed.position,
                                    "restore the end barrier (barrier.cluster.arrive/wait "
                                    "before the CTA exits)"))

    # --- building the graph -----------------------------------------------------------
    def effect(self, op: int) -> Effect | None:
        o = self.body[op]
        return self.bound.effect(o.role, o.channel)

    def channel_kind(self, name: str | None) -> ChannelKind | None:
        c = self.kinds.get(name) if name is not None else None
        return None if c is None else c.kind

    def trips_of(self, agent: int) -> tuple[int, ...]:
        """The K-tile counts ``agent`` runs: the run's, moved by its ``trip_delta`` and raised
        to its ``min_trips`` (both 0 in a derived plan)."""
        prog = self.plan.programs[agent]
        return tuple(max(t + prog.trip_delta, prog.min_trips, 0) for t in self.trips)

    def locate(self, tile: int) -> tuple[int, int]:
        """(output tile, K tile within it) of ring position ``tile``."""
        o = max((o for o in range(self.outputs) if self.bases[o] <= tile
                 and (self.trips[o] or o == self.outputs - 1)), default=0)
        return o, tile - self.bases[o]

    def runs(self, agent: int, output: int) -> bool:
        """Whether ``agent`` runs the CTA's output tile ``output`` (a tile split gives each of
        its agents every n-th; docs/guide/agents.md, "Tile splits")."""
        split = self.plan.split
        return split is None or split.runs(self.agent_name(agent), output)

    def placed_runs(self, a: int) -> list[tuple[int, int, list[PlacedStep]]]:
        """(output tile, ring base, placed steps) of each output tile agent ``a`` runs, and
        after its last, for the split agent whose turn would come next, the steps that fill
        the last output tile's generation (``Step.output_lag``)."""
        prog, trips = self.plan.programs[a], self.trips_of(a)
        own = prog.split_base == "own"
        out = []
        for o in range(self.outputs):
            if not self.runs(a, o):
                continue
            base = sum(t for q, t in enumerate(trips[:o]) if not own or self.runs(a, q))
            # a step that fills an earlier output tile's generation has none on the first
            steps = [p for p in prog.placed(trips[o]) if p.step.output_lag <= o]
            out.append((o, base, steps))
        if self.plan.split is not None and self.runs(a, self.outputs):
            base = sum(t for q, t in enumerate(trips) if not own or self.runs(a, q))
            tail = [p for p in prog.placed(0) if p.step.output_lag > 0]
            if tail:
                out.append((self.outputs, base, tail))
        return out

    def build(self) -> None:
        for a, prog in enumerate(self.plan.programs):
            insts: list[_Inst] = []
            for o, base, placed in self.placed_runs(a):
                insts += [_Inst(agent=a, n=len(insts) + n, output=o, base=base,
                                placed=PlacedStep(section=p.section, iteration=p.iteration,
                                                  position=p.position, t=p.t + base, step=p.step))
                          for n, p in enumerate(placed)]
            self.insts.append(insts)
            prev: Node = START if self.cluster is None else ("begin", self.cluster.agent_cta[a])
            open_ops: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
            for inst in insts:
                if inst.n and inst.output != insts[inst.n - 1].output:
                    self.g.add_edge(prev, ("end", a, insts[inst.n - 1].output))
                    prev = ("end", a, insts[inst.n - 1].output)
                self.g.add_edge(prev, inst.node)
                prev = inst.node
                self._step(inst, open_ops)
            self.g.add_edge(prev, ("end", a, insts[-1].output if insts else self.outputs - 1))
            for ch, keys in open_ops.items():  # never committed: never known complete
                for key in keys:
                    self.done[key] = self.reads_end[key] = None
        if self.cluster is not None:
            self._cluster_nodes(self.cluster)
        self._phases()
        self._generations()

    def _generations(self) -> None:
        """Each named barrier's syncs and arrives, one generation per tile (a step's tile is the
        generation it fills, pipeline_core/agents/order.py), in tile order: a sync's threads
        arrive when it is reached and leave when its generation completes; an arrive adds its
        threads and goes on; generation k completes after generation k - 1."""
        nb = self.sync.named_barriers
        warp = nb.warp_size if nb is not None else 32
        for bid, parts in sorted(self.named.items()):
            by_tile: dict[int, list[_Inst]] = defaultdict(list)
            for inst in parts:
                by_tile[inst.generation].append(inst)
            before: Node | None = None
            for u in sorted(by_tile):
                insts = by_tile[u]
                node = ("named", bid, u)
                threads = sum(self.plan.programs[i.agent].role.warps * warp for i in insts)
                counts = sorted({i.step.value for i in insts})
                self.gens[node] = _Generation(barrier=bid, tile=u, insts=tuple(insts),
                                              threads=threads, counts=tuple(counts),
                                              before=before,
                                              output=any(i.step.once for i in insts))
                self.g.add_node(node)
                for i in insts:
                    if i.step.kind == StepKind.NAMED_SYNC:
                        self.g.add_edge(self.prev(i), node)
                        self.g.add_edge(node, i.node)
                    else:
                        self.g.add_edge(i.node, node)
                if before is not None:
                    self.g.add_edge(before, node)
                before = node

    def _step(self, inst: _Inst, open_ops: dict[str, list[tuple[int, int, int]]]) -> None:
        s, a, u = inst.step, inst.agent, inst.pos
        if s.kind == StepKind.OP:
            key = (a, s.op, inst.key_tile)
            self.op_at[key] = inst
            eff = self.effect(s.op)
            ck = self.channel_kind(eff.counter if eff else None)
            if eff is None or eff.counter is None:  # synchronous for its issuer
                self.done[key] = self.reads_end[key] = inst.node
            elif ck == ChannelKind.PHASE:
                land = ("land", a, inst.n)
                self.g.add_edge(inst.node, land)
                self.done[key] = land
                self.reads_end[key] = land if eff.resolves == "both" else None
                if eff.completes == "arrival":  # the thread's next async arrival tracks it
                    self.untracked[a].append(key)
                    return
                for ring_name, nbytes in self.landings(s.op):
                    self.copies[(ring_name, u % self.S(ring_name))].append((inst, nbytes))
            else:
                open_ops[eff.counter].append(key)
        elif s.kind == StepKind.COMMIT:
            groups = self.groups.setdefault((a, s.channel), [])
            g = len(groups)
            retire = ("retire", a, s.channel, g)
            self.g.add_edge(inst.node, retire)
            if g:
                self.g.add_edge(("retire", a, s.channel, g - 1), retire)
            keys = open_ops.pop(s.channel, [])
            for key in keys:
                self.g.add_edge(self.op_at[key].node, retire)
                self.done[key] = retire
                eff = self.effect(key[1])
                self.reads_end[key] = retire if eff is not None and eff.resolves == "both" else None
                self.group_of[key] = (a, s.channel, g)
            groups.append((inst, keys))
        elif s.kind == StepKind.COUNTER_WAIT:
            self._counter_wait(inst)
        elif s.kind in (StepKind.ARRIVE, StepKind.EXPECT_TX):
            units = self.plan.programs[a].role.release_arrivals if s.kind == StepKind.ARRIVE else 1
            tx = s.value if s.kind == StepKind.EXPECT_TX else 0
            self.signals[(s.channel, u % self.S(s.channel))].append((inst, units, tx))
        elif s.kind == StepKind.ASYNC_ARRIVE:
            # each issuing thread's arrival, made once every copy it issued before this step
            # landed (cp.async.mbarrier.arrive.noinc): after those copies' landings and after
            # the thread's previous such arrival (which tracked the copies before it)
            event = ("arrival", a, inst.n)
            self.g.add_edge(inst.node, event)
            for copy in self.untracked.pop(a, []):
                landed = self.done.get(copy)
                if landed is not None:
                    self.g.add_edge(landed, event)
            if a in self.last_arrival:
                self.g.add_edge(self.last_arrival[a], event)
            self.last_arrival[a] = self.arrival_event[(a, inst.n)] = event
            units = self.plan.programs[a].role.issuers
            self.signals[(s.channel, u % self.S(s.channel))].append((inst, units, 0))
        elif s.kind == StepKind.PROXY_FENCE:
            self.proxy_fences[a].append(inst)
        elif s.kind == StepKind.DESCRIPTOR_ACQUIRE:
            self.descriptor_acquires[a].append(inst)
        elif s.kind == StepKind.PHASE_WAIT:
            depth = self.S(s.channel)
            self.waits.append((inst, s.channel, u % depth, u // depth + s.phase_offset))
        elif s.kind in (StepKind.NAMED_SYNC, StepKind.NAMED_ARRIVE):
            self.named[s.barrier].append(inst)

    def _counter_wait(self, inst: _Inst) -> None:
        s, a = inst.step, inst.agent
        channel = self.kinds.get(s.channel)
        limit = channel.max_wait if channel is not None else None
        n = s.value
        if n < 0 or (limit is not None and n > limit):
            allowed = f"0..{limit}" if limit is not None else "a value >= 0"
            label = channel.label if channel is not None else s.channel
            self.report(HazardKind.WAIT_RANGE, inst,
                        f"{label} waits take {allowed}; {n} cannot be encoded",
                        fix=Fix("lower_wait", inst.placed.section, inst.placed.position,
                                f"set the wait to a value in {allowed}", s.channel,
                                max(0, min(n, limit if limit is not None else n))))
            n = max(n, 0)
        groups = self.groups.get((a, s.channel), [])
        retired = len(groups) - n
        if retired > 0:
            self.g.add_edge(("retire", a, s.channel, retired - 1), inst.node)
            for g in range(retired):
                self.cover.setdefault((a, s.channel, g), inst)

    def _phases(self) -> None:
        """Count each ring stage's arrivals in tile order into phases; link the phase events."""
        rings = {r.name: r for r in self.plan.rings}
        keys = set(self.signals) | {(r, s) for _, r, s, _ in self.waits} | set(self.copies)
        for ring_name, stage in sorted(keys):
            ring = rings.get(ring_name)
            need = ring.arrivals if ring is not None else 1
            sig = sorted(self.signals.get((ring_name, stage), []),
                         key=lambda x: (x[0].pos, x[0].agent, x[0].n))
            count = 0
            tile_phase: dict[int, int] = {}
            for inst, units, tx in sig:
                first = count // need
                releases = not self.unreleased(inst)
                for _ in range(units):
                    k = count // need
                    ph = self.phases.setdefault((ring_name, stage, k), _new_phase())
                    ph["units"] += 1
                    ph["from"].append(inst)
                    # a CTA-scope arrival on a peer's barrier counts, but orders nothing there;
                    # an async arrival arrives when its event happens, not when it is issued
                    if releases:
                        self.g.add_edge(self.arrival_event.get((inst.agent, inst.n), inst.node),
                                        ("phase", ring_name, stage, k))
                    else:
                        self.g.add_node(("phase", ring_name, stage, k))
                    self.phase_of_unit[(inst.agent, inst.n)].append(k)
                    count += 1
                last = (count - 1) // need
                if tx:
                    self.phases[(ring_name, stage, first)]["announced"] += tx
                tile_phase[inst.pos] = max(tile_phase.get(inst.pos, -1), last)
                self.phases[(ring_name, stage, last)].setdefault("tiles", set()).add(inst.pos)
            for inst, nbytes in self.copies.get((ring_name, stage), []):
                k = tile_phase.get(inst.pos, inst.pos // self.S(ring_name))
                ph = self.phases.setdefault((ring_name, stage, k), _new_phase())
                ph["landed"] += nbytes
                ph["copies"].append(inst)
            self.tile_phase_by_ring[(ring_name, stage)] = tile_phase
        for (ring_name, stage, k), ph in sorted(self.phases.items()):
            node = ("phase", ring_name, stage, k)
            self.g.add_node(node)
            need = rings[ring_name].arrivals if ring_name in rings else 1
            # tx-count must reach 0: fewer bytes than announced never complete the phase; more
            # complete it before the rest land (the copies are then left unordered: SMEM_RAW)
            ph["complete"] = ph["units"] == need and ph["landed"] >= ph["announced"]
            ph["need"] = need
            if ph["landed"] == ph["announced"]:
                for inst in ph["copies"]:
                    self.g.add_edge(("land", inst.agent, inst.n), node)
            if k > 0 and (ring_name, stage, k - 1) in self.phases:
                self.g.add_edge(("phase", ring_name, stage, k - 1), node)
        for inst, ring_name, stage, k in self.waits:
            node = self.phase_node(ring_name, stage, k)
            if node != START and (ring_name, stage, k) not in self.phases:
                self.phases[(ring_name, stage, k)] = {**_new_phase(), "complete": False,
                                                      "need": rings[ring_name].arrivals
                                                      if ring_name in rings else 1}
                self.g.add_node(node)
            self.g.add_edge(node, inst.node)

    def phase_node(self, ring: str, stage: int, k: int) -> Node:
        return START if k < 0 else ("phase", ring, stage, k)

    # --- reachability -----------------------------------------------------------------
    def close(self) -> None:
        """Dead events (never happen: an incomplete phase, a cycle, anything after them) and
        every live event's ancestors as a bit set."""
        dead = {("phase",) + k for k, ph in self.phases.items() if not ph["complete"]}
        dead |= {node for node, gen in self.gens.items() if not gen.complete}
        self.cycles = [c for c in nx.strongly_connected_components(self.g) if len(c) > 1]
        for c in self.cycles:
            dead |= c
        self.root_dead = set(dead)
        for node in list(dead):
            dead |= nx.descendants(self.g, node)
        self.dead = dead
        if self.cycles:  # every cycle is dead: what is left is acyclic
            live = self.g.copy()
            live.remove_nodes_from(dead)
            order = list(nx.topological_sort(live))
        else:
            order = [n for n in nx.topological_sort(self.g) if n not in dead]
        self.bit = {n: 1 << i for i, n in enumerate(order)}
        anc: dict[Node, int] = {}
        pred = self.g.pred
        for n in order:
            acc = 0
            for p in pred[n]:
                if p not in dead:
                    acc |= anc[p] | self.bit[p]
            anc[n] = acc
        self.anc = anc
        #: (op, tile) -> its instances, in program order of the agents
        self.op_tile: dict[tuple[int, int], list[tuple[tuple[int, int, int], _Inst]]] = \
            defaultdict(list)
        for key, inst in self.op_at.items():
            self.op_tile[(key[1], key[2])].append((key, inst))
        #: (agent, ring, stage) -> its waits there and the phase each names
        self.waits_by: dict[tuple[int, str, int], list[tuple[_Inst, int]]] = defaultdict(list)
        for w, ring_name, stage, k in self.waits:
            self.waits_by[(w.agent, ring_name, stage)].append((w, k))

    def hb(self, x: Node | None, y: Node | None) -> bool:
        """``x`` happens before ``y`` in every timing (both must happen)."""
        if x is None or y is None or x in self.dead or y in self.dead:
            return False
        return x == y or bool(self.anc[y] & self.bit[x])

    def prev(self, inst: _Inst) -> Node:
        return self.insts[inst.agent][inst.n - 1].node if inst.n else START

    # --- the checks ----------------------------------------------------------------------
    def check(self) -> list[Violation]:
        self.close()
        if self.cluster is not None:
            self._cluster_rules(self.cluster)
        self._deadlocks()
        self._trips_agree()
        self._stranded()
        self._named_rules()
        self._orders()
        self._phase_rules()
        self._war()
        self._raw()
        self._descriptors()
        self._accumulators()
        self._register_fences()
        self._products()
        return self.out

    def _trips_agree(self) -> None:
        """Every agent on a ring visits each output tile's K tiles by the same count: the ring
        positions (stages and phases) run on across output tiles, so one agent that runs a
        tile the others skip (a loop run once on an empty query tile) leaves every later wait
        on a phase that completes for another tile (docs/guide/agents.md, "Output tiles of
        different lengths")."""
        for ring in self.plan.rings:
            if ring.once:
                continue
            agents = [a for a, p in enumerate(self.plan.programs)
                      if p.name in ring.signallers or p.name in ring.waiters]
            for o in range(self.outputs):
                # the agents of a tile split count as one: the owner of the output tile
                counts = {a: self.trips_of(a)[o] for a in agents if self.runs(a, o)}
                if len(set(counts.values())) < 2:
                    continue
                a = next(a for a in counts if counts[a] != self.trips[o])
                other = next((b for b in counts if counts[b] == self.trips[o]),
                             next(b for b in counts if counts[b] != counts[a]))
                # an agent that runs nothing for the tile is reported where the others begin
                first = next((i for b in (a, other) for i in self.insts[b] if i.output == o),
                             None)
                if first is None:
                    continue
                self.report(HazardKind.DEADLOCK, first,
                            f"{self.agent_name(a)} runs {counts[a]} K tile"
                            f"{'s' if counts[a] != 1 else ''} for output tile {o + 1} where "
                            f"{self.agent_name(other)} runs {counts[other]}: their positions "
                            f"on {ring.name} diverge, so a later wait names a phase that "
                            "completes for another tile (a persistent kernel hangs)",
                            fix=Fix("review", first.placed.section, first.placed.position,
                                    f"let {self.agent_name(a)} run the plan's trip count "
                                    "(Plan.trip_rule's): an output tile with no K tile runs "
                                    "only its once steps"), rank=0)
                return

    def _deadlocks(self) -> None:
        for a, insts in enumerate(self.insts):
            blocked = next((i for i in insts if i.node in self.dead), None)
            if blocked is None:
                continue
            why, direct = self._why_dead(blocked)
            self.report(HazardKind.DEADLOCK, blocked,
                        f"{self.agent_name(a)} never gets past this step: {why}",
                        rank=0 if direct else 1)

    def _why_dead(self, inst: _Inst) -> tuple[str, bool]:
        """Why ``inst`` never runs, and whether that is a cause (not a consequence)."""
        s = inst.step
        if s.kind == StepKind.PHASE_WAIT:
            depth = self.S(s.channel)
            u, stage = inst.pos, inst.pos % depth
            k = u // depth + s.phase_offset
            key = (s.channel, stage, k)
            ph = self.phases.get(key)
            source = self._source_tile(s.channel, u)
            short = self._short_tile(s.channel, stage, source)
            if short:
                return (f"phase {k} of {s.channel}[{stage}] should complete with the "
                        f"{self._what(s.channel)} of tile {source}, {short}; the phase then "
                        "needs arrivals that come only after this wait"), True
            if ph is not None and ("phase",) + key in self.root_dead and not ph["complete"]:
                what = f"phase {k} of {s.channel}[{stage}] never completes"
                if ph["units"] < ph["need"]:
                    return (f"{what}: it gets {ph['units']} of its {ph['need']} arrivals"
                            + self._missing(s.channel, stage, k)), True
                return (f"{what}: {ph['announced']} bytes are announced and "
                        f"{ph['landed']} land"), True
        if s.kind == StepKind.NAMED_SYNC:
            gen = self.gens.get(("named", s.barrier, inst.generation))
            if gen is not None and ("named", s.barrier, inst.generation) in self.root_dead:
                return self._gen_text(gen), True
        for c in self.cycles:
            if inst.node in c:
                steps = sorted((n for n in c if n[0] == "step"), key=lambda n: (n[1], n[2]))
                shown = [self.step_text(self.insts[n[1]][n[2]]) for n in steps[:4]]
                return "it waits on itself through " + " -> ".join(shown), True
        return "it waits on a step that never runs (see the other DEADLOCK findings)", False

    def _gen_text(self, gen: "_Generation") -> str:
        """Why a generation of a named barrier never completes (or completes wrongly)."""
        output, local = self.locate(gen.tile)
        what = (f"the generation of named barrier {gen.barrier} for output tile {gen.tile + 1}"
                if gen.output else f"the generation of named barrier {gen.barrier} for tile "
                f"{local}{_of_output(output)}")
        if len(gen.counts) > 1:
            return (f"{what} is joined with counts {', '.join(map(str, gen.counts))}: every "
                    "named_sync and named_arrive of one generation must name the same count")
        agents = sorted({self.agent_name(i.agent) for i in gen.insts})
        who = ", ".join(agents)
        if gen.threads > gen.counts[0]:
            return (f"{what} gets {gen.threads} threads ({who}) for a count of {gen.counts[0]}: "
                    "the extra arrivals complete it early and spill into the next generation")
        return (f"{what} gets {gen.threads} of its {gen.counts[0]} threads (only {who} "
                f"arrive{'s' if len(agents) == 1 else ''}): it never completes")

    def _named_rules(self) -> None:
        """Named barriers: a generation no sync blocks on that is left incomplete or over-full
        (the barrier is out of step for the rest of the kernel), and arrivals that may come
        before the generation before theirs completed (they count towards it)."""
        stranded: set[int] = set()  # one finding per barrier: the first generation is the cause
        overrun: set[int] = set()
        for node, gen in sorted(self.gens.items()):
            if not gen.complete and gen.barrier not in stranded \
                    and not any(i.step.kind == StepKind.NAMED_SYNC for i in gen.insts):
                stranded.add(gen.barrier)
                self.report(HazardKind.DEADLOCK, gen.insts[0],
                            f"{self._gen_text(gen)}; no named_sync waits on it, so the barrier is "
                            "out of step with every later generation", rank=2)
            if gen.before is None or gen.before in self.dead or not gen.complete \
                    or gen.barrier in overrun:
                continue
            for i in gen.insts:
                at = self.prev(i) if i.step.kind == StepKind.NAMED_SYNC else i.node
                if i.node not in self.dead and not self.hb(gen.before, at):
                    overrun.add(gen.barrier)
                    self.report(HazardKind.DEADLOCK, i,
                                f"may arrive on named barrier {gen.barrier} before its previous "
                                "generation completed, and count towards it: the generations "
                                "mismatch", rank=1)
                    break

    def _orders(self) -> None:
        """Each declared ordering: every turn's ops issued in a loop iteration are issued after
        the previous turn's ops of that iteration, and the first turn's of iteration t + 1
        after the last turn's of iteration t, also from one output tile's last iteration to the
        next one's first (docs/guide/agents.md, "Named barriers").  An op of lag L serving K
        tile u is issued in iteration u + L: a turn of S_t and a lagged PV_{t-1} brackets
        both.  What the epilogue issues past the loop (iteration KT on) runs outside the
        turns, and is not held to them."""
        index = {p.name: a for a, p in enumerate(self.plan.programs)}
        section: dict[tuple[str, int, int], list[_Inst]] = defaultdict(list)
        for order in self.plan.orders:
            for n, turn in enumerate(order.turns):
                a = index[turn.agent]
                for (agent, op, u), inst in self.op_at.items():
                    if agent != a or op not in turn.ops:
                        continue
                    if order.scope != "k_tile" or inst.step.lag == 0:
                        section[(order.name, n, u)].append(inst)
                    elif inst.local + inst.step.lag < self.trips[inst.output]:
                        section[(order.name, n, u + inst.step.lag)].append(inst)
        for order in self.plan.orders:
            turns = len(order.turns)
            if order.scope == "output_tile":
                self._output_order(order.name, [index[t.agent] for t in order.turns],
                                   {i for t in order.turns for i in t.ops})
                continue
            if order.scope == "join":
                self._join(order.name, [(index[t.agent], set(t.ops)) for t in order.turns])
                continue
            # the turns run on across output tiles as across K tiles (the persistent kernel)
            seq = [(n, u) for u in range(sum(self.trips)) for n in range(turns)]
            for (i, u), (j, v) in zip(seq, seq[1:]):
                before, after = section.get((order.name, i, u)), section.get((order.name, j, v))
                if not before or not after:
                    continue
                last = max(before, key=lambda x: x.n)
                first = min(after, key=lambda x: x.n)
                if self.hb(last.node, first.node):
                    continue
                self._unordered(first, last, f"ordering {order.name} ("
                                f"{' then '.join(t.agent for t in order.turns)}, each K tile)",
                                f"named barrier wait of ordering {order.name}")
                break

    def _join(self, name: str, parts: Sequence[tuple[int, set[int]]]) -> None:
        """A join: each part's ops of a K tile are issued before every other part's next step
        after them (its first step past its own ops of that tile), so what one part wrote is
        there for the others from their meeting on (docs/guide/agents.md, "Joins")."""
        last_of: dict[tuple[int, int], _Inst] = {}  # (agent, K tile) -> its last part op
        for a, ops in parts:
            for (agent, op, u), i in self.op_at.items():
                if agent == a and op in ops and ((a, u) not in last_of or last_of[(a, u)].n < i.n):
                    last_of[(a, u)] = i
        for u in range(sum(self.trips)):
            ends = [last_of[(a, u)] for a, _ in parts if (a, u) in last_of]
            for last in ends:
                for other in ends:
                    if other.agent == last.agent or other.n + 1 >= len(self.insts[other.agent]):
                        continue
                    after = next((i for i in self.insts[other.agent][other.n + 1:]
                                  if i.step.kind == StepKind.OP), None)
                    if after is None or after.node in self.dead or \
                            self.hb(last.node, after.node):
                        continue
                    self._unordered(after, last, f"join {name} ("
                                    f"{', '.join(self.agent_name(a) for a, _ in parts)} meet "
                                    "each K tile)", f"named barrier sync of join {name}")
                    return

    def _output_order(self, name: str, agents: Sequence[int], ops: set[int]) -> None:
        """An ordering over output tiles: the turn ops of output tile o + 1 (run by its owner in
        the tile split) are issued after those of output tile o, whoever ran it; an output tile
        with no K tile has none and passes the turn on (docs/guide/agents.md, "Tile splits")."""
        tiles = [sorted((i for (a, op, _), i in self.op_at.items()
                         if a in agents and op in ops and i.output == o), key=lambda i: i.n)
                 for o in range(self.outputs)]
        runs = [t for t in tiles if t]
        for before, after in zip(runs, runs[1:]):
            last, first = before[-1], after[0]
            if self.hb(last.node, first.node):
                continue
            self._unordered(first, last, f"ordering {name} ("
                            f"{' then '.join(self.agent_name(a) for a in agents)}, each output "
                            "tile's mainloop in turn)", f"named barrier wait of ordering {name}")
            return

    def _unordered(self, early: _Inst, last: _Inst, what: str, barrier: str) -> None:
        """One ORDER report, the same words for every ordering rule: ``early`` may be issued
        before ``last`` because ``what`` (an ordering or a join, named with its parts) is not
        enforced; the fix restores ``early``'s agent's ``barrier`` step."""
        self.report(HazardKind.ORDER, early,
                    f"may be issued before {self.step_text(last)}: {what} is not enforced",
                    other=last, fix=Fix("review", early.placed.section, early.placed.position,
                                        f"restore {self.agent_name(early.agent)}'s {barrier}"))

    def _what(self, ring_name: str) -> str:
        return "data" if self.plan.ring(ring_name).kind == "full" else "releases"

    def _source_tile(self, ring_name: str, tile: int) -> int:
        """The tile whose signals a wait for ``tile`` on ``ring_name`` needs."""
        return tile if self.plan.ring(ring_name).kind == "full" else tile - self.S(ring_name)

    def _short_tile(self, ring_name: str, stage: int, tile: int) -> str:
        """Why ``tile``'s signals on the stage do not fill one phase ("" when they do)."""
        if tile < 0:
            return ""
        ring = self.plan.ring(ring_name)
        sig = [(i, n) for i, n, _ in self.signals.get((ring_name, stage), []) if i.pos == tile]
        got = sum(n for _, n in sig)
        if got == ring.arrivals:
            return ""
        who = {self.agent_name(i.agent) for i, _ in sig}
        silent = [n for n in ring.signallers if n not in who]
        text = f"which bring {got} of its {ring.arrivals} arrivals"
        if silent:
            text += f" ({self._silent(silent)})"
        return text

    @staticmethod
    def _silent(agents: Sequence[str]) -> str:
        return f"{', '.join(agents)} never arrive{'s' if len(agents) == 1 else ''}"

    def _stranded(self) -> None:
        """A ring left unbalanced when the programs end: a phase part-filled, or a K tile that
        brought its stage no arrival at all (a sole consumer's dropped release).  No wait of
        this run blocks on it, but the ring is out of step for its next use (the next output
        tile of a persistent kernel waits forever)."""
        for (ring_name, stage, k), ph in sorted(self.phases.items()):
            if ph["complete"] or not ph["from"] or ph["units"] >= ph["need"]:
                continue
            if not any((r, st, kk) == (ring_name, stage, k) for _, r, st, kk in self.waits):
                first = ph["from"][0]
                self.report(HazardKind.DEADLOCK, first,
                            f"phase {k} of {ring_name}[{stage}] gets {ph['units']} of its "
                            f"{ph['need']} arrivals{self._missing(ring_name, stage, k)} and is "
                            "left incomplete when the programs end: the ring's next use waits "
                            "on it forever", rank=2)
        for ring in self.plan.rings:
            waited = {self._source_tile(r, inst.pos) for inst, r, _, _ in self.waits
                      if r == ring.name}
            # a once ring holds one position per output tile
            held = [(o, o, 0) if ring.once else (self.bases[o] + k, o, k)
                    for o in range(self.outputs) for k in range(1 if ring.once else self.trips[o])]
            for u, o, local in held:
                stage = u % ring.stages
                if u in waited or any(i.pos == u for i, _, _ in
                                      self.signals.get((ring.name, stage), [])):
                    continue
                # no signal at all for this tile: no phase holds it, the ring falls one behind
                silent = [a for a, p in enumerate(self.plan.programs)
                          if p.name in ring.signallers]
                for a in silent:
                    kind = (StepKind.ARRIVE if ring.kind == "empty" else StepKind.EXPECT_TX
                            if ring.tx_bytes else StepKind.ASYNC_ARRIVE)
                    site, anchor = self.missing_site(
                        a, lambda x: x.kind == kind and x.channel == ring.name, local,
                        f"{kind.value.upper()} {ring.name}[{stage}]", o)
                    self.report(HazardKind.DEADLOCK, anchor,
                                f"{ring.name}[{stage}] gets none of its {ring.arrivals} "
                                f"arrivals for tile {local} ({self._silent(ring.signallers)}): "
                                "the stage ends the loop one phase behind the K tiles it held, "
                                "so its next use (the next output tile of a persistent kernel) "
                                "waits on it forever", rank=2, site=site,
                                fix=Fix("review", site.phase, site.index,
                                        f"restore {self.agent_name(a)}'s {kind.value} on "
                                        f"{ring.name}[{stage}] for tile {local}", ring.name))
                    break

    def _missing(self, ring_name: str, stage: int, k: int) -> str:
        ring = self.plan.ring(ring_name)
        counts: dict[str, int] = defaultdict(int)
        for inst in self.phases[(ring_name, stage, k)]["from"]:
            counts[self.agent_name(inst.agent)] += 1
        silent = [n for n in ring.signallers if counts.get(n, 0) == 0]
        return f" ({self._silent(silent)})" if silent else ""

    def _intended(self, ring_name: str, stage: int, tile: int) -> int:
        """The phase a wait for ``tile`` must name: the one its data (full ring) or the
        release of the tile the stage held before (empty ring) completes."""
        ring = self.plan.ring(ring_name)
        source = tile if ring.kind == "full" else tile - ring.stages
        if source < 0:
            return -1
        return self.tile_phase_by_ring.get((ring_name, stage), {}).get(source,
                                                                        source // ring.stages)

    def _phase_rules(self) -> None:
        for inst, ring_name, stage, k in self.waits:
            if inst.node in self.dead:
                continue
            want = self._intended(ring_name, stage, inst.pos)
            what = "data" if self.plan.ring(ring_name).kind == "full" else "release"
            if k != want:
                self.report(HazardKind.PHASE_PARITY, inst,
                            f"waits for phase {k} of {ring_name}[{stage}], but the {what} it "
                            f"needs completes phase {want} (parity {want & 1})",
                            fix=Fix("review", inst.placed.section, inst.placed.position,
                                    f"set the wait's phase_offset to "
                                    f"{inst.step.phase_offset + want - k}"))
                continue
            before = self.phase_node(ring_name, stage, k - 1)
            if before != START and before not in self.dead and not self.hb(before, self.prev(inst)):
                self.report(HazardKind.PHASE_PARITY, inst,
                            f"may start before phase {k - 1} of {ring_name}[{stage}] completed; "
                            f"its parity {k & 1} then matches that older phase and the wait "
                            "passes early")
            after = ("phase", ring_name, stage, k + 1)
            if k + 1 < 0 or (after in self.g and after not in self.dead
                             and not self.hb(inst.node, after)):
                self.report(HazardKind.PHASE_LAG, inst,
                            f"phase {k + 1} of {ring_name}[{stage}] may complete before this "
                            "wait tests it: a waiter may lag its barrier by at most one phase")
        for (ring_name, stage, k), ph in sorted(self.phases.items()):
            before = ("phase", ring_name, stage, k - 1)
            if k == 0 or before not in self.g or before in self.dead:
                continue
            for inst in ph["from"]:
                if not self.hb(before, inst.node) and inst.node not in self.dead:
                    self.report(HazardKind.PHASE_OVERRUN, inst,
                                f"belongs to phase {k} of {ring_name}[{stage}] but may arrive "
                                f"before phase {k - 1} completed, and count towards it")
                    break
            for inst in ph["copies"]:
                if not self.hb(before, inst.node) and inst.node not in self.dead:
                    self.report(HazardKind.PHASE_OVERRUN, inst,
                                f"its bytes belong to phase {k} of {ring_name}[{stage}] but may "
                                f"land before phase {k - 1} completed")
                    break

    def _war(self) -> None:
        """Releases follow the end of the releaser's reads of the ring's stage; ANTI edges are
        ordered."""
        readers = {r.name: {e.producer for e in self.edges
                            if e.kind == DepKind.ANTI and e.consumer in r.ops}
                   for r in self.plan.rings}
        released: set[tuple[int, int, int]] = set()
        for inst_list in self.insts:
            for inst in inst_list:
                s = inst.step
                if s.kind != StepKind.ARRIVE or inst.node in self.dead:
                    continue
                if self.plan.ring(s.channel).kind != "empty":
                    continue
                # a once ring's release frees the copy every K tile of its output tile read
                tiles = ([inst.base + k for k in range(self.trips_of(inst.agent)[inst.output])]
                         if s.once
                         else [inst.tile])
                for op in sorted(readers[s.channel]):
                    for u in tiles:
                        key = (inst.agent, op, u)
                        if key not in self.op_at:
                            continue
                        if not self.hb(self.reads_end.get(key), inst.node):
                            released.add(key)
                            self._war_report(key, inst, None, f"releases {s.channel}"
                                                              f"[{inst.pos % self.S(s.channel)}]")
                            break
        for e in self.edges:
            if e.kind != DepKind.ANTI:
                continue
            for key, reader in self.op_at.items():
                a, op, u = key
                if op != e.producer or key in released or reader.node in self.dead:
                    continue
                # a once copy's stage is overwritten by the copy of the output tile its
                # ring's depth later (the ring's stages count output tiles)
                target = (reader.output + self.once_depth[e.consumer]
                          if e.consumer in self.once_ops else u + e.distance)
                for _, writer in self.op_tile.get((e.consumer, target), []):
                    if writer.node in self.dead:
                        continue
                    if not self.hb(self.reads_end.get(key), writer.node):
                        self._war_report(key, None, writer,
                                         f"lets {self.step_text(writer)} overwrite its stage")

    def _war_report(self, key: tuple[int, int, int], release: _Inst | None,
                    writer: _Inst | None, what: str) -> None:
        a, op, u = key
        reader = self.op_at[key]
        gk = self.group_of.get(key)
        eff = self.effect(op)
        if eff is not None and eff.counter is not None and eff.resolves != "both":
            why = (f"the sync model says a retirement on {eff.counter} ends only its writes "
                   f"(Effect.resolves={eff.resolves!r}), so its reads never provably end")
            self.report(HazardKind.SMEM_WAR, reader, f"{self.step_text(reader)}: {why}",
                        other=writer)
            return
        if (eff is None or eff.counter is None) and writer is not None \
                and writer.agent != a and self._ordering_of(a, writer.agent):
            # a synchronous read of a buffer two turns of an ordering share
            self.report(HazardKind.SMEM_WAR, writer,
                        f"may overwrite what {self.step_text(reader)} still reads: no named "
                        f"barrier of ordering {self._ordering_of(a, writer.agent)} orders the "
                        "read before the write", other=reader)
            return
        if gk is None:
            self.report(HazardKind.SMEM_WAR, release or reader,
                        f"{self.agent_name(a)} {what} while {self.step_text(reader)} is never "
                        "committed, so its reads never provably end", other=writer)
            return
        ring_name = release.step.channel if release is not None else next(
            (r.name for r in self.plan.rings if r.kind == "empty" and writer is not None
             and writer.step.op in r.ops), None)
        own = release or self._release_of(a, reader, ring_name)
        if release is None and writer is not None and own is not None \
                and self.hb(self.reads_end.get(key), own.node):
            # the reader releases in time: the writer does not wait for that release
            ring = self.plan.ring(own.step.channel)
            st = own.pos % ring.stages
            k = self.phase_of_unit.get((own.agent, own.n), [own.pos // ring.stages])[-1]
            self.report(HazardKind.SMEM_WAR, writer,
                        f"may overwrite ring stage {st} while "
                        f"{self.step_text(reader)} still reads it: {self.agent_name(writer.agent)} "
                        f"does not wait for phase {k} of {ring.name}[{st}], which "
                        f"{self.agent_name(a)}'s release of tile {u} completes", other=reader,
                        fix=Fix("insert_wait", writer.placed.section, writer.placed.position,
                                f"acquire {ring.name}[{st}] (wait for phase {k}, parity "
                                f"{k & 1}) before the copy", ring.name))
            return
        # the counter wait that should have retired the group: the last one before the release
        site_from = own or reader
        wait = next((i for i in reversed(self.insts[a][:site_from.n])
                     if i.step.kind == StepKind.COUNTER_WAIT and i.step.channel == gk[1]), None)
        channel = self.kinds.get(gk[1])
        wname = channel.wait_name if channel is not None else gk[1]
        if wait is not None and wait.n > reader.n:
            younger = sum(1 for c, _ in self.groups.get((a, gk[1]), [])[gk[2] + 1:]
                          if c.n < wait.n)
            fix = Fix("lower_wait", wait.placed.section, wait.placed.position,
                      f"lower {wname} to {younger}", gk[1], younger)
            self.report(HazardKind.SMEM_WAR, wait,
                        f"{self.agent_name(a)} {what} while {self.step_text(reader)} may still "
                        f"read it: {wname}({wait.step.value}) may leave the "
                        f"{wait.step.value} youngest groups pending, and that tile's group has "
                        f"only {younger} younger", other=writer, fix=fix)
        else:
            at = own or reader
            self.report(HazardKind.SMEM_WAR, at,
                        f"{self.agent_name(a)} {what} while {self.step_text(reader)} may still "
                        f"read it: no counter wait retires its group first", other=writer,
                        fix=Fix("insert_wait", at.placed.section, at.placed.position,
                                f"insert {wname}(n) that retires the tile's group before the "
                                "release", gk[1]))

    def _ordering_of(self, a: int, b: int) -> str:
        """The ordering agents ``a`` and ``b`` take turns in ("" when none): its named barriers
        order and publish memory between them (docs/guide/agents.md, "Named barriers")."""
        names = {self.agent_name(a), self.agent_name(b)}
        shared = [o for o in self.plan.orders if names <= {t.agent for t in o.turns}]
        # a join's barrier is what publishes between two agents that also take turns
        return next((o.name for o in sorted(shared, key=lambda o: o.scope != "join")), "")

    def _release_of(self, agent: int, reader: _Inst, ring: str | None) -> _Inst | None:
        """``agent``'s release on ``ring`` (any empty ring when None) of the stage ``reader``
        reads: its K tile's, or its output tile's on a once ring."""
        return next((i for i in self.insts[agent] if i.step.kind == StepKind.ARRIVE
                     and (ring is None or i.step.channel == ring)
                     and (i.output == reader.output if i.step.once else i.tile == reader.tile)),
                    None)

    def _raw(self) -> None:
        for e in self.edges:
            if e.kind != DepKind.FLOW:
                continue
            for ckey, reader in self.op_at.items():
                if ckey[1] != e.consumer or reader.node in self.dead:
                    continue
                # a once copy is keyed by its output tile (:attr:`_Inst.key_tile`)
                u = reader.output if e.producer in self.once_ops else ckey[2] - e.distance
                if e.producer not in self.once_ops and u < reader.base:
                    continue  # no output tile reads data of the one before it
                for pkey, writer in self.op_tile.get((e.producer, u), []):
                    if writer.node in self.dead:
                        continue
                    ok, why = self._visible(pkey, writer, reader)
                    if not ok:
                        self.report(HazardKind.SMEM_RAW, reader,
                                    f"may read before {self.step_text(writer)} is visible to "
                                    f"it: {why}", other=writer)

    def _descriptors(self) -> None:
        """A copy through a tensor map written on the device (``Effect.descriptor``) reads it
        only after its issuer's acquire of the maps (``descriptor_acquire``: fence.proxy.
        tensormap::generic.acquire) in the same output tile: the maps are the tile's (its
        group's), and without the acquire the tensormap proxy may serve a stale map, the one
        the same address held at an earlier launch (PTX ISA, "fence.proxy.tensormap")."""
        for (a, op, _), inst in sorted(self.op_at.items()):
            eff = self.effect(op)
            if eff is None or eff.descriptor != "device" or inst.node in self.dead:
                continue
            if not any(f.n < inst.n and f.output == inst.output
                       for f in self.descriptor_acquires.get(a, [])):
                self.report(HazardKind.SMEM_RAW, inst,
                            f"reads through a tensor map written on the device, and no "
                            f"descriptor acquire of {self.agent_name(a)}'s in its output tile "
                            "comes before it: the copy may use a stale map")

    def _visible(self, pkey: tuple[int, int, int], writer: _Inst,
                 reader: _Inst) -> tuple[bool, str]:
        done = self.done.get(pkey)
        if done is None:
            return False, "the write is never known complete (no commit or wait covers it)"
        ordered = self.hb(done, reader.node)
        unordered = "nothing orders its completion before the read"
        if writer.agent == reader.agent:
            return ordered, "" if ordered else unordered
        shared = self._ordering_of(writer.agent, reader.agent)
        if shared:  # two turns of one ordering: its named barriers publish the write
            if ordered and not self._turn_fenced(done, writer, reader):
                w, r = self.effect(writer.step.op), self.effect(reader.step.op)
                return False, (f"it is written by the {w.proxy if w else '?'} proxy and read "
                               f"by the {r.proxy if r else '?'} proxy, and no proxy fence of "
                               f"{self.agent_name(writer.agent)}'s after the write (or of "
                               f"{self.agent_name(reader.agent)}'s before the read) is "
                               f"ordered before the read by ordering {shared}")
            return ordered, "" if ordered else (f"no named barrier of ordering {shared} orders "
                                                "its completion before the read")
        # across agents, a missing wait on the copy's own ring is named first: the likelier cause
        eff = self.effect(writer.step.op)
        channel = self.kinds.get(eff.counter) if eff is not None and eff.counter else None
        if channel is None or channel.results_visible_to != "waiters":
            return False, (f"{self.agent_name(writer.agent)}'s results on "
                           f"{channel.name if channel else 'its own'} channel are visible to "
                           "the issuer only")
        ring = self.landing_ring(writer.step.op, reader.agent)
        if ring is None:
            return False, "its copies complete on no ring"
        stage = writer.pos % ring.stages
        holds = self.tile_phase_by_ring.get((ring.name, stage), {}).get(writer.pos,
                                                                       writer.pos // ring.stages)
        if not any(w.n < reader.n and k >= holds
                   for w, k in self.waits_by.get((reader.agent, ring.name, stage), [])):
            return False, (f"{self.agent_name(reader.agent)} waits on no phase of "
                           f"{ring.name}[{stage}] that holds it")
        if ordered and not self._proxy_fenced(done, writer, reader):
            w, r = self.effect(writer.step.op), self.effect(reader.step.op)
            return False, (f"it is written by the {w.proxy if w else '?'} proxy and read by "
                           f"the {r.proxy if r else '?'} proxy, and no proxy fence of "
                           f"{self.agent_name(reader.agent)}'s lies between the wait that "
                           "makes it visible and the read")
        return ordered, "" if ordered else unordered

    def _proxy_fenced(self, done: Node, writer: _Inst, reader: _Inst) -> bool:
        """A write by one memory proxy read by another (``Effect.proxy``) is seen only through
        a proxy fence of the reader's, after the write is visible to it and before the read
        (PTX ISA, "Proxies"); writes and reads of one proxy (or a model without proxies) need
        none."""
        w, r = self.effect(writer.step.op), self.effect(reader.step.op)
        if w is None or r is None or not w.proxy or not r.proxy or w.proxy == r.proxy:
            return True
        return any(f.n < reader.n and self.hb(done, f.node)
                   for f in self.proxy_fences.get(reader.agent, []))

    def _turn_fenced(self, done: Node, writer: _Inst, reader: _Inst) -> bool:
        """A buffer one turn writes by one proxy and another turn reads by another: a proxy
        fence of the writer's threads after the write that the ordering puts before the read
        (the CUTLASS form: ``fence.proxy.async`` by the threads that wrote, then the barrier),
        or one of the reader's between the write's completion and the read (PTX ISA,
        "Proxies")."""
        w, r = self.effect(writer.step.op), self.effect(reader.step.op)
        if w is None or r is None or not w.proxy or not r.proxy or w.proxy == r.proxy:
            return True
        return any(f.n > writer.n and self.hb(f.node, reader.node)
                   for f in self.proxy_fences.get(writer.agent, [])) \
            or self._proxy_fenced(done, writer, reader)

    def _accumulators(self) -> None:
        """Each output tile's groups retire before its accumulators are read (after its loop),
        and a fence precedes its first group."""
        for (a, channel), groups in sorted(self.groups.items()):
            name = self.kinds[channel].wait_name if channel in self.kinds else channel
            for o in range(self.outputs):
                end = ("end", a, o)
                mine = [(g, commit) for g, (commit, _) in enumerate(groups) if commit.output == o]
                if end in self.dead or not mine:
                    continue
                pending = next((commit for g, commit in mine
                                if not self.hb(("retire", a, channel, g), end)), None)
                if pending is not None:
                    last = [i for i in self.insts[a] if i.output == o][-1]
                    self.report(HazardKind.ACC_RAW, pending,
                                f"this group is still pending when {self.agent_name(a)}'s "
                                "program ends and its accumulators are read",
                                fix=Fix("insert_wait", last.placed.section, last.placed.position + 1,
                                        f"end {self.agent_name(a)}'s epilogue with {name}(0)",
                                        channel, 0))
                own = [i for i in self.insts[a] if i.output == o]
                if channel in self.kinds and not self.kinds[channel].registers:
                    continue  # its groups touch no registers: no fence (a bulk copy's)
                first = next((i for i in own if i.step.kind == StepKind.OP
                              and (a, i.step.op, i.tile) in self.group_of
                              and self.group_of[(a, i.step.op, i.tile)][1] == channel), None)
                if first is not None and not any(
                        i.step.kind == StepKind.FENCE and i.step.channel == channel
                        for i in own if i.n < first.n):
                    self.report(HazardKind.ACC_RAW, first,
                                f"no fence on {channel} comes before {self.agent_name(a)}'s first "
                                "group: its accumulator registers are not ordered before it")

    def _register_fences(self) -> None:
        """The PTX ISA's fence rule: a register access by the agent's threads (a synchronous op:
        attention's softmax reading S's accumulators and writing P, the rescale multiplying O)
        and a later group op that uses the same registers (as accumulator or as register A
        operand) must have a fence on the group's channel between them; the hardware does not
        order them otherwise.  Two ops share registers when a dependence joins them (either
        way, any distance): the schedule's own statement of what each op reads and writes."""
        related: set[tuple[int, int]] = set()
        for e in self.edges:
            related |= {(e.producer, e.consumer), (e.consumer, e.producer)}
        # the channels whose groups take a fence (those whose groups touch registers)
        fenced = {ch for (_, ch) in self.groups
                  if ch not in self.kinds or self.kinds[ch].registers}
        for a, insts in enumerate(self.insts):
            since: dict[str, list[_Inst]] = {ch: [] for ch in fenced}
            for inst in insts:
                s = inst.step
                if s.kind == StepKind.FENCE and s.channel in since:
                    since[s.channel] = []
                if s.kind != StepKind.OP:
                    continue
                eff = self.effect(s.op)
                if eff is None or eff.counter is None:  # a register access of the threads
                    for pending in since.values():
                        pending.append(inst)
                    continue
                touched = since.get(eff.counter, [])
                access = next((y for y in reversed(touched) if (y.step.op, s.op) in related),
                              None)
                if access is None:
                    continue
                touched.clear()  # one finding per unfenced stretch
                self.report(HazardKind.ACC_RAW, inst,
                            f"{self.step_text(access)} accesses registers this group op uses "
                            f"and no fence on {eff.counter} lies between them: the hardware "
                            "orders a register access before a later group op only through "
                            "the fence (PTX ISA, wgmma.fence)", other=access,
                            fix=Fix("review", inst.placed.section, inst.placed.position,
                                    f"put a FENCE on {eff.counter} before this step, after "
                                    f"{tag_name(self.body[access.step.op].tag, self.names)}"))

    def _products(self) -> None:
        """Every body op runs exactly once for each K tile 0 .. KT - 1 of every output tile, on
        the agent the schedule gave it: a wgmma step left out is a K tile its accumulator never
        gets, and no ordering rule sees a step that is not there."""
        runs: dict[tuple[int, int, int], list[_Inst]] = defaultdict(list)
        for insts in self.insts:
            for inst in insts:
                if inst.step.kind == StepKind.OP:
                    runs[(inst.agent, inst.step.op, inst.output)].append(inst)
        owned = {(a, op) for a, p in enumerate(self.plan.programs) for op in p.role.ops}
        for a, op, o in sorted({(a, op, o) for a, op in owned for o in range(self.outputs)}
                               | set(runs)):
            who, name = self.agent_name(a), tag_name(self.body[op].tag, self.names)
            mine = runs.get((a, op, o), [])
            seen = Counter(i.local for i in mine)
            # a once copy runs once per output tile, also for one with no K tile; an agent of
            # a tile split runs only its own output tiles
            limit = (0 if not self.runs(a, o) else 1 if op in self.once_ops
                     else self.trips[o])
            inside = lambda i: 0 <= i.local < limit  # noqa: E731
            extra = [i for i in mine if (a, op) not in owned or not inside(i) or seen[i.local] > 1]
            if extra:
                inst = extra[-1] if (a, op) in owned and inside(extra[-1]) else extra[0]
                why = (f"the schedule gives op {op} to another agent" if (a, op) not in owned
                       else "that K tile is outside the loop" if not inside(inst)
                       else "that K tile's product is accumulated twice")
                self.report(HazardKind.DUPLICATE_PRODUCT, inst, f"{self.step_text(inst)} "
                            f"runs once too often: {why}",
                            fix=Fix("review", inst.placed.section, inst.placed.position,
                                    f"remove this {name} step"))
            expected = limit  # a once copy: one per output tile
            missing = [u for u in range(expected) if not seen[u]]
            if (a, op) not in owned or not missing:
                continue
            u = missing[0]
            site, anchor = self.missing_site(a, lambda x: x.kind == StepKind.OP and x.op == op,
                                             u, name, o)
            shown = ", ".join(map(str, missing[:6])) + (", ..." if len(missing) > 6 else "")
            self.report(HazardKind.MISSING_PRODUCT, anchor,
                        f"{who}'s {name} never runs for K tile{'s' if len(missing) > 1 else ''} "
                        f"{shown} of a {self.trips[o]}-tile loop: every K tile's product must "
                        "reach the result exactly once", site=site,
                        fix=Fix("review", site.phase, site.index,
                                f"restore {who}'s {name} step for tile {u}"))


@attrs.frozen(kw_only=True)
class _Generation:
    """One generation of a named barrier: the syncs and arrives of one tile."""

    barrier: int
    tile: int
    insts: tuple[_Inst, ...]
    threads: int
    counts: tuple[int, ...]  #: the counts its steps name (one, unless they disagree)
    before: Node | None  #: the generation before it on the same barrier
    output: bool = False  #: ``tile`` counts output tiles (an ordering of scope output_tile)

    @property
    def complete(self) -> bool:
        return len(self.counts) == 1 and self.threads == self.counts[0]


def _of_output(output: int) -> str:
    """How a step text names the output tile (nothing for the first)."""
    return f" of output tile {output + 1}" if output else ""


def finding_key(v: Violation) -> tuple:
    """What makes two findings the same finding: one hazard found again in a later output
    tile, or for another K-tile count at the same step, is not a new one."""
    op = re.sub(r" of output tile \d+", "", v.site.op)
    return v.kind, v.site.phase, v.site.index, v.site.group, op


def _shape(step: Step) -> tuple:
    """A step without its derived value: what is the same step in every section."""
    return step.kind, step.channel, step.op, step.lag, step.phase_offset


def _section_at(prog: AgentProgram, t: int, tiles: int) -> tuple[str, int, Sequence[Step]]:
    """The section, iteration and steps of ``prog`` that run at loop index ``t``."""
    if t < len(prog.prologue):
        return "prologue", t, prog.prologue[t]
    if t < tiles or not prog.epilogue:
        return "kernel", 0, prog.kernel
    j = min(t - tiles, len(prog.epilogue) - 1)
    return "epilogue", j, prog.epilogue[j]


def _new_phase() -> dict[str, Any]:
    return {"units": 0, "announced": 0, "landed": 0, "from": [], "copies": [], "complete": False}


def longer_runs(plan: Plan) -> list[tuple[int, ...]]:
    """Runs beyond the proof's own, for an independent judge of an edit the proof accepts: 3
    and 4 output tiles of every K-tile count, K-tile counts a whole ring period further, and
    each sequence of output tiles run twice back to back.  The proof's runs are chosen to be
    enough; these ask the plan again where a rule that is not enough would first fail."""
    counts = tile_counts(plan)
    period = math.lcm(plan.stages, *(r.stages for r in plan.rings))
    longer = sorted({*counts, *(max(counts) + 1 + r for r in range(period))})
    runs = [(tiles,) * outputs for outputs in (3, 4) for tiles in longer]
    runs += [(tiles,) * outputs for outputs in output_tiles(plan) for tiles in longer
             if tiles not in counts]
    return runs + [q + q for q in trip_sequences(plan)]


def _coverage(plan: Plan) -> list[Violation]:
    """The trip rule's own proof, where it has one (``coverage_faults()``: a family's rule
    checks that every output element's terms are visited, and masked where its mask drops
    them): the programs may be safe for any trip counts, and still skip a K tile the product
    needs (docs/guide/agents.md, "Output tiles of different lengths").  Each fault is a
    ``MISSING_PRODUCT`` of the rule."""
    faults = getattr(plan.trip_rule, "coverage_faults", None)
    if not callable(faults):
        return []
    site = Site(phase="trip_rule", index=-1, iteration=0, group=0, op="the trip rule")
    return [Violation(HazardKind.MISSING_PRODUCT, site, str(f),
                      order=(PRIORITY[HazardKind.MISSING_PRODUCT], 0, n))
            for n, f in enumerate(faults())]


def prove_plan(plan: Plan, body: Sequence[Op], edges: Sequence[DepEdge], sync: SyncModel,
               *, name: str = "", names: Mapping[int, str] | None = None,
               longer: bool = False) -> Verdict:
    """The verdict on ``plan`` over every timing, for each of :func:`tile_counts`; ``longer``
    adds :func:`longer_runs` (an audit's oracle, not the proof: it costs several times more)."""
    names = dict(names or {})
    names.update({k: v for k, v in sync.tag_names().items() if k not in names})
    # steps no proof would read are refused before any runs (agents/records.py)
    found: dict[tuple, Violation] = {finding_key(v): v
                                    for v in unrecorded(plan, body, sync, PRIORITY)}
    shared = shared_issue_assumptions(plan)
    if plan.shared_issue is not None and not found:  # one agent a warp that issues copies
        plan, body, edges = expand_shared_issue(plan, body, edges)
    cluster = None
    if plan.cluster is not None and not found:  # every CTA's programs, as one CTA
        cluster = expand(plan, body, edges, sync)
        plan, body, edges = cluster.plan, cluster.body, cluster.edges
    counts = tile_counts(plan)
    sequences = trip_sequences(plan)
    outputs_of = output_tiles(plan)
    runs = [(tiles,) * outputs for outputs in outputs_of for tiles in counts] + sequences
    runs += longer_runs(plan) if longer else []
    for trips in runs if not found else ():
        run = _Run(plan, body, edges, sync, names, trips, cluster)
        run.build()
        for v in run.check():
            found.setdefault(finding_key(v), v)
    if not any(v.kind == HazardKind.UNPROVEN for v in found.values()):
        for v in _coverage(plan):  # the family's trip rule covers its iteration space
            found.setdefault(finding_key(v), v)
        for v in prove_reduction(plan, sync, names, PRIORITY):  # the CTAs of one output tile
            found.setdefault(finding_key(v), v)
        for v in prove_fixups(plan, PRIORITY):  # the trip rule's K ranges and fixup order
            found.setdefault(finding_key(v), v)
        for v in prove_store(plan, sync, names, PRIORITY):  # the staged bulk store's buffers
            found.setdefault(finding_key(v), v)
        for v in prove_turns(plan, names, PRIORITY):  # the CTAs adding to one accumulator
            found.setdefault(finding_key(v), v)
    violations = tuple(sorted(found.values(), key=lambda v: v.order))
    agents = ", ".join(p.name for p in plan.programs)
    model = {"name": sync.name, "agents": [p.name for p in plan.programs],
             "stages": plan.stages, "tile_counts": counts, "output_tiles": list(outputs_of),
             "assumptions": [f"{len(plan.programs)} agents ({agents})",
                             f"{plan.stages} ring stages",
                             f"K-tile counts {', '.join(map(str, counts))}",
                             f"{', '.join(map(str, outputs_of[:-1]))} and {outputs_of[-1]} output tiles per CTA, "
                             "the rings running on across them (the persistent kernel)",
                             *([f"output tiles of different K-tile counts back to back: "
                                f"{'; '.join(', '.join(map(str, q)) for q in sequences)}"]
                               if sequences else []),
                             *([f"a cluster of {cluster.ctas} CTAs, every CTA's programs "
                                "instantiated; multicast copies land their share on every "
                                "CTA's ring; only arrivals at scope "
                                f"{', '.join(cluster.release_scopes)} release to a peer's "
                                "waiters"] if cluster is not None else []),
                             *shared,
                             f"sync model {sync.name}", *assumptions(sync),
                             *reduction_assumptions(plan, sync), *fixup_assumptions(plan),
                             *turn_assumptions(plan),
                             *store_assumptions(plan, sync),
                             *(["the tensor maps copies read through are written and released "
                                "(fence.proxy.tensormap release) by a kernel before this one; "
                                "each copy's issuer acquires them in its output tile"]
                               if sync.device_written_maps else [])],
             "notes": list(sync.notes)}
    if sequences:
        model["trip_sequences"] = [list(q) for q in sequences]
    return Verdict(safe=not violations, name=name, groups=len(plan.programs), warps_per_group=1,
                   iterations=max(counts), model=model, violations=violations)


def prove_agents(compiled: CompiledSchedule) -> Proof:
    """The proof of a compiled agents schedule (pipeline_core/proof.py calls it)."""
    from pipeline_core.compiled import Proof

    sync = compiled.plan.sync
    if sync is None:
        return Proof(verdict=None, unprovable="the target declares no sync model")
    return Proof(verdict=prove_plan(compiled.plan, compiled.body, compiled.edges, sync,
                                    name=compiled.schedule_name, names=compiled.tag_names))
