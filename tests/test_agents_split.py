"""Consumers taking output tiles in turn (docs/guide/agents.md, "Tile splits"): the lowering of
``AgentSpec.split`` and of an ordering over output tiles, the prover over persistent CTAs whose
output tiles alternate between the consumers, and the mutations it refuses, on the
target-neutral fixture (CUTLASS's ping-pong GEMM's shape)."""
from __future__ import annotations

import attrs
import pytest

import agents_fixtures as fx
from pipeline_core.agents import OrderSpec, StepKind, TileSplit, Turn
from pipeline_core.agents.inject import lower_agents
from pipeline_core.agents.prove import prove_plan
from pipeline_core.agents.timing import AgentMachine, run
from pipeline_core.agents.views import agents_doc
from pipeline_core.check.mutate import agent_mutations
from pipeline_core.check.verdict import HazardKind as H
from pipeline_core.errors import ProgramError


def verdict(plan, readers=2):
    return prove_plan(plan, fx.body(readers), fx.edges(readers, plan.stages), fx.SYNC_NAMED,
                      name="split", names=fx.NAMES)


def kinds(plan):
    return {v.kind for v in verdict(plan).violations}


def named(steps):
    return [(s.kind, s.barrier, s.value, s.once, s.output_lag, s.exit) for s in steps
            if s.kind in (StepKind.NAMED_SYNC, StepKind.NAMED_ARRIVE)]


# --- the lowering -----------------------------------------------------------------------------
def test_a_split_ring_waits_for_one_consumers_release_and_the_plan_records_the_split():
    plan = fx.split_plan()
    assert plan.split == TileSplit(agents=("consumer0", "consumer1"))
    empty = plan.ring("empty")
    # a stage of output tile o is released by o's owner only: 4 warps, not 8
    assert empty.arrivals == 4 and set(empty.signallers) == {"consumer0", "consumer1"}
    unsplit = fx.plan()
    assert unsplit.split is None and unsplit.ring("empty").arrivals == 8


def test_an_output_tile_ordering_waits_before_the_loop_and_arrives_as_it_exits():
    plan = fx.split_plan()
    (order,) = plan.orders
    assert order.scope == "output_tile" and order.barriers == (1, 2) and order.counts == (256, 256)
    c0, c1 = plan.program("consumer0"), plan.program("consumer1")
    # the wait fills the previous output tile's generation; it comes first, before the ring wait
    assert named(c0.prologue[0][:1]) == [(StepKind.NAMED_SYNC, 1, 256, True, 1, False)]
    assert named(c1.prologue[0][:1]) == [(StepKind.NAMED_SYNC, 2, 256, True, 1, False)]
    # the arrive hands the next output tile over right after the loop, before the drain
    assert named(c0.epilogue[0][:1]) == [(StepKind.NAMED_ARRIVE, 2, 256, True, 0, True)]
    assert c0.epilogue[0][1].kind == StepKind.COUNTER_WAIT
    assert named(c0.kernel) == []  # no K-tile turns


@pytest.mark.parametrize("split, message", [
    (TileSplit(agents=("consumer0",)), "takes two reader agents or more"),
    (TileSplit(agents=("consumer0", "consumer0")), "takes two reader agents or more"),
    (TileSplit(agents=("consumer0", "nobody")), "AgentSpec.split names agent 'nobody'"),
    (TileSplit(agents=("producer", "consumer1")), "names agent producer, which reads no ring"),
])
def test_a_bad_split_is_one_line(split, message):
    spec = attrs.evolve(fx.split_spec(ordered=False), split=split)
    with pytest.raises(ProgramError, match=message) as err:
        lower_agents(fx.body(2), fx.edges(2, 4), fx.SYNC_NAMED, stages=4, spec=spec,
                     owner="schedule t")
    assert "\n" not in str(err.value) and str(err.value).startswith("schedule t: ")


def test_split_agents_that_differ_are_refused():
    spec = fx.split_spec(ordered=False)
    roles = [attrs.evolve(r, warps=8) if r.name == "consumer1" else r for r in spec.roles]
    with pytest.raises(ProgramError, match=r"agents consumer0 and consumer1 differ \(warps 4 / 8"):
        lower_agents(fx.body(2), fx.edges(2, 4), fx.SYNC_NAMED, stages=4,
                     spec=attrs.evolve(spec, roles=roles))


@pytest.mark.parametrize("split, turns, message", [
    (None, ("consumer0", "consumer1"), "AgentSpec.split is None"),
    (TileSplit(agents=("consumer0", "consumer1")), ("consumer1", "consumer0"),
     r"its turns name \['consumer1', 'consumer0'\] and AgentSpec.split is "
     r"\['consumer0', 'consumer1'\]"),
])
def test_an_output_tile_ordering_needs_the_split_in_its_order(split, turns, message):
    order = OrderSpec(name="mainloop", scope="output_tile",
                      turns=[Turn(agent=a, ops=(2 + int(a[-1]),)) for a in turns])
    spec = attrs.evolve(fx.split_spec(), split=split, orders=(order,))
    with pytest.raises(ProgramError, match=message) as err:
        lower_agents(fx.body(2), fx.edges(2, 4), fx.SYNC_NAMED, stages=4, spec=spec)
    assert "\n" not in str(err.value)


def test_a_k_tile_ordering_of_split_agents_is_refused():
    order = OrderSpec(name="pp", turns=[Turn(agent="consumer0", ops=(2,)),
                                        Turn(agent="consumer1", ops=(3,))])
    with pytest.raises(ProgramError, match='ordering pp takes turns every K tile among agents of '
                                           'AgentSpec.split .* give it scope="output_tile"') as err:
        lower_agents(fx.body(2), fx.edges(2, 4), fx.SYNC_NAMED, stages=4,
                     spec=attrs.evolve(fx.split_spec(), orders=(order,)))
    assert "\n" not in str(err.value)


def test_an_unknown_order_scope_is_refused():
    with pytest.raises(ValueError, match="scope"):
        OrderSpec(name="x", scope="cta", turns=[Turn(agent="a", ops=(1,))])


# --- the prover -------------------------------------------------------------------------------
@pytest.mark.parametrize("stages, lag", [(2, 1), (3, 0), (4, 1), (4, 3)])
def test_two_consumers_on_alternate_output_tiles_are_safe(stages, lag):
    v = verdict(fx.split_plan(stages=stages, release_lag=lag))
    assert v.safe, v.violations[:2]


def test_three_consumers_in_turn_are_safe():
    v = verdict(fx.split_plan(readers=3), readers=3)
    assert v.safe, v.violations[:2]


def test_the_proof_covers_empty_tiles_odd_counts_and_one_or_two_output_tiles():
    v = verdict(fx.split_plan())
    sequences = [tuple(q) for q in v.model["trip_sequences"]]
    assert v.model["output_tiles"] == [1, 2]  # consumer1 idle, then one tile each
    assert any(0 in q for q in sequences)  # an output tile with no K tile passes its turn on
    assert any(len(q) % 2 for q in sequences)  # consumer0 takes the last tile
    # each consumer runs a second tile after the other's, each of S + 1 K tiles: long enough
    # that a wait moved before its turn meets a stage two phases on (a stale parity)
    long = v.model["stages"] + 1  # the fixture's rings are all of the plan's depth
    assert (2, 2, 2, 2) in sequences
    assert (long,) * 4 in sequences and (long,) * 3 in sequences


def test_a_split_without_the_ordering_lets_a_wait_pass_on_a_stale_parity():
    """Without the mainloop order, consumer1 may wait on a stage's phase k + 1 while phase k
    (consumer0's tile) has not completed: the parity of k + 1 is that of k - 1, so the wait
    passes early.  The ordering is what makes the split safe."""
    v = verdict(fx.split_plan(ordered=False))
    assert not v.safe
    assert v.violations[0].kind == H.PHASE_PARITY and "passes early" in v.violations[0].message


def test_the_doubled_release_count_deadlocks():
    plan = fx.split_plan()
    (m,) = agent_mutations(plan, ("split_all_arrivals",))
    assert m.apply(plan).ring("empty").arrivals == 8
    v = verdict(m.apply(plan))
    assert v.violations[0].kind == H.DEADLOCK
    assert "bring 4 of its 8 arrivals" in v.violations[0].message


@pytest.mark.parametrize("agent", ["consumer0", "consumer1"])
def test_a_consumer_counting_its_own_k_tiles_for_the_ring_position_is_refused(agent):
    plan = fx.split_plan()
    m = next(m for m in agent_mutations(plan, ("split_own_base",)) if m.agent == agent)
    found = kinds(m.apply(plan))
    assert H.PHASE_PARITY in found and H.DEADLOCK in found, found


def test_a_dropped_mainloop_arrive_deadlocks():
    plan = fx.split_plan()
    for m in agent_mutations(plan, ("drop_named_arrive",)):
        v = verdict(m.apply(plan))
        assert v.violations[0].kind == H.DEADLOCK, m.description
        assert "for output tile" in v.violations[0].message and "never completes" in \
            v.violations[0].message


def test_a_dropped_mainloop_sync_breaks_the_order():
    plan = fx.split_plan()
    ms = list(agent_mutations(plan, ("drop_named_sync",)))
    assert len(ms) == 2
    for m in ms:
        found = kinds(m.apply(plan))
        assert H.ORDER in found, (m.description, found)


def test_every_other_single_step_edit_of_a_split_plan_is_refused():
    plan = fx.split_plan()
    for m in agent_mutations(plan):
        assert kinds(m.apply(plan)), m.description


# --- the timing model and the views -----------------------------------------------------------
def test_the_timing_model_runs_one_output_tile_on_its_owner():
    machine = AgentMachine(copy_latency=500, copy_bytes_per_cycle=64, mma_efficiency=1.0)
    timing, taken = run(fx.split_plan(), fx.body(2), machine, 8)
    ran = {fx.split_plan().programs[t.agent].name for t in taken}
    assert ran == {"producer", "consumer0"} and timing.cycles > 0


def test_the_document_records_the_split_and_the_scope():
    doc = agents_doc(fx.split_plan(), fx.body(2), fx.NAMES, fx.SYNC_NAMED)
    assert doc["split"] == {"agents": ["consumer0", "consumer1"]}
    assert doc["orders"][0]["scope"] == "output_tile"
    sync = doc["programs"][1]["prologue"][0][0]
    assert sync["kind"] == "named_sync" and sync["output_lag"] == 1
    assert "none on the CTA's first, once more after its last" in sync["isa"]
    plain = agents_doc(fx.pingpong_plan(), fx.body(2), fx.NAMES, fx.SYNC_NAMED)
    assert "split" not in plain and "scope" not in plain["orders"][0]
