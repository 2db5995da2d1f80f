"""The agents checker proves the injected plans safe over every timing and refuses each unsafe
edit with the hazard it causes (docs/guide/agents.md, "What the checker proves")."""
from __future__ import annotations

import attrs
import pytest

import agents_fixtures as fx
from pipeline_core.agents import AgentProgram, AgentRole, Step, StepKind
from pipeline_core.agents.prove import prove_plan, tile_counts
from pipeline_core.check.mutate import AgentMutation, agent_mutations
from pipeline_core.check.verdict import HazardKind as H


def verdict(plan, readers=2):
    return prove_plan(plan, fx.body(readers), fx.edges(readers, plan.stages), fx.SYNC,
                      name="test", names=fx.NAMES)


def kinds(v):
    return {x.kind for x in v.violations}


def mutated(plan, category, agent, section="kernel", delta=1, iteration=0):
    prog = plan.program(agent)
    steps = prog.kernel if section == "kernel" else getattr(prog, section)[iteration]
    wanted = {"drop_arrive": StepKind.ARRIVE, "loosen_counter_wait": StepKind.COUNTER_WAIT,
              "flip_phase_offset": StepKind.PHASE_WAIT, "drop_acquire": StepKind.PHASE_WAIT}
    index = next(i for i, s in enumerate(steps) if s.kind == wanted[category])
    return AgentMutation(category=category, agent=agent, section=section, iteration=iteration,
                         index=index, description=category, delta=delta).apply(plan)


@pytest.mark.parametrize("stages", [2, 3, 4, 5])
@pytest.mark.parametrize("readers", [1, 2, 3])
def test_every_injected_plan_is_safe(stages, readers):
    for lag in range(stages):
        v = verdict(fx.plan(stages, readers, lag), readers)
        assert v.safe, (stages, readers, lag, v.render_text())


def test_the_tile_counts_cover_every_tail():
    plan = fx.plan(stages=4)
    counts = tile_counts(plan)
    assert plan.min_tiles in counts
    assert {c % 4 for c in counts if c > plan.min_tiles + 8} == {0, 1, 2, 3}


def test_a_dropped_release_deadlocks_the_producer():
    v = verdict(mutated(fx.plan(), "drop_arrive", "consumer1"))
    first = v.first
    assert first.kind == H.DEADLOCK and first.site.agent == "producer"
    assert "consumer1 never arrives" in first.message and "empty[0]" in first.message


def test_a_dropped_release_after_the_loop_leaves_the_ring_unbalanced():
    v = verdict(mutated(fx.plan(), "drop_arrive", "consumer0", section="epilogue"))
    assert v.first.kind == H.DEADLOCK and "left incomplete" in v.first.message


def test_a_loosened_wgmma_wait_is_a_war_with_the_fix():
    plan = fx.plan(release_lag=1)
    v = verdict(mutated(plan, "loosen_counter_wait", "consumer0"))
    first = v.first
    assert first.kind == H.SMEM_WAR and first.site.agent == "consumer0"
    assert first.site.phase == "kernel" and "WAIT_GROUPS(2)" in first.site.op
    assert first.fix.action == "lower_wait" and first.fix.value == 1
    assert first.fix.text == "lower WAIT_GROUPS to 1"


@pytest.mark.parametrize("lag", [0, 2, 3])
def test_loosening_any_release_wait_is_a_war(lag):
    plan = fx.plan(stages=4, release_lag=lag)
    v = verdict(mutated(plan, "loosen_counter_wait", "consumer1"))
    assert v.first.kind == H.SMEM_WAR and v.first.fix.value == lag


def test_a_dropped_acquire_lets_the_copy_overwrite_a_stage():
    v = verdict(mutated(fx.plan(), "drop_acquire", "producer"))
    first = v.first
    assert first.kind == H.SMEM_WAR and first.site.agent == "producer"
    assert "TMA" not in first.site.op and "COPY for tile 4" in first.site.op
    assert first.fix.action == "insert_wait" and "empty[0]" in first.fix.text
    assert H.PHASE_OVERRUN in kinds(v)  # its next expect-tx may land in the pending phase


def test_a_phase_offset_one_early_is_a_parity_error():
    v = verdict(mutated(fx.plan(), "flip_phase_offset", "consumer0", delta=-1))
    assert v.first.kind == H.PHASE_PARITY
    assert "phase -1" in v.first.message or "phase -1" in v.first.site.op
    assert v.first.fix.text == "set the wait's phase_offset to 0"
    assert H.SMEM_RAW in kinds(v)  # and the read may see the stage before the copy lands


def test_a_phase_offset_one_late_deadlocks():
    v = verdict(mutated(fx.plan(), "flip_phase_offset", "consumer0", delta=1))
    assert v.first.kind == H.DEADLOCK and "never completes" in v.first.message


def test_an_acquire_of_its_own_phase_is_a_cycle():
    v = verdict(mutated(fx.plan(), "flip_phase_offset", "producer", delta=1))
    assert v.first.kind == H.DEADLOCK and "waits on itself" in v.first.message


def test_an_acquire_two_phases_back_lags():
    v = verdict(mutated(fx.plan(), "flip_phase_offset", "producer", delta=-1))
    assert {H.PHASE_PARITY, H.PHASE_LAG} <= kinds(v)


def test_every_single_step_mutation_is_refused():
    plan = fx.plan(stages=3, release_lag=1)
    mutations = list(agent_mutations(plan))
    assert {m.category for m in mutations} == {"drop_arrive", "loosen_counter_wait",
                                               "flip_phase_offset", "drop_acquire"}
    # the lowering leaves out an after-the-loop wait(0) the last release's wait(0) already did,
    # so no mutation is a no-op that stays safe
    assert [m.description for m in mutations if verdict(m.apply(plan)).safe] == []


def _edit(plan, agent, **sections):
    prog = attrs.evolve(plan.program(agent), **sections)
    return attrs.evolve(plan, programs=[prog if p.name == agent else p for p in plan.programs])


def test_a_wait_out_of_range_is_refused():
    plan = fx.plan()
    kernel = [attrs.evolve(s, value=-1) if s.kind == StepKind.COUNTER_WAIT else s
              for s in plan.program("consumer0").kernel]
    v = verdict(_edit(plan, "consumer0", kernel=kernel))
    assert H.WAIT_RANGE in kinds(v)
    assert any("0..7" in x.message for x in v.violations if x.kind == H.WAIT_RANGE)


def test_a_pending_group_at_the_end_is_an_accumulator_hazard():
    plan = fx.plan(release_lag=1)
    prog = plan.program("consumer0")
    last = [s for s in prog.epilogue[-1] if s.kind != StepKind.COUNTER_WAIT]
    v = verdict(_edit(plan, "consumer0", epilogue=[last]))
    acc = [x for x in v.violations if x.kind == H.ACC_RAW]
    assert acc and acc[0].fix.text == "end consumer0's epilogue with WAIT_GROUPS(0)"


def test_a_missing_fence_is_an_accumulator_hazard():
    plan = fx.plan()
    prog = plan.program("consumer1")
    strip = lambda steps: [s for s in steps if s.kind != StepKind.FENCE]  # noqa: E731
    v = verdict(_edit(plan, "consumer1", prologue=[strip(i) for i in prog.prologue],
                      kernel=strip(prog.kernel)))
    assert [x.kind for x in v.violations] == [H.ACC_RAW] and "fence" in v.first.message


@pytest.mark.parametrize("delta, kind", [(1024, H.DEADLOCK), (-1024, H.SMEM_RAW)])
def test_announced_bytes_must_match_the_copies(delta, kind):
    plan = fx.plan()
    kernel = [attrs.evolve(s, value=s.value + delta) if s.kind == StepKind.EXPECT_TX else s
              for s in plan.program("producer").kernel]
    v = verdict(_edit(plan, "producer", kernel=kernel))
    assert v.first.kind == kind


def test_a_waiter_that_does_not_release_may_lag_a_phase():
    plan = fx.plan(stages=2, readers=1)
    watcher = AgentProgram(role=AgentRole(name="watcher", ops=()),
                           prologue=[()], kernel=[Step(kind=StepKind.PHASE_WAIT, channel="full",
                                                       tag=fx.PHASE_WAIT)], epilogue=[])
    v = verdict(attrs.evolve(plan, programs=[*plan.programs, watcher]), readers=1)
    assert H.PHASE_LAG in kinds(v)
    early = AgentProgram(role=AgentRole(name="watcher", ops=()), prologue=[(), ()],
                         kernel=[Step(kind=StepKind.PHASE_WAIT, channel="full",
                                      tag=fx.PHASE_WAIT)], epilogue=[])
    v = verdict(attrs.evolve(plan, programs=[*plan.programs, early]), readers=1)
    stale = [x for x in v.violations if x.kind == H.PHASE_PARITY]
    assert stale and "passes early" in stale[0].message and stale[0].site.agent == "watcher"


def test_the_verdict_is_deterministic_and_serialisable():
    plan = mutated(fx.plan(), "loosen_counter_wait", "consumer0")
    a, b = verdict(plan).to_json(), verdict(plan).to_json()
    assert a == b and '"agent": "consumer0"' in a
