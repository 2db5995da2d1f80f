"""Several writer rings: one full / empty pair per writer and buffer, each with its own depth and
release lag, waited on separately by the consumers; proven over every ring and refused ring by
ring when an edit breaks one (docs/guide/agents.md, "Several rings").

The body is the shape attention needs: a producer copies K_j and V_j, each consumer computes
S = Q.K_j (reads K only) and O += P.V_j (reads V only).
"""
from __future__ import annotations

import attrs
import pytest

import agents_fixtures as fx
from pipeline_core.agents import AgentRole, AgentSpec, RingSpec, StepKind
from pipeline_core.edges import DepEdge
from pipeline_core.ops import DepKind, Op, OpRole
from pipeline_core.agents.inject import lower_agents
from pipeline_core.agents.prove import prove_plan, tile_counts
from pipeline_core.agents.timing import AgentMachine, simulate
from pipeline_core.agents.views import agents_doc, isa_form
from pipeline_core.check.mutate import agent_mutations, mutate_compiled
from pipeline_core.check.verdict import HazardKind as H
from pipeline_core.errors import ProgramError

K, V = fx.K_COPY, fx.V_COPY
#: K released at once, V two tiles late: the rings are released separately
OWN = (RingSpec(name="k", ops=(K,), release_lag=0), RingSpec(name="v", ops=(V,), release_lag=2))


def verdict(plan, readers=2, v_stages=None):
    return prove_plan(plan, fx.two_ring_body(readers),
                      fx.two_ring_edges(readers, plan.stages, v_stages), fx.SYNC,
                      name="two-rings", names=fx.NAMES)


def shape(steps):
    return [(s.kind.value, s.channel or s.op, s.lag) for s in steps]


def test_one_ring_per_buffer_is_derived_from_the_edges():
    plan = fx.two_ring_plan()
    assert [(r.name, r.kind, r.ops) for r in plan.rings] == [
        ("ring0_full", "full", (K,)), ("ring0_empty", "empty", (K,)),
        ("ring1_full", "full", (V,)), ("ring1_empty", "empty", (V,))]
    assert {r.tx_bytes for r in plan.rings if r.kind == "full"} == {4096}
    # the writer acquires and announces each ring right before its own copy
    assert shape(plan.program("producer").kernel) == [
        ("phase_wait", "ring0_empty", 0), ("expect_tx", "ring0_full", 0), ("op", K, 0),
        ("phase_wait", "ring1_empty", 0), ("expect_tx", "ring1_full", 0), ("op", V, 0)]
    # a consumer waits on K's ring before S and on V's ring before PV, not both up front
    assert shape(plan.program("consumer1").kernel)[:5] == [
        ("phase_wait", "ring0_full", 0), ("fence", "groups", 0), ("op", 4, 0),
        ("phase_wait", "ring1_full", 0), ("op", 5, 0)]


def test_a_single_buffer_keeps_one_ring_named_full_and_empty():
    assert [r.name for r in fx.plan().rings] == ["full", "empty"]


def test_declared_rings_get_their_own_release_lags():
    plan = fx.two_ring_plan(rings=OWN)
    assert [(r.name, r.release_lag) for r in plan.rings if r.kind == "empty"] == [
        ("k_empty", 0), ("v_empty", 2)]
    tail = [(s.kind.value, s.channel, s.lag, s.value)
            for s in plan.program("consumer0").kernel][6:]
    # K's wait(0) has retired tile t-2's group too: V's release needs no wait of its own
    assert tail == [("counter_wait", "groups", 0, 0), ("arrive", "k_empty", 0, 0),
                    ("arrive", "v_empty", 2, 0)]
    assert verdict(plan).safe


@pytest.mark.parametrize("readers", [1, 2])
@pytest.mark.parametrize("stages, lag", [(2, 0), (2, 1), (3, 2), (4, 1)])
def test_every_derived_two_ring_plan_is_safe(readers, stages, lag):
    v = verdict(fx.two_ring_plan(stages, readers, lag), readers)
    assert v.safe, v.render_text()


def test_a_ring_of_its_own_depth_is_proven_at_every_pair_of_residues():
    rings = (RingSpec(name="k", ops=(K,)), RingSpec(name="v", ops=(V,), stages=3))
    plan = fx.two_ring_plan(stages=4, rings=rings, v_stages=3)
    assert plan.ring("v_full").stages == 3 and plan.ring("k_full").stages == 4
    long = [c for c in tile_counts(plan) if c > plan.min_tiles + 1]
    assert len(long) == 12  # lcm(4, 3) residues
    assert verdict(plan, v_stages=3).safe
    # the views write each ring's own depth
    wait_v = next(s for s in plan.program("consumer0").kernel if s.channel == "v_full")
    assert "v_full[t%3] parity (t/3)&1" in isa_form(wait_v, plan, fx.two_ring_body(), fx.NAMES,
                                                     fx.SYNC)
    doc = agents_doc(plan, fx.two_ring_body(), fx.NAMES, fx.SYNC)
    assert {r["name"]: r["stages"] for r in doc["rings"]} == {
        "k_full": 4, "k_empty": 4, "v_full": 3, "v_empty": 3}


def _first_kinds(plan, agents=("producer", "consumer0")):
    out = {}
    for m in agent_mutations(plan):
        if m.agent in agents:
            v = verdict(m.apply(plan))
            out[m.description] = (m.category, m.ring, v.first.kind if v.violations else None)
    return out


def test_every_edit_of_either_ring_is_refused():
    found = _first_kinds(fx.two_ring_plan())
    assert all(kind is not None for _, _, kind in found.values()), \
        [d for d, (_, _, k) in found.items() if k is None]
    by = {(cat, ring): set() for cat, ring, _ in found.values()}
    for cat, ring, kind in found.values():
        by[(cat, ring)].add(kind)
    for ring in ("ring0", "ring1"):
        # a dropped release of either ring, in the loop or after it, hangs the producer
        assert by[("drop_arrive", f"{ring}_empty")] == {H.DEADLOCK}
        # a wait one phase early passes on the stale parity, one late never returns
        assert by[("flip_phase_offset", f"{ring}_full")] == {H.DEADLOCK, H.PHASE_PARITY}
        assert by[("flip_phase_offset", f"{ring}_empty")] == {H.DEADLOCK, H.PHASE_PARITY}
        assert by[("drop_acquire", f"{ring}_empty")] <= {H.SMEM_WAR, H.PHASE_OVERRUN}
    assert by[("loosen_counter_wait", "")] == {H.SMEM_WAR}
    assert by[("drop_mma", "")] == {H.MISSING_PRODUCT}


def test_a_loosened_wait_of_one_ring_is_refused_on_that_ring():
    plan = fx.two_ring_plan(rings=OWN)
    waits = [m for m in agent_mutations(plan, ("loosen_counter_wait",))
             if m.agent == "consumer0" and m.section == "kernel"]
    lags = [plan.program("consumer0").kernel[m.index].lag for m in waits]
    assert lags == [0]
    k_wait = verdict(waits[0].apply(plan))
    assert k_wait.first.kind == H.SMEM_WAR and "k_empty" in k_wait.first.message


@pytest.mark.parametrize("rings, message", [
    ((RingSpec(name="k", ops=(K, 2)), RingSpec(name="v", ops=(V,))),
     "ring k names op 2, which is no phase-tracked copy feeding another agent; list only ops "
     "[0, 1]"),
    ((RingSpec(name="k", ops=(K, V)), RingSpec(name="v", ops=(V,))),
     "op 1 is in rings k and v; a copy completes on one ring"),
    ((RingSpec(name="k", ops=(K,)),), "copies [1] are in no ring of AgentSpec.rings"),
    ((RingSpec(name="k", ops=(K,)), RingSpec(name="k", ops=(V,))),
     "AgentSpec.rings names k, k: each ring needs its own identifier name"),
    ((RingSpec(name="k", ops=(K,)), RingSpec(name="v", ops=(V,), release_lag=3, stages=3)),
     "ring v: release_lag 3 must be 0 .. stages - 1 (2)"),
    ((RingSpec(name="k", ops=(K,)), RingSpec(name="v", ops=(V,), stages=3)),
     "ANTI edge 3->1 crosses agents at distance 4; a ring of 3 stages reuses a stage after 3"),
])
def test_a_bad_ring_declaration_is_one_line(rings, message):
    with pytest.raises(ProgramError) as exc:
        lower_agents(fx.two_ring_body(), fx.two_ring_edges(), fx.SYNC, stages=4,
                     spec=fx.two_ring_spec(rings=rings), owner="schedule t")
    text = str(exc.value)
    assert "\n" not in text and text.startswith("schedule t: ") and message in text


MACHINE = AgentMachine(copy_latency=500, copy_bytes_per_cycle=64, step_cycles=1)


def test_the_timing_model_lands_each_copy_on_its_own_ring():
    plan = fx.two_ring_plan()
    t = simulate(plan, fx.two_ring_body(), MACHINE, 16)
    assert t.cycles > 16 * 2 * 4096 / 64  # both copies of every tile went through the SM
    drop = next(m for m in agent_mutations(plan, ("drop_arrive",))
                if m.ring == "ring1_empty" and m.section == "kernel")
    with pytest.raises(ValueError, match="deadlock"):
        simulate(drop.apply(plan), fx.two_ring_body(), MACHINE, 16)


class _TwoRingSchedule:
    """A test plugin's schedule asking for the agents lowering with two writer rings."""

    name = "t-two-rings"

    def __init__(self):
        from pipeline_core.config import PipelineConfig, TargetProfile
        from pipeline_core.costs import CostModel, OpCost
        from pipeline_core.ops import OpRole, ResourceKind

        costs = CostModel({fx.COPY: OpCost(ResourceKind.GLOBAL_MEM, 300, OpRole.GLOBAL_LOAD,
                                           name="COPY"),
                           fx.MMA: OpCost(ResourceKind.MMA_UNIT, 400, OpRole.COMPUTE, name="MMA"),
                           fx.SOFTMAX: OpCost(ResourceKind.VALU, 100, OpRole.VALU_COMPUTE,
                                              name="SOFTMAX")})
        self.target = TargetProfile(costs, PipelineConfig(depth=3, num_partitions=1, m_mmas=1,
                                                          n_mmas=1, vm_per_load_a=1,
                                                          vm_per_load_b=1), sync=fx.SYNC)

    def config(self):
        return self.target.pipeline

    def lowering(self):
        return "agents"

    def build_body(self):
        return fx.two_ring_body()

    def derive_edges(self, body):
        return fx.two_ring_edges(stages=3)

    def agents(self):
        return fx.two_ring_spec()


def test_a_two_ring_schedule_compiles_safe_and_each_ring_edit_is_refused():
    from pipeline_core.compiler import compile_schedule
    from pipeline_core.proof import UnsafeScheduleError

    c = compile_schedule(_TwoRingSchedule())
    assert c.proof.safe and len([r for r in c.plan.rings if r.kind == "empty"]) == 2
    picked = {}
    for m in agent_mutations(c.plan, ("drop_arrive", "flip_phase_offset")):
        picked.setdefault((m.category, m.ring), m)
    picked["loosen", ""] = next(m for m in agent_mutations(c.plan, ("loosen_counter_wait",))
                                if m.section == "kernel")
    assert {ring for _, ring in picked} == {"ring0_full", "ring0_empty", "ring1_full",
                                            "ring1_empty", ""}
    for m in picked.values():
        with pytest.raises(UnsafeScheduleError):
            mutate_compiled(c, m)


# --- a copy issued once per output tile (docs/guide/agents.md, "Loads issued once") --------
Q = fx.Q_COPY


def once_verdict(plan, readers=2):
    return prove_plan(plan, fx.once_body(readers), fx.once_edges(readers, plan.stages), fx.SYNC,
                      name="once", names=fx.NAMES)


def test_a_once_copy_is_issued_and_waited_on_before_the_loop_and_released_after_it():
    plan = fx.once_plan()
    q_full, q_empty = plan.ring_of(Q, "full"), plan.ring_of(Q, "empty")
    assert (q_full.once, q_full.stages, q_full.tx_bytes, q_empty.arrivals) == (True, 1, 8192, 8)
    producer, consumer = plan.program("producer"), plan.program("consumer0")
    assert [(s.kind.value, s.channel or s.op) for s in producer.prologue[0][:3]] == [
        ("phase_wait", q_empty.name), ("expect_tx", q_full.name), ("op", Q)]
    assert all(s.once for s in producer.prologue[0][:3])
    assert Q not in {s.op for s in producer.kernel}
    assert consumer.prologue[0][0].channel == q_full.name and consumer.prologue[0][0].once
    assert q_full.name not in {s.channel for s in consumer.kernel}
    tail = consumer.epilogue[-1]
    assert (tail[-1].kind, tail[-1].channel, tail[-1].once) == (StepKind.ARRIVE, q_empty.name,
                                                                True)
    # the last release's wait(0) already drained the groups: no second wait(0) before Q's
    assert [s.value for s in tail if s.kind == StepKind.COUNTER_WAIT] == [0]
    wait_q = consumer.prologue[0][0]
    assert "[o%1] parity (o/1)&1" in isa_form(wait_q, plan, fx.once_body(), fx.NAMES, fx.SYNC)


@pytest.mark.parametrize("readers", [1, 2])
@pytest.mark.parametrize("stages, lag", [(2, 0), (2, 1), (4, 1), (4, 3)])
def test_every_plan_with_a_once_copy_is_safe(readers, stages, lag):
    v = once_verdict(fx.once_plan(stages, readers, lag), readers)
    assert v.safe, v.render_text()


def test_every_edit_of_the_once_ring_is_refused():
    plan = fx.once_plan()
    q_rings = {plan.ring_of(Q, "full").name, plan.ring_of(Q, "empty").name}
    found = {}
    for m in agent_mutations(plan):
        if m.ring in q_rings and m.agent in ("producer", "consumer1"):
            v = once_verdict(m.apply(plan))
            found[m.description] = (m.category, v.first.kind if v.violations else None)
    assert sorted({c for c, _ in found.values()}) == ["drop_acquire", "drop_arrive",
                                                      "flip_phase_offset"]
    assert {k for _, k in found.values()} <= {H.DEADLOCK, H.PHASE_PARITY, H.SMEM_WAR}
    assert None not in {k for _, k in found.values()}, found
    assert [k for c, k in found.values() if c == "drop_acquire"] == [H.SMEM_WAR]


def test_releasing_the_once_copy_before_the_last_group_retires_is_refused():
    import attrs

    plan = fx.once_plan(release_lag=1)
    prog = plan.program("consumer0")
    tail = list(prog.epilogue[-1])
    release = tail.pop()
    edited = attrs.evolve(prog, epilogue=[*prog.epilogue[:-1], (release, *tail)])
    plan = attrs.evolve(plan, programs=[edited if p.name == "consumer0" else p
                                        for p in plan.programs])
    v = once_verdict(plan)
    assert v.first.kind == H.SMEM_WAR and plan.ring_of(Q, "empty").name in v.first.message


@pytest.mark.parametrize("readers", [1, 2])
@pytest.mark.parametrize("q_stages", [2, 3])
def test_a_once_ring_of_several_stages_is_safe(readers, q_stages):
    """A double-buffered Q: output tile o's copy lands in stage o % S, so the copy of o + 1
    need not wait for the release of o; the stage is written again S output tiles later, and
    only that copy's acquire must follow o's release (the copy of tile 1 is no WAR on tile 0's
    Q, which the prover once reported).  The proof runs S + 1 output tiles to reach it."""
    plan = fx.once_plan(readers=readers, q_stages=q_stages)
    assert (plan.ring_of(Q, "full").stages, plan.ring_of(Q, "empty").stages) == (q_stages,) * 2
    v = once_verdict(plan, readers)
    assert v.safe, v.render_text()
    assert v.model["output_tiles"] == [1, 2, q_stages + 1]
    acquire, consumer_wait = plan.program("producer").prologue[0][0], \
        plan.program("consumer0").prologue[0][0]
    assert f"q_empty[o%{q_stages}] parity (o/{q_stages}-1)&1" in isa_form(
        acquire, plan, fx.once_body(readers), fx.NAMES, fx.SYNC)
    assert f"q_full[o%{q_stages}] parity (o/{q_stages})&1" in isa_form(
        consumer_wait, plan, fx.once_body(readers), fx.NAMES, fx.SYNC)


def test_every_edit_of_a_two_stage_once_ring_is_refused():
    """Dropping the producer's acquire of a 2-stage Q ring is a WAR only when an output tile
    reuses a stage (output tile 2 of 3): the proof must unroll that far."""
    plan = fx.once_plan(q_stages=2)
    found = {}
    for m in agent_mutations(plan):
        if m.ring in ("q_full", "q_empty") and m.agent in ("producer", "consumer1"):
            v = once_verdict(m.apply(plan))
            found[m.description] = (m.category, v.first if v.violations else None)
    assert sorted({c for c, _ in found.values()}) == ["drop_acquire", "drop_arrive",
                                                      "flip_phase_offset"]
    assert None not in {f for _, f in found.values()}, found
    dropped = [f for c, f in found.values() if c == "drop_acquire"]
    assert [f.kind for f in dropped] == [H.SMEM_WAR]
    assert "q_empty[0]" in dropped[0].message and "output tile 3" in dropped[0].site.op


def test_a_once_op_that_is_no_copy_is_one_line():
    import attrs

    spec = attrs.evolve(fx.once_spec(), once=(Q, 3))
    with pytest.raises(ProgramError) as exc:
        lower_agents(fx.once_body(), fx.once_edges(), fx.SYNC, stages=4, spec=spec,
                     owner="schedule t")
    assert str(exc.value) == ("schedule t: AgentSpec.once names ops [3], which are no phase-"
                              "tracked copies feeding another agent; list only ops [0, 1, 2]")


def test_a_ring_mixing_once_and_per_tile_copies_is_one_line():
    import attrs

    spec = attrs.evolve(fx.once_spec(), rings=(RingSpec(name="qk", ops=(Q, 1)),
                                               RingSpec(name="v", ops=(2,))))
    with pytest.raises(ProgramError) as exc:
        lower_agents(fx.once_body(), fx.once_edges(), fx.SYNC, stages=4, spec=spec,
                     owner="schedule t")
    assert "ring qk mixes copies issued once ([0], AgentSpec.once)" in str(exc.value)


def test_the_timing_model_runs_a_once_copy_once():
    t = simulate(fx.once_plan(), fx.once_body(), MACHINE, 16)
    per_tile = simulate(fx.two_ring_plan(), fx.two_ring_body(), MACHINE, 16)
    # Q's 8192 bytes come once, not per K tile: at most one extra copy's worth of cycles
    assert per_tile.cycles < t.cycles <= per_tile.cycles + 500 + 8192 / 64 + 64


# --- attention: chained groups (docs/guide/agents.md, "Chained groups") -------------------
def attention_verdict(plan, readers=2):
    return prove_plan(plan, fx.attention_body(readers), fx.attention_edges(readers, plan.stages),
                      fx.SYNC, name="attention", names=fx.NAMES)


def test_an_op_reading_an_async_result_cuts_the_group_and_waits_for_it():
    plan = fx.attention_plan(release_lag=1)
    kernel = plan.program("consumer1").kernel
    s, softmax, pv = 6, 7, 8
    assert [(x.kind.value, x.op if x.kind != StepKind.PHASE_WAIT else x.channel, x.value)
            for x in kernel] == [
        ("phase_wait", "ring1_full", 0), ("fence", -1, 0), ("op", s, 0), ("commit", -1, 0),
        ("counter_wait", s, 0), ("op", softmax, 0),
        ("phase_wait", "ring2_full", 0), ("fence", -1, 0), ("op", pv, 0), ("commit", -1, 0),
        # S's wait(0) of the next tile retires this PV: the release needs no wait of its own
        ("arrive", -1, 0), ("arrive", -1, 0)]
    assert [x.channel for x in kernel if x.kind == StepKind.ARRIVE] == ["ring1_empty",
                                                                       "ring2_empty"]


def test_a_group_closes_after_an_op_a_later_op_reads_alone():
    """Two async ops in a row (S, then T, both reading the K tile's copy) and a softmax that
    reads S alone: S's group is committed before T is issued, so the softmax waits for S with
    wait(1) while T still runs; an op that reads both (here the last one) waits for both.  A
    body whose later ops read every async op keeps them in one group (the test above)."""
    body = [*fx.body(0), Op(tag=fx.MMA, subtile=0, role=OpRole.COMPUTE),
            Op(tag=fx.MMA, subtile=0, channel=1, role=OpRole.COMPUTE),
            Op(tag=fx.SOFTMAX, subtile=0, role=OpRole.VALU_COMPUTE),
            Op(tag=fx.SOFTMAX, subtile=0, channel=1, role=OpRole.VALU_COMPUTE)]
    s, t, sm, both = 2, 3, 4, 5
    edges = [DepEdge.flow(0, s), DepEdge.flow(1, t), DepEdge.flow(s, sm), DepEdge.flow(s, both),
             DepEdge.flow(t, both), DepEdge.anti(s, 0, 4), DepEdge.anti(t, 1, 4),
             DepEdge.anti(sm, s, 1), DepEdge.anti(both, t, 1), DepEdge.anti(both, s, 1)]
    spec = AgentSpec(roles=[AgentRole(name="producer", ops=(0, 1), warps=4, issuers=1),
                            AgentRole(name="consumer0", ops=(s, t, sm, both))],
                     op_bytes={0: 4096, 1: 4096})
    plan = lower_agents(body, edges, fx.SYNC, stages=4, spec=spec)
    steps = [(x.kind.value, x.op, x.value) for x in plan.program("consumer0").kernel
             if x.kind in (StepKind.OP, StepKind.COMMIT, StepKind.COUNTER_WAIT)]
    assert steps[:7] == [("op", s, 0), ("commit", -1, 0), ("op", t, 0), ("commit", -1, 0),
                         ("counter_wait", s, 1), ("op", sm, 0), ("counter_wait", t, 0)]
    v = prove_plan(plan, body, edges, fx.SYNC, names=fx.NAMES)
    assert v.safe, v.violations[:2]


@pytest.mark.parametrize("stages, lag", [(2, 0), (2, 1), (4, 2)])
def test_every_attention_plan_is_safe(stages, lag):
    v = attention_verdict(fx.attention_plan(stages, 2, lag))
    assert v.safe, v.render_text()


def test_every_edit_of_an_attention_consumer_is_refused():
    plan = fx.attention_plan(release_lag=1)
    found = {}
    for m in agent_mutations(plan):
        if m.agent == "consumer0" and m.section != "prologue":
            v = attention_verdict(m.apply(plan))
            found[m.description] = v.first.kind if v.violations else None
    assert None not in found.values(), [d for d, k in found.items() if k is None]
    # the chained wait loosened: softmax may read S before its group retired
    loosened = {d: k for d, k in found.items() if "wait groups" in d and "kernel" in d}
    assert set(loosened.values()) == {H.SMEM_RAW}


class _AttentionSchedule(_TwoRingSchedule):
    """A test plugin's attention schedule: Q once, K and V rings, S -> softmax -> PV."""

    name = "t-attention"

    def build_body(self):
        return fx.attention_body()

    def derive_edges(self, body):
        return fx.attention_edges(stages=3)

    def agents(self):
        return fx.attention_spec()


def test_an_attention_schedule_compiles_safe_with_its_views():
    from pipeline_core.compiler import compile_schedule
    from pipeline_core.document import to_document
    from pipeline_core.export.text import render

    c = compile_schedule(_AttentionSchedule())
    assert c.proof.safe
    text = render(c)
    assert "ring0_full[1] (full): 1 arrival, 8192 bytes per phase" in text
    assert "ring0_full[o%1] parity (o/1)&1" in text and "ring1_full[t%3] parity (t/3)&1" in text
    doc = to_document(c)["agents"]
    consumer = doc["programs"][1]
    chained = [s for s in consumer["kernel"] if s["kind"] == "counter_wait"]
    assert [s["op"] for s in chained] == [3]  # S's group, retired before softmax reads S


def test_the_document_records_each_rings_writer_ops_lag_and_once():
    """A reader of the document sees which copies each ring carries, when it is released and
    whether it counts output tiles, not only its name (docs/document-format.md, `agents`)."""
    from pipeline_core.compiler import compile_schedule
    from pipeline_core.document import to_document

    c = compile_schedule(_AttentionSchedule())
    doc = to_document(c)["agents"]
    rings = {r["name"]: r for r in doc["rings"]}
    assert rings == {r.name: {**rings[r.name], "ops": list(r.ops), "release_lag": r.release_lag,
                              "once": r.once} for r in c.plan.rings}
    assert [n for n, r in rings.items() if r["once"]] == ["ring0_full", "ring0_empty"]
    assert rings["ring0_full"]["ops"] != rings["ring1_full"]["ops"]
    once_steps = [s for p in doc["programs"] for sec in ("prologue", "epilogue")
                  for it in p[sec] for s in it if s["once"]]
    assert {s["kind"] for s in once_steps} == {"phase_wait", "expect_tx", "op", "arrive"}
    assert all(s["channel"].startswith("ring0_") and "[o%1]" in s["isa"]
               for s in once_steps if s["kind"] != "op")


def test_a_read_without_its_own_rings_wait_is_a_raw_on_that_ring():
    import attrs

    plan = fx.two_ring_plan()
    prog = plan.program("consumer0")
    kernel = [s for s in prog.kernel if s.channel != "ring1_full"]  # V read with no V wait
    edited = attrs.evolve(prog, kernel=kernel)
    plan = attrs.evolve(plan, programs=[edited if p.name == "consumer0" else p
                                        for p in plan.programs])
    raw = [v for v in verdict(plan).violations if v.kind == H.SMEM_RAW]
    assert raw and all("ring1_full" in v.message for v in raw)
    # its K wait still covers S: only PV (op 3) is flagged
    pv = next(i for i, s in enumerate(kernel) if s.kind == StepKind.OP and s.op == 3)
    assert {(v.site.phase, v.site.index) for v in raw} == {("kernel", pv)}


def test_at_lag_zero_k_is_released_once_s_retires_while_pv_runs():
    plan = fx.attention_plan(release_lag=0)
    kernel = plan.program("consumer0").kernel
    at = {(s.kind, s.channel or s.op): i for i, s in enumerate(kernel)}
    s_wait = next(i for i, s in enumerate(kernel) if s.kind == StepKind.COUNTER_WAIT and s.op == 3)
    assert at[(StepKind.ARRIVE, "ring1_empty")] == s_wait + 1          # K: right after S retires
    assert at[(StepKind.ARRIVE, "ring2_empty")] > at[(StepKind.OP, 5)]  # V: after PV
    v = attention_verdict(plan)
    assert v.safe, v.render_text()
    # releasing K before S's wait is refused on K's ring
    import attrs
    early = list(kernel)
    early.insert(s_wait, early.pop(s_wait + 1))
    edited = attrs.evolve(plan.program("consumer0"), kernel=early)
    bad = attrs.evolve(plan, programs=[edited if p.name == "consumer0" else p
                                       for p in plan.programs])
    first = attention_verdict(bad).first
    assert first.kind == H.SMEM_WAR and "ring1_empty" in first.message


# --- an output tile with no K tile (attention's query tile with no valid key) --------------
def test_a_plan_with_a_once_copy_is_proven_at_zero_k_tiles():
    """Only the once steps run; the GEMM's plan (no once copy) keeps its counts."""
    assert tile_counts(fx.attention_plan())[0] == 0
    assert 0 not in tile_counts(fx.two_ring_plan())
    steps = fx.attention_plan().program("consumer0").placed(0)
    assert [(p.step.kind, p.step.channel) for p in steps] == [
        (StepKind.PHASE_WAIT, "ring0_full"), (StepKind.ARRIVE, "ring0_empty")]


def test_at_zero_k_tiles_a_dropped_q_release_hangs_the_next_output_tile(monkeypatch):
    """An output tile with no K tile still releases its Q (the hang of an attention forward whose
    query tile has no valid key, NVIDIA/cudnn-frontend PR #1069): proven at KT = 0 alone, the
    derived plan is safe and a dropped release is a DEADLOCK."""
    import pipeline_core.agents.prove as prove

    monkeypatch.setattr(prove, "tile_counts", lambda plan: [0])
    plan = fx.attention_plan(release_lag=1)
    assert attention_verdict(plan).safe
    drop = next(m for m in agent_mutations(plan, ("drop_arrive",))
                if m.ring == "ring0_empty" and m.agent == "consumer1")
    v = attention_verdict(drop.apply(plan))
    assert v.first.kind == H.DEADLOCK and "ring0_empty" in v.first.message


# --- skewed ops: a software pipeline inside one agent (docs/guide/agents.md, "Skewed ops") --
def _skewed_edges(p_buffers: int, stages: int = 3, readers: int = 2):
    """The attention fixture's edges with the softmax's next write of P ``p_buffers`` K tiles
    behind PV's read of it (PV is op 5 + 3c)."""
    pvs = {5 + 3 * c for c in range(readers)}
    return [attrs.evolve(e, distance=p_buffers)
            if e.kind == DepKind.ANTI and e.producer in pvs and e.consumer == e.producer - 1
            else e for e in fx.attention_edges(readers, stages)]


def _skewed(p_buffers: int, stages: int = 3, readers: int = 2, lag: int = 1,
            turns: bool = False):
    """The attention fixture with each consumer's PV (op 5 + 3c) issued one K tile late, right
    after S: S_t, PV_{t-1}, softmax_t.  ``p_buffers``: how many K tiles the softmax's next write
    of P waits behind PV's read (2: P double-buffered).  ``turns``: the consumers take turns
    issuing S_t and PV_{t-1} together (FA3's scheduler barrier) on named barriers."""
    from pipeline_core.agents import OrderSpec, Turn

    edges = _skewed_edges(p_buffers, stages, readers)
    spec = fx.attention_spec(readers, lag)
    roles = [spec.roles[0]] + [attrs.evolve(r, ops=(r.ops[0], r.ops[2], r.ops[1]))
                               for r in spec.roles[1:]]
    orders = (OrderSpec(name="pp", turns=tuple(
        Turn(agent=f"consumer{c}", ops=(3 + 3 * c, 5 + 3 * c)) for c in range(readers))),
    ) if turns else ()
    spec = attrs.evolve(spec, roles=roles, lags={5 + 3 * c: 1 for c in range(readers)},
                        orders=orders)
    sync = fx.SYNC_NAMED if turns else fx.SYNC
    plan = lower_agents(fx.attention_body(readers), edges, sync, stages=stages, spec=spec)
    verdict = prove_plan(plan, fx.attention_body(readers), edges, sync, name="skewed",
                         names=fx.NAMES)
    return plan, verdict


def test_a_skewed_op_runs_a_tile_late_in_the_order_its_role_lists():
    plan, v = _skewed(2)
    assert v.safe, v.render_text()
    kernel = plan.program("consumer0").kernel
    ops = [(s.op, s.lag) for s in kernel if s.kind == StepKind.OP]
    assert ops == [(3, 0), (5, 1), (4, 0)]
    # S and PV_{t-1} are two groups; the softmax's wait retires S and leaves PV_{t-1} in flight
    wait = next(s for s in kernel if s.kind == StepKind.COUNTER_WAIT)
    assert (wait.op, wait.value) == (3, 1)
    assert [s.lag for s in kernel if s.kind == StepKind.COMMIT] == [0, 1]
    v_wait = next(s for s in kernel if s.channel == "ring2_full")
    assert v_wait.lag == 1
    # tile 0's PV runs in the epilogue; the prologue holds no PV
    assert 5 not in {s.op for s in plan.program("consumer0").prologue[0]}
    assert [s.op for s in plan.program("consumer0").epilogue[0] if s.kind == StepKind.OP] == [5]


def test_over_a_single_p_buffer_the_softmax_waits_for_the_skewed_pv():
    """The softmax of tile t overwrites the P that PV_{t-1} reads: the same-iteration ANTI edge
    gets its wait, which retires PV_{t-1} (and S_t before it) first."""
    plan, v = _skewed(1)
    assert v.safe, v.render_text()
    kernel = plan.program("consumer0").kernel
    waits = [(s.op, s.lag, s.value) for s in kernel if s.kind == StepKind.COUNTER_WAIT]
    assert waits[0] == (5, 1, 0)
    # tile 0 has no PV_{-1}: its softmax waits for S alone
    first = [(s.op, s.value) for s in plan.program("consumer0").prologue[0]
             if s.kind == StepKind.COUNTER_WAIT]
    assert first == [(3, 0)]


def test_every_edit_of_a_skewed_consumer_is_refused():
    plan, _ = _skewed(2)
    edges = _skewed_edges(2)
    found = {}
    for m in agent_mutations(plan):
        if m.agent == "consumer0" and m.section != "prologue":
            v = prove_plan(m.apply(plan), fx.attention_body(2), edges, fx.SYNC, name="s",
                           names=fx.NAMES)
            found[m.description] = v.first.kind if v.violations else None
    assert found and None not in found.values(), [d for d, k in found.items() if k is None]


# --- a turn over a lagged op: S_t and PV_{t-1} issued back to back (FA3's scheduler barrier) --
def _named(steps):
    return [(s.kind, s.op, s.lag) for s in steps
            if s.kind in (StepKind.NAMED_SYNC, StepKind.NAMED_ARRIVE, StepKind.OP)]


def test_a_turn_brackets_the_lagged_op_its_iteration_issues():
    plan, v = _skewed(2, turns=True)
    assert v.safe, v.render_text()
    c0 = plan.program("consumer0")
    # the turn waits before S_t and hands over after PV_{t-1}; the softmax runs outside it
    assert _named(c0.kernel) == [(StepKind.NAMED_SYNC, -1, 1), (StepKind.OP, 3, 0),
                                 (StepKind.OP, 5, 1), (StepKind.NAMED_ARRIVE, -1, 0),
                                 (StepKind.OP, 4, 0)]
    # the last PV runs past the loop: the first turn's last wait (lag 1) still brackets it, so
    # each barrier's generations stay whole for the next output tile
    assert _named(c0.epilogue[0]) == [(StepKind.NAMED_SYNC, -1, 1), (StepKind.OP, 5, 1)]
    assert _named(plan.program("consumer1").epilogue[0]) == [(StepKind.OP, 8, 1)]


def test_every_named_barrier_edit_of_a_lagged_turn_is_refused():
    plan, _ = _skewed(2, turns=True)
    edges = _skewed_edges(2)
    mutations = list(agent_mutations(plan, ("drop_named_arrive", "drop_named_sync",
                                            "swap_named_id")))
    assert mutations
    for m in mutations:
        v = prove_plan(m.apply(plan), fx.attention_body(2), edges, fx.SYNC_NAMED, name="s",
                       names=fx.NAMES)
        assert v.violations, m.description


def test_a_turn_that_hands_over_before_its_lagged_op_is_refused():
    """consumer0's arrival moved up behind S_t: consumer1's S_t may then be issued before
    consumer0's PV_{t-1}, which the turn brackets, and the proof says so."""
    plan, _ = _skewed(2, turns=True)
    edges = _skewed_edges(2)
    c0 = plan.program("consumer0")
    steps = list(c0.kernel)
    arrive = next(n for n, s in enumerate(steps) if s.kind == StepKind.NAMED_ARRIVE)
    moved = steps.pop(arrive)
    s_commit = next(n for n, s in enumerate(steps) if s.kind == StepKind.COMMIT and s.lag == 0)
    steps.insert(s_commit + 1, moved)
    early = attrs.evolve(plan, programs=[attrs.evolve(p, kernel=steps) if p is c0 else p
                                         for p in plan.programs])
    v = prove_plan(early, fx.attention_body(2), edges, fx.SYNC_NAMED, name="s",
                   names=fx.NAMES)
    assert {x.kind for x in v.violations} == {H.ORDER}, v.render_text()
    assert "ordering pp (consumer0 then consumer1, each K tile) is not enforced" in \
        v.first.message


@pytest.mark.parametrize("lags, orders, message", [
    ({1: 1}, False, "AgentSpec.lags names op 1, which is no reader agent's op"),
    ({5: -1}, False, "AgentSpec.lags gives op 5 lag -1"),
    ({5: 2}, False, "releases ring ring2_empty 3 K tiles late"),
])
def test_a_bad_lag_is_one_line(lags, orders, message):
    import attrs

    from pipeline_core.agents import OrderSpec, Turn

    spec = attrs.evolve(fx.attention_spec(2, 1), lags=lags)
    sync = fx.SYNC
    if orders:
        sync = fx.SYNC_NAMED
        spec = attrs.evolve(spec, orders=(OrderSpec(name="pp", turns=(
            Turn(agent="consumer0", ops=(3,)), Turn(agent="consumer1", ops=(6,)))),))
    with pytest.raises(ProgramError) as exc:
        lower_agents(fx.attention_body(), fx.attention_edges(2, 3), sync, stages=3, spec=spec,
                     owner="schedule t")
    text = str(exc.value)
    assert "\n" not in text and text.startswith("schedule t: ") and message in text
