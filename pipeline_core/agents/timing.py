"""The agents timing model: one CTA's agents run their compiled programs on one SM's machine.

A discrete-event walk of the unrolled programs (docs/guide/agents.md, "Timing model"): the agent
with the earliest clock takes its next step.  Async copies share the SM's copy bandwidth and land
no sooner than the copy latency after their issue; async MMA groups share the SM's tensor unit
in issue order (a register op, ``OpRole.VALU_COMPUTE`` such as attention's softmax, holds its
own agent for its latency); a ring phase completes when its arrivals are in and its bytes have
landed; a phase wait blocks its agent until then; a counter wait until the groups it retires are
done.
What comes out is the CTA's cycles for ``tiles`` K tiles, and so cycles per K tile.

The machine's numbers are a target's (:class:`AgentMachine`); the H100 plugin's are calibrated
against measured GEMMs (benchmarks/h100/GEMM_NOTES.md has the table and the rank correlation).
"""
from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

import attrs

from pipeline_core.plan import Plan, PlacedStep, Step, StepKind
from pipeline_core.ops import FrameworkTag, Op, OpRole, Phase, ResourceKind
from pipeline_core.simulate.inputs import MachineModel
from pipeline_core.simulate.timeline import GroupTimeline, Instr, OpTiming, Stall, Summary, Timeline
from pipeline_core.simulate.timeline import Step as SimStep
from pipeline_core.sync.model import SyncModel


@attrs.frozen(kw_only=True)
class AgentMachine:
    """One SM as the agents timing model sees it (cycles, bytes)."""

    copy_latency: float           #: issue of an async copy to its bytes landing, unloaded
    copy_bytes_per_cycle: float   #: sustained async-copy bytes per cycle into one SM
    mma_efficiency: float = 1.0   #: achieved / peak rate of the async MMA unit (op latency = peak)
    step_cycles: float = 1.0      #: issue cost of one sync step (arrive, fence, commit, wait poll)
    wake_cycles: float = 0.0      #: a phase completing to its waiter's next step
    cta_overhead_cycles: float = 0.0  #: per CTA: launch, barrier set-up, the epilogue's stores
    #: what the epilogue's steps cost (a bulk store's, a reduction's finish); None: they are
    #: not modelled, the overhead stands for the epilogue (docs/guide/agents.md, "Timing model")
    epilogue: EpilogueCosts | None = None


@attrs.frozen(kw_only=True)
class EpilogueCosts:
    """The target's costs of an output tile's epilogue steps (cycles; bytes per cycle): a
    staged bulk store's (``AgentProgram.store``) and a cross-CTA reduction's
    (``AgentProgram.finish``).  Why a target declares them: the fitted CTA overhead stands for
    the direct store, so without them the model cannot tell a bulk store from it nor count
    what splitting K costs (docs/guide/agents.md, "Timing model")."""

    #: the share of ``cta_overhead_cycles`` that is the results' direct store: a plan with a
    #: bulk store runs its store steps instead, so this much is not charged for it
    direct_store_cycles: float
    stage_bytes_per_cycle: float       #: one agent's threads writing a staging buffer
    #: the async proxy storing staging buffers to global memory (the SM's rate, shared by the
    #: agents); it holds no agent: a ``store_wait`` waits for its reads of a buffer
    bulk_store_bytes_per_cycle: float
    sync_cycles: float                 #: a named-barrier sync of one agent's threads
    fence_cycles: float                #: a proxy fence (generic writes before async reads)
    slice_bytes_per_cycle: float       #: the SM's agents storing or reading slices
    release_cycles: float              #: a release or acquire fence of global memory
    atomic_cycles: float               #: the counter's atomic arrival, a round trip


@attrs.frozen(kw_only=True)
class Epilogue:
    """What one output tile's epilogue steps cost on the model: per agent that runs them, the
    cycles they held it after its K loop (``held``); the async store's busy cycles, which
    overlap the next output tile (``async_store``); the direct store's share of the overhead not
    charged (``credit``); and the splits the finish was modelled for (its last CTA's reads)."""

    held: tuple[tuple[str, float], ...]
    async_store: float = 0.0
    credit: float = 0.0
    splits: int = 1


@attrs.frozen(kw_only=True)
class Timing:
    tiles: int
    cycles: float              #: the CTA, start to last step, plus the machine's CTA overhead
    mma_busy: float            #: cycles the MMA unit worked
    #: the epilogue steps the run charged (None: none, or the machine declares no costs)
    epilogue: Epilogue | None = None

    @property
    def cycles_per_tile(self) -> float:
        return self.cycles / self.tiles

    @property
    def mma_utilisation(self) -> float:
        return self.mma_busy / self.cycles if self.cycles else 0.0


@attrs.frozen(kw_only=True)
class Taken:
    """One step an agent took: when it reached it, issued it, moved on and saw it complete,
    and what it waited for (the ring or counter channel; "" when it did not wait)."""

    agent: int
    placed: PlacedStep
    ready: float
    start: float
    issue_end: float
    end: float
    waited_on: str = ""
    #: the unit the step occupied and when (an async copy in flight, an MMA group executing)
    busy: tuple[ResourceKind, float, float] | None = None


def simulate(plan: Plan, body: Sequence[Op], machine: AgentMachine, tiles: int, *,
             splits: int = 2) -> Timing:
    """Run every agent of ``plan`` over ``tiles`` K tiles on ``machine`` (see the module); a
    cross-CTA reduction's finish is modelled for ``splits`` CTAs per output tile (2, the
    fewest a split runs, unless the caller knows its shape's)."""
    return run(plan, body, machine, tiles, splits=splits)[0]


def each_tile(plan: Plan, body: Sequence[Op], machine: AgentMachine,
              trips: Sequence[int]) -> Timing:
    """Output tiles of ``trips[i]`` K tiles each (a problem of the plan's trip rule,
    :meth:`~pipeline_core.tiles.TripRule.sample`), their cycles summed.  Each output tile is
    modelled alone, as :func:`simulate` models one; an output tile with no K tile is charged
    nothing (its once copy is not modelled)."""
    each = {n: simulate(plan, body, machine, max(n, plan.min_tiles))
            for n in sorted(set(trips)) if n}
    return Timing(tiles=sum(trips), cycles=sum(each[n].cycles for n in trips if n),
                  mma_busy=sum(each[n].mma_busy for n in trips if n))


def run(plan: Plan, body: Sequence[Op], machine: AgentMachine,
        tiles: int, *, splits: int = 2) -> tuple[Timing, list[Taken]]:
    """:func:`simulate`, with every step each agent took (what :func:`timeline` draws)."""
    if tiles < plan.min_tiles:
        raise ValueError(f"timing model: {tiles} K tiles are fewer than the plan's minimum "
                         f"{plan.min_tiles}")
    rings = {r.name: r for r in plan.rings}
    # one output tile: with a tile split only its owner runs it, and a step that waits on an
    # earlier output tile's turn (Step.output_lag) has none to wait on (docs/guide/agents.md,
    # "Tile splits")
    streams = [[s for s in p.placed(tiles) if s.step.output_lag <= 0]
               if plan.split is None or plan.split.runs(p.name, 0) else []
               for p in plan.programs]
    taken: list[Taken] = []
    pc = [0] * len(streams)
    clock = [0.0] * len(streams)
    groups: list[list[float]] = [[] for _ in streams]   # completion time of each committed group
    open_group: list[list[float]] = [[] for _ in streams]
    arrivals: dict[tuple[str, int, int], list[float]] = {}
    landed: dict[tuple[str, int, int], list[tuple[float, int]]] = {}
    # named barriers (docs/guide/agents.md, "Named barriers"): id -> the agents that join it;
    # (id, tile) -> agent -> when it arrived; a sync passes once every member arrived
    members = {bid: ({t.agent for t in o.turns} if o.scope == "join"
                     else {o.turns[i].agent, o.turns[i - 1].agent})
               for o in plan.orders for i, bid in enumerate(o.barriers)}
    named: dict[tuple[int, int], dict[str, float]] = {}
    state = {"copy_free": 0.0, "mma_free": 0.0, "mma_busy": 0.0}

    def phase_done(ring: str, stage: int, phase: int) -> float | None:
        if phase < 0:
            return 0.0  # the phase a fresh barrier reports complete
        r = rings[ring]
        got = arrivals.get((ring, stage, phase), [])
        data = landed.get((ring, stage, phase), [])
        if len(got) < r.arrivals or sum(b for _, b in data) < r.tx_bytes:
            return None
        return max([*got, *(t for t, _ in data)])

    def where(step: Step, t: int, ring: str) -> tuple[int, int]:
        tile, depth = (0 if step.once else step.tile(t)), rings[ring].stages  # one output tile
        return tile % depth, tile // depth

    def advance(a: int) -> bool:
        """Take agent a's next step; False when it is blocked on a phase."""
        placed = streams[a][pc[a]]
        t, step = placed.t, placed.step
        now = ready = start = clock[a]
        end: float | None = None
        waited = ""
        busy: tuple[ResourceKind, float, float] | None = None
        if step.kind == StepKind.PHASE_WAIT:
            stage, phase = where(step, t, step.channel)
            done = phase_done(step.channel, stage, phase + step.phase_offset)
            if done is None:
                return False
            start = max(now, done + machine.wake_cycles)
            waited = step.channel if start > now else ""
            now = start + machine.step_cycles
        elif step.kind in (StepKind.ARRIVE, StepKind.EXPECT_TX, StepKind.ASYNC_ARRIVE):
            stage, phase = where(step, t, step.channel)
            now += machine.step_cycles
            # an async arrival (each issuing thread's) completes the phase with its copies'
            # landings, which the phase's completion time already takes (``landed``)
            role = plan.programs[a].role
            weight = (role.release_arrivals if step.kind == StepKind.ARRIVE
                      else role.issuers if step.kind == StepKind.ASYNC_ARRIVE else 1)
            arrivals.setdefault((step.channel, stage, phase), []).extend([now] * weight)
        elif step.kind == StepKind.OP:
            op = body[step.op]
            nbytes = plan.op_bytes.get(step.op, 0)
            full = plan.ring_of(step.op, "full")
            if op.role == OpRole.GLOBAL_LOAD and nbytes and full is not None:
                stage, phase = where(step, t, full.name)
                copy = max(now, state["copy_free"])
                state["copy_free"] = copy + nbytes / machine.copy_bytes_per_cycle
                land = max(now + machine.copy_latency, state["copy_free"])
                landed.setdefault((full.name, stage, phase), []).append((land, nbytes))
                end, busy = land, (ResourceKind.GLOBAL_MEM, copy, land)
                now += machine.step_cycles
            elif op.role == OpRole.VALU_COMPUTE:
                # a register op (attention's softmax): the agent's own warps run it
                end, busy = now + op.latency, (op.resource, now, now + op.latency)
                now = end + machine.step_cycles
            else:
                work = op.latency / machine.mma_efficiency
                begin = max(now, state["mma_free"])
                state["mma_free"] = begin + work
                state["mma_busy"] += work
                open_group[a].append(state["mma_free"])
                end, busy = state["mma_free"], (ResourceKind.MMA_UNIT, begin, state["mma_free"])
                now += machine.step_cycles
        elif step.kind in (StepKind.NAMED_SYNC, StepKind.NAMED_ARRIVE):
            gen = named.setdefault((step.barrier, step.tile(t)), {})
            gen.setdefault(plan.programs[a].name, now)
            if step.kind == StepKind.NAMED_SYNC:
                if set(gen) < members.get(step.barrier, set()):
                    return False
                start = max(now, *gen.values())
                waited = step.channel if start > now else ""
                now = start
            now += machine.step_cycles
        elif step.kind == StepKind.COMMIT:
            groups[a].append(max(open_group[a], default=now))
            open_group[a] = []
            now += machine.step_cycles
        elif step.kind == StepKind.COUNTER_WAIT:
            retired = groups[a][:max(0, len(groups[a]) - step.value)]
            start = max([now, *retired])
            waited = step.channel if start > now else ""
            now = start + machine.step_cycles
        else:  # FENCE
            now += machine.step_cycles
        taken.append(Taken(agent=a, placed=placed, ready=ready, start=start, issue_end=now,
                           end=now if end is None else max(end, now), waited_on=waited,
                           busy=busy))
        clock[a] = now
        pc[a] += 1
        return True

    while True:
        live = [(clock[a], a) for a in range(len(streams)) if pc[a] < len(streams[a])]
        if not live:
            break
        heapq.heapify(live)
        progressed = False
        while live:
            _, a = heapq.heappop(live)
            if advance(a):
                progressed = True
                break
        if not progressed:
            stuck = [f"{plan.programs[a].name} at step {pc[a]}" for a in range(len(streams))
                     if pc[a] < len(streams[a])]
            raise ValueError(f"timing model: the agents deadlock ({', '.join(stuck)})")
    epi = None
    if machine.epilogue is not None and (plan.store is not None or plan.reduction is not None):
        clock, epi = epilogue(plan, machine, machine.epilogue, clock, splits)
    total = max(clock) + machine.cta_overhead_cycles - (epi.credit if epi else 0.0)
    return Timing(tiles=tiles, cycles=total, mma_busy=state["mma_busy"], epilogue=epi), taken


def epilogue(plan: Plan, machine: AgentMachine, costs: EpilogueCosts, ends: Sequence[float],
             splits: int) -> tuple[list[float], Epilogue]:
    """Each agent's ``finish`` and one output tile's ``store`` steps after its K loop ended at
    ``ends[agent]``: when each agent is done, and what it cost (docs/guide/agents.md, "Timing
    model").  The finish is the last arriving CTA's (it runs every step, reading ``splits``
    slices).  The agent with the earliest clock takes its next step, as in :func:`run`; a
    ``store_issue`` hands its buffer to the SM's global-memory path (one per SM, shared by the
    agents), and a ``store_wait`` N waits until every group but the newest N has read its
    buffer; a slice's stores and reads hold their agent on the same path.  The ``drain`` runs
    once after the CTA's last output tile, so one tile is not charged it: its stores overlap
    the next."""
    red, st = plan.reduction, plan.store
    slice_bytes = red.slice_bytes if red is not None else 0
    subtile = st.subtile_bytes if st is not None else 0
    streams = [list(p.finish) + list(p.store) * (st.subtiles if st is not None else 0)
               for p in plan.programs]
    clock, pc = list(ends), [0] * len(streams)
    read_done: list[list[float]] = [[] for _ in streams]   # per committed group
    open_group: list[list[float]] = [[] for _ in streams]
    unit = {"free": 0.0, "busy": 0.0}
    fixed = {StepKind.RELEASE_FENCE: costs.release_cycles,
             StepKind.COUNT_ACQUIRE: costs.release_cycles,
             StepKind.COUNT_ARRIVE: costs.atomic_cycles, StepKind.COUNT_RESET: costs.sync_cycles,
             StepKind.NAMED_SYNC: costs.sync_cycles, StepKind.PROXY_FENCE: costs.fence_cycles,
             StepKind.STAGE_WRITE: subtile / costs.stage_bytes_per_cycle}
    while True:
        live = [(clock[a], a) for a in range(len(streams)) if pc[a] < len(streams[a])]
        if not live:
            break
        a = min(live)[1]
        step, now = streams[a][pc[a]], clock[a]
        if step.kind == StepKind.STORE_WAIT:
            older = read_done[a][:max(0, len(read_done[a]) - step.value)]
            now = max([now, *older]) + machine.step_cycles
        elif step.kind == StepKind.STORE_ISSUE:
            begin = max(now, unit["free"])
            unit["free"] = begin + subtile / costs.bulk_store_bytes_per_cycle
            unit["busy"] += unit["free"] - begin
            open_group[a].append(unit["free"])
            now += machine.step_cycles
        elif step.kind in (StepKind.SLICE_STORE, StepKind.SLICE_READ):
            # the agent's own loads and stores, on the SM's global-memory rate
            nbytes = slice_bytes * (splits if step.kind == StepKind.SLICE_READ else 1)
            begin = max(now, unit["free"])
            now = unit["free"] = begin + nbytes / costs.slice_bytes_per_cycle
        elif step.kind == StepKind.STORE_COMMIT:
            read_done[a].append(max(open_group[a], default=now))
            open_group[a] = []
            now += machine.step_cycles
        else:
            now += fixed.get(step.kind, machine.step_cycles)
        clock[a] = now
        pc[a] += 1
    held = tuple((p.name, clock[a] - ends[a]) for a, p in enumerate(plan.programs) if streams[a])
    credit = costs.direct_store_cycles if st is not None and subtile else 0.0
    return clock, Epilogue(held=held, async_store=unit["busy"], credit=credit,
                           splits=splits if red is not None else 1)


_KIND = {StepKind.OP: "op", StepKind.PHASE_WAIT: "wait", StepKind.COUNTER_WAIT: "wait",
         StepKind.COMMIT: "commit", StepKind.ARRIVE: "op", StepKind.EXPECT_TX: "op",
         StepKind.ASYNC_ARRIVE: "op", StepKind.PROXY_FENCE: "hint",
         StepKind.DESCRIPTOR_ACQUIRE: "hint",
         StepKind.FENCE: "hint", StepKind.NAMED_SYNC: "wait", StepKind.NAMED_ARRIVE: "op",
         StepKind.TURN_WAIT: "wait", StepKind.TURN_DRAIN: "wait", StepKind.TURN_FENCE: "hint",
         StepKind.TURN_RELEASE: "op"}
_PHASE = {"prologue": Phase.PROLOGUE, "kernel": Phase.KERNEL, "epilogue": Phase.EPILOGUE}


def timeline(plan: Plan, body: Sequence[Op], machine: AgentMachine, tiles: int, *,
             name: str, names: Mapping[int, str], sync: SyncModel | None,
             clock_ghz: float | None = None) -> Timeline:
    """The run as the exporters' :class:`~pipeline_core.simulate.Timeline`: one track per agent
    (named after its role), the MMA unit and the copies in flight; its headline figures are the
    model's own (cycles per K tile over the whole run, what ``analyze`` reports)."""
    from pipeline_core.export.notation import isa_form
    from pipeline_core.agents.views import is_after_loop
    from pipeline_core.simulate.engine import assign_lanes, spans_of

    timing, taken = run(plan, body, machine, tiles)
    per_agent: list[list[Taken]] = [[] for _ in plan.programs]
    for k in taken:
        per_agent[k.agent].append(k)
    busy_raw = []
    groups = []
    for a, (prog, mine) in enumerate(zip(plan.programs, per_agent)):
        steps = []
        for seq, k in enumerate(mine):
            p, step = k.placed, k.placed.step
            after = is_after_loop(prog, p.section, p.iteration, p.position)
            if step.kind == StepKind.OP:
                op = body[step.op]
            else:
                op = Op(tag=step.tag if step.tag >= 0 else int(FrameworkTag.NONE),
                        resource=ResourceKind.SCALAR, role=OpRole.SYNC, wait_value=step.value)
            phase = _PHASE[p.section]
            instr = Instr(op, phase, p.t if phase == Phase.KERNEL else -1, p.position,
                          text=isa_form(step, plan, body, names, sync, after_loop=after))
            cost = OpTiming(op.resource, op.latency, "", 0, _KIND[step.kind],
                            waits_on=step.channel if step.kind in (
                                StepKind.PHASE_WAIT, StepKind.COUNTER_WAIT,
                                StepKind.NAMED_SYNC) else "")
            stall = (Stall(round(k.start) - round(k.ready), k.waited_on,
                           f"{k.waited_on}: {round(k.start) - round(k.ready)} cycles")
                     if k.waited_on and round(k.start) > round(k.ready) else None)
            steps.append(SimStep(a, seq, instr, cost, round(k.ready), round(k.start),
                                 round(k.issue_end), round(k.end), stall))
            if k.busy is not None:
                busy_raw.append((k.busy[0], a, seq, round(k.busy[1]), round(k.busy[2])))
        finish = max((s.issue_end for s in steps), default=0)
        starts = []
        for i in range(tiles):
            first = next((s for s, k in zip(steps, mine) if k.placed.t >= i
                          and k.placed.section != "epilogue"), None)
            starts.append(first.ready if first is not None else finish)
        epilogue = next((s for s in steps if s.phase == Phase.EPILOGUE), None)
        starts.append(epilogue.ready if epilogue is not None else finish)
        groups.append(GroupTimeline(a, tuple(steps), spans_of(steps), tuple(starts),
                                    name=prog.name))
    bound = timing.mma_busy / tiles
    makespan = max((g.finish for g in groups), default=0)
    figures = Summary(
        makespan=makespan, iterations=tiles, groups=len(groups),
        steady_state_cycles=timing.cycles_per_tile, period=1, window=(0, tiles),
        mma_busy=round(timing.mma_busy), mma_utilisation=timing.mma_utilisation,
        steady_mma_utilisation=timing.mma_utilisation, mma_bound_cycles=round(bound),
        stall_cycles=tuple(g.stall_cycles for g in groups))
    waits = dict.fromkeys(s.channel for p in plan.programs for s in p.kernel
                          if s.kind in (StepKind.PHASE_WAIT, StepKind.COUNTER_WAIT,
                                        StepKind.NAMED_SYNC))
    return Timeline(
        name=name, model=MachineModel(clock_ghz=clock_ghz), iterations=tiles,
        groups=tuple(groups), busy=assign_lanes(busy_raw), barriers=(), tag_names=dict(names),
        channels=tuple((w, w) for w in waits), sync=sync,
        model_text=(f"agents model: copy latency {machine.copy_latency:g}, "
                    f"{machine.copy_bytes_per_cycle:g} bytes/cycle, MMA efficiency "
                    f"{machine.mma_efficiency:g}, {machine.step_cycles:g} cycle(s)/step, CTA "
                    f"overhead {machine.cta_overhead_cycles:g} (docs/guide/agents.md)"),
        figures=figures)
