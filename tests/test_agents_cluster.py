"""Clusters (docs/guide/agents.md, "Clusters"): two CTAs sharing a multicast copy, lowered with a
peer arrival per release at cluster scope and a doubled arrival count, proven over both CTAs'
programs, and every edit of the cluster's hand-off refused: a peer arrival dropped or made
CTA-scope (NVIDIA/cutlass#3324), the arrival count not doubled, the start or end cluster barrier
dropped.  Target-neutral: the test sync model of tests/agents_fixtures.py with cluster forms."""
from __future__ import annotations

import attrs
import pytest

from agents_fixtures import SYNC, body, edges, spec
from pipeline_core.agents.inject import lower_agents
from pipeline_core.agents.prove import prove_plan
from pipeline_core.check.mutate import agent_mutations
from pipeline_core.check.verdict import HazardKind
from pipeline_core.errors import ProgramError
from pipeline_core.plan import ClusterSpec, StepKind
from pipeline_core.sync import ClusterSync

CL_SYNC = attrs.evolve(SYNC, cluster=ClusterSync(max_ctas=2))
#: the same with the peers' releases forwarded by a relay agent (ClusterSync.relay)
RELAY_SYNC = attrs.evolve(SYNC, cluster=ClusterSync(max_ctas=2, relay=True))
CATEGORIES = ("drop_arrive", "cta_scope_remote_arrive", "cta_scope_peer_wait",
              "cluster_arrival_count",
              "drop_cluster_start", "drop_cluster_end")


def _plan(readers: int = 2, multicast: tuple[int, ...] = (1,), stages: int = 4, sync=CL_SYNC):
    s = attrs.evolve(spec(readers), cluster=ClusterSpec(ctas=2, multicast=multicast))
    return lower_agents(body(readers), edges(readers, stages), sync, stages=stages, spec=s,
                        owner="schedule t", target="t")


def _prove(plan, readers: int = 2, sync=CL_SYNC):
    return prove_plan(plan, body(readers), edges(readers), sync)


def _kinds(verdict):
    return {v.kind for v in verdict.violations}


def test_the_lowering_doubles_the_empty_ring_and_adds_a_cluster_scope_peer_arrival():
    plan = _plan()
    plain = lower_agents(body(), edges(), SYNC, stages=4, spec=spec())
    empty = next(r for r in plan.rings if r.kind == "empty")
    plain_empty = next(r for r in plain.rings if r.kind == "empty")
    assert empty.ctas == 2 and empty.arrivals == 2 * plain_empty.arrivals
    assert plan.cluster is not None and plan.cluster.multicast == (1,)
    for p in plan.programs[1:]:
        arrives = [s for s in p.kernel if s.kind == StepKind.ARRIVE]
        assert [(s.peer, s.scope) for s in arrives] == [(0, ""), (1, "cluster")]
    # the writer's acquire of the stage its peers release waits at cluster scope
    assert [s.scope for s in plan.programs[0].kernel if s.kind == StepKind.PHASE_WAIT] == [
        "cluster"]
    assert plain.cluster is None and all(r.ctas == 1 for r in plain.rings)


@pytest.mark.parametrize("sync", [CL_SYNC, RELAY_SYNC], ids=["direct", "relay"])
@pytest.mark.parametrize("readers", [1, 2])
def test_a_cluster_plan_is_proven_safe_over_both_ctas(readers, sync):
    v = _prove(_plan(readers, sync=sync), readers, sync)
    assert v.safe, [x.message for x in v.violations]
    assert "@cta1" in " ".join(v.model["agents"])
    assert any("cluster of 2 CTAs" in a for a in v.model["assumptions"])


def test_a_multicast_copy_whose_share_is_wrong_is_refused():
    # one CTA's share of the multicast copy announced as the whole tile: the bytes no longer add up
    plan = _plan()
    bad = attrs.evolve(plan, op_bytes={**plan.op_bytes, 1: plan.op_bytes[1] * 2})
    assert not _prove(bad).safe


def test_every_mutation_of_the_cluster_is_listed_and_refused():
    plan = _plan()
    found: dict[str, set] = {}
    for m in agent_mutations(plan, CATEGORIES):
        verdict = _prove(m.apply(plan))
        assert not verdict.safe, m.description
        found.setdefault(m.category, set()).update(_kinds(verdict))
    assert set(found) == set(CATEGORIES)
    # the cutlass#3324 bug: the CTA-scope arrive is named for what it is
    assert HazardKind.SMEM_WAR in found["cta_scope_remote_arrive"]
    assert HazardKind.SMEM_WAR in found["cta_scope_peer_wait"]
    assert HazardKind.DEADLOCK in found["drop_arrive"]
    # 8 arrivals where 16 come: each tile completes two phases, the writer runs a phase ahead
    assert HazardKind.SMEM_WAR in found["cluster_arrival_count"]
    assert HazardKind.PHASE_OVERRUN in found["drop_cluster_start"]
    assert HazardKind.SMEM_WAR in found["drop_cluster_end"]


def test_the_peer_arrival_dropped_is_a_deadlock_and_cta_scope_names_cutlass_3324():
    plan = _plan()
    drops = [m for m in agent_mutations(plan, ("drop_arrive", "cta_scope_remote_arrive"))
             if "peer 1" in m.description and m.section == "kernel"]
    assert {m.category for m in drops} == {"drop_arrive", "cta_scope_remote_arrive"}
    for m in drops:
        v = _prove(m.apply(plan))
        if m.category == "drop_arrive":
            assert HazardKind.DEADLOCK in _kinds(v)
        else:
            assert any("cutlass#3324" in x.message for x in v.violations)


def test_a_target_without_cluster_forms_refuses_the_spec_in_one_line():
    s = attrs.evolve(spec(), cluster=ClusterSpec(ctas=2, multicast=(1,)))
    with pytest.raises(ProgramError) as e:
        lower_agents(body(), edges(), SYNC, stages=4, spec=s, owner="schedule t", target="t")
    assert "SyncModel.cluster" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("cluster, words", [(ClusterSpec(ctas=4, multicast=(1,)), "ctas=4"),
                                            (ClusterSpec(ctas=2, multicast=(2,)), "multicast")])
def test_a_bad_cluster_spec_is_refused_naming_the_field(cluster, words):
    s = attrs.evolve(spec(), cluster=cluster)
    with pytest.raises(ProgramError, match=words):
        lower_agents(body(), edges(), CL_SYNC, stages=4, spec=s, owner="schedule t", target="t")


def test_an_arrival_count_above_the_arrivals_that_come_is_a_deadlock():
    plan = _plan()
    bad = attrs.evolve(plan, rings=[attrs.evolve(r, arrivals=r.arrivals + 4)
                                    if r.kind == "empty" else r for r in plan.rings])
    assert HazardKind.DEADLOCK in _kinds(_prove(bad))


def test_a_relay_forwards_the_releases_and_each_of_its_edits_is_refused():
    plan = _plan(sync=RELAY_SYNC)
    relay = plan.program("relay")
    assert [(s.kind, s.channel, s.peer, s.scope) for s in relay.kernel] == [
        (StepKind.PHASE_WAIT, "relay", 0, ""), (StepKind.ARRIVE, "empty", 1, "cluster")]
    empty = next(r for r in plan.rings if r.kind == "empty")
    plain = lower_agents(body(), edges(), SYNC, stages=4, spec=spec())
    assert empty.arrivals == next(r for r in plain.rings if r.kind == "empty").arrivals + 1
    for p in plan.programs[1:3]:  # the readers arrive locally, on their empty and relay rings
        assert [(s.channel, s.peer) for s in p.kernel if s.kind == StepKind.ARRIVE] == [
            ("empty", 0), ("relay", 0)]
    found: dict[str, set] = {}
    for m in agent_mutations(plan, CATEGORIES):
        v = _prove(m.apply(plan), sync=RELAY_SYNC)
        assert not v.safe, m.description
        found.setdefault(m.category, set()).update(_kinds(v))
    assert set(found) == set(CATEGORIES)
    assert HazardKind.SMEM_WAR in found["cta_scope_remote_arrive"]
    assert HazardKind.DEADLOCK in found["drop_arrive"]


def test_a_cluster_with_a_bulk_store_or_a_tile_split_is_refused_in_one_line():
    """The cluster's expansion into both CTAs moves the K loop's and the finish's steps, not a
    bulk store's, and runs every CTA on every output tile: a store or a split beside a cluster
    would be proven on a model that does not hold, so the lowering refuses the pair by name."""
    from agents_fixtures import SYNC_NAMED
    from pipeline_core.plan import OrderSpec, StoreSpec, TileSplit, Turn
    from pipeline_core.sync import BulkStoreChannel
    from pipeline_core.sync.model import BULK_STORE_STEPS

    sync = attrs.evolve(SYNC_NAMED, cluster=ClusterSync(max_ctas=2), bulk_store=BulkStoreChannel(
        tags={step: 200 + i for i, step in enumerate(BULK_STORE_STEPS)}, max_wait=3))
    cluster = ClusterSpec(ctas=2, multicast=(1,))
    split = attrs.evolve(spec(), cluster=cluster,
                         split=TileSplit(agents=("consumer0", "consumer1")),
                         orders=[OrderSpec(name="mainloop", scope="output_tile",
                                           turns=[Turn(agent="consumer0", ops=(2,)),
                                                  Turn(agent="consumer1", ops=(3,))])])
    for s in (attrs.evolve(spec(), cluster=cluster, store=StoreSpec(buffers=2)), split):
        with pytest.raises(ProgramError) as e:
            lower_agents(body(), edges(), sync, stages=4, spec=s, owner="schedule t", target="t")
        assert "AgentSpec.cluster" in str(e.value) and "store and split" in str(e.value)
        assert "\n" not in str(e.value)
