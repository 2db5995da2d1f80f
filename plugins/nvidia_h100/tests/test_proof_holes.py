"""Issue 33's reproducers on warpspecialized-gemm plans, each now refused: the TMA store's
barrier counts, a plan whose records leave steps unproven (``UNPROVEN``), a ping-pong turn wait
moved behind the ring wait (caught by split runs of S + 1 K tiles), and malformed plans that
used to crash the prover instead of getting a verdict (docs/guide/agents.md)."""
from __future__ import annotations

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.agents.prove import prove_plan, trip_sequences  # noqa: E402
from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.check.verdict import HazardKind as H  # noqa: E402
from pipeline_core.plan import StepKind  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402


def _compile(**params: str):
    return compile_named("warpspecialized-gemm", target="h100", host=default_host(),
                         params=params)


def _prove(c, plan):
    return prove_plan(plan, c.body, c.edges, c.plan.sync, names=c.tag_names)


def _with_program(plan, name, **fields):
    return attrs.evolve(plan, programs=[attrs.evolve(p, **fields) if p.name == name else p
                                        for p in plan.programs])


@pytest.mark.parametrize("count, kind, says", [
    (96, H.SMEM_RAW, "passes while a warp still writes the staging buffer"),
    (256, H.DEADLOCK, "it never completes"),
])
def test_a_store_sync_that_counts_other_than_the_agents_threads_is_refused(count, kind, says):
    c = _compile(store="tma")
    assert c.proof.verdict.safe
    p = c.plan.program("consumer0")
    store = tuple(attrs.evolve(s, value=count) if s.kind == StepKind.NAMED_SYNC else s
                  for s in p.store)
    v = _prove(c, _with_program(c.plan, "consumer0", store=store))
    assert not v.safe
    hits = [x for x in v.violations if x.kind == kind and x.site.phase == "store"]
    assert hits and says in hits[0].message and "128" in hits[0].message


def test_a_store_sync_on_another_barrier_is_refused():
    c = _compile(store="tma")
    p = c.plan.program("consumer0")
    store = tuple(attrs.evolve(s, barrier=s.barrier + 1) if s.kind == StepKind.NAMED_SYNC
                  else s for s in p.store)
    v = _prove(c, _with_program(c.plan, "consumer0", store=store))
    assert any(x.kind == H.DEADLOCK and "BulkStore.barriers" in x.message for x in v.violations)


@pytest.mark.parametrize("params, edit, says", [
    ({"store": "tma"}, lambda plan: attrs.evolve(plan, store=None), "restore Plan.store"),
    ({"store": "tma"}, lambda plan: attrs.evolve(plan, store=attrs.evolve(
        plan.store, agents=plan.store.agents[:1], barriers=plan.store.barriers[:1])),
     "consumer1's STORE_WAIT"),
    ({"split_k": "true"}, lambda plan: attrs.evolve(plan, reduction=None),
     "restore Plan.reduction"),
    ({"split_k": "true"}, lambda plan: attrs.evolve(plan, reduction=attrs.evolve(
        plan.reduction, agents=plan.reduction.agents[1:])), "consumer0's SLICE_STORE"),
    ({"pingpong": "true", "BN": "128"}, lambda plan: attrs.evolve(plan, split=None),
     "restore Plan.split"),
    ({"store": "tma"}, lambda plan: attrs.evolve(plan, store=attrs.evolve(
        plan.store, agents=("consumer0", "nobody"))), "lists agent 'nobody'"),
])
def test_steps_a_record_no_longer_covers_are_unproven_not_safe(params, edit, says):
    c = _compile(**params)
    assert c.proof.verdict.safe
    v = _prove(c, edit(c.plan))
    assert not v.safe and {x.kind for x in v.violations} == {H.UNPROVEN}
    assert any(says in x.message for x in v.violations), [x.message for x in v.violations]


def test_a_store_step_moved_into_the_loop_is_unproven():
    c = _compile(store="tma")
    p = c.plan.program("consumer0")
    v = _prove(c, _with_program(c.plan, "consumer0", kernel=p.kernel + p.store[:1],
                                store=p.store[1:]))
    assert any(x.kind == H.UNPROVEN and "belongs in the store or drain section" in x.message
               for x in v.violations)


def test_split_runs_reach_a_stale_parity():
    """Swapping consumer0's prologue turn wait with its ring wait lets its second output tile
    pass a full stage on the parity of a phase two back; only a run of S + 1 K tiles per output
    tile gets there (of 2, every stage's phase differs by one at most)."""
    c = _compile(pingpong="true", BN="128")
    deepest = max(r.stages for r in c.plan.rings)
    n = len(c.plan.split.agents)
    assert {(deepest + 1,) * (n + 1), (deepest + 1,) * (2 * n)} <= set(trip_sequences(c.plan))
    p = c.plan.program("consumer0")
    first = list(p.prologue[0])
    assert (first[0].kind, first[0].output_lag, first[1].kind) == (
        StepKind.NAMED_SYNC, 1, StepKind.PHASE_WAIT)
    first[0], first[1] = first[1], first[0]
    v = _prove(c, _with_program(c.plan, "consumer0", prologue=(tuple(first),) + p.prologue[1:]))
    assert any(x.kind == H.PHASE_PARITY for x in v.violations)


@pytest.mark.parametrize("params, edit", [
    ({}, lambda p: _with_program(p, "producer", kernel=tuple(
        attrs.evolve(s, lag=-1) if s.kind == StepKind.OP else s
        for s in p.program("producer").kernel))),
    ({}, lambda p: _with_program(p, "producer", trip_delta=-1)),
    ({}, lambda p: attrs.evolve(p, rings=[attrs.evolve(r, once=True) for r in p.rings])),
    ({"pingpong": "true", "BN": "128"}, lambda p: _with_program(p, "consumer0", min_trips=1)),
    ({"pingpong": "true", "BN": "128"}, lambda p: _with_program(p, "consumer1", trip_delta=-1)),
])
def test_malformed_plans_that_crashed_the_prover_get_a_verdict(params, edit):
    c = _compile(**params)
    v = _prove(c, edit(c.plan))
    assert not v.safe and v.violations


@pytest.mark.parametrize("params, agent, edit, says", [
    # a field the step's kind (or its section) does not read
    ({"store": "tma"}, "consumer0",
     lambda p: {"store": tuple(attrs.evolve(s, lag=1) if s.kind == StepKind.NAMED_SYNC else s
                               for s in p.store)}, "lag=1 means nothing to a named_sync"),
    ({}, "consumer0", lambda p: {"kernel": tuple(attrs.evolve(s, peer=1)
                                                 if s.kind == StepKind.ARRIVE else s
                                                 for s in p.kernel)}, "outside a cluster"),
    # a channel that is not its owner's: an ordering's, the store's, the reduction's
    ({"pingpong": "true", "BN": "128"}, "consumer0",
     lambda p: {"prologue": (tuple(attrs.evolve(s, channel="full") if s.kind ==
                                   StepKind.NAMED_SYNC else s for s in p.prologue[0]),)
                + p.prologue[1:]}, "its channel 'full' names none of mainloop"),
    ({"split_k": "true"}, "consumer1",
     lambda p: {"finish": (attrs.evolve(p.finish[0], channel="full"),) + p.finish[1:]},
     "names none of split_k"),
    # a tag that is not what the step's kind and op lower to
    ({}, "producer", lambda p: {"kernel": tuple(attrs.evolve(s, tag=s.tag + 1)
                                                if s.kind == StepKind.OP else s
                                                for s in p.kernel)}, "restore the tag"),
])
def test_a_step_field_no_proof_reads_is_unproven(params, agent, edit, says):
    c = _compile(**params)
    v = _prove(c, _with_program(c.plan, agent, **edit(c.plan.program(agent))))
    assert not v.safe and any(x.kind == H.UNPROVEN and says in x.message
                              for x in v.violations), [x.message for x in v.violations][:3]


def test_the_emitter_refuses_rings_of_another_depth_than_its_kernel():
    from pipeline_core.errors import ProgramError

    from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma

    c = _compile()
    stages = c.launch.geometry.stages
    full = attrs.evolve(c.plan, rings=[attrs.evolve(r, stages=r.stages + 1)
                                       if r.kind == "full" else r for r in c.plan.rings])
    v = _prove(c, full)  # a full ring deeper than its empty ring is no ring of buffers
    assert any(x.kind == H.UNPROVEN and "a stage is one buffer" in x.message
               for x in v.violations)
    deeper = attrs.evolve(c.plan, rings=[attrs.evolve(r, stages=r.stages + 1)
                                         for r in c.plan.rings])
    with pytest.raises(ProgramError, match=f"proven {stages + 1} stages deep and the kernel's "
                                           f"geometry has {stages}"):
        emit_wgmma(attrs.evolve(c, plan=deeper))  # the kernel's buffers are its geometry's

