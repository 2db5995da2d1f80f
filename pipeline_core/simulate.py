"""A deterministic timing model of an emitted schedule (prologue, N kernel iterations, epilogue).

Why: the compiler optimises one iteration's makespan, but what a kernel engineer (and the
``analyze`` metrics) needs is how the *emitted* entries behave when the warp groups run them
together: where the waits stall, who holds the MMA unit, how long one steady-state iteration
takes. This module executes the entries under the target's cost model and returns a
:class:`Timeline`; the exporters (trace, picture) only render it.

Model (every choice is a field of :class:`MachineModel`):

The synchronisation facts come from the target's sync model (``pipeline_core.sync``): which
channel each op ticks and by how much, which tags wait on which channel, the barrier's tag
and name, and which tags are scheduling hints.

* Each warp group issues its stream in order. A real instruction costs ``issue_cycles`` of the
  group's time; the target's hint tags are markers (zero cost; its priority hint breaks ties
  when two groups are ready in the same cycle).
* Ops with an effect on a sync channel are asynchronous: they are in flight for their
  latency, counted on that channel of their group. Global and LDS ops hold a port shared by
  all groups for ``global_issue_cycles`` / ``lds_issue_cycles`` (0 = fully pipelined, as the
  reference's cost model with ``lds_contention_penalty`` 0).
* MMAs (and VALU ops) serialise on ONE unit shared by all groups, first come first served.
* A wait on a channel stalls until at most n of the group's ticks on it are outstanding. An
  op ticks its channel's ``op_cost_field`` when set (prologue entries), else its effect's
  ticks, bound from the compiled configs.
* The barrier is a rendezvous of all running groups, matched by ordinal (the n-th barrier
  of each group meet). Ping-pong (REFERENCE §10): when ``warp_stagger_index <=
  len(prologue)`` two groups run; group 1 runs an extra barrier after
  ``prologue[:warp_stagger_index]``, both run a barrier after the prologue, and group 0
  runs an extra one after the epilogue. Otherwise one group runs the phases back to back.

Times are integer cycles. Everything is O(instructions x groups).
"""
from __future__ import annotations

import heapq
from typing import Any, Callable, Mapping, Sequence

import attrs

from pipeline_core.document import entries_from_doc, op_from_doc, ops_from_doc
from pipeline_core.execution import LAUNCH, STAGGER, TAIL, ExecutionModel
from pipeline_core.ops import Entry, FrameworkTag, KOffset, Op, OpRole, Phase, ResourceKind, tag_name
from pipeline_core.sync.model import BoundSync

#: units a single op occupies exclusively for its latency (shared by all groups)
EXCLUSIVE_UNITS = frozenset({ResourceKind.MMA_UNIT, ResourceKind.VALU})
_ROLE_RESOURCE = {OpRole.GLOBAL_LOAD: ResourceKind.GLOBAL_MEM, OpRole.FRAGMENT_LOAD: ResourceKind.LDS,
                  OpRole.SHARED_STORE: ResourceKind.LDS, OpRole.COMPUTE: ResourceKind.MMA_UNIT,
                  OpRole.VALU_COMPUTE: ResourceKind.VALU}


class SimulationError(ValueError):
    """The input cannot be simulated (bad iteration count, group count, ...)."""


# --- inputs -------------------------------------------------------------------

def _cycles(inst, attribute, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SimulationError(f"MachineModel.{attribute.name} must be an integer >= 0, got {value!r}")


def _positive(inst, attribute, value) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise SimulationError(f"MachineModel.{attribute.name} must be > 0, got {value!r}")


@attrs.frozen
class MachineModel:
    """The timing knobs; defaults follow the reference's cost model (latencies only)."""

    #: cycles a group spends issuing one real instruction
    issue_cycles: int = attrs.field(default=1, validator=_cycles)
    #: cycles a global load holds the shared global-memory port (0: fully pipelined)
    global_issue_cycles: int = attrs.field(default=0, validator=_cycles)
    #: cycles an LDS op holds the shared LDS port (0: fully pipelined)
    lds_issue_cycles: int = attrs.field(default=0, validator=_cycles)
    #: LDS and global ops share one port (the reference's penalty model)
    shared_memory_port: bool = False
    #: the target's clock (TargetProfile.clock_ghz); only used to state real time next to
    #: cycles (None: not declared, cycles only)
    clock_ghz: float | None = attrs.field(default=None, validator=_positive)

    @classmethod
    def for_penalty(cls, penalty: int = 0, **changes) -> "MachineModel":
        """The reference's ``lds_contention_penalty``: one port shared by LDS and global ops."""
        if penalty:
            changes = {"global_issue_cycles": penalty, "lds_issue_cycles": penalty,
                       "shared_memory_port": True, **changes}
        return cls(**changes)


@attrs.frozen
class SimInput:
    """What the timing model needs from a compiled schedule (and nothing else)."""

    name: str
    prologue: tuple[Entry, ...]
    kernel: tuple[Entry, ...]
    epilogue: tuple[Entry, ...]
    warp_stagger_index: int
    sync: BoundSync  #: the target's sync model with this schedule's tick counts bound
    body: tuple[Op, ...] = ()  #: for ops without costs (4-wave bootstrap frags): same-tag body op
    tag_names: Mapping[int, str] = attrs.field(factory=dict)
    lds_contention_penalty: int = 0
    clock_ghz: float | None = None  #: the target's clock, for the default MachineModel

    @property
    def staggered(self) -> bool:
        return ExecutionModel.is_staggered(self.warp_stagger_index, len(self.prologue))


def input_from_compiled(compiled: Any, host: Any = None) -> SimInput:
    """Adapter for :class:`pipeline_core.compiler.CompiledSchedule` (sync model from its target)."""
    from pipeline_core.sync.resolve import clock_for_compiled, sync_for_compiled

    sync = sync_for_compiled(compiled, host)
    return SimInput(
        name=f"{compiled.schedule_name}" + (f" on {compiled.target_name}" if compiled.target_name else ""),
        prologue=tuple(compiled.prologue), kernel=tuple(compiled.kernel),
        epilogue=tuple(compiled.epilogue), warp_stagger_index=int(compiled.warp_stagger_index),
        sync=sync.bind(compiled.config, compiled.schedule_config),
        body=tuple(compiled.body), tag_names={**sync.tag_names(), **dict(compiled.tag_names)},
        lds_contention_penalty=int(getattr(compiled.schedule_config, "lds_contention_penalty", 0)),
        clock_ghz=clock_for_compiled(compiled, host))


def op_from_document(d: Mapping[str, Any]) -> Op:
    """One op dict of the schedule document as an :class:`Op` (the document codec's decoder)."""
    return op_from_doc(d)


def input_from_document(doc: Mapping[str, Any], host: Any = None) -> SimInput:
    """Adapter for a schedule document (``compile --format json`` output or a golden file).

    The sync model and clock are those of the target the document names.
    """
    from pipeline_core.sync.resolve import clock_for_target, document_target, sync_for_document

    sync = sync_for_document(doc, host)
    def entries(key: str) -> tuple[Entry, ...]:
        return entries_from_doc(doc.get(key, ()))

    names: dict[int, str] = sync.tag_names()
    for key in ("body", "prologue", "kernel", "epilogue"):
        for item in doc.get(key, ()):
            o = item.get("op", item)
            if o["tag"] < 128 and "tag_name" in o:
                names[o["tag"]] = o["tag_name"]
    config = doc.get("config", {})
    sched = doc.get("schedule_config", {})
    name = doc.get("case") or doc.get("schedule") or "schedule"
    if doc.get("target"):
        name = f"{name} on {doc['target']}"
    return SimInput(name=str(name), prologue=entries("prologue"), kernel=entries("kernel"),
                    epilogue=entries("epilogue"), warp_stagger_index=int(doc["warp_stagger_index"]),
                    sync=sync.bind(config, sched),
                    body=tuple(ops_from_doc(doc.get("body", ()))), tag_names=names,
                    lds_contention_penalty=int(sched.get("lds_contention_penalty", 0) or 0),
                    clock_ghz=clock_for_target(document_target(doc), host))


def as_input(source: Any) -> SimInput:
    """A SimInput from a SimInput, a CompiledSchedule or a schedule document dict."""
    if isinstance(source, SimInput):
        return source
    if isinstance(source, Mapping):
        return input_from_document(source)
    if hasattr(source, "kernel") and hasattr(source, "warp_stagger_index"):
        return input_from_compiled(source)
    raise SimulationError(f"cannot simulate a {type(source).__name__}: pass a CompiledSchedule, "
                          "a schedule document or a SimInput")


# --- outputs ------------------------------------------------------------------

@attrs.frozen
class Stall:
    """Why a step could not issue when it became ready, and what released it."""

    cycles: int
    reason: str  #: a channel's label ("vmcnt"), "barrier", or the busy unit's name ("MMA_UNIT", ...)
    detail: str  #: e.g. "vmcnt <= 6 (8 outstanding)"
    blocker_group: int = -1  #: group of the step whose completion/arrival ended the stall
    blocker_seq: int = -1  #: that step's index in its group's stream (-1: none)


@attrs.frozen
class Instr:
    """One instruction of a group's stream: an emitted entry of a phase (and kernel iteration)."""

    op: Op
    phase: Phase
    iteration: int  #: kernel iteration (0-based); -1 in prologue/epilogue
    entry: int  #: index in the phase's entry list; -1 for the barriers the kernel inserts
    is_prefetch: bool = False
    note: str = ""  #: why a synthetic instruction exists ("stagger barrier (group 1)", ...)


@attrs.frozen
class OpTiming:
    """What an op costs in the model (resolved: bootstrap frags take their body op's cost)."""

    resource: ResourceKind
    latency: int
    counter: str  #: the sync channel the op ticks ("" : none, or a sync entry)
    counter_cost: int
    #: what the entry is to the timing model: "op", "wait", "commit", "barrier", "hint", "priority"
    kind: str = "op"
    waits_on: str = ""  #: for a wait: the sync channel it tests; for a commit: the one it closes
    hint_format: str = ""  #: for a hint: how its operands read (the target's format)


@attrs.frozen
class Step:
    """One instruction a warp group executed, with its timing.

    ``ready``: the group reached it; ``start``: it issued (after any stall); ``issue_end``: the
    group moves on (the next step's ``ready``); ``end``: its effect is complete (data back, MMA
    done; for waits and barriers ``issue_end``). Always ready <= start <= issue_end and
    start <= end; an async op's end usually lies past later steps' starts.
    """

    group: int
    seq: int  #: index in the group's stream
    instr: Instr
    timing: OpTiming
    ready: int
    start: int
    issue_end: int
    end: int
    stall: Stall | None = None

    op = property(lambda self: self.instr.op)
    phase = property(lambda self: self.instr.phase)
    iteration = property(lambda self: self.instr.iteration)
    entry = property(lambda self: self.instr.entry)
    is_prefetch = property(lambda self: self.instr.is_prefetch)
    note = property(lambda self: self.instr.note)
    resource = property(lambda self: self.timing.resource)
    latency = property(lambda self: self.timing.latency)
    counter = property(lambda self: self.timing.counter)
    counter_cost = property(lambda self: self.timing.counter_cost)

    @property
    def stall_cycles(self) -> int:
        return self.start - self.ready

    @property
    def is_marker(self) -> bool:
        return self.timing.kind in ("hint", "priority")


@attrs.frozen
class Span:
    """A labelled interval of one group's stream (a phase or a kernel iteration)."""

    label: str
    phase: Phase
    iteration: int
    first_seq: int
    last_seq: int
    start: int
    end: int


@attrs.frozen
class GroupTimeline:
    group: int
    steps: tuple[Step, ...]
    spans: tuple[Span, ...]  #: prologue, iteration 0..N-1, epilogue (non-empty ones)
    iteration_starts: tuple[int, ...]  #: N+1 boundaries: iteration i starts, then the epilogue starts

    @property
    def finish(self) -> int:
        return max((s.end for s in self.steps), default=0)

    @property
    def stall_cycles(self) -> int:
        return sum(s.stall_cycles for s in self.steps)

    def stalls_by_reason(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.steps:
            if s.stall is not None:
                out[s.stall.reason] = out.get(s.stall.reason, 0) + s.stall.cycles
        return dict(sorted(out.items()))


@attrs.frozen
class Busy:
    """A unit occupied by one step; ``lane`` separates overlapping in-flight ops for display."""

    resource: ResourceKind
    group: int
    seq: int
    start: int
    end: int
    lane: int = 0


@attrs.frozen
class BarrierRelease:
    ordinal: int
    release: int
    arrivals: tuple[tuple[int, int, int], ...]  #: (group, seq, arrival cycle)


@attrs.frozen
class Summary:
    """Headline figures of a timeline (what ``analyze`` and the exports report)."""

    makespan: int
    iterations: int
    groups: int
    steady_state_cycles: float  #: per kernel iteration, between iteration starts mid-run
    period: int  #: iterations after which the iteration lengths repeat (0: no period found)
    window: tuple[int, int]  #: iterations [lo, hi) the steady state was measured over
    mma_busy: int
    mma_utilisation: float  #: over the whole run
    steady_mma_utilisation: float  #: inside the steady-state window
    mma_bound_cycles: int  #: MMA cycles per kernel iteration, all groups (the MMA-bound limit)
    stall_cycles: tuple[int, ...]  #: per group

    @property
    def ratio_to_mma_bound(self) -> float:
        return self.steady_state_cycles / self.mma_bound_cycles if self.mma_bound_cycles else 0.0


@attrs.frozen
class Timeline:
    """The modelled execution: per-group steps, unit occupancy, barrier releases."""

    name: str
    model: MachineModel
    iterations: int
    groups: tuple[GroupTimeline, ...]
    busy: tuple[Busy, ...]
    barriers: tuple[BarrierRelease, ...]
    tag_names: Mapping[int, str] = attrs.field(factory=dict)
    #: the sync channels in declaration order: (name, label), e.g. ("vm", "vmcnt")
    channels: tuple[tuple[str, str], ...] = ()
    barrier_name: str = "barrier"

    @property
    def makespan(self) -> int:
        return max((g.finish for g in self.groups), default=0)

    def step(self, group: int, seq: int) -> Step:
        return self.groups[group].steps[seq]

    def busy_on(self, resource: ResourceKind) -> tuple[Busy, ...]:
        return tuple(b for b in self.busy if b.resource == resource)

    def lanes(self, resource: ResourceKind) -> int:
        return 1 + max((b.lane for b in self.busy_on(resource)), default=-1)

    def iteration_starts(self) -> tuple[int, ...]:
        """N+1 boundaries of the run: the first group to start iteration i (then the epilogue)."""
        return tuple(min(g.iteration_starts[i] for g in self.groups)
                     for i in range(self.iterations + 1))

    def steady_window(self, skip: int | None = None) -> tuple[int, int]:
        """Iterations [lo, hi) away from the warm-up and drain: a quarter at each end (>= 1 from 3 on)."""
        n = self.iterations
        if skip is None:
            skip = n // 4 if n >= 4 else (1 if n == 3 else 0)
        if n - 2 * skip < 1:
            raise SimulationError(f"{n} iterations leave no steady-state window after skipping {skip}")
        return skip, n - skip

    def steady_state(self, skip: int | None = None) -> tuple[float, int, tuple[int, int]]:
        """(cycles per iteration, period, window) measured between iteration starts mid-run.

        Iteration lengths can repeat with a period > 1 (loads of one iteration land in a later
        one); the average is then taken over whole periods at the end of the window, so the
        figure does not depend on where the window cuts the pattern.
        """
        lo, hi = self.steady_window(skip)
        b = self.iteration_starts()
        d = [b[i + 1] - b[i] for i in range(lo, hi)]
        n = len(d)
        for p in range(1, n // 2 + 1):
            if all(d[i] == d[i - p] for i in range(p, n)):
                k = (n // p) * p
                return sum(d[n - k:]) / k, p, (hi - k, hi)
        return sum(d) / n, 0, (lo, hi)

    def steady_state_cycles(self, skip: int | None = None) -> float:
        """Cycles per kernel iteration in the steady state (see :meth:`steady_state`)."""
        return self.steady_state(skip)[0]

    def mma_busy_between(self, t0: int, t1: int) -> int:
        return sum(max(0, min(b.end, t1) - max(b.start, t0)) for b in self.busy
                   if b.resource == ResourceKind.MMA_UNIT)

    def mma_bound_cycles(self) -> int:
        """MMA-unit cycles one kernel iteration needs, summed over the groups."""
        total = 0
        for g in self.groups:
            total += sum(s.latency for s in g.steps
                         if s.iteration == 0 and s.phase == Phase.KERNEL
                         and s.resource == ResourceKind.MMA_UNIT)
        return total

    def summary(self, skip: int | None = None) -> Summary:
        cycles, period, (lo, hi) = self.steady_state(skip)
        b = self.iteration_starts()
        window = b[hi] - b[lo]
        busy = self.mma_busy_between(0, self.makespan)
        makespan = self.makespan
        return Summary(
            makespan=makespan, iterations=self.iterations, groups=len(self.groups),
            steady_state_cycles=cycles, period=period, window=(lo, hi), mma_busy=busy,
            mma_utilisation=busy / makespan if makespan else 0.0,
            steady_mma_utilisation=self.mma_busy_between(b[lo], b[hi]) / window if window else 0.0,
            mma_bound_cycles=self.mma_bound_cycles(),
            stall_cycles=tuple(g.stall_cycles for g in self.groups))


# --- the instruction streams --------------------------------------------------

_NOTES = {STAGGER: "stagger barrier (group 1)", LAUNCH: "end-of-prologue barrier",
          TAIL: "closing barrier (group 0)"}


def streams(inp: SimInput, iterations: int, groups: int | None = None) -> list[list[Instr]]:
    """Each group's instruction stream, as the execution model runs the phases."""
    if iterations < 1:
        raise SimulationError(f"iterations must be >= 1, got {iterations}")
    if groups is not None and groups < 1:
        raise SimulationError(f"groups must be >= 1, got {groups}")
    if inp.staggered and groups not in (None, 2):
        raise SimulationError(f"a staggered schedule (warp_stagger_index {inp.warp_stagger_index} <= "
                              f"{len(inp.prologue)} prologue entries) runs exactly 2 warp groups, not {groups}")
    execution = ExecutionModel.of(inp.warp_stagger_index, len(inp.prologue), groups=groups)
    barrier = Op(tag=inp.sync.model.barrier.tag, resource=ResourceKind.SCALAR, role=OpRole.SYNC)
    lists = {Phase.PROLOGUE: inp.prologue, Phase.KERNEL: inp.kernel, Phase.EPILOGUE: inp.epilogue}
    out = []
    for g in range(execution.groups):
        s: list[Instr] = []
        for slot in execution.stream(g, len(inp.prologue), len(inp.kernel), len(inp.epilogue),
                                     iterations):
            if slot.synthetic:
                s.append(Instr(barrier, slot.phase, -1, -1, False, _NOTES[slot.synthetic]))
            else:
                e = lists[slot.phase][slot.index]
                s.append(Instr(e.op, slot.phase, slot.iteration, slot.index, e.is_prefetch))
        out.append(s)
    return out


# --- costs --------------------------------------------------------------------

def _resolver(inp: SimInput):
    """(resource, latency, channel, ticks, kind) of an op, filling in cost-less data ops."""
    by_tag: dict[int, Op] = {}
    for o in inp.body:
        by_tag.setdefault(o.tag, o)
    cache: dict[Op, OpTiming] = {}
    sync = inp.sync.model
    special: dict[int, tuple[str, str]] = {c.wait_tag: ("wait", c.name) for c in sync.channels}
    special.update({c.commit_tag: ("commit", c.name) for c in sync.channels
                    if c.commit_tag is not None})
    special.update({b.tag: ("barrier", "") for b in sync.barriers})
    special.update({t: ("hint", sync.hint_formats.get(t, "")) for t in sync.hint_tags})
    if sync.priority_tag is not None:
        special[sync.priority_tag] = ("priority", "")
    special.setdefault(int(FrameworkTag.NONE), ("hint", ""))

    def resolve(o: Op) -> OpTiming:
        hit = cache.get(o)
        if hit is not None:
            return hit
        if o.tag in special:
            kind, detail = special[o.tag]
            cache[o] = hit = (OpTiming(o.resource, o.latency, "", 0, kind, waits_on=detail)
                              if kind in ("wait", "commit") else
                              OpTiming(o.resource, o.latency, "", 0, kind, hint_format=detail))
            return hit
        resource, latency, channel = o.resource, o.latency, o.channel
        ref = by_tag.get(o.tag) if o.tag < 128 else None
        if resource == ResourceKind.NONE and o.tag < 128:
            if ref is not None and ref.resource != ResourceKind.NONE:
                resource, latency = ref.resource, latency or ref.latency
            else:
                resource = _ROLE_RESOURCE.get(o.role, ResourceKind.NONE)
        if channel < 0 and ref is not None:
            channel = ref.channel
        role = o.role if o.role != OpRole.NONE or ref is None else ref.role
        effect = inp.sync.effect(role, channel)
        counter, cost = "", 0
        if effect is not None and effect.counter is not None:
            counter = effect.counter
            field = sync.channel(counter).op_cost_field
            cost = (getattr(o, field, 0) if field else 0) or effect.ticks
        cache[o] = hit = OpTiming(resource, latency, counter, cost)
        return hit

    return resolve


# --- the simulation -----------------------------------------------------------

class _Group:
    __slots__ = ("gid", "stream", "pc", "t", "prio", "blocked", "outstanding", "barriers", "rows",
                 "iteration_seen", "open_groups")

    def __init__(self, gid: int, stream: list[Instr], channels: Sequence[str]):
        self.gid, self.stream, self.pc, self.t, self.prio = gid, stream, 0, 0, 0
        self.blocked = False
        self.outstanding: dict[str, list[tuple[int, int, int]]] = {c: [] for c in channels}
        #: group channels: (latest end, position) of the ops since the last commit
        self.open_groups: dict[str, tuple[int, int]] = {}
        self.barriers = 0
        self.rows: list[list[Any]] = []
        self.iteration_seen = -1

    @property
    def done(self) -> bool:
        """Every instruction issued (it may still wait at its last barrier)."""
        return self.pc >= len(self.stream)

    @property
    def finished(self) -> bool:
        """Out of the program: takes no further part in barriers."""
        return self.pc >= len(self.stream) and not self.blocked


def _wait_release(pending: list[tuple[int, int, int]], now: int, limit: int):
    """Earliest cycle >= now with at most ``limit`` counter ops outstanding, and the releasing op."""
    pending[:] = [p for p in pending if p[0] > now]
    total = sum(p[1] for p in pending)
    if total <= limit:
        return now, None, total
    release, last = now, None
    for end, cost, seq in sorted(pending):
        total -= cost
        release, last = end, seq
        if total <= limit:
            break
    return release, last, sum(p[1] for p in pending)


def simulate(source: Any, iterations: int = 12, *, model: MachineModel | None = None,
             groups: int | None = None,
             progress: Callable[[int, int], None] | None = None) -> Timeline:
    """Run the emitted entries of ``source`` (CompiledSchedule, document dict or SimInput).

    ``iterations``: kernel iterations between prologue and epilogue. ``groups``: warp groups
    (default: 2 when the schedule is staggered, else 1). ``progress(done, total)`` is called
    as the leading group enters each kernel iteration, then once at the end.
    """
    inp = as_input(source)
    if model is None:
        model = MachineModel.for_penalty(inp.lds_contention_penalty, clock_ghz=inp.clock_ghz)
    resolve = _resolver(inp)
    sync = inp.sync.model
    labels = {c.name: c.label for c in sync.channels}
    grouped = {c.name for c in sync.channels if c.commit_tag is not None}
    barrier_name = sync.barrier.name
    gs = [_Group(g, s, list(labels)) for g, s in enumerate(streams(inp, iterations, groups))]
    unit_free: dict[Any, int] = {}
    unit_holder: dict[Any, tuple[int, int]] = {}
    busy_raw: list[tuple[ResourceKind, int, int, int, int]] = []
    arrivals: dict[int, list[tuple[int, int, int]]] = {}
    releases: list[BarrierRelease] = []
    port_cycles = {ResourceKind.GLOBAL_MEM: model.global_issue_cycles,
                   ResourceKind.LDS: model.lds_issue_cycles}
    issue = model.issue_cycles

    def port_key(resource: ResourceKind):
        if model.shared_memory_port and resource in port_cycles:
            return "memory port"
        return resource

    def release_barrier(ordinal: int) -> None:
        arrived = arrivals.pop(ordinal)
        when = max(a[2] for a in arrived)
        last = max(arrived, key=lambda a: (a[2], a[0]))
        for gid, seq, at in arrived:
            grp = gs[gid]
            row = grp.rows[seq]
            row[1] = when  # start
            row[2] = row[3] = when + issue
            if when > at:
                row[4] = Stall(when - at, "barrier",
                               f"{barrier_name} #{ordinal}: waiting for group {last[0]}",
                               last[0], last[1])
            grp.t = when + issue
            grp.blocked = False
        releases.append(BarrierRelease(ordinal, when, tuple(sorted(arrived))))

    def maybe_release(force: bool = False) -> None:
        """Release the oldest barrier once every group still running has arrived."""
        if arrivals:
            ordinal = min(arrivals)
            if force or len(arrivals[ordinal]) == sum(1 for x in gs if not x.finished):
                release_barrier(ordinal)

    total_iters = iterations
    while True:
        ready = [g for g in gs if not g.done and not g.blocked]
        if not ready:
            if arrivals:  # every running group waits: only possible if counts differ
                maybe_release(force=True)
                continue
            break
        g = min(ready, key=lambda x: (x.t, -x.prio, x.gid))
        ins = g.stream[g.pc]
        seq, now, o = g.pc, g.t, ins.op
        g.pc += 1
        if progress is not None and g.gid == 0 and ins.iteration > g.iteration_seen:
            g.iteration_seen = ins.iteration
            progress(ins.iteration, total_iters)
        timing = resolve(o)
        resource, latency, counter, cost = (timing.resource, timing.latency, timing.counter,
                                            timing.counter_cost)
        row: list[Any] = [now, now, now, now, None, timing]
        g.rows.append(row)
        kind = timing.kind
        if kind in ("hint", "priority"):
            if kind == "priority":
                g.prio = o.wait_value
        elif kind == "wait":
            release, last, had = _wait_release(g.outstanding[timing.waits_on], now, o.wait_value)
            row[1] = release
            row[2] = row[3] = release + issue
            if release > now:
                label = labels[timing.waits_on]
                row[4] = Stall(release - now, label,
                               f"{label} <= {o.wait_value} ({had} outstanding)", g.gid, last)
            g.t = release + issue
        elif kind == "commit":  # one tick that completes with the group's last op
            end, last_seq = g.open_groups.pop(timing.waits_on, (now, seq))
            g.outstanding[timing.waits_on].append((max(end, now), 1, last_seq))
            row[2] = row[3] = now + issue
            g.t = now + issue
        elif kind == "barrier":
            ordinal = g.barriers
            g.barriers += 1
            arrivals.setdefault(ordinal, []).append((g.gid, seq, now))
            g.blocked = True
            maybe_release()
        elif resource in EXCLUSIVE_UNITS or resource in port_cycles:
            key = resource if resource in EXCLUSIVE_UNITS else port_key(resource)
            start = max(now, unit_free.get(key, 0))
            if start > now:
                hg, hs = unit_holder[key]
                name = key.name if isinstance(key, ResourceKind) else key
                row[4] = Stall(start - now, name, f"{name} busy with group {hg}", hg, hs)
            hold = latency if resource in EXCLUSIVE_UNITS else port_cycles[resource]
            if hold:
                unit_free[key] = start + hold
                unit_holder[key] = (g.gid, seq)
            end = start + latency
            row[1], row[2], row[3] = start, start + issue, end
            if latency:
                busy_raw.append((resource, g.gid, seq, start, end))
            if counter and counter in grouped:
                prev = g.open_groups.get(counter, (0, seq))
                g.open_groups[counter] = (end, seq) if end >= prev[0] else prev
            elif counter and cost:
                pend = g.outstanding[counter]
                pend.append((end, cost, seq))
                if len(pend) > 64:
                    pend[:] = [p for p in pend if p[0] > start]
            g.t = start + issue
        else:  # scalar or unknown ops: issue only
            row[2] = row[3] = now + issue
            g.t = now + issue
        if g.finished and arrivals:  # one participant fewer
            maybe_release()
    if progress is not None:
        progress(total_iters, total_iters)
    return _assemble(inp, model, iterations, gs, busy_raw, releases)


def _assemble(inp: SimInput, model: MachineModel, iterations: int, gs: list[_Group],
              busy_raw, releases) -> Timeline:
    groups = []
    for g in gs:
        steps = tuple(
            Step(g.gid, i, ins, r[5], r[0], r[1], r[2], r[3], r[4])
            for i, (ins, r) in enumerate(zip(g.stream, g.rows)))
        spans = _spans(steps)
        starts = [0] * (iterations + 1)
        for sp in spans:
            if sp.phase == Phase.KERNEL:
                starts[sp.iteration] = sp.start
            elif sp.phase == Phase.EPILOGUE:
                starts[iterations] = sp.start
        if not any(sp.phase == Phase.EPILOGUE for sp in spans):
            starts[iterations] = max((s.issue_end for s in steps), default=0)
        groups.append(GroupTimeline(g.gid, steps, spans, tuple(starts)))
    sync = inp.sync.model
    return Timeline(name=inp.name, model=model, iterations=iterations, groups=tuple(groups),
                    busy=_assign_lanes(busy_raw), barriers=tuple(releases),
                    tag_names=dict(inp.tag_names),
                    channels=tuple((c.name, c.label) for c in sync.channels),
                    barrier_name=sync.barrier.name)


def _spans(steps: Sequence[Step]) -> tuple[Span, ...]:
    out: list[Span] = []
    i = 0
    while i < len(steps):
        j = i
        key = (steps[i].phase, steps[i].iteration)
        while j + 1 < len(steps) and (steps[j + 1].phase, steps[j + 1].iteration) == key:
            j += 1
        ph, it = key
        label = f"iteration {it}" if ph == Phase.KERNEL else ph.name.lower()
        out.append(Span(label, ph, it, i, j, steps[i].ready, steps[j].issue_end))
        i = j + 1
    return tuple(out)


def _assign_lanes(raw) -> tuple[Busy, ...]:
    """Greedy interval partitioning per unit: the lowest free lane, so overlaps never share one."""
    out: list[Busy] = []
    for resource in sorted({r[0] for r in raw}):
        items = sorted((r for r in raw if r[0] == resource), key=lambda r: (r[3], r[4], r[1], r[2]))
        running: list[tuple[int, int]] = []  # (end, lane)
        free: list[int] = []
        lanes = 0
        for res, group, seq, start, end in items:
            while running and running[0][0] <= start:
                heapq.heappush(free, heapq.heappop(running)[1])
            if free:
                lane = heapq.heappop(free)
            else:
                lane, lanes = lanes, lanes + 1
            heapq.heappush(running, (end, lane))
            out.append(Busy(res, group, seq, start, end, lane))
    return tuple(out)


# --- labels shared by the exporters -------------------------------------------

_K = {KOffset.K0: "K0", KOffset.K1: "K1", KOffset.K_NEXT: "K+2", KOffset.K_PREV: "K-1"}


def step_label(step: Step, names: Mapping[int, str] | None = None,
               barrier_name: str = "barrier") -> str:
    """A short readable name: ``LOAD_A[A s1.1 K-1]``, ``MMA[0,1]``, ``wait_vm(6)``.

    Wait, barrier and hint names are the target's (``names`` holds its tag names).
    """
    o = step.op
    name = tag_name(o.tag, names)
    kind = step.timing.kind
    if kind in ("wait", "priority"):
        return f"{name.lower()}({o.wait_value})"
    if kind == "hint" and step.timing.hint_format:
        return f"{name.lower()}({step.timing.hint_format.format(subtile=o.subtile, wait_value=o.wait_value)})"
    if kind == "barrier":
        return barrier_name + (f" ({step.note})" if step.note else "")
    if o.tag >= 128:
        return name.lower()
    if step.resource == ResourceKind.MMA_UNIT or o.role == OpRole.COMPUTE:
        return f"{name}[{o.stage},{o.subtile}]"
    ch = "AB"[o.channel] + " " if o.channel in (0, 1) else ""
    k = f" {_K[o.k_offset]}" if o.k_offset in _K else ""
    return f"{name}[{ch}s{o.stage}.{o.subtile}{k}]"


def step_args(step: Step, names: Mapping[int, str] | None = None) -> dict[str, Any]:
    """The step's identity and operands, for trace-event args and tooltips."""
    o = step.op
    args: dict[str, Any] = {
        "op": tag_name(o.tag, names), "group": step.group, "phase": step.phase.name,
        "iteration": step.iteration, "entry_index": step.entry, "stream_index": step.seq,
        "stage": o.stage, "subtile": o.subtile, "k_offset": o.k_offset.name, "channel": o.channel,
        "role": o.role.name, "resource": step.resource.name, "latency": step.latency,
    }
    if step.timing.kind in ("wait", "priority") or step.timing.hint_format:
        args["wait_value"] = o.wait_value
    if step.counter:
        args[f"{step.counter}_ops"] = step.counter_cost
    if step.is_prefetch:
        args["is_prefetch"] = True
    if step.note:
        args["note"] = step.note
    return args


def outstanding_series(group: GroupTimeline, counter: str) -> list[tuple[int, int]]:
    """(cycle, outstanding ticks) change points of one group's sync channel ``counter``."""
    deltas: dict[int, int] = {}
    for s in group.steps:
        if s.counter == counter and s.counter_cost:
            deltas[s.start] = deltas.get(s.start, 0) + s.counter_cost
            deltas[s.end] = deltas.get(s.end, 0) - s.counter_cost
    out, level = [], 0
    for t in sorted(deltas):
        if deltas[t]:
            level += deltas[t]
            out.append((t, level))
    return out


def _period(s: Summary) -> str:
    if s.period == 1 or s.window[1] - s.window[0] < 2:
        return ""
    return ", no period found" if s.period == 0 else f", period {s.period}"


def format_summary(tl: Timeline, summary: Summary | None = None) -> str:
    """A few lines for terminals and reports."""
    s = summary or tl.summary()
    lines = [
        f"{tl.name}: {s.groups} warp group(s), {s.iterations} kernel iterations",
        f"  makespan {s.makespan} cycles; steady state {s.steady_state_cycles:.1f} cycles/iteration "
        f"(iterations {s.window[0]}..{s.window[1] - 1}{_period(s)}); MMA bound {s.mma_bound_cycles} "
        f"(ratio {s.ratio_to_mma_bound:.2f})",
        f"  MMA unit busy {s.mma_busy} cycles: {100 * s.mma_utilisation:.1f}% of the run, "
        f"{100 * s.steady_mma_utilisation:.1f}% in the steady state",
    ]
    for g in tl.groups:
        reasons = ", ".join(f"{k} {v}" for k, v in g.stalls_by_reason().items()) or "none"
        lines.append(f"  group {g.group}: {g.stall_cycles} stall cycles ({reasons})")
    return "\n".join(lines)


__all__ = ["MachineModel", "SimInput", "SimulationError", "Stall", "Instr",
           "OpTiming", "Step", "Span",
           "GroupTimeline", "Busy", "BarrierRelease", "Summary", "Timeline", "simulate",
           "as_input", "input_from_compiled", "input_from_document", "streams",
           "step_label", "step_args", "outstanding_series", "format_summary", "op_from_document"]
