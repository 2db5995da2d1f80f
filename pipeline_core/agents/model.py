"""Records of a warp-specialized program: roles, steps, rings, and the per-agent programs.

A *step* is one instruction-level action of one agent, placed in the loop over K tiles.  Steps
are iteration-invariant: a step with ``lag`` L in the kernel serves K tile ``t - L`` when the
loop index is ``t``.  The ring stage a step touches is ``tile % stages`` and, for a phase wait,
the phase it waits for is ``tile // stages + phase_offset`` (parity: that phase's low bit; phase
-1 is the one a fresh mbarrier reports complete).  docs/guide/agents.md explains the model.
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

import attrs


class StepKind(str, enum.Enum):
    """What one step does (docs/guide/agents.md, "Steps")."""

    OP = "op"                      #: a body op (a TMA copy, a wgmma group)
    PHASE_WAIT = "phase_wait"      #: wait until a ring stage's phase completed (try_wait.parity)
    ARRIVE = "arrive"              #: one arrival on a ring stage (release, publishes completed work)
    EXPECT_TX = "expect_tx"        #: the arrival that also announces the bytes the phase waits for
    FENCE = "fence"                #: order register accesses before the next async group
    COMMIT = "commit"              #: close the open group of a counter channel
    COUNTER_WAIT = "counter_wait"  #: wait until at most ``value`` groups of a channel are pending
    #: block until ``value`` threads arrived on named barrier ``barrier`` (bar.sync id, count)
    NAMED_SYNC = "named_sync"
    #: add this agent's threads to named barrier ``barrier`` without waiting (bar.arrive)
    NAMED_ARRIVE = "named_arrive"


def _steps(items: Iterable["Step"]) -> tuple["Step", ...]:
    return tuple(items)


def _iterations(items: Iterable[Iterable["Step"]]) -> tuple[tuple["Step", ...], ...]:
    return tuple(tuple(i) for i in items)


def _ints(items: Iterable[int]) -> tuple[int, ...]:
    return tuple(items)


def _programs(items: Iterable["AgentProgram"]) -> tuple["AgentProgram", ...]:
    return tuple(items)


def _rings(items: Iterable["Ring"]) -> tuple["Ring", ...]:
    return tuple(items)


def _roles(items: Iterable["AgentRole"]) -> tuple["AgentRole", ...]:
    return tuple(items)


def _ring_specs(items: Iterable["RingSpec"]) -> tuple["RingSpec", ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class Step:
    """One action of one agent (see the module for ``lag`` and ``phase_offset``)."""

    kind: StepKind = attrs.field(converter=StepKind)
    lag: int = 0
    #: COMMIT / COUNTER_WAIT: the counter channel; phase steps: the ring's name
    channel: str = ""
    #: COUNTER_WAIT: groups left pending; EXPECT_TX: bytes the phase waits for
    value: int = 0
    #: PHASE_WAIT: which phase of the stage, relative to ``tile // stages``
    phase_offset: int = 0
    #: OP: the body op's index
    op: int = -1
    #: the tag the step lowers to (the op's tag, or the sync model's tag for the action)
    tag: int = -1
    #: runs once per output tile, before the K loop (lag 0) or after it (lag -1); its ring
    #: position is the output tile, not the K tile (docs/guide/agents.md, "Loads issued once")
    once: bool = False
    #: NAMED_SYNC / NAMED_ARRIVE: the named barrier's id (``value`` is its thread count,
    #: ``channel`` the ordering's name); docs/guide/agents.md, "Named barriers"
    barrier: int = -1

    def tile(self, t: int) -> int:
        """The K tile this step serves when the loop index is ``t``."""
        return t - self.lag


@attrs.frozen(kw_only=True)
class AgentRole:
    """What a schedule says about one agent: its ops and its shape.

    ``warps`` warps run the role; ``issuers`` of its threads issue the body ops (1 for a
    producer whose elected thread issues the TMA copies, 128 for a warp group issuing wgmma);
    a release by the role is one arrival per warp (``warps`` arrivals), each after that warp's
    own counter wait.  ``registers`` is the per-thread register count the role asks for with
    ``setmaxnreg`` (0: keep the launch's).
    """

    name: str
    ops: tuple[int, ...] = attrs.field(converter=_ints)
    warps: int = 4
    issuers: int = 128
    registers: int = 0

    @property
    def release_arrivals(self) -> int:
        return self.warps


@attrs.frozen(kw_only=True)
class RingSpec:
    """A ring (a full / empty pair) a schedule declares: the writer ops whose copies go through
    it, and optionally its own depth and release lag (docs/guide/agents.md, "Several rings").

    The lowering derives the rings from the edges (one per writer agent and set of reading ops);
    a schedule declares them only to group its copies differently or to give a ring its own
    ``stages`` or ``release_lag`` (``None``: the schedule's depth, :attr:`AgentSpec.release_lag`).
    """

    name: str
    ops: tuple[int, ...] = attrs.field(converter=_ints)
    stages: int | None = None
    release_lag: int | None = None


def _turns(items: Iterable["Turn"]) -> tuple["Turn", ...]:
    return tuple(items)


def _order_specs(items: Iterable["OrderSpec"]) -> tuple["OrderSpec", ...]:
    return tuple(items)


def _orderings(items: Iterable["Ordering"]) -> tuple["Ordering", ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class Turn:
    """One agent's part of an ordering: the body ops it issues in its turn."""

    agent: str
    ops: tuple[int, ...] = attrs.field(converter=_ints)


@attrs.frozen(kw_only=True)
class OrderSpec:
    """An ordering between consumer groups a schedule declares (docs/guide/agents.md, "Named
    barriers"): for every K tile t, each turn's ops of tile t are issued after the previous
    turn's ops of tile t, and the first turn's ops of tile t + 1 after the last turn's of
    tile t (with two turns, the ping-pong: A(t), B(t), A(t+1), B(t+1), ...)."""

    name: str
    turns: tuple[Turn, ...] = attrs.field(converter=_turns)


@attrs.frozen(kw_only=True)
class Ordering:
    """An :class:`OrderSpec` as lowered: turn i waits on named barrier ``barriers[i]`` (joined
    by ``counts[i]`` threads: turn i's and the turn before it's) before its ops, and arrives on
    the next turn's barrier after them."""

    name: str
    turns: tuple[Turn, ...] = attrs.field(converter=_turns)
    barriers: tuple[int, ...] = attrs.field(converter=_ints)
    counts: tuple[int, ...] = attrs.field(converter=_ints)


@attrs.frozen(kw_only=True)
class AgentSpec:
    """A schedule's agent assignment: the roles and, per body op, the bytes it copies.

    ``release_lag``: how many K tiles a consumer keeps a stage after issuing its reads before
    releasing it (1 lets one wgmma group stay in flight while the next is issued).  ``rings``:
    the rings, when the derived ones (:class:`RingSpec`) are not what the schedule wants.
    """

    roles: tuple[AgentRole, ...] = attrs.field(converter=_roles)
    op_bytes: Mapping[int, int] = attrs.field(factory=dict)
    release_lag: int = 1
    rings: tuple[RingSpec, ...] = attrs.field(converter=_ring_specs, default=())
    #: copies issued once per output tile before the K loop (attention's Q), each on a ring of
    #: its own that its readers wait on once and release after their loop
    once: tuple[int, ...] = attrs.field(converter=_ints, default=())
    #: orderings between consumer groups, enforced with the target's named barriers
    orders: tuple[OrderSpec, ...] = attrs.field(converter=_order_specs, default=())


@attrs.frozen(kw_only=True)
class Ring:
    """A phase channel of ``stages`` mbarriers (one per ring stage).

    ``kind`` "full": the writer's async copies land (``tx_bytes`` per phase) and waiters may read;
    "empty": every reader released the stage and the writer may overwrite it.  A phase completes
    when ``arrivals`` arrivals are in and the announced bytes have landed.
    """

    name: str
    kind: str  #: "full" or "empty"
    stages: int
    arrivals: int
    tx_bytes: int = 0
    #: agents that arrive on the ring, and agents that wait on it
    signallers: tuple[str, ...] = ()
    waiters: tuple[str, ...] = ()
    #: the writer ops whose stages the ring carries: a full ring's copies complete on it, an
    #: empty ring frees their stages for the next copy (one ring per writer and buffer)
    ops: tuple[int, ...] = ()
    #: an empty ring: the K tiles a reader keeps a stage before releasing it
    release_lag: int = 0
    #: the ring carries copies issued once per output tile: its stages and phases count output
    #: tiles (:attr:`Step.once`)
    once: bool = False


@attrs.frozen(kw_only=True)
class AgentProgram:
    """One agent's prologue, kernel and epilogue.

    ``prologue[i]`` runs as loop iteration ``t = i``; ``kernel`` runs for ``t = len(prologue)``
    up to ``KT - 1``; ``epilogue[j]`` runs as iteration ``t = KT + j``.  Steps whose tile falls
    outside ``0 .. KT - 1`` were left out when the split was made.
    """

    role: AgentRole
    prologue: tuple[tuple[Step, ...], ...] = attrs.field(converter=_iterations)
    kernel: tuple[Step, ...] = attrs.field(converter=_steps)
    epilogue: tuple[tuple[Step, ...], ...] = attrs.field(converter=_iterations)

    @property
    def name(self) -> str:
        return self.role.name

    def placed(self, tiles: int) -> list["PlacedStep"]:
        """Every step this agent runs for ``tiles`` K tiles, in program order, with where it
        comes from (section, iteration within the section, position) and its loop index."""
        out: list[PlacedStep] = []
        for i, steps in enumerate(self.prologue):
            out += [PlacedStep(section="prologue", iteration=i, position=pos, t=i, step=s)
                    for pos, s in enumerate(steps)]
        for t in range(len(self.prologue), tiles):
            out += [PlacedStep(section="kernel", iteration=t, position=pos, t=t, step=s)
                    for pos, s in enumerate(self.kernel)]
        for j, steps in enumerate(self.epilogue):
            out += [PlacedStep(section="epilogue", iteration=j, position=pos, t=tiles + j, step=s)
                    for pos, s in enumerate(steps)]
        return out


@attrs.frozen(kw_only=True)
class PlacedStep:
    """One step instance of an unrolled program: ``step`` at loop index ``t``, taken from
    ``section`` (prologue / kernel / epilogue), its ``iteration`` there and ``position``."""

    section: str
    iteration: int
    position: int
    t: int
    step: Step

    @property
    def tile(self) -> int:
        return self.step.tile(self.t)


@attrs.frozen(kw_only=True)
class AgentPlan:
    """The agents lowering's result: every agent's program and the rings between them.

    ``stages`` is the schedule's ring depth; each :class:`Ring` has its own (``Ring.stages``),
    which is what a step's stage and phase are counted in."""

    stages: int
    programs: tuple[AgentProgram, ...] = attrs.field(converter=_programs)
    rings: tuple[Ring, ...] = attrs.field(converter=_rings)
    #: the smallest K-tile count the split is valid for (the longest prologue)
    min_tiles: int = 1
    #: bytes each phase-tracked body op moves (what its copies complete on the full ring)
    op_bytes: Mapping[int, int] = attrs.field(factory=dict)
    #: the consumer-group orderings and the named barriers that enforce them
    orders: tuple[Ordering, ...] = attrs.field(converter=_orderings, default=())

    def program(self, name: str) -> AgentProgram:
        for p in self.programs:
            if p.name == name:
                return p
        raise KeyError(name)

    def ring(self, name: str) -> Ring:
        for r in self.rings:
            if r.name == name:
                return r
        raise KeyError(name)

    def ring_of(self, op: int, kind: str) -> Ring | None:
        """The ring of ``kind`` ("full" / "empty") that carries writer op ``op``'s stages."""
        return next((r for r in self.rings if r.kind == kind and op in r.ops), None)
