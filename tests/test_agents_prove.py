"""The agents checker proves the injected plans safe over every timing and refuses each unsafe
edit with the hazard it causes (docs/guide/agents.md, "What the checker proves")."""
from __future__ import annotations

import attrs
import pytest

import agents_fixtures as fx
from pipeline_core.agents import AgentProgram, AgentRole, Step, StepKind
from pipeline_core.agents.prove import OUTPUT_TILES, prove_plan, tile_counts
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
              "flip_phase_offset": StepKind.PHASE_WAIT, "drop_acquire": StepKind.PHASE_WAIT,
              "drop_mma": StepKind.OP}
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
                                               "flip_phase_offset", "drop_acquire", "drop_mma"}
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


# --- completeness and the persistent ring (issue 23) --------------------------------------

@pytest.mark.parametrize("section, iteration, tile", [("prologue", 0, 0), ("prologue", 1, 1),
                                                       ("kernel", 0, 2)])
def test_a_dropped_mma_step_is_a_missing_product(section, iteration, tile):
    plan = fx.plan(stages=4, readers=1, release_lag=2)
    v = verdict(mutated(plan, "drop_mma", "consumer0", section, iteration=iteration), readers=1)
    # nothing else notices: the release of that tile has no reads to wait for
    assert kinds(v) == {H.MISSING_PRODUCT}
    first = v.first
    assert first.site.agent == "consumer0" and first.site.phase == section
    assert f"MMA for tile {tile} (missing)" in first.site.op
    assert f"never runs for K tile {tile}" in first.message
    assert first.fix.text == f"restore consumer0's MMA step for tile {tile}"


def test_an_mma_step_run_twice_is_a_duplicate_product():
    plan = fx.plan(stages=3, readers=2)
    prog = plan.program("consumer1")
    mma = next(s for s in prog.kernel if s.kind == StepKind.OP)
    v = verdict(_edit(plan, "consumer1", kernel=[*prog.kernel, mma]))
    dup = [x for x in v.violations if x.kind == H.DUPLICATE_PRODUCT]
    assert dup and dup[0].site.agent == "consumer1" and "accumulated twice" in dup[0].message


@pytest.mark.parametrize("stages", [2, 4])
def test_a_sole_consumer_dropping_a_release_after_the_loop_deadlocks(stages):
    """One consumer: its after-the-loop release is the stage's only arrival for that tile, so
    no half-filled phase shows it; the ring still ends a phase behind (docs/guide/agents.md)."""
    plan = fx.plan(stages=stages, readers=1, release_lag=1)
    v = verdict(mutated(plan, "drop_arrive", "consumer0", "epilogue"), readers=1)
    assert v.first.kind == H.DEADLOCK
    assert "gets none of its 4 arrivals" in v.first.message
    assert "consumer0 never arrives" in v.first.message and v.first.site.agent == "consumer0"
    assert v.first.fix.text.startswith("restore consumer0's arrive on empty[")


def test_the_next_output_tile_waits_on_the_dropped_release():
    """The second output tile's acquire hangs on the stage the first one left a phase behind:
    the hand-over is proven, not only the ledger."""
    plan = mutated(fx.plan(stages=2, readers=1, release_lag=1), "drop_arrive", "consumer0",
                   "epilogue")
    v = verdict(plan, readers=1)
    hang = [x for x in v.violations if x.kind == H.DEADLOCK and x.site.agent == "producer"]
    assert 2 in OUTPUT_TILES and hang and "of output tile 2" in hang[0].site.op


def test_the_proof_unrolls_two_output_tiles():
    v = verdict(fx.plan(stages=3))
    assert v.safe and v.model["output_tiles"] == [1, 2]
    assert any("output tiles per CTA" in a for a in v.model["assumptions"])


def test_a_hazard_of_every_output_tile_is_reported_once():
    plan = fx.plan()
    prog = plan.program("consumer1")
    strip = [s for s in prog.kernel if s.kind != StepKind.FENCE]
    v = verdict(_edit(plan, "consumer1", prologue=[[s for s in i if s.kind != StepKind.FENCE]
                                                   for i in prog.prologue], kernel=strip))
    assert len(v.violations) == 1


# --- the whole mutation set, judged ------------------------------------------------------

def _drained(plan, m) -> bool:
    """The loosened wait is an after-the-loop drain whose channel an earlier wait(0) of the
    same agent already drained, with no commit since: it retires nothing at any value."""
    if m.section != "epilogue":
        return False
    prog = plan.program(m.agent)
    for tiles in tile_counts(plan):
        placed = prog.placed(tiles)
        at = next(n for n, p in enumerate(placed) if (p.section, p.iteration, p.position)
                  == (m.section, m.iteration, m.index))
        step = placed[at].step
        earlier = next((p.step for p in reversed(placed[:at]) if p.step.channel == step.channel
                        and p.step.kind in (StepKind.COMMIT, StepKind.COUNTER_WAIT)), None)
        if earlier is None or earlier.kind == StepKind.COMMIT or earlier.value != 0:
            return False
    return True


#: every kind of mutation the agents checker accepts, and the test that shows it harmless
HARMLESS = {
    "loosen_counter_wait": ("an after-the-loop wait(0) after the last release's own wait(0) "
                            "(release_lag 0): no group is pending, so wait(1) retires the same",
                            _drained),
}

#: what each category's first finding is, where it is refused
REFUSED_AS = {
    "drop_arrive": {H.DEADLOCK},
    "drop_acquire": {H.SMEM_WAR},
    "loosen_counter_wait": {H.SMEM_WAR},
    "flip_phase_offset": {H.DEADLOCK, H.PHASE_PARITY},
    "drop_mma": {H.MISSING_PRODUCT},
}

#: (consumers, stages) run in every test session; the rest of the grid is marked slow
QUICK = {(1, 2), (1, 4), (2, 2), (3, 2)}


@pytest.mark.parametrize("readers, stages", [
    pytest.param(r, s, marks=() if (r, s) in QUICK else pytest.mark.slow)
    for r in (1, 2, 3) for s in (2, 3, 4, 5)])
def test_every_mutation_is_refused_or_shown_harmless(readers, stages):
    accepted, refused = [], 0
    for lag in range(stages):
        plan = fx.plan(stages, readers, lag)
        for m in agent_mutations(plan):
            v = verdict(m.apply(plan), readers)
            if m.category in HARMLESS:  # the judge tells the harmless edits from the others
                assert HARMLESS[m.category][1](plan, m) == v.safe, (lag, m.description)
            if v.safe:
                reason = HARMLESS.get(m.category)
                assert reason is not None and reason[1](plan, m), (lag, m.description)
                accepted.append((lag, m.agent))
            else:
                assert v.first.kind in REFUSED_AS[m.category], (lag, m.description, v.first)
                refused += 1
    # exactly one harmless edit per consumer, at release lag 0
    assert sorted(accepted) == [(0, f"consumer{r}") for r in range(readers)]
    assert refused > 0
