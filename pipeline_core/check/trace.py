"""Expand the entry lists into what each warp executes, with its synchronisation facts.

A warp group runs what the execution model (``pipeline_core.execution``) gives it:
the prologue (ping-pong: split at the warp-stagger index, group 1 adding one extra
barrier), ``iterations`` copies of the kernel and the epilogue
(docs/guide/reference-behaviours.md, "Warp stagger").
For each position we record how many barriers came
before it (its barrier *phase*) and, for every asynchronous op, the first wait that
guarantees it retired.  Those two facts decide happens-before for all timings:

* same warp: program order;
* different warps: ``a`` happens before ``b`` iff a barrier lies after ``a`` in its
  warp and before ``b`` in the other, i.e. ``phase(a) < phase(b)`` (the n-th barrier
  of every warp is one rendezvous);
* an async op completes before ``b`` iff its forcing wait happens before ``b``.
"""
from __future__ import annotations

from collections import deque

import attrs

from pipeline_core import execution
from pipeline_core.check.program import CheckProgram, Instr, Kind
from pipeline_core.check.verdict import LAUNCH, STAGGER, TAIL
from pipeline_core.execution import ExecutionModel
from pipeline_core.ops import Phase

#: Kernel loop: ``for k in range(2·BK, K, 2·BK)``; k_base is kept in BK units.
K_STEP = 2


@attrs.frozen
class Event:
    """One executed entry: the instruction plus the loop context it ran in."""

    instr: Instr
    iteration: int  #: kernel iteration 1..N; 0 in prologue/epilogue and synthetic barriers
    k_base: int  #: loop variable in BK units


@attrs.frozen
class WarpTrace:
    """Everything one warp executes, with barrier phases and forced retirements."""

    group: int
    lane: int
    events: tuple[Event, ...]
    bphase: tuple[int, ...]  #: barriers strictly before each position
    forced: tuple[int | None, ...]  #: async ops: position of the first wait retiring them
    cum: dict  #: counter -> prefix sums of counter ops issued before each position
    outstanding: tuple[int, ...]  #: waits: ops outstanding on their counter when reached
    phase_start: tuple[int, ...]  #: first position whose bphase >= p, for p = 0..barriers+1

    multi: bool = False  #: the group is modelled as several warps

    @property
    def label(self) -> str:
        return f"group {self.group} warp {self.lane}" if self.multi else f"group {self.group}"

    def before(self, pos: int, other: "WarpTrace", other_pos: int) -> bool:
        """Does position ``pos`` of this warp happen before ``other_pos`` of ``other``?"""
        if other is self:
            return pos < other_pos
        return self.bphase[pos] < other.bphase[other_pos]

    def ops_between(self, counter: str, after: int, before: int) -> int:
        """Counter ops issued strictly after position ``after`` and before ``before``."""
        c = self.cum[counter]
        return c[before] - c[after + 1]


_SYNTHETIC = {execution.STAGGER: STAGGER, execution.LAUNCH: LAUNCH, execution.TAIL: TAIL}


def _synthetic(name: str, tag: int) -> Instr:
    return Instr(Kind.BARRIER, phase=name, index=-1, tag=tag, name="BARRIER")


def execution_model(program: CheckProgram) -> ExecutionModel:
    """The groups of ``program`` as the execution model runs them (staggered when > 1)."""
    if program.groups > 1:
        return ExecutionModel(groups=program.groups, stagger_index=program.warp_stagger_index)
    return ExecutionModel(groups=1)


def schedule_of(program: CheckProgram, group: int, iterations: int) -> list[Event]:
    """The event sequence of warp group ``group`` (the execution model's stream, with loop context).

    Kernel iterations are numbered 1..N here and the loop variable is ``K_STEP * it``;
    the epilogue runs with ``k_base = K_STEP * (N + 1)``.
    """
    lists = {Phase.PROLOGUE: program.prologue, Phase.KERNEL: program.kernel,
             Phase.EPILOGUE: program.epilogue}
    k_end = K_STEP * (iterations + 1)
    barrier_tag = program.model.barrier_tag
    out = []
    for slot in execution_model(program).stream(group, len(program.prologue), len(program.kernel),
                                                len(program.epilogue), iterations):
        k_base = k_end if slot.phase == Phase.EPILOGUE else 0
        if slot.synthetic:
            out.append(Event(_synthetic(_SYNTHETIC[slot.synthetic], barrier_tag), 0, k_base))
        elif slot.phase == Phase.KERNEL:
            it = slot.iteration + 1
            out.append(Event(lists[slot.phase][slot.index], it, K_STEP * it))
        else:
            out.append(Event(lists[slot.phase][slot.index], 0, k_base))
    return out


def _sync_facts(events: list[Event], program: CheckProgram):
    model = program.model
    names = [c.name for c in model.counters]
    in_order = {c.name: c.in_order for c in model.counters}
    grouped = {c.name for c in model.counters if c.commit_tag is not None}
    open_group: dict[str, list[int]] = {n: [] for n in grouped}
    members: dict[int, list[int]] = {}  # commit position -> the ops its group closed
    queues: dict[str, deque] = {n: deque() for n in names}
    totals = {n: 0 for n in names}
    cum = {n: [0] * (len(events) + 1) for n in names}
    forced: list[int | None] = [None] * len(events)
    outstanding = [0] * len(events)
    bphase = [0] * len(events)
    bars = 0

    def retire(name: str, n: int, at: int) -> None:
        q = queues[name]
        if in_order[name]:
            while q and totals[name] - q[0][1] >= n:
                pos, cost = q.popleft()
                totals[name] -= cost
                forced[pos] = at
                for m in members.get(pos, ()):
                    forced[m] = at
        elif n == 0:
            while q:
                pos, _ = q.popleft()
                forced[pos] = at
                for m in members.get(pos, ()):
                    forced[m] = at
            totals[name] = 0

    def interlock(reg: tuple) -> None:
        """A register use waits for the load writing it (and, in order, all older ops)."""
        w = writer.get(reg)
        if w is None or forced[w] is not None:
            return
        name = events[w].instr.counter
        assert name is not None  # writers are loads, and every load names its counter
        if in_order[name]:
            younger = sum(cost for pos, cost in queues[name] if pos > w)
            retire(name, younger, p)
        else:
            retire(name, 0, p)

    writer: dict[tuple, int] = {}
    staged = not model.global_loads_write_lds
    for p, ev in enumerate(events):
        ins = ev.instr
        bphase[p] = bars
        for n in names:
            cum[n][p + 1] = cum[n][p]
        if model.register_interlock:
            if ins.kind is Kind.MMA:
                for reg in ins.operands:
                    interlock(reg)
            elif ins.kind is Kind.STORE:
                interlock(("stg", ins.channel))
        if ins.kind is Kind.FRAG:
            writer[(ins.channel, ins.subtile)] = p
        elif ins.kind is Kind.LOAD and staged:
            writer[("stg", ins.channel)] = p
        if ins.kind in (Kind.LOAD, Kind.FRAG, Kind.STORE) and ins.counter is None:
            forced[p] = p  # synchronous: complete for its issuer at once
        elif ins.kind in (Kind.LOAD, Kind.FRAG, Kind.STORE) and ins.counter in grouped:
            open_group[ins.counter].append(p)  # pending until its group's commit retires
        elif ins.kind is Kind.COMMIT and ins.counter in queues:
            members[p] = open_group[ins.counter]
            open_group[ins.counter] = []
            queues[ins.counter].append((p, ins.cost))
            totals[ins.counter] += ins.cost
            cum[ins.counter][p + 1] += ins.cost
        elif ins.kind in (Kind.LOAD, Kind.FRAG, Kind.STORE) and ins.counter in queues:
            queues[ins.counter].append((p, ins.cost))
            totals[ins.counter] += ins.cost
            cum[ins.counter][p + 1] += ins.cost
        elif ins.kind is Kind.WAIT and ins.counter in queues:
            outstanding[p] = totals[ins.counter]
            retire(ins.counter, ins.value, p)
        elif ins.kind is Kind.BARRIER:
            if model.barrier_drains:
                for n in names:
                    retire(n, 0, p)
            bars += 1
    starts = [0] * (bars + 2)
    ph = 0
    for p in range(len(events)):
        while ph <= bphase[p]:
            starts[ph] = p
            ph += 1
    while ph < len(starts):
        starts[ph] = len(events)
        ph += 1
    return tuple(bphase), tuple(forced), cum, tuple(outstanding), tuple(starts)


def expand(program: CheckProgram, iterations: int, warps_per_group: int = 1) -> tuple[WarpTrace, ...]:
    """Per-warp traces.  ``warps_per_group`` > 1 models a group's warps as separate
    agents (same program, same barriers), so hazards *inside* a group also need a
    barrier; 1 treats each group as one agent (its own waits suffice for itself)."""
    if iterations < 1:
        raise ValueError("iterations must be >= 1")
    if program.groups not in (1, 2):
        raise ValueError(f"only 1 or 2 warp groups are modelled, got {program.groups}")
    traces = []
    for g in range(program.groups):
        events = schedule_of(program, g, iterations)
        bphase, forced, cum, outstanding, starts = _sync_facts(events, program)
        for lane in range(warps_per_group):
            traces.append(WarpTrace(g, lane, tuple(events), bphase, forced, cum, outstanding, starts,
                                    multi=warps_per_group > 1))
    return tuple(traces)
