"""The agents timing model (pipeline_core/agents/timing.py) on the target-neutral fixture."""
from __future__ import annotations

import attrs
import pytest

import agents_fixtures as fx
from pipeline_core.plan import StepKind
from pipeline_core.agents.timing import AgentMachine, simulate
from pipeline_core.check.mutate import agent_mutations

MMA_CYCLES = 400
MACHINE = AgentMachine(copy_latency=1000, copy_bytes_per_cycle=32, mma_efficiency=1.0,
                       step_cycles=1, wake_cycles=0, cta_overhead_cycles=0)


def _body():
    return [attrs.evolve(o, latency=MMA_CYCLES) if o.tag == fx.MMA else o for o in fx.body()]


def _per_tile(stages: int, machine: AgentMachine = MACHINE, tiles: int = 64, lag: int = 1) -> float:
    return simulate(fx.plan(stages=stages, release_lag=lag), _body(), machine, tiles).cycles_per_tile


def test_a_deep_ring_runs_at_the_mma_units_rate():
    work = 2 * MMA_CYCLES  # two consumers share one MMA unit
    per_tile = _per_tile(4)
    assert work <= per_tile <= 1.1 * work
    t = simulate(fx.plan(stages=4), _body(), MACHINE, 64)
    assert t.mma_busy == 64 * work and t.mma_utilisation > 0.9


def test_deeper_rings_are_never_slower_and_two_stages_pay_the_copy_latency():
    s2, s3, s4 = (_per_tile(s) for s in (2, 3, 4))
    assert s2 >= s3 >= s4
    slow = attrs.evolve(MACHINE, copy_latency=4000)
    assert _per_tile(2, slow) > 1.5 * s2          # the latency is on the 2-stage recurrence
    assert _per_tile(4, slow) < _per_tile(2, slow) / 2  # four stages overlap four latencies


def test_the_copy_bandwidth_bounds_a_tile():
    starved = attrs.evolve(MACHINE, copy_bytes_per_cycle=1)
    assert _per_tile(4, starved) >= 1024 + 2048  # each tile's bytes at one byte per cycle


def test_the_efficiency_and_overhead_scale_as_declared():
    half = attrs.evolve(MACHINE, mma_efficiency=0.5)
    assert _per_tile(4, half) >= 2 * 2 * MMA_CYCLES
    tiles = 16
    base = simulate(fx.plan(), _body(), MACHINE, tiles).cycles
    more = simulate(fx.plan(), _body(), attrs.evolve(MACHINE, cta_overhead_cycles=500), tiles).cycles
    assert more == base + 500


def test_a_plan_that_deadlocks_is_an_error_not_a_figure():
    plan = fx.plan(stages=2)
    drop = next(m for m in agent_mutations(plan, ("drop_arrive",)) if m.section == "kernel")
    with pytest.raises(ValueError, match="deadlock"):
        simulate(drop.apply(plan), _body(), MACHINE, 16)


def test_fewer_tiles_than_the_plan_needs_are_refused():
    plan = fx.plan(release_lag=2)
    assert any(s.kind == StepKind.ARRIVE for s in plan.program("consumer0").kernel)
    with pytest.raises(ValueError, match="fewer than"):
        simulate(plan, _body(), MACHINE, plan.min_tiles - 1)


def test_the_timeline_is_the_same_run_as_the_figures():
    """The exporters' view of a run (agents.timing.timeline) is the run simulate() measures:
    every step each agent takes, in order, the MMA unit busy as long, the same cycles per tile."""
    from pipeline_core.agents.timing import timeline
    from pipeline_core.ops import ResourceKind

    plan, tiles = fx.plan(stages=3), 16
    t = simulate(plan, _body(), MACHINE, tiles)
    tl = timeline(plan, _body(), MACHINE, tiles, name="fixture", names={}, sync=None)
    assert [g.title for g in tl.groups] == [p.name for p in plan.programs]
    for g, prog in zip(tl.groups, plan.programs):
        assert len(g.steps) == len(prog.placed(tiles))
        assert all(s.ready <= s.start <= s.issue_end and s.start <= s.end for s in g.steps)
        assert all(a.issue_end == b.ready for a, b in zip(g.steps, g.steps[1:]))
        assert len(g.iteration_starts) == tiles + 1
    assert tl.summary().steady_state_cycles == t.cycles_per_tile
    assert sum(b.end - b.start for b in tl.busy_on(ResourceKind.MMA_UNIT)) == t.mma_busy
    # a 3-stage ring with a 1000-cycle copy makes the consumers wait on the full ring
    reasons = {r for g in tl.groups for r in g.stalls_by_reason()}
    assert any(r == "full" for r in reasons), reasons


# --- the epilogue's steps: a bulk store and a cross-CTA reduction's finish ------------------
# (docs/guide/agents.md, "Timing model"; the fixture's sync models of test_agents_store.py and
# test_agents_reduction.py)

from pipeline_core.agents.timing import EpilogueCosts  # noqa: E402
from pipeline_core.plan import ReductionSpec, StoreSpec  # noqa: E402

COSTS = EpilogueCosts(direct_store_cycles=3000, stage_bytes_per_cycle=128,
                      bulk_store_bytes_per_cycle=32, sync_cycles=20, fence_cycles=2,
                      slice_bytes_per_cycle=32, release_cycles=300, atomic_cycles=300)
COSTED = attrs.evolve(MACHINE, cta_overhead_cycles=4000, epilogue=COSTS)
SUBTILE = 8192


def _lowered(sync, **kw):
    from pipeline_core.agents.inject import lower_agents

    return lower_agents(fx.body(), fx.edges(), sync, stages=4,
                        spec=attrs.evolve(fx.spec(), **kw), owner="schedule t", target="t")


def _store_plan(subtiles: int = 4, buffers: int = 2):
    from test_agents_store import STORE_SYNC

    return _lowered(STORE_SYNC, store=StoreSpec(buffers=buffers, subtiles=subtiles,
                                                subtile_bytes=SUBTILE))


def _reduction_plan(slice_bytes: int = 65536):
    from test_agents_reduction import RED_SYNC

    return _lowered(RED_SYNC, reduction=ReductionSpec(slice_bytes=slice_bytes))


def test_without_epilogue_costs_a_store_or_a_finish_changes_nothing():
    """A machine that declares no costs keeps the figures of a plan without the steps (what
    every existing ``analyze`` output rests on)."""
    base = simulate(fx.plan(), _body(), attrs.evolve(MACHINE, cta_overhead_cycles=4000), 16)
    for plan in (_store_plan(), _reduction_plan()):
        t = simulate(plan, _body(), attrs.evolve(MACHINE, cta_overhead_cycles=4000), 16)
        assert t.cycles == base.cycles and t.epilogue is None
    assert simulate(fx.plan(), _body(), COSTED, 16) == attrs.evolve(base, epilogue=None)


def test_the_bulk_store_holds_its_agents_less_than_the_direct_store_it_replaces():
    tiles = 16
    direct = simulate(fx.plan(), _body(), COSTED, tiles)
    staged = simulate(_store_plan(), _body(), COSTED, tiles)
    e = staged.epilogue
    assert e is not None and e.credit == COSTS.direct_store_cycles
    assert [a for a, _ in e.held] == ["consumer0", "consumer1"]
    # the async store ran every sub-tile of both agents; the agents were held for less: only
    # the staging writes, fences, syncs and the waits for a buffer's reads hold them
    assert e.async_store == 2 * 4 * SUBTILE / COSTS.bulk_store_bytes_per_cycle
    assert max(c for _, c in e.held) < e.async_store
    assert staged.cycles < direct.cycles


def test_a_buffer_is_reused_only_after_the_async_store_read_it():
    """With one buffer each sub-tile waits for the previous one's store; more buffers let the
    staging run ahead, so the agents are held for less."""
    held = {b: max(c for _, c in simulate(_store_plan(buffers=b), _body(), COSTED, 16)
                   .epilogue.held) for b in (1, 2, 3)}
    assert held[1] > held[2] >= held[3]
    one = simulate(_store_plan(subtiles=4, buffers=1), _body(), COSTED, 16).epilogue
    assert max(c for _, c in one.held) >= 3 * SUBTILE / COSTS.bulk_store_bytes_per_cycle


def test_more_sub_tiles_hold_the_agents_longer():
    cycles = [simulate(_store_plan(subtiles=n), _body(), COSTED, 16).cycles for n in (1, 2, 4, 8)]
    assert cycles == sorted(cycles) and cycles[0] < cycles[-1]


def test_the_finish_adds_cycles_in_proportion_to_the_slices_it_reads():
    plan, tiles = _reduction_plan(), 16
    base = simulate(fx.plan(), _body(), COSTED, tiles).cycles
    cycles = {s: simulate(plan, _body(), COSTED, tiles, splits=s).cycles for s in (2, 3, 4, 8)}
    # each further split is one more slice per agent read back (the agents share the SM's rate)
    per_slice = 2 * 65536 / COSTS.slice_bytes_per_cycle
    for a, b in ((2, 3), (3, 4), (4, 8)):
        assert cycles[b] - cycles[a] == pytest.approx((b - a) * per_slice)
    # one agent's slice stored and two read, its fences and the atomic, at least (the other
    # agent's may overlap its K loop's end)
    assert cycles[2] >= base + 3 * per_slice / 2 + 2 * COSTS.release_cycles + COSTS.atomic_cycles
    assert simulate(plan, _body(), COSTED, tiles, splits=4).epilogue.splits == 4


def test_the_epilogue_run_is_deterministic():
    runs = [simulate(_store_plan(), _body(), COSTED, 16) for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]


def test_sizes_the_epilogue_cannot_have_are_refused_in_one_line():
    from test_agents_reduction import RED_SYNC
    from test_agents_store import STORE_SYNC

    from pipeline_core.errors import ProgramError

    with pytest.raises(ProgramError, match=r"AgentSpec.store store: subtiles=0, subtile_bytes=8;"
                                           r" give subtiles >= 1"):
        _lowered(STORE_SYNC, store=StoreSpec(subtiles=0, subtile_bytes=8))
    with pytest.raises(ProgramError, match=r"AgentSpec.reduction split_k: slice_bytes=-1; give"):
        _lowered(RED_SYNC, reduction=ReductionSpec(slice_bytes=-1))
