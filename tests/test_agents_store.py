"""The staged bulk store (a TMA-store epilogue; docs/guide/agents.md, "Bulk stores"): lowered
into the storing agents' ``store`` and ``drain``, proven over the staging buffers' reuse and the
kernel's end, every edit of it refused, and a store the target cannot take refused in one line.
Target-neutral: the test sync model of tests/agents_fixtures.py with named barriers and a bulk
store declared."""
from __future__ import annotations

import attrs
import pytest

from agents_fixtures import SYNC, SYNC_NAMED, body, edges, pingpong_spec, spec
from pipeline_core.agents.inject import lower_agents
from pipeline_core.agents.prove import prove_plan
from pipeline_core.check.mutate import agent_mutations
from pipeline_core.check.verdict import HazardKind
from pipeline_core.errors import ProgramError
from pipeline_core.plan import ReductionSpec, StepKind, StoreSpec
from pipeline_core.sync import BulkStoreChannel, CrossCtaReduction
from pipeline_core.sync.model import BULK_STORE_STEPS, REDUCTION_STEPS

TAGS = dict(zip(BULK_STORE_STEPS, range(220, 226)))
STORE_SYNC = attrs.evolve(SYNC_NAMED, bulk_store=BulkStoreChannel(tags=TAGS, max_wait=3))
CATEGORIES = ("drop_store_wait", "loosen_store_wait", "drop_proxy_fence", "store_before_sync",
              "drop_store_drain")


def _plan(readers: int = 2, buffers: int = 2, agents: tuple[str, ...] = (), sync=STORE_SYNC,
          **store):
    s = attrs.evolve(spec(readers), store=StoreSpec(buffers=buffers, agents=agents, **store))
    return lower_agents(body(readers), edges(readers), sync, stages=4, spec=s,
                        owner="schedule t", target="t")


def _prove(plan, readers: int = 2):
    return prove_plan(plan, body(readers), edges(readers), STORE_SYNC)


@pytest.mark.parametrize("buffers", [1, 2, 3])
def test_the_store_is_derived_and_proven_for_each_buffer_count(buffers):
    plan = _plan(buffers=buffers)
    assert plan.store is not None and plan.store.agents == ("consumer0", "consumer1")
    assert plan.store.barriers == (1, 2)  # the free named-barrier ids, one per storing agent
    for p in plan.programs[1:]:
        assert [s.kind for s in p.store] == [
            StepKind.STORE_WAIT, StepKind.NAMED_SYNC, StepKind.STAGE_WRITE,
            StepKind.PROXY_FENCE, StepKind.NAMED_SYNC, StepKind.STORE_ISSUE,
            StepKind.STORE_COMMIT]
        assert p.store[0].value == buffers - 1 and p.store[1].value == 128
        assert [s.kind for s in p.drain] == [StepKind.STORE_DRAIN]
    assert plan.programs[0].store == () == plan.programs[0].drain
    v = _prove(plan)
    assert v.safe, [x.message for x in v.violations]
    assert any(f"{buffers} staging buffers" in a for a in v.model["assumptions"])


@pytest.mark.parametrize("buffers", [1, 2, 3])
def test_every_edit_of_the_store_is_refused(buffers):
    plan = _plan(buffers=buffers)
    seen = set()
    for m in agent_mutations(plan, CATEGORIES):
        seen.add(m.category)
        v = _prove(m.apply(plan))
        assert not v.safe, m.description
        kinds = {x.kind for x in v.violations}
        want = (HazardKind.SMEM_RAW if m.category in ("drop_proxy_fence", "store_before_sync")
                else HazardKind.SMEM_WAR)
        assert want in kinds, (m.description, kinds)
    assert seen == set(CATEGORIES)


@pytest.mark.parametrize("buffers, subtiles", [(1, 1), (2, 2), (2, 4), (3, 3)])
def test_an_optional_store_is_proven_over_every_pattern_of_skipped_tiles(buffers, subtiles):
    """A tile that stores another way skips its sub-tiles; with a whole number of buffers per
    tile each sub-tile's buffer is free after the same wait, skipped tiles or not."""
    plan = _plan(buffers=buffers, subtiles=subtiles, optional=True)
    assert plan.store is not None and plan.store.optional
    v = _prove(plan)
    assert v.safe, [x.message for x in v.violations]
    assert any("may skip its" in a for a in v.model["assumptions"])


def test_an_optional_store_whose_tiles_split_the_buffers_is_smem_war():
    """Two buffers, one sub-tile a tile: a skipped tile between two staged ones puts both in
    buffer 0 with no store between them, so the wait for one group (N = 1) leaves the older
    store reading the buffer the newer one writes.  Staged always, the same store is safe."""
    assert _prove(_plan(buffers=2, subtiles=1)).safe
    v = _prove(_plan(buffers=2, subtiles=1, optional=True))
    war = [x for x in v.violations if x.kind == HazardKind.SMEM_WAR]
    assert war and "while the store of sub-tile 0 still reads it" in war[0].message


@pytest.mark.parametrize("buffers", [1, 2])
def test_every_edit_of_an_optional_store_is_refused(buffers):
    plan = _plan(buffers=buffers, subtiles=2 * buffers, optional=True)
    for m in agent_mutations(plan, CATEGORIES):
        assert not _prove(m.apply(plan)).safe, m.description


def test_a_wait_beyond_the_encodable_one_is_wait_range():
    plan = _plan()
    p = plan.programs[1]
    wide = attrs.evolve(p, store=(attrs.evolve(p.store[0], value=9), *p.store[1:]))
    plan = attrs.evolve(plan, programs=[wide if q.name == p.name else q for q in plan.programs])
    assert HazardKind.WAIT_RANGE in {x.kind for x in _prove(plan).violations}


def test_the_store_takes_the_barrier_ids_the_orderings_leave():
    s = attrs.evolve(pingpong_spec(), store=StoreSpec())
    plan = lower_agents(body(2), edges(2), STORE_SYNC, stages=4, spec=s, owner="schedule t")
    taken = {i for o in plan.orders for i in o.barriers}
    assert plan.store is not None and taken and not taken & set(plan.store.barriers)
    assert _prove(plan).safe


@pytest.mark.parametrize("sync, kwargs, says", [
    (SYNC, {}, "declares no bulk store with named barriers (SyncModel.bulk_store"),
    (STORE_SYNC, {"buffers": 5}, "buffers=5; give 1..4"),
    (STORE_SYNC, {"agents": ("producer",)}, "names agents ['producer']"),
])
def test_a_store_the_target_cannot_take_is_one_line(sync, kwargs, says):
    with pytest.raises(ProgramError) as err:
        _plan(sync=sync, **kwargs)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_store_with_a_reduction_is_refused():
    sync = attrs.evolve(STORE_SYNC, reduction=CrossCtaReduction(
        tags=dict(zip(REDUCTION_STEPS, range(210, 216)))))
    s = attrs.evolve(spec(), store=StoreSpec(), reduction=ReductionSpec())
    with pytest.raises(ProgramError, match="AgentSpec.store store with AgentSpec.reduction"):
        lower_agents(body(), edges(), sync, stages=4, spec=s, owner="schedule t")


@pytest.mark.parametrize("channel, steps", [(BulkStoreChannel, BULK_STORE_STEPS),
                                            (CrossCtaReduction, REDUCTION_STEPS)])
def test_a_step_channel_names_exactly_its_steps(channel, steps):
    tags = dict(zip(steps[1:], range(220, 230)), typo=230)
    with pytest.raises(ValueError) as err:
        channel(tags=tags)
    says = str(err.value)
    assert says.startswith(f"{channel.__name__}.tags needs exactly {steps[0]}")
    assert f"missing [{steps[0]!r}]" in says and "unknown ['typo']" in says
