"""The Plan: the one record every lowering produces, and the records it is made of.

Whatever lowering ran (the reference's block program, the ring, the warp-specialized
agents; ``pipeline_core.lowering`` registers them by name), the proof, the timing model, the
views, the document and the emitters read a :class:`Plan`: agents (a warp group or a role each),
each with prologue / kernel / epilogue step lists, the rings between them, and the launch
geometry, recorded once.  docs/guide/concepts.md, "The Plan", says how to read one.

A plan is *lockstep* when every agent runs the same steps (the block program and the ring: the
warp groups pass the same CTA barriers and counter waits, and the reference's warp stagger is
"agent 1 runs the same steps one barrier late": the synthetic barrier steps of
:mod:`pipeline_core.execution`); otherwise each agent runs its own program and they meet on
mbarrier rings.  Lockstep steps keep the exact op line the phase list holds (:attr:`Step.instr`),
so a lockstep plan gives back its phase lists (:meth:`Plan.entries`) byte for byte.

A *step* is one instruction-level action of one agent, placed in the loop over K tiles.  Steps
are iteration-invariant: a step with ``lag`` L in the kernel serves K tile ``t - L`` when the
loop index is ``t``.  The ring stage a step touches is ``tile % stages`` and, for a phase wait,
the phase it waits for is ``tile // stages + phase_offset`` (parity: that phase's low bit; phase
-1 is the one a fresh mbarrier reports complete).  docs/guide/agents.md explains the model.
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from pipeline_core.edges import DepEdge
from pipeline_core.execution import ExecutionModel
from pipeline_core.launch import KernelLaunch
from pipeline_core.ops import Entry, FrameworkTag, Op, OpRole, Phase
from pipeline_core.tiles import TripRule

if TYPE_CHECKING:
    from pipeline_core.check.verdict import Fix
    from pipeline_core.sync.model import SyncModel

#: the template's wait tags and the counters they wait on, for a plan without a sync model
_TEMPLATE_WAITS = {int(FrameworkTag.WAIT_VM): "vm", int(FrameworkTag.WAIT_LGKM): "lgkm"}


class StepKind(str, enum.Enum):
    """What one step does (docs/guide/agents.md, "Steps")."""

    OP = "op"                      #: a body op (a TMA copy, a wgmma group)
    PHASE_WAIT = "phase_wait"      #: wait until a ring stage's phase completed (try_wait.parity)
    ARRIVE = "arrive"              #: one arrival on a ring stage (release, publishes completed work)
    EXPECT_TX = "expect_tx"        #: the arrival that also announces the bytes the phase waits for
    #: each issuing thread's arrival on a ring stage, made by the hardware once every copy that
    #: thread issued before it landed (a copy that completes by arrival, ``Effect.completes``)
    ASYNC_ARRIVE = "async_arrive"
    FENCE = "fence"                #: order register accesses before the next async group
    COMMIT = "commit"              #: close the open group of a counter channel
    COUNTER_WAIT = "counter_wait"  #: wait until at most ``value`` groups of a channel are pending
    #: block until ``value`` threads arrived on named barrier ``barrier`` (bar.sync id, count)
    NAMED_SYNC = "named_sync"
    #: add this agent's threads to named barrier ``barrier`` without waiting (bar.arrive)
    NAMED_ARRIVE = "named_arrive"
    BARRIER = "barrier"            #: a barrier every agent of the CTA passes (lockstep plans)
    HINT = "hint"                  #: a priority or scheduling hint: orders nothing
    # a cross-CTA reduction's steps (AgentProgram.finish; docs/guide/agents.md, "Cross-CTA
    # reductions"): the CTAs of one output tile each reduce a K slice through global memory
    SLICE_STORE = "slice_store"      #: store this CTA's partial results to its workspace slice
    RELEASE_FENCE = "release_fence"  #: order the slice's stores before the arrive (release)
    #: the CTA's one atomic arrival on the tile's counter, which tells it whether it came last
    COUNT_ARRIVE = "count_arrive"
    #: go on only as the last arriver (the count reached the splits), then acquire: every slice
    #: released before an arrival is visible from here on
    COUNT_ACQUIRE = "count_acquire"
    SLICE_READ = "slice_read"        #: read every slice back and add them in split order
    #: set the counter back to 0 once the slices are read: its next use (a later tile on the
    #: counter, the next launch) may begin
    COUNT_RESET = "count_reset"
    # a staged bulk store's steps (AgentProgram.store / drain; docs/guide/agents.md, "Bulk
    # stores"): results go through a shared-memory staging buffer to global memory by the async
    # proxy; its sync between the consumer group's threads is a NAMED_SYNC
    #: (the issuer) wait until at most ``value`` bulk-store groups still read their buffers
    STORE_WAIT = "store_wait"
    STAGE_WRITE = "stage_write"      #: every thread writes its results into the staging buffer
    #: order this thread's generic-proxy writes before async-proxy reads of the buffer; in a K
    #: loop (``channel`` a full ring): order the generic-proxy copies a reader's wait on that
    #: ring made visible before its async-proxy reads of them
    PROXY_FENCE = "proxy_fence"
    #: the issuer's acquire of the tensor maps its next copies read, written on the device by
    #: an earlier kernel (``Effect.descriptor``): fence.proxy.tensormap::generic.acquire, so
    #: the copy reads the new map, not a stale one its descriptor cache kept
    DESCRIPTOR_ACQUIRE = "descriptor_acquire"
    STORE_ISSUE = "store_issue"      #: (the issuer) the bulk store of the staging buffer
    STORE_COMMIT = "store_commit"    #: (the issuer) close the open bulk-store group
    #: (the issuer) before the kernel ends: every bulk-store group complete, writes included
    STORE_DRAIN = "store_drain"
    # a turn-ordered add's steps (AgentProgram.kernel; docs/guide/agents.md, "Turn-ordered
    # adds"): the adds several CTAs make to one accumulator in global memory, made in one fixed
    # order, so its floating-point sums are the same bits every run
    #: wait until the accumulator's turn counter equals this add's turn (``value``: the add's
    #: slot among the CTA's adds), then acquire: every earlier turn's add is visible from here on
    TURN_WAIT = "turn_wait"
    #: wait until the add's group fully completed, its writes performed (not only its reads of
    #: its source: ``value`` groups left pending, ``channel`` the add's counter channel)
    TURN_DRAIN = "turn_drain"
    #: order the completed add (async proxy) before the release (generic proxy)
    TURN_FENCE = "turn_fence"
    #: release the next turn: add 1 to the turn counter (release)
    TURN_RELEASE = "turn_release"


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


def _names(items: Iterable[str]) -> tuple[str, ...]:
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
    #: a once NAMED_SYNC / NAMED_ARRIVE of an ordering over output tiles
    #: (``OrderSpec.scope`` "output_tile"): the generation it fills is the CTA's output
    #: tile position minus this; 1 is the wait on the previous output tile's turn, left out on
    #: the CTA's first output tile and run once after its last by the agent whose turn would
    #: come next (docs/guide/agents.md, "Tile splits")
    output_lag: int = 0
    #: a once step run as the K loop exits, after the output tile's last commit and before the
    #: epilogue's iterations (the turn's arrive of an output-tile ordering); False: a once step
    #: runs before the loop (lag 0) or at the end of the epilogue (lag -1)
    exit: bool = False
    #: a lockstep step: the op line exactly as the phase list holds it (the op variant with its
    #: stage, k offset and costs, or the sync op with its wait value); None on agents steps
    instr: Op | None = None
    #: a lockstep step: the entry loads ahead of its iteration (``Entry.is_prefetch``)
    prefetch: bool = False
    #: a barrier the execution model adds, not the lowering (pipeline_core.execution: STAGGER,
    #: LAUNCH, TAIL); "" for every other step
    synthetic: str = ""
    #: ARRIVE in a cluster (``Plan.cluster``): which CTA's barrier it
    #: arrives on, counted from the agent's own (0: its own CTA; 1: the next CTA of the
    #: cluster, through ``mapa``)
    peer: int = 0
    #: ARRIVE: the release scope, "cta" or "cluster" ("": the sync model's plain arrive, CTA
    #: scope); an arrival on another CTA's barrier releases to its waiters only at cluster scope;
    #: PHASE_WAIT: the acquire scope, likewise (docs/guide/agents.md, "Clusters")
    scope: str = ""

    @property
    def stage(self) -> int:
        """A lockstep step's buffer stage (its op line's); -1 where the ring position says it."""
        return self.instr.stage if self.instr is not None else -1

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
    barriers"): for every loop iteration t, each turn's ops issued in iteration t are issued
    after the previous turn's, and the first turn's ops of iteration t + 1 after the last
    turn's of iteration t (with two turns, the ping-pong: A(t), B(t), A(t+1), B(t+1), ...).
    A turn's op of lag L (``AgentSpec.lags``) serving K tile u is issued in iteration u + L:
    FA3's turn of S_t and PV_{t-1}."""

    name: str
    turns: tuple[Turn, ...] = attrs.field(converter=_turns)
    #: "k_tile": the turns alternate every K tile (above); "output_tile": they alternate every
    #: output tile, each turn the whole mainloop of an output tile of the split agent that owns
    #: it (``TileSplit``: turn i is ``split.agents[i]``), as CUTLASS's ping-pong orders
    #: its two consumers' mainloops (docs/guide/agents.md, "Tile splits"); "join": no turn
    #: waits for another's, every agent meets the others once per K tile right after its
    #: turn's ops, so what any of them wrote before the meeting is visible to all of them after
    #: it (FlashAttention-3's backward exchanging dS between its consumers: docs/guide/agents.md,
    #: "Joins")
    scope: str = attrs.field(default="k_tile",
                             validator=attrs.validators.in_(("k_tile", "output_tile", "join")))


@attrs.frozen(kw_only=True)
class TileSplit:
    """Reader agents that take a CTA's output tiles round-robin (docs/guide/agents.md, "Tile
    splits"): ``agents[c]`` runs the CTA's output tiles ``c, c + n, c + 2n, ...`` (n agents),
    each a whole output tile on its own, as CUTLASS's ping-pong consumers do.  The ring is
    shared: a stage of output tile o is read and released by o's owner only, so the empty
    ring's arrivals are one agent's; its stages and phases count the K tiles of every earlier
    output tile of the CTA, whoever ran it.  The agents must be alike (same warps, ops and
    rings)."""

    agents: tuple[str, ...] = attrs.field(converter=_names)

    def owner(self, output: int) -> str:
        """The agent that runs the CTA's output tile at position ``output``."""
        return self.agents[output % len(self.agents)]

    def runs(self, agent: str, output: int) -> bool:
        """Whether ``agent`` runs output tile position ``output`` (an agent outside the split
        runs every one)."""
        return agent not in self.agents or self.owner(output) == agent


@attrs.frozen(kw_only=True)
class Ordering:
    """An :class:`OrderSpec` as lowered: turn i waits on named barrier ``barriers[i]`` (joined
    by ``counts[i]`` threads: turn i's and the turn before it's) before its ops, and arrives on
    the next turn's barrier after them; a join has one barrier, ``barriers[0]``, that every
    turn's agent syncs on after its ops (``counts[0]``: all their threads)."""

    name: str
    turns: tuple[Turn, ...] = attrs.field(converter=_turns)
    barriers: tuple[int, ...] = attrs.field(converter=_ints)
    counts: tuple[int, ...] = attrs.field(converter=_ints)
    scope: str = "k_tile"  #: ``OrderSpec.scope``


@attrs.frozen(kw_only=True)
class ReductionSpec:
    """A cross-CTA reduction a schedule declares (docs/guide/agents.md, "Cross-CTA
    reductions"): several CTAs (the *splits*) compute partial results of one output tile, each
    stores its slice to a global workspace and arrives on the tile's counter; the last to arrive
    reads every slice, adds them and runs the epilogue once, then resets the counter.  Split-K
    and stream-K both hand partial tiles over this way.  ``agents``: the agents whose results
    are reduced (empty: every agent that waits on a full ring)."""

    name: str = "split_k"
    agents: tuple[str, ...] = attrs.field(converter=_names, default=())
    #: bytes of one agent's partial results (its workspace slice): what the timing model
    #: charges the slice store and, times the splits, the last CTA's reads (0: not modelled)
    slice_bytes: int = 0


@attrs.frozen(kw_only=True)
class Reduction:
    """A :class:`ReductionSpec` as lowered: its steps sit in the ``finish`` of each of
    ``agents`` (:attr:`AgentProgram.finish`); the sync model's reduction record
    (``SyncModel.reduction``) says what each step is on the target."""

    name: str
    agents: tuple[str, ...] = attrs.field(converter=_names)
    slice_bytes: int = 0  #: ``ReductionSpec.slice_bytes``


@attrs.frozen(kw_only=True)
class TurnSpec:
    """Adds to an accumulator in global memory that several CTAs make, declared ordered
    (docs/guide/agents.md, "Turn-ordered adds"): every add to one part of the accumulator waits
    for its turn on that part's counter and releases the next, so the adds land in one fixed
    order, whatever the timing.  ``ops``: the adds one CTA makes per K tile, in their turn
    order (each its own agent's, issued in the K loop and committed on a counter channel); the
    trip rule ranks the CTAs adding to each part (its ``turn_orders()``, which the proof
    checks: pipeline_core/tiles.py)."""

    name: str = "turns"
    ops: tuple[int, ...] = attrs.field(converter=_ints, default=())


@attrs.frozen(kw_only=True)
class Turns:
    """A :class:`TurnSpec` as lowered: ``agents[i]`` makes add ``ops[i]``, the CTA's slot i of
    every turn; its kernel holds the ``turn_*`` steps around it.  An add's turn is ``slots *
    rank + slot + first``, rank its output tile's among the part's adders (the trip rule's)."""

    name: str
    agents: tuple[str, ...] = attrs.field(converter=_names)
    ops: tuple[int, ...] = attrs.field(converter=_ints)
    #: the turn of every part's first add: 0 in every kernel (the counters start at 0); a
    #: mutation test's edit (a turn no add releases: the first add waits for ever)
    first: int = 0

    @property
    def slots(self) -> int:
        """Adds per CTA per K tile: the turns one output tile takes of each part it adds to."""
        return len(self.ops)


@attrs.frozen(kw_only=True)
class StoreSpec:
    """A staged bulk store a schedule declares (docs/guide/agents.md, "Bulk stores"): each of
    ``agents`` writes its results, one sub-tile at a time, into ``buffers`` shared-memory staging
    buffers of its own, and one elected thread stores each buffer to global memory by the async
    proxy (a TMA store), which overlaps what the agent does next.  ``agents``: empty, every
    agent that waits on a full ring."""

    name: str = "store"
    buffers: int = 2
    agents: tuple[str, ...] = attrs.field(converter=_names, default=())
    #: sub-tiles each agent stages per output tile, and the bytes of one: what the timing
    #: model charges the staging writes and the async store (0 bytes: not modelled)
    subtiles: int = 1
    subtile_bytes: int = 0
    #: whether each agent may, per output tile, store the whole tile another way (a clipped
    #: direct store of a tile that crosses what TMA may write) and skip its ``subtiles`` staged
    #: sub-tiles, chosen at run time: the proof then covers every pattern of staged and skipped
    #: tiles, a sub-tile's buffer counting the skipped ones (docs/guide/agents.md, "Bulk stores")
    optional: bool = False


@attrs.frozen(kw_only=True)
class BulkStore:
    """A :class:`StoreSpec` as lowered: each of ``agents`` runs its ``store`` steps once per
    staged sub-tile (the buffer is the sub-tile's running count modulo ``buffers``) and its
    ``drain`` once before the kernel ends; ``barriers[i]`` is the named barrier agent i's
    threads meet on (the sync model's ``SyncModel.bulk_store`` says what each step is)."""

    name: str
    agents: tuple[str, ...] = attrs.field(converter=_names)
    buffers: int
    barriers: tuple[int, ...] = attrs.field(converter=_ints)
    subtiles: int = 1      #: ``StoreSpec.subtiles``
    subtile_bytes: int = 0  #: ``StoreSpec.subtile_bytes``
    optional: bool = False  #: ``StoreSpec.optional``


@attrs.frozen(kw_only=True)
class ClusterSpec:
    """CTAs launched as one cluster that share copies (docs/guide/agents.md, "Clusters"): each
    CTA's writer issues its ``1 / ctas`` share of every ``multicast`` copy into the same ring
    stage of every CTA of the cluster, so a stage of such a ring fills with bytes from every
    CTA's writer and may be overwritten only once the readers of every CTA released it."""

    ctas: int = 2
    multicast: tuple[int, ...] = attrs.field(converter=_ints, default=())


@attrs.frozen(kw_only=True)
class Cluster:
    """A plan's cluster (:class:`ClusterSpec` lowered): the CTAs the proof instantiates the
    programs for, the copies each multicasts, and the cluster barriers at the kernel's start
    (after the mbarriers' initialisation, before any CTA may signal a peer's barrier) and at its
    end (no CTA exits while a peer may still copy into it or arrive on its barriers)."""

    ctas: int
    multicast: tuple[int, ...] = attrs.field(converter=_ints, default=())
    start_barrier: bool = True
    end_barrier: bool = True


@attrs.frozen(kw_only=True)
class SharedIssue:
    """A writer agent whose copies several of its warps issue (docs/guide/agents.md, "Shared
    issue"): the elected thread of each of ``warps`` warps runs the agent's program and issues
    an equal share of every copy's bytes into the same ring stage, after its own wait for the
    stage to be free.  Why: one thread issuing many small copies a stage bounds the stream
    (decode's pages of 16: 16 copies of 4 KB a block).  Warp 0, the *lead*, alone announces a
    stage's bytes (so a full ring still counts one arrival a phase: a share that lands first
    only runs the transaction count below zero, as a cluster peer's multicast does), and alone
    issues the ``lead`` copies and runs every step on their rings: a warp that copies nothing
    into a ring must not wait on it, or it may fall two phases behind the ring and wait forever.
    The plan records it (``Plan.shared_issue``), the one home the proof
    (``agents/shared_issue.py`` expands it into one agent a warp) and the emitter read."""

    agent: str
    warps: int = 2
    #: the copies the lead alone issues (attention decode's Q, loaded once per output tile)
    lead: tuple[int, ...] = attrs.field(converter=_ints, default=())


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
    #: a reader's ops issued this many K tiles late (op -> lag; absent: 0), in the order its
    #: ``AgentRole.ops`` lists them: a software pipeline inside one agent, such as attention's
    #: O += P.V_{j-1} issued right after S_j (docs/guide/agents.md, "Skewed ops")
    lags: Mapping[int, int] = attrs.field(factory=dict)
    #: a cross-CTA reduction of the readers' results (split-K): its steps go after the loop
    reduction: ReductionSpec | None = None
    #: the readers' results stored through staging buffers by the async proxy (a TMA store)
    store: StoreSpec | None = None
    #: adds to a global accumulator made in a fixed order across CTAs (None: in any order)
    turns: TurnSpec | None = None
    #: the family's trip rule (pipeline_core.tiles): the K tiles each output tile of a problem
    #: visits; None, or a uniform rule: every output tile visits the same count
    trip_rule: TripRule[Any] | None = None
    #: reader agents that take the CTA's output tiles round-robin (the ping-pong GEMM's
    #: consumers); None: every reader runs every output tile
    split: TileSplit | None = None
    #: CTAs launched as a cluster sharing multicast copies; None: one CTA (docs/guide/agents.md,
    #: "Clusters")
    cluster: ClusterSpec | None = None
    #: a writer whose copies several of its warps issue, each its share; None: one thread
    #: issues each writer's copies (docs/guide/agents.md, "Shared issue")
    shared_issue: SharedIssue | None = None


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
    #: CTAs whose agents signal each of its stages (a cluster's multicast ring: its ``arrivals``
    #: count every CTA's readers); 1 for a ring of one CTA
    ctas: int = 1


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
    #: steps run once per output tile after the epilogue, on the final results: a cross-CTA
    #: reduction's (``Plan.reduction``); not K-tile steps, so :meth:`placed` leaves them out
    finish: tuple[Step, ...] = attrs.field(converter=_steps, default=())
    #: steps run once per staged sub-tile of the results, after the finish: a bulk store's
    #: (``Plan.store``); the sub-tiles run on across output tiles
    store: tuple[Step, ...] = attrs.field(converter=_steps, default=())
    #: steps run once after this agent's last output tile, before the kernel ends
    drain: tuple[Step, ...] = attrs.field(converter=_steps, default=())
    #: the fewest K tiles this agent's loop runs for an output tile: 0 in every derived plan
    #: (an output tile with no K tile runs only the once steps, :meth:`placed`); 1 is a loop
    #: that runs its body once before testing its bound, which the other agents do not expect
    #: on an empty query tile (the hang of cudnn-frontend PR #1069; the proof refuses it)
    min_trips: int = 0
    #: K tiles this agent's loop runs beyond the plan's trip count (never below 0): 0 in every
    #: derived plan; -1 / +1 is an agent that computes the bound off by one from the others
    trip_delta: int = 0
    #: an agent of a tile split (``Plan.split``): its ring positions count the K tiles of
    #: "all" the CTA's earlier output tiles (every derived plan), or only of its "own" (an
    #: emitter that advances ``rb`` by its own tiles only; the proof refuses it)
    split_base: str = "all"

    @property
    def name(self) -> str:
        return self.role.name

    def placed(self, tiles: int) -> list["PlacedStep"]:
        """Every step this agent runs for ``tiles`` K tiles, in program order, with where it
        comes from (section, iteration within the section, position) and its loop index.
        At 0 tiles (an output tile with no K tile) only the once steps run: the copies issued
        once per output tile, their waits and their releases."""
        out: list[PlacedStep] = []
        if tiles == 0:
            sections = [("prologue", i, steps) for i, steps in enumerate(self.prologue)]
            sections += [("epilogue", j, steps) for j, steps in enumerate(self.epilogue)]
            return [PlacedStep(section=sec, iteration=i, position=pos, t=0, step=s)
                    for sec, i, steps in sections for pos, s in enumerate(steps) if s.once]
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
class Region:
    """A named stretch ``[start, end)`` of a lockstep plan's kernel (a block of the block
    program), where the views put their markers; ``heading`` opens a group of regions (a
    partition) and is "" inside one."""

    start: int
    end: int
    label: str  #: the marker on the full listing ("block 3")
    short: str = ""  #: the row title of the compact listing ("b3 p1")
    heading: str = ""


class LoweringDetails(Protocol):
    """What a lowering shows beyond its steps: the block program's blocks, its derived knob
    waits.  Every reader calls these on any plan; a lowering with nothing to add answers with
    ``NO_DETAILS`` (docs/guide/concepts.md, "The Plan")."""

    def document_sections(self, plan: "Plan", names: Mapping[int, str]
                          ) -> tuple[tuple[str, object], ...]:
        """Extra keys of the schedule document, in order (docs/document-format.md)."""

    def text_notes(self, plan: "Plan", sync: "SyncModel | None") -> tuple[str, ...]:
        """Lines the text view's header adds."""

    def regions(self, plan: "Plan", sync: "SyncModel | None") -> tuple[Region, ...]:
        """The kernel's named stretches, on the emitted kernel."""

    def layout(self, plan: "Plan", names: Mapping[int, str], sync: "SyncModel | None"
               ) -> tuple[str, ...]:
        """The text view's closing section (the block layout)."""

    def how_to_apply(self, plan: "Plan", sync: "SyncModel | None", fix: "Fix") -> str:
        """What a user types to apply the checker's ``fix`` (the ``-c`` flags that set the wait
        it names, or the schedule method to change); "" when nothing names it."""


@attrs.frozen
class _NoDetails:
    """The answer of a lowering that adds nothing to the views."""

    def document_sections(self, plan: "Plan", names: Mapping[int, str]
                          ) -> tuple[tuple[str, object], ...]:
        return ()

    def text_notes(self, plan: "Plan", sync: "SyncModel | None") -> tuple[str, ...]:
        return ()

    def regions(self, plan: "Plan", sync: "SyncModel | None") -> tuple[Region, ...]:
        return ()

    def layout(self, plan: "Plan", names: Mapping[int, str], sync: "SyncModel | None"
               ) -> tuple[str, ...]:
        return ()

    def how_to_apply(self, plan: "Plan", sync: "SyncModel | None", fix: "Fix") -> str:
        return ""


NO_DETAILS: LoweringDetails = _NoDetails()


def _edges(items: Iterable[DepEdge]) -> tuple[DepEdge, ...]:
    return tuple(items)


def _order(items: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if items is None else tuple(items)


@attrs.frozen(kw_only=True)
class Plan:
    """What a lowering produced: every agent's program, the rings between them, who runs what.

    ``stages`` is the schedule's ring depth; each :class:`Ring` has its own (``Ring.stages``),
    which is what a step's stage and phase are counted in.  A *lockstep* plan (the module says
    what that is) gives back its phase lists with :meth:`entries`; the document, the barrier
    checker and the single-stream timing model read those, the agents checker and timing model
    the programs (docs/guide/concepts.md, "The Plan")."""

    #: the lowering that built the plan, as registered (``pipeline_core.lowering``); recorded
    #: in documents and views, never a reason for a reader to branch
    lowering: str = "agents"
    stages: int
    programs: tuple[AgentProgram, ...] = attrs.field(converter=_programs)
    rings: tuple[Ring, ...] = attrs.field(converter=_rings, default=())
    #: the smallest K-tile count the split is valid for (the longest prologue)
    min_tiles: int = 1
    #: the schedule's trip rule (:class:`~pipeline_core.tiles.TripRule`, ``AgentSpec.trip_rule``):
    #: a rule that is not uniform has the proof run output tiles of different counts back to
    #: back; None: every output tile visits the same count
    trip_rule: TripRule[Any] | None = None
    #: bytes each phase-tracked body op moves (what its copies complete on the full ring)
    op_bytes: Mapping[int, int] = attrs.field(factory=dict)
    #: the consumer-group orderings and the named barriers that enforce them
    orders: tuple[Ordering, ...] = attrs.field(converter=_orderings, default=())
    #: the cross-CTA reduction whose steps the agents' ``finish`` holds (None: none)
    reduction: Reduction | None = None
    #: the bulk store whose steps the agents' ``store`` and ``drain`` hold (None: none)
    store: BulkStore | None = None
    #: the turn-ordered adds whose steps the agents' kernels hold (None: none)
    turns: Turns | None = None
    #: reader agents that take the CTA's output tiles round-robin (None: every agent runs
    #: every output tile); the one home of the rule the emitter and the proof follow
    split: TileSplit | None = None
    #: the CTAs launched as one cluster sharing multicast copies (None: one CTA)
    cluster: Cluster | None = None
    #: the writer whose copies several of its warps issue (None: none; agents/shared_issue.py)
    shared_issue: SharedIssue | None = None
    #: every agent runs the same steps (the module says what that means for readers)
    lockstep: bool = False
    #: how many warp groups run a lockstep plan and how they are staggered; None on a plan of
    #: one program per role, whose agents are its programs (pipeline_core/execution.py)
    execution: ExecutionModel | None = None
    #: the reference's warp-stagger index (the document's ``warp_stagger_index``): the stagger
    #: applies when it lies inside the prologue (``ExecutionModel.is_staggered``)
    stagger_index: int = 0
    #: the dependences between kernel entries the lockstep checker proves (the body's edges on
    #: a plan whose kernel is the body)
    kernel_deps: tuple[DepEdge, ...] = attrs.field(converter=_edges, default=())
    #: the body order the lowering placed the ops in; None: the body's own order
    order: tuple[int, ...] | None = attrs.field(converter=_order, default=None)
    #: the partitions the order was cut into, the blocks of each and the global loads a block
    #: may hold (the block program's; 1, 0 and 0 where the order is not cut into blocks)
    partitions: int = 1
    blocks_per_partition: int = 0
    max_globals: int = 0
    #: what the lowering adds to the views (the block program's blocks)
    details: LoweringDetails = NO_DETAILS
    #: the sync model the lowering read its target's channels and tags from (None: none)
    sync: "SyncModel | None" = None
    #: the steps count through the block template's per-op costs and per-load ticks (the
    #: reference's document format keeps those fields; other plans count through ``sync``)
    template_counters: bool = False
    #: a few words the views print for how the kernel is built ("double-buffer", "ring of 4
    #: stages", "agents")
    description: str = ""
    #: who wrote explicit op lists the plan kept (a plugin or a schedule method); "" for none
    explicit_source: str = ""
    #: the kernel family and launch geometry the schedule declared (pipeline_core/launch.py);
    #: None when it declares none.  Emitters read it.
    launch: KernelLaunch | None = None

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

    def entries(self, phase: Phase) -> tuple[Entry, ...]:
        """A lockstep plan's phase list, as every group runs it (the stagger's synthetic
        barriers left out); () for a plan of one program per role."""
        if not self.lockstep or not self.programs:
            return ()
        prog = self.programs[0]
        steps = {Phase.PROLOGUE: [s for it in prog.prologue for s in it],
                 Phase.KERNEL: list(prog.kernel),
                 Phase.EPILOGUE: [s for it in prog.epilogue for s in it]}[Phase(phase)]
        out = [s for s in steps if not s.synthetic and s.instr is not None]
        return tuple(Entry(op=s.instr, time_slot=i, phase=Phase(phase), is_prefetch=s.prefetch)
                     for i, s in enumerate(out) if s.instr is not None)

    def with_entries(self, **lists: Sequence[Entry] | int) -> "Plan":
        """This lockstep plan with some of its phase lists (``prologue``, ``kernel``,
        ``epilogue``) or its ``stagger_index`` replaced, its programs rebuilt to match."""
        phases = {name: lists.get(name, self.entries(ph)) for name, ph in
                  (("prologue", Phase.PROLOGUE), ("kernel", Phase.KERNEL),
                   ("epilogue", Phase.EPILOGUE))}
        stagger = lists.get("stagger_index", self.stagger_index)
        assert isinstance(stagger, int) and self.execution is not None and self.lockstep
        old = self.execution
        prologue = _as_entries(phases["prologue"])
        return lockstep_plan(
            lowering=self.lowering, stages=self.stages, prologue=prologue,
            kernel=_as_entries(phases["kernel"]), epilogue=_as_entries(phases["epilogue"]),
            stagger_index=stagger,
            execution=ExecutionModel.of(stagger, len(prologue),
                                        groups=old.groups if old.stagger_index is None else None,
                                        warps_per_group=old.warps_per_group),
            kernel_deps=self.kernel_deps, order=self.order, partitions=self.partitions,
            blocks_per_partition=self.blocks_per_partition, max_globals=self.max_globals, details=self.details, launch=self.launch,
            sync=self.sync, template_counters=self.template_counters,
            description=self.description, explicit_source=self.explicit_source)


def _as_entries(value: Sequence[Entry] | int) -> tuple[Entry, ...]:
    assert not isinstance(value, int)
    return tuple(value)


def _lockstep_step(entry: Entry, sync: "SyncModel | None") -> Step:
    """One phase-list entry as a step: its kind and channel from the target's sync model (the
    template's tags without one); the op line itself is kept whole."""
    op = entry.op
    kind, channel = StepKind.OP, ""
    if sync is not None:
        for c in sync.channels:
            if op.tag == c.wait_tag:
                kind, channel = StepKind.COUNTER_WAIT, c.name
            elif op.tag == c.commit_tag:
                kind, channel = StepKind.COMMIT, c.name
        if op.tag in {b.tag for b in sync.barriers}:
            kind = StepKind.BARRIER
    elif op.tag in _TEMPLATE_WAITS:
        kind, channel = StepKind.COUNTER_WAIT, _TEMPLATE_WAITS[op.tag]
    elif op.tag == FrameworkTag.BARRIER:
        kind = StepKind.BARRIER
    if kind == StepKind.OP and op.role == OpRole.FENCE:
        kind = StepKind.HINT
    return Step(kind=kind, tag=op.tag, channel=channel, value=op.wait_value, instr=op,
                prefetch=entry.is_prefetch)


def lockstep_plan(*, lowering: str, stages: int, prologue: Sequence[Entry],
                  kernel: Sequence[Entry], epilogue: Sequence[Entry], stagger_index: int,
                  execution: ExecutionModel, kernel_deps: Iterable[DepEdge] = (),
                  order: Iterable[int] | None = None, partitions: int = 1,
                  blocks_per_partition: int = 0, max_globals: int = 0,
                  details: LoweringDetails = NO_DETAILS, launch: KernelLaunch | None = None,
                  sync: "SyncModel | None" = None, template_counters: bool = False,
                  description: str = "", explicit_source: str = "") -> Plan:
    """The plan of phase lists every warp group runs: one program per group, each the same
    steps, with the barriers the execution model adds where it adds them (group 1 one barrier
    late, pipeline_core/execution.py), so the stagger is steps, not a separate mechanism."""
    lists = {Phase.PROLOGUE: tuple(prologue), Phase.KERNEL: tuple(kernel),
             Phase.EPILOGUE: tuple(epilogue)}
    steps = {ph: [_lockstep_step(e, sync) for e in items] for ph, items in lists.items()}
    programs = []
    for g in range(execution.groups):
        sections: dict[Phase, list[Step]] = {ph: [] for ph in lists}
        for slot in execution.stream(g, len(lists[Phase.PROLOGUE]), len(lists[Phase.KERNEL]),
                                     len(lists[Phase.EPILOGUE]), 1):
            sections[slot.phase].append(
                Step(kind=StepKind.BARRIER, synthetic=slot.synthetic) if slot.synthetic
                else steps[slot.phase][slot.index])
        role = AgentRole(name=f"group{g}", ops=(), warps=execution.warps_per_group, issuers=0)
        programs.append(AgentProgram(role=role, prologue=(sections[Phase.PROLOGUE],),
                                     kernel=sections[Phase.KERNEL],
                                     epilogue=(sections[Phase.EPILOGUE],)))
    return Plan(lowering=lowering, stages=stages, programs=programs, lockstep=True,
                sync=sync, execution=execution, stagger_index=stagger_index, kernel_deps=kernel_deps,
                order=order, partitions=partitions, blocks_per_partition=blocks_per_partition,
                max_globals=max_globals, details=details,
                launch=launch, template_counters=template_counters, description=description,
                explicit_source=explicit_source)
