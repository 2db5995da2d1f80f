"""The cross-CTA reduction (split-K, stream-K; docs/guide/agents.md, "Cross-CTA reductions"):
lowered into the reducing agents' ``finish``, proven over the splits, their arrival orders and
the counter's next generation, and every edit of its hand-off refused.  Target-neutral: the
test sync model of tests/agents_fixtures.py with a reduction declared."""
from __future__ import annotations

import attrs
import pytest

from agents_fixtures import SYNC, body, edges, spec
from pipeline_core.agents.inject import lower_agents
from pipeline_core.agents.prove import prove_plan
from pipeline_core.check.mutate import agent_mutations
from pipeline_core.check.verdict import HazardKind
from pipeline_core.errors import ProgramError
from pipeline_core.plan import ReductionSpec, StepKind
from pipeline_core.sync import CrossCtaReduction
from pipeline_core.sync.model import REDUCTION_STEPS

TAGS = dict(zip(REDUCTION_STEPS, range(210, 216)))
RED_SYNC = attrs.evolve(SYNC, reduction=CrossCtaReduction(
    tags=TAGS, cta_join="a CTA barrier of the readers", next_use="the next launch"))
CATEGORIES = ("drop_release_fence", "drop_count_arrive", "drop_count_reset",
              "read_before_count", "reset_before_read")


def _plan(readers: int = 2, agents: tuple[str, ...] = ()):
    s = attrs.evolve(spec(readers), reduction=ReductionSpec(agents=agents))
    return lower_agents(body(readers), edges(readers), RED_SYNC, stages=4, spec=s,
                        owner="schedule t", target="t")


def _prove(plan, readers: int = 2):
    return prove_plan(plan, body(readers), edges(readers), RED_SYNC)


def _kinds(verdict):
    return {v.kind for v in verdict.violations}


def test_the_lowering_puts_the_steps_in_every_readers_finish_in_order():
    plan = _plan()
    assert plan.reduction is not None and plan.reduction.agents == ("consumer0", "consumer1")
    for p in plan.programs[1:]:
        assert [s.kind.value for s in p.finish] == list(REDUCTION_STEPS)
        assert [s.tag for s in p.finish] == [TAGS[k] for k in REDUCTION_STEPS]
    assert plan.programs[0].finish == ()  # the producer holds no result
    # finish steps are no K-tile steps: the unrolled program is the plain one
    plain = lower_agents(body(), edges(), RED_SYNC, stages=4, spec=spec())
    assert [p.placed(5) for p in plan.programs] == [p.placed(5) for p in plain.programs]
    assert plain.reduction is None and all(p.finish == () for p in plain.programs)


def test_the_reduction_is_proven_safe_and_its_assumptions_stated():
    v = _prove(_plan())
    assert v.safe, [x.message for x in v.violations]
    text = " ".join(v.model["assumptions"])
    assert "cross-CTA reduction split_k" in text and "the next launch" in text


def test_a_target_without_a_reduction_model_refuses_the_spec_in_one_line():
    s = attrs.evolve(spec(), reduction=ReductionSpec())
    with pytest.raises(ProgramError) as e:
        lower_agents(body(), edges(), SYNC, stages=4, spec=s, owner="schedule t", target="t")
    assert "AgentSpec.reduction split_k" in str(e.value) and "SyncModel.reduction" in str(e.value)
    assert "\n" not in str(e.value)


def test_only_reader_agents_may_reduce():
    with pytest.raises(ProgramError, match="names agents \\['producer'\\]"):
        _plan(agents=("producer",))


def test_every_mutation_of_the_hand_off_is_listed_and_refused():
    plan = _plan()
    found = {}
    for m in agent_mutations(plan, CATEGORIES):
        assert m.section == "finish"
        found.setdefault(m.category, set()).add(m.agent)
        assert not _prove(m.apply(plan)).safe, m.description
    assert found == {c: {"consumer0", "consumer1"} for c in CATEGORIES}


def _mutated(category: str, readers: int = 2):
    plan = _plan(readers)
    m = next(m for m in agent_mutations(plan, (category,)) if m.agent == "consumer0")
    return _prove(m.apply(plan), readers)


def test_dropping_the_release_fence_lets_the_last_cta_read_an_unpublished_slice():
    v = _mutated("drop_release_fence")
    raw = [x for x in v.violations if x.kind == HazardKind.SMEM_RAW]
    assert raw and "before it is published" in raw[0].message
    assert "RELEASE_FENCE" in raw[0].fix.text


def test_dropping_the_arrive_leaves_the_stores_unreleased_or_the_tile_unreduced():
    # one of two readers: its stores are not released by the CTA's arrival
    v = _mutated("drop_count_arrive")
    assert HazardKind.SMEM_RAW in _kinds(v)
    assert any("does not join its CTA's COUNT_ARRIVE" in x.message for x in v.violations)
    # the only reader: no CTA ever arrives, so none is last
    assert HazardKind.DEADLOCK in _kinds(_mutated("drop_count_arrive", readers=1))


def test_reading_before_the_count_reaches_the_splits_is_a_raw():
    v = _mutated("read_before_count", readers=1)
    assert any(x.kind == HazardKind.SMEM_RAW and "before the count reached" in x.message
               for x in v.violations)


def test_dropping_the_reset_deadlocks_the_next_generation():
    v = _mutated("drop_count_reset", readers=1)
    dead = [x for x in v.violations if x.kind == HazardKind.DEADLOCK]
    assert dead and "next generation" in dead[0].message
    # with two readers, the one that no longer joins the reset may still be reading
    assert HazardKind.SMEM_WAR in _kinds(_mutated("drop_count_reset"))


def test_a_reset_before_the_read_lets_the_next_generation_overwrite_a_slice():
    v = _mutated("reset_before_read", readers=1)
    assert _kinds(v) == {HazardKind.SMEM_WAR}
    assert "before CTA" in v.violations[0].message


def _edited(move: StepKind | None = None, before: StepKind | None = None,
            drop: StepKind | None = None):
    """The one-reader plan with its finish edited: ``move`` put just before ``before``, or
    ``drop`` left out."""
    plan = _plan(readers=1)
    steps = [s for s in plan.programs[1].finish if s.kind != drop]
    if move is not None and before is not None:
        step = steps.pop([s.kind for s in steps].index(move))
        steps.insert([s.kind for s in steps].index(before), step)
    edited = attrs.evolve(plan, programs=[plan.programs[0],
                                          attrs.evolve(plan.programs[1], finish=steps)])
    return _prove(edited, readers=1)


def test_a_reset_before_the_acquire_races_an_arrival():
    v = _edited(move=StepKind.COUNT_RESET, before=StepKind.COUNT_ACQUIRE)
    assert any(x.kind == HazardKind.DEADLOCK and "may race" in x.message for x in v.violations)


def test_without_the_acquire_every_split_runs_the_epilogue():
    v = _edited(drop=StepKind.COUNT_ACQUIRE)
    assert {HazardKind.DUPLICATE_PRODUCT, HazardKind.SMEM_RAW} <= _kinds(v)


def test_a_slice_never_stored_is_a_missing_product():
    v = _edited(drop=StepKind.SLICE_STORE)
    assert HazardKind.MISSING_PRODUCT in _kinds(v)


def test_the_document_carries_the_reduction_and_validates():
    jsonschema = pytest.importorskip("jsonschema")
    from agents_fixtures import NAMES

    from pipeline_core.agents.views import agents_doc
    from pipeline_core.json_output import load_schema

    schema = load_schema("schedule")
    sub = {**schema["$defs"]["agents"], "$defs": schema["$defs"]}
    doc = agents_doc(_plan(), body(), NAMES, RED_SYNC)
    jsonschema.validate(doc, sub)
    assert doc["reduction"] == {"name": "split_k", "agents": ["consumer0", "consumer1"]}
    assert [s["kind"] for s in doc["programs"][1]["finish"]] == list(REDUCTION_STEPS)
    assert all(s["after_loop"] for s in doc["programs"][1]["finish"])
    plain = agents_doc(lower_agents(body(), edges(), RED_SYNC, stages=4, spec=spec()), body(),
                       NAMES, RED_SYNC)
    assert "reduction" not in plain and all("finish" not in p for p in plain["programs"])
