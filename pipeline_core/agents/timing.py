"""The agents timing model: one CTA's agents run their compiled programs on one SM's machine.

A discrete-event walk of the unrolled programs (docs/guide/agents.md, "Timing model"): the agent
with the earliest clock takes its next step.  Async copies share the SM's copy bandwidth and land
no sooner than the copy latency after their issue; async MMA groups share the SM's tensor unit
in issue order; a ring phase completes when its arrivals are in and its bytes have landed; a
phase wait blocks its agent until then; a counter wait until the groups it retires are done.
What comes out is the CTA's cycles for ``tiles`` K tiles, and so cycles per K tile.

The machine's numbers are a target's (:class:`AgentMachine`); the H100 plugin's are calibrated
against measured GEMMs (benchmarks/h100/GEMM_NOTES.md has the table and the rank correlation).
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence

import attrs

from pipeline_core.agents.model import AgentPlan, Step, StepKind
from pipeline_core.ops import Op, OpRole


@attrs.frozen(kw_only=True)
class AgentMachine:
    """One SM as the agents timing model sees it (cycles, bytes)."""

    copy_latency: float           #: issue of an async copy to its bytes landing, unloaded
    copy_bytes_per_cycle: float   #: sustained async-copy bytes per cycle into one SM
    mma_efficiency: float = 1.0   #: achieved / peak rate of the async MMA unit (op latency = peak)
    step_cycles: float = 1.0      #: issue cost of one sync step (arrive, fence, commit, wait poll)
    wake_cycles: float = 0.0      #: a phase completing to its waiter's next step
    cta_overhead_cycles: float = 0.0  #: per CTA: launch, barrier set-up, the epilogue's stores


@attrs.frozen(kw_only=True)
class Timing:
    tiles: int
    cycles: float              #: the CTA, start to last step, plus the machine's CTA overhead
    mma_busy: float            #: cycles the MMA unit worked

    @property
    def cycles_per_tile(self) -> float:
        return self.cycles / self.tiles

    @property
    def mma_utilisation(self) -> float:
        return self.mma_busy / self.cycles if self.cycles else 0.0


def simulate(plan: AgentPlan, body: Sequence[Op], machine: AgentMachine, tiles: int) -> Timing:
    """Run every agent of ``plan`` over ``tiles`` K tiles on ``machine`` (see the module)."""
    if tiles < plan.min_tiles:
        raise ValueError(f"timing model: {tiles} K tiles are fewer than the plan's minimum "
                         f"{plan.min_tiles}")
    rings = {r.name: r for r in plan.rings}
    streams = [p.unrolled(tiles) for p in plan.programs]
    pc = [0] * len(streams)
    clock = [0.0] * len(streams)
    groups: list[list[float]] = [[] for _ in streams]   # completion time of each committed group
    open_group: list[list[float]] = [[] for _ in streams]
    arrivals: dict[tuple[str, int, int], list[float]] = {}
    landed: dict[tuple[str, int, int], list[tuple[float, int]]] = {}
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

    def where(step: Step, t: int) -> tuple[int, int]:
        tile = step.tile(t)
        return tile % plan.stages, tile // plan.stages

    def advance(a: int) -> bool:
        """Take agent a's next step; False when it is blocked on a phase."""
        t, step = streams[a][pc[a]]
        now = clock[a]
        if step.kind == StepKind.PHASE_WAIT:
            stage, phase = where(step, t)
            done = phase_done(step.channel, stage, phase + step.phase_offset)
            if done is None:
                return False
            now = max(now, done + machine.wake_cycles) + machine.step_cycles
        elif step.kind in (StepKind.ARRIVE, StepKind.EXPECT_TX):
            stage, phase = where(step, t)
            now += machine.step_cycles
            weight = plan.programs[a].role.release_arrivals if step.kind == StepKind.ARRIVE else 1
            arrivals.setdefault((step.channel, stage, phase), []).extend([now] * weight)
        elif step.kind == StepKind.OP:
            op = body[step.op]
            nbytes = plan.op_bytes.get(step.op, 0)
            if op.role == OpRole.GLOBAL_LOAD and nbytes:
                stage, phase = where(step, t)
                start = max(now, state["copy_free"])
                state["copy_free"] = start + nbytes / machine.copy_bytes_per_cycle
                land = max(now + machine.copy_latency, state["copy_free"])
                full = next(r.name for r in plan.rings if r.kind == "full")
                landed.setdefault((full, stage, phase), []).append((land, nbytes))
                now += machine.step_cycles
            else:
                work = op.latency / machine.mma_efficiency
                start = max(now, state["mma_free"])
                state["mma_free"] = start + work
                state["mma_busy"] += work
                open_group[a].append(state["mma_free"])
                now += machine.step_cycles
        elif step.kind == StepKind.COMMIT:
            groups[a].append(max(open_group[a], default=now))
            open_group[a] = []
            now += machine.step_cycles
        elif step.kind == StepKind.COUNTER_WAIT:
            retired = groups[a][:max(0, len(groups[a]) - step.value)]
            now = max([now, *retired]) + machine.step_cycles
        else:  # FENCE
            now += machine.step_cycles
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
    total = max(clock) + machine.cta_overhead_cycles
    return Timing(tiles=tiles, cycles=total, mma_busy=state["mma_busy"])
