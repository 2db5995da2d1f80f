"""Named barriers between consumer groups (docs/guide/agents.md, "Named barriers"): the sync
model's record, the lowering of an ordering, the prover's generations and ORDER rule, the
mutations, the timing model and the document, on the target-neutral fixture."""
from __future__ import annotations

import attrs
import pytest

import agents_fixtures as fx
from pipeline_core.agents import AgentRole, AgentSpec, OrderSpec, StepKind, Turn
from pipeline_core.agents.inject import lower_agents
from pipeline_core.agents.prove import prove_plan
from pipeline_core.agents.timing import AgentMachine, run
from pipeline_core.check.mutate import agent_mutations
from pipeline_core.check.verdict import HazardKind as H
from pipeline_core.errors import ProgramError
from pipeline_core.sync import NamedBarriers

NAMED = ("drop_named_arrive", "drop_named_sync", "swap_named_id")


def verdict(plan, sync=fx.SYNC_NAMED):
    return prove_plan(plan, fx.body(2), fx.edges(2, plan.stages), sync, name="pingpong",
                      names=fx.NAMES)


def named_steps(prog, section="kernel"):
    steps = prog.kernel if section == "kernel" else getattr(prog, section)[0]
    return [(s.kind, s.barrier, s.value, s.lag) for s in steps
            if s.kind in (StepKind.NAMED_SYNC, StepKind.NAMED_ARRIVE)]


# --- the sync model's record ------------------------------------------------------------------
@pytest.mark.parametrize("kw, message", [
    ({"ids": 0}, "ids must be 1 or more"),
    ({"reserved": (16,)}, r"reserved names ids \[16\] outside 0..15"),
    ({"arrive_tag": 206}, "sync_tag and arrive_tag must differ"),
    ({"sync_form": "bar.sync {slot}"}, "sync_form .* is not a format over id and count"),
])
def test_a_bad_named_barrier_declaration_is_refused(kw, message):
    args = {"ids": 16, "sync_tag": 206, "arrive_tag": 207, "sync_form": "w {id}, {count}",
            "arrive_form": "a {id}, {count}", **kw}
    with pytest.raises(ValueError, match=message):
        NamedBarriers(**args)


def test_the_free_ids_leave_the_reserved_ones_out():
    nb = attrs.evolve(fx.NAMED, ids=4, reserved=(0, 2))
    assert nb.free == (1, 3)
    assert nb.text(arrive=True, id=3, count=256) == "nbar.arrive 3, 256"


def test_the_h100_wgmma_model_declares_its_named_barriers():
    pytest.importorskip("pipeline_core_nvidia_h100")
    from pipeline_core_nvidia_h100.wgmma_sync import H100_WGMMA_SYNC

    nb = H100_WGMMA_SYNC.named_barriers
    assert nb is not None and nb.ids == 16 and 0 not in nb.free and len(nb.free) == 15
    assert nb.text(arrive=False, id=1, count=256) == "bar.sync 1, 256"


# --- the lowering -----------------------------------------------------------------------------
def test_each_turn_waits_on_its_own_barrier_and_arrives_on_the_next():
    plan = fx.pingpong_plan()
    c0, c1 = plan.program("consumer0"), plan.program("consumer1")
    (order,) = plan.orders
    assert order.barriers == (1, 2) and order.counts == (256, 256)  # id 0 is reserved
    # consumer0 goes first: its wait for tile t is on consumer1's arrival of tile t - 1 (lag 1),
    # so tile 0 has none and the epilogue takes the last one
    assert named_steps(c0, "prologue") == [(StepKind.NAMED_ARRIVE, 2, 256, 0)]
    assert named_steps(c0) == [(StepKind.NAMED_SYNC, 1, 256, 1), (StepKind.NAMED_ARRIVE, 2, 256, 0)]
    assert named_steps(c0, "epilogue") == [(StepKind.NAMED_SYNC, 1, 256, 1)]
    assert named_steps(c1, "prologue") == named_steps(c1) == [
        (StepKind.NAMED_SYNC, 2, 256, 0), (StepKind.NAMED_ARRIVE, 1, 256, 0)]
    assert named_steps(c1, "epilogue") == []
    # the wait sits before the fence that opens the group, the arrive after its commit
    kinds = [s.kind for s in c1.kernel]
    at = kinds.index(StepKind.NAMED_SYNC)
    assert kinds[at + 1:at + 5] == [StepKind.FENCE, StepKind.OP, StepKind.COMMIT,
                                    StepKind.NAMED_ARRIVE]


def test_counts_are_the_threads_of_the_two_turns_that_meet_on_a_barrier():
    roles = [AgentRole(name="producer", ops=(0, 1), warps=4, issuers=1),
             AgentRole(name="consumer0", ops=(2,), warps=4),
             AgentRole(name="consumer1", ops=(3,), warps=4),
             AgentRole(name="consumer2", ops=(4,), warps=8)]
    order = OrderSpec(name="round", turns=[Turn(agent=f"consumer{r}", ops=(2 + r,))
                                           for r in range(3)])
    spec = AgentSpec(roles=roles, op_bytes={0: 1024, 1: 2048}, orders=(order,))
    plan = lower_agents(fx.body(3), fx.edges(3, 4), fx.SYNC_NAMED, stages=4, spec=spec)
    # barrier 1: consumer0 (4 warps) and consumer2 (8 warps) before it; barrier 2: consumer1 and
    # consumer0; barrier 3: consumer2 and consumer1
    assert plan.orders[0].barriers == (1, 2, 3)
    assert plan.orders[0].counts == (384, 256, 384)
    v = prove_plan(plan, fx.body(3), fx.edges(3, 4), fx.SYNC_NAMED, names=fx.NAMES)
    assert v.safe, v.violations[:2]


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("lag", [0, 1])
def test_every_pingpong_plan_is_safe(stages, lag):
    if lag >= stages:
        return
    v = verdict(fx.pingpong_plan(stages=stages, release_lag=lag))
    assert v.safe, v.violations[:2]


def _spec(**change):
    return attrs.evolve(fx.pingpong_spec(), **change)


@pytest.mark.parametrize("orders, message", [
    ([OrderSpec(name="pp", turns=[Turn(agent="consumer0", ops=(2,))])],
     "ordering pp has 1 turn; an ordering needs two consumer groups"),
    ([OrderSpec(name="pp", turns=[Turn(agent="consumer0", ops=(2,)),
                                  Turn(agent="nobody", ops=(3,))])],
     "ordering pp names agent 'nobody'"),
    ([OrderSpec(name="pp", turns=[Turn(agent="producer", ops=(0,)),
                                  Turn(agent="consumer1", ops=(3,))])],
     "names the writer agent producer; named barriers order consumer groups only"),
    ([OrderSpec(name="pp", turns=[Turn(agent="consumer0", ops=(3,)),
                                  Turn(agent="consumer1", ops=(3,))])],
     r"turn of consumer0 names ops \[3\]; list one or more of its own ops \[2\]"),
    ([OrderSpec(name="pp", turns=[Turn(agent="consumer0", ops=(2,)),
                                  Turn(agent="consumer0", ops=(2,))])],
     "agent consumer0 has a turn in ordering pp and again in pp"),
    ([OrderSpec(name="p p", turns=[Turn(agent="consumer0", ops=(2,)),
                                   Turn(agent="consumer1", ops=(3,))])],
     "each ordering needs its own identifier name"),
])
def test_a_bad_ordering_is_one_line(orders, message):
    with pytest.raises(ProgramError, match=message) as err:
        lower_agents(fx.body(2), fx.edges(2, 4), fx.SYNC_NAMED, stages=4,
                     spec=_spec(orders=orders), owner="schedule t")
    assert "\n" not in str(err.value)


def test_a_target_without_named_barriers_is_refused_naming_it_and_the_key():
    with pytest.raises(ProgramError) as err:
        lower_agents(fx.body(2), fx.edges(2, 4), fx.SYNC, stages=4, spec=fx.pingpong_spec(),
                     owner="schedule t-pingpong", target="toy")
    text = str(err.value)
    assert text.startswith("schedule t-pingpong: AgentSpec.orders 'pingpong' needs named "
                           "barriers, and target toy declares none") and "\n" not in text


def test_more_turns_than_free_ids_are_refused():
    few = attrs.evolve(fx.SYNC_NAMED, named_barriers=attrs.evolve(fx.NAMED, ids=2))
    with pytest.raises(ProgramError, match=r"need 2 named barrier ids and target t has 1 free"):
        lower_agents(fx.body(2), fx.edges(2, 4), few, stages=4, spec=fx.pingpong_spec(),
                     target="t")


# --- the prover -------------------------------------------------------------------------------
def test_every_named_barrier_edit_is_refused_naming_the_deadlock_or_the_ordering():
    plan = fx.pingpong_plan()
    found = {}
    for m in agent_mutations(plan, NAMED):
        v = verdict(m.apply(plan))
        found[m.description] = {x.kind for x in v.violations}
    assert {m.category for m in agent_mutations(plan, NAMED)} == set(NAMED)
    assert all(kinds and kinds <= {H.DEADLOCK, H.ORDER} for kinds in found.values()), found
    # every edit also breaks the declared ordering somewhere
    assert all(H.ORDER in kinds for kinds in found.values()), found


def test_a_dropped_arrive_leaves_its_generation_short():
    plan = fx.pingpong_plan()
    m = next(m for m in agent_mutations(plan, ("drop_named_arrive",))
             if m.agent == "consumer0" and m.section == "kernel")
    first = verdict(m.apply(plan)).first
    assert first.kind == H.DEADLOCK and first.site.agent == "consumer1"
    assert "named barrier 2 for tile 1 gets 128 of its 256 threads (only consumer1 arrives)" \
        in first.message


def test_a_swapped_id_overfills_a_generation():
    plan = fx.pingpong_plan()
    m = next(m for m in agent_mutations(plan, ("swap_named_id",))
             if m.agent == "consumer1" and m.section == "kernel" and "sync" in m.description)
    assert m.barrier == 1
    messages = [x.message for x in verdict(m.apply(plan)).violations if x.kind == H.DEADLOCK]
    assert any("gets 384 threads (consumer0, consumer1) for a count of 256" in t
               for t in messages), messages


def test_mismatched_counts_in_one_generation_deadlock():
    plan = fx.pingpong_plan()
    c1 = plan.program("consumer1")
    kernel = [attrs.evolve(s, value=128) if s.kind == StepKind.NAMED_ARRIVE else s
              for s in c1.kernel]
    bad = attrs.evolve(plan, programs=[attrs.evolve(c1, kernel=kernel) if p is c1 else p
                                       for p in plan.programs])
    messages = [x.message for x in verdict(bad).violations if x.kind == H.DEADLOCK]
    assert any("is joined with counts 128, 256" in t for t in messages), messages


def test_an_ordering_with_no_barriers_is_an_order_hazard_alone():
    """The ORDER rule fires on its own: the plan declares the ping-pong but no step enforces it
    (no deadlock either: nothing waits)."""
    plan = fx.pingpong_plan()
    stripped = attrs.evolve(plan, programs=[
        attrs.evolve(p, prologue=[[s for s in it if s.barrier < 0] for it in p.prologue],
                     kernel=[s for s in p.kernel if s.barrier < 0],
                     epilogue=[[s for s in it if s.barrier < 0] for it in p.epilogue])
        for p in plan.programs])
    v = verdict(stripped)
    assert {x.kind for x in v.violations} == {H.ORDER}
    assert v.first.message.startswith("may be issued before consumer0 MMA for tile 0: "
                                      "ordering pingpong (consumer0 then consumer1, each K "
                                      "tile) is not enforced")


# --- the timing model and the views -----------------------------------------------------------
def test_the_timing_model_alternates_the_turns():
    machine = AgentMachine(copy_latency=100, copy_bytes_per_cycle=320, mma_efficiency=1.0)
    turns = [(1 + n % 2, n // 2) for n in range(12)]  # consumer0 tile t, consumer1 tile t, ...
    starts = {}
    for name, plan in (("free", fx.plan()), ("pingpong", fx.pingpong_plan())):
        _, taken = run(plan, fx.body(2), machine, 6)
        starts[name] = {(k.agent, k.placed.tile): k.start for k in taken
                        if k.placed.step.kind == StepKind.OP and k.agent > 0}
    ordered = starts["pingpong"]
    assert all(ordered[a] < ordered[b] for a, b in zip(turns, turns[1:])), ordered
    # without the ordering both consumers issue each tile at once
    assert starts["free"][(1, 0)] == starts["free"][(2, 0)]


def test_a_pingpong_schedule_compiles_safe_with_its_views_and_document():
    from pipeline_core.compiler import compile_schedule
    from pipeline_core.document import to_document
    from pipeline_core.export.text import render
    from pipeline_core.proof import UnsafeScheduleError
    from pipeline_core.check.mutate import mutate_compiled

    c = compile_schedule(fx.PingPongSchedule())
    assert c.proof.safe
    text = render(c)
    assert ("  pingpong: each K tile consumer0 (ops 2), then consumer1 (ops 3); named barriers "
            "1 (256 threads), 2 (256 threads)") in text
    assert "nbar.wait 1, 256 (pingpong)" in text and "nbar.arrive 2, 256 (pingpong)" in text
    doc = to_document(c)["agents"]
    assert doc["orders"] == [{"name": "pingpong", "turns": [{"agent": "consumer0", "ops": [2]},
                                                            {"agent": "consumer1", "ops": [3]}],
                              "barriers": [1, 2], "counts": [256, 256]}]
    steps = [s for p in doc["programs"] for s in p["kernel"] if s["kind"].startswith("named")]
    assert {(s["kind"], s["barrier"]) for s in steps} == {
        ("named_sync", 1), ("named_arrive", 2), ("named_sync", 2), ("named_arrive", 1)}
    for m in agent_mutations(c.plan, NAMED):
        with pytest.raises(UnsafeScheduleError):
            mutate_compiled(c, m)


def test_a_pingpong_document_validates_and_a_plan_without_orders_has_no_orders_key():
    jsonschema = pytest.importorskip("jsonschema")
    from pipeline_core.agents.views import agents_doc
    from pipeline_core.json_output import load_schema

    schema = load_schema("schedule")
    sub = {**schema["$defs"]["agents"], "$defs": schema["$defs"]}
    doc = agents_doc(fx.pingpong_plan(), fx.body(2), fx.NAMES, fx.SYNC_NAMED)
    jsonschema.validate(doc, sub)
    plain = agents_doc(fx.plan(), fx.body(2), fx.NAMES, fx.SYNC)
    assert "orders" not in plain
    assert not any("barrier" in s for p in plain["programs"] for s in p["kernel"])


def test_a_compile_for_a_target_without_named_barriers_is_one_line():
    from pipeline_core.compiler import compile_schedule

    with pytest.raises(ProgramError, match="AgentSpec.orders 'pingpong' needs named barriers, "
                                           "and sync model test-agents declares none"):
        compile_schedule(fx.PingPongSchedule(fx.SYNC))


# --- a buffer the ordering protects -----------------------------------------------------------
def shared_verdict(plan):
    return prove_plan(plan, fx.shared_body(), fx.shared_edges(plan.stages), fx.SYNC_NAMED,
                      names=fx.NAMES)


def test_a_buffer_two_turns_share_is_proven_through_the_named_barriers():
    """consumer0 writes a buffer each K tile that consumer1 reads; the ping-pong orders the
    write before the read and the read before the next write (no ring carries it)."""
    plan = fx.shared_plan()
    assert [r.name for r in plan.rings] == ["full", "empty"]  # no ring for the shared buffer
    assert shared_verdict(plan).safe
    found = {}
    for m in agent_mutations(plan, ("drop_named_sync",)):
        found[(m.agent, m.section)] = {x.kind for x in shared_verdict(m.apply(plan)).violations}
    # consumer1 reading before consumer0's write landed; consumer0 overwriting (in the loop, and
    # the next output tile's first write after the epilogue's wait is gone) before it was read
    assert H.SMEM_RAW in found[("consumer1", "kernel")]
    assert H.SMEM_WAR in found[("consumer0", "kernel")]
    assert H.SMEM_WAR in found[("consumer0", "epilogue")]


def test_the_ordering_names_the_buffer_it_failed_to_protect():
    plan = fx.shared_plan()
    m = next(m for m in agent_mutations(plan, ("drop_named_sync",))
             if m.agent == "consumer1" and m.section == "kernel")
    raw = [x for x in shared_verdict(m.apply(plan)).violations if x.kind == H.SMEM_RAW]
    assert raw and "no named barrier of ordering pingpong orders its completion before the read" \
        in raw[0].message


def test_an_edge_between_consumers_without_an_ordering_is_one_line():
    with pytest.raises(ProgramError, match=r"edge 4->5 crosses agents from an op with no phase "
                                           r"channel; .* unless both ops are in turns of one "
                                           r"ordering or both agents meet in a join "
                                           r"\(AgentSpec.orders\)"):
        lower_agents(fx.shared_body(), fx.shared_edges(4), fx.SYNC_NAMED, stages=4,
                     spec=fx.shared_spec(ordered=False))


def test_the_ordering_runs_on_into_the_next_output_tile():
    """The first turn's epilogue wait orders the next output tile's first turn after this one's
    last: without it, ORDER at the hand-over (the persistent kernel)."""
    plan = fx.pingpong_plan()
    m = next(m for m in agent_mutations(plan, ("drop_named_sync",))
             if m.agent == "consumer0" and m.section == "epilogue")
    order = [x for x in verdict(m.apply(plan)).violations if x.kind == H.ORDER]
    assert order and order[0].site.op.startswith("consumer0 MMA for tile 0 of output tile 2")


def test_the_trace_names_a_turns_stall_after_its_ordering():
    from pipeline_core.agents.timing import timeline

    machine = AgentMachine(copy_latency=100, copy_bytes_per_cycle=320, mma_efficiency=1.0)
    tl = timeline(fx.pingpong_plan(), fx.body(2), machine, 6, name="pp", names=fx.NAMES,
                  sync=fx.SYNC_NAMED)
    waits = [s for g in tl.groups for s in g.steps if s.instr.text.startswith("nbar.wait")]
    assert waits and {s.stall.reason for s in waits if s.stall} == {"pingpong"}
    assert ("pingpong", "pingpong") in tl.channels
