"""The timing model's outputs: per-group steps, stalls, spans, unit occupancy and the
steady-state summary, as frozen records the exporters render.
"""
from __future__ import annotations

from typing import Mapping

import attrs

from pipeline_core.ops import Op, Phase, ResourceKind
from pipeline_core.simulate.inputs import MachineModel, SimulationError
from pipeline_core.sync.model import SyncModel


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
    #: the instruction as its plan writes it, when the op alone does not say (an agents step's
    #: ring stage and parity, pipeline_core.export.notation.isa_form)
    text: str = ""


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
    name: str = ""  #: the agent's role ("producer", "consumer0"); "" : a warp group of one stream

    @property
    def title(self) -> str:
        """What the exporters call the track: the agent's role, else ``group N``."""
        return self.name or f"group {self.group}"

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
    #: the target's SyncModel, for its ISA names in labels (None: tag names)
    sync: SyncModel | None = attrs.field(default=None, eq=False)
    #: tag -> channel of the body's loads, so prologue loads label with their operand
    channel_of: Mapping[int, int] = attrs.field(factory=dict, eq=False)
    #: the model's words for the trace's ``otherData`` (how it costs a step)
    model_text: str = ""
    #: the headline figures when the engine measures them itself (the agents model reports
    #: cycles per K tile over the whole run, docs/guide/agents.md "Timing model"); None: the
    #: steady state is measured between iteration starts (:meth:`summary`)
    figures: Summary | None = None

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
        if self.figures is not None and skip is None:
            return self.figures
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
