"""The timing model itself: build each warp group's instruction stream from the execution
model, then issue it against the machine model's units, ports, channels and barriers.
"""
from __future__ import annotations

from pipeline_core.export.notation import channels_by_tag

import heapq
from typing import Any, Callable, Sequence

from pipeline_core.execution import LAUNCH, STAGGER, TAIL, ExecutionModel
from pipeline_core.ops import MAX_KERNEL_TAG, FrameworkTag, Op, OpRole, Phase, ResourceKind
from pipeline_core.simulate.inputs import (EXCLUSIVE_UNITS, ROLE_RESOURCE, MachineModel, SimInput,
                                           SimulationError, as_input)
from pipeline_core.simulate.timeline import (BarrierRelease, Busy, GroupTimeline, Instr, OpTiming,
                                             Span, Stall, Step, Timeline)


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
        ref = by_tag.get(o.tag) if o.tag <= MAX_KERNEL_TAG else None
        if resource == ResourceKind.NONE and o.tag <= MAX_KERNEL_TAG:
            if ref is not None and ref.resource != ResourceKind.NONE:
                resource, latency = ref.resource, latency or ref.latency
            else:
                resource = ROLE_RESOURCE.get(o.role, ResourceKind.NONE)
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
        spans = spans_of(steps)
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
                    busy=assign_lanes(busy_raw), barriers=tuple(releases),
                    tag_names=dict(inp.tag_names),
                    channels=tuple((c.name, c.label) for c in sync.channels),
                    barrier_name=sync.barrier.name, sync=sync,
                    channel_of=channels_by_tag(inp.body), model_text=model.describe())


def spans_of(steps: Sequence[Step]) -> tuple[Span, ...]:
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


def assign_lanes(raw) -> tuple[Busy, ...]:
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
