"""Shared issue (docs/guide/agents.md, "Shared issue"): a writer's copies issued by several of its
warps, each an equal share after its own wait, the lead alone announcing a stage's bytes and
issuing the lead copies.  The lowering records it and refuses what the model does not cover; the
proof instantiates one agent a warp and refuses each way a warp can break the hand-off: a warp
that skips its wait (SMEM_WAR), every warp announcing the bytes (DEADLOCK), a warp waiting on a
ring it copies nothing into (PHASE_LAG), a warp's share never issued.  Target-neutral: the test
sync model of tests/agents_fixtures.py."""
from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from agents_fixtures import (Q_COPY, SYNC, body, edges, once_body, once_edges, once_spec, spec)
from pipeline_core.agents.inject import lower_agents
from pipeline_core.agents.prove import prove_plan
from pipeline_core.agents.shared_issue import expand, lead_only, warp_name
from pipeline_core.check.mutate import agent_mutations
from pipeline_core.check.verdict import HazardKind
from pipeline_core.errors import ProgramError
from pipeline_core.ops import DepKind
from pipeline_core.plan import ClusterSpec, SharedIssue, Step, StepKind
from pipeline_core.sync import ClusterSync

K, V = 1, 2  # the once body's K and V copies (Q is Q_COPY)


def _plan(warps: int = 4, lead: tuple[int, ...] = (Q_COPY,), agent: str = "producer"):
    s = attrs.evolve(once_spec(q_stages=2),
                     shared_issue=SharedIssue(agent=agent, warps=warps, lead=lead))
    return lower_agents(once_body(), once_edges(), SYNC, stages=4, spec=s, owner="schedule t",
                        target="t")


def _expanded(warps: int = 4):
    return expand(_plan(warps), once_body(), once_edges())


def _prove(plan, b=None, e=None):
    return prove_plan(plan, b if b is not None else once_body(),
                      e if e is not None else once_edges(), SYNC)


def _kinds(verdict) -> set[HazardKind]:
    return {v.kind for v in verdict.violations}


def _edit(plan, agent: str, f: Callable[[tuple[Step, ...]], tuple[Step, ...]]):
    """``plan`` with ``f`` applied to every section of ``agent``'s program."""
    return attrs.evolve(plan, programs=[
        attrs.evolve(p, kernel=f(p.kernel), prologue=[f(it) for it in p.prologue],
                     epilogue=[f(it) for it in p.epilogue]) if p.name == agent else p
        for p in plan.programs])


def test_the_plan_records_the_shared_issue_and_the_proof_runs_one_agent_a_warp():
    plan = _plan()
    assert plan.shared_issue == SharedIssue(agent="producer", warps=4, lead=(Q_COPY,))
    v = _prove(plan)
    assert v.safe, [x.message for x in v.violations]
    assert v.model["agents"][:4] == ["producer", "producer.warp1", "producer.warp2",
                                     "producer.warp3"]
    assert any("issued by 4 of its warps" in a and "lead alone issues copies [0]" in a
               for a in v.model["assumptions"])


def test_each_warp_waits_for_its_stages_and_issues_a_share_the_lead_alone_announces():
    plan, b, e = _expanded(4)
    warp = plan.program(warp_name("producer", 2))
    steps = [s for it in warp.prologue for s in it] + list(warp.kernel)
    assert {s.kind for s in steps} == {StepKind.PHASE_WAIT, StepKind.OP}
    assert {s.channel for s in steps if s.kind == StepKind.PHASE_WAIT} == {"k_empty", "v_empty"}
    lead = plan.program("producer")
    assert any(s.channel == "q_empty" for it in lead.prologue for s in it)
    # the shares add up to each stage's announced bytes; Q stays whole
    for ring in ("k_full", "v_full"):
        r = plan.ring(ring)
        assert sum(plan.op_bytes[op] for op in r.ops) == r.tx_bytes and len(r.ops) == 4
    assert plan.op_bytes[Q_COPY] == 8192 and plan.ring("q_full").ops == (Q_COPY,)
    # every reader of K reads every warp's share, and its release frees every share's stage
    kinds = {(x.producer, x.consumer, x.kind) for x in e}
    for op in plan.ring("k_full").ops:
        assert {(op, 3, DepKind.FLOW), (3, op, DepKind.ANTI)} <= kinds
    assert len(b) == len(once_body()) + 3 * 2


def test_lead_only_picks_the_announcements_the_lead_copies_and_their_rings_steps():
    plan = _plan()
    shared, rings = plan.shared_issue, plan.rings
    assert lead_only(shared, rings, Step(kind=StepKind.EXPECT_TX, channel="k_full"))
    assert lead_only(shared, rings, Step(kind=StepKind.OP, op=Q_COPY))
    assert lead_only(shared, rings, Step(kind=StepKind.PHASE_WAIT, channel="q_empty"))
    assert not lead_only(shared, rings, Step(kind=StepKind.OP, op=K))
    assert not lead_only(shared, rings, Step(kind=StepKind.PHASE_WAIT, channel="v_empty"))


@pytest.mark.parametrize("warp", [1, 2, 3])
def test_a_warp_that_skips_its_wait_overwrites_a_stage_still_read(warp):
    plan, b, e = _expanded(4)
    bad = _edit(plan, warp_name("producer", warp),
                lambda xs: tuple(s for s in xs if not (s.kind == StepKind.PHASE_WAIT
                                                       and s.channel == "k_empty")))
    v = _prove(bad, b, e)
    assert HazardKind.SMEM_WAR in _kinds(v)
    assert any(f"producer.warp{warp} does not wait for phase" in x.message
               for x in v.violations)


def test_bytes_announced_by_every_warp_never_complete_the_phase():
    plan, b, e = _expanded(2)
    announce = {s.channel: s for s in plan.program("producer").kernel
                if s.kind == StepKind.EXPECT_TX}

    def also_announce(xs: tuple[Step, ...]) -> tuple[Step, ...]:
        out: list[Step] = []
        for s in xs:
            out.append(s)
            full = s.channel.replace("_empty", "_full")
            if s.kind == StepKind.PHASE_WAIT and full in announce:
                out.append(announce[full])
        return tuple(out)

    v = _prove(_edit(plan, "producer.warp1", also_announce), b, e)
    assert HazardKind.DEADLOCK in _kinds(v)


def test_a_warp_waiting_on_a_ring_it_copies_nothing_into_may_lag_it_two_phases():
    plan, b, e = _expanded(4)
    q_wait = next(s for it in plan.program("producer").prologue for s in it
                  if s.channel == "q_empty")
    bad = attrs.evolve(plan, programs=[
        attrs.evolve(p, prologue=[(q_wait, *p.prologue[0]), *p.prologue[1:]])
        if p.name == "producer.warp1" else p for p in plan.programs])
    assert HazardKind.PHASE_LAG in _kinds(_prove(bad, b, e))


def test_a_warps_share_never_issued_leaves_the_stage_short_of_its_bytes():
    plan, b, e = _expanded(4)
    mine = plan.program("producer.warp3").role.ops
    bad = _edit(plan, "producer.warp3",
                lambda xs: tuple(s for s in xs if not (s.kind == StepKind.OP and s.op == mine[1])))
    assert {HazardKind.DEADLOCK, HazardKind.MISSING_PRODUCT} <= _kinds(_prove(bad, b, e))


def test_every_mutation_of_the_writers_program_is_refused_on_every_warp():
    # an edit of the writer's program is every warp's (the readers' are tested elsewhere)
    plan = _plan(warps=2)
    mutations = [m for m in agent_mutations(plan) if m.agent == "producer"]
    assert {m.category for m in mutations} == {"drop_acquire", "flip_phase_offset"}
    for m in mutations:
        assert not _prove(m.apply(plan)).safe, m.description


@pytest.mark.parametrize("shared,fault", [
    (SharedIssue(agent="nobody", warps=2), "names agent 'nobody'; agents: producer"),
    (SharedIssue(agent="consumer0", warps=2), "no writer whose one thread issues"),
    (SharedIssue(agent="producer", warps=1), "warps=1; agent producer has 4 warps"),
    (SharedIssue(agent="producer", warps=8), "warps=8; agent producer has 4 warps"),
    (SharedIssue(agent="producer", warps=2, lead=(3,)), "names ops [3], which are not"),
    (SharedIssue(agent="producer", warps=3), "do not divide into 3 equal shares"),
    (SharedIssue(agent="producer", warps=2, lead=(0, 1, 2)), "every copy of agent producer"),
])
def test_a_shared_issue_the_model_does_not_cover_is_refused_in_one_line(shared, fault):
    s = attrs.evolve(once_spec(q_stages=2), shared_issue=shared)
    with pytest.raises(ProgramError, match="AgentSpec.shared_issue") as info:
        lower_agents(once_body(), once_edges(), SYNC, stages=4, spec=s, owner="schedule t")
    assert fault in str(info.value) and "\n" not in str(info.value)


def test_a_ring_holding_lead_and_shared_copies_or_a_cluster_is_refused():
    # the two-copy body's copies share one ring: the lead would run its waits alone
    s = attrs.evolve(spec(), shared_issue=SharedIssue(agent="producer", warps=2, lead=(0,)))
    with pytest.raises(ProgramError, match="carries lead copies \\[0\\] and shared ones \\[1\\]"):
        lower_agents(body(), edges(), SYNC, stages=4, spec=s)
    cl = attrs.evolve(spec(), shared_issue=SharedIssue(agent="producer", warps=2),
                      cluster=ClusterSpec(ctas=2, multicast=(1,)))
    with pytest.raises(ProgramError, match="not modelled with a cluster"):
        lower_agents(body(), edges(), attrs.evolve(SYNC, cluster=ClusterSync(max_ctas=2)),
                     stages=4, spec=cl)


def test_the_expansion_is_deterministic_and_leaves_a_plan_without_sharing_alone():
    a, b = _expanded(4), _expanded(4)
    assert a == b and a[0].shared_issue is None
    plain = lower_agents(once_body(), once_edges(), SYNC, stages=4, spec=once_spec(q_stages=2))
    assert plain.shared_issue is None
    assert _prove(plain).model["agents"] == ["producer", "consumer0", "consumer1"]
