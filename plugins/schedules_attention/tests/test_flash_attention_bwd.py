"""flash-attention-bwd: every variant proven safe, the dQ hand-off derived (the consumers'
proxy fence, the writer's bulk read wait before it hands the buffers back), and the edits that
break it refused: a dropped or loosened reduce wait, the buffer handed back before the reduce
read it, a dropped proxy fence, a dropped Q / dO release, a wrong diagonal start
(docs/guide/attention.md, "The backward")."""
from __future__ import annotations

import attrs
import pytest

from pipeline_core.api import compile_named
from pipeline_core.check.mutate import agent_mutations, mutate_compiled
from pipeline_core.check.verdict import HazardKind as H
from pipeline_core.errors import ProgramError
from pipeline_core.plan import StepKind
from pipeline_core.proof import UnsafeScheduleError, require_safe

from pipeline_core_schedules_attention.bwd_schedule import BackwardTag as T
from pipeline_core_schedules_attention.bwd_tiles import BackwardTrips

NAME = "flash-attention-bwd"
VARIANTS = [dict(head_dim=d, causal=c, align=a) for d in (64, 128)
            for c, a in ((False, "top_left"), (True, "top_left"), (True, "bottom_right"))]


def build(stages: int | None = None, **params):
    return compile_named(NAME, params={k: str(v).lower() for k, v in params.items()},
                         target_args={"stages": str(stages)} if stages else {})


def prog(c, name):
    return next(p for p in c.plan.programs if p.name == name)


def edited(c, agent, kernel):
    """``c`` with ``agent``'s kernel steps replaced, proven again (hazards kept)."""
    plan = attrs.evolve(c.plan, programs=[attrs.evolve(p, kernel=kernel) if p.name == agent
                                          else p for p in c.plan.programs])
    return require_safe(attrs.evolve(c, plan=plan, proof=None), allow_unsafe=True)


def hazards(c):
    return {v.kind for v in c.proof.verdict.violations}


@pytest.mark.parametrize("params", VARIANTS, ids=lambda p: "-".join(map(str, p.values())))
def test_every_variant_compiles_safe(params):
    c = build(**params)
    assert c.proof.safe
    g = c.plan.trip_rule
    assert isinstance(g, BackwardTrips) and g.causal is params["causal"]
    assert (g.block_m, g.block_n) == (64, 128)


def test_three_ring_stages_prove_safe_where_they_fit():
    assert build(3, head_dim=64, block_m=64, causal=True).proof.safe


def test_the_hand_off_is_derived_fence_after_staging_read_wait_before_the_hand_back():
    c = build(shared_dq=False)  # a buffer and a writer per consumer
    for name in ("consumer0", "consumer1"):
        kinds = [s.kind for s in prog(c, name).kernel]
        stages = [n for n, s in enumerate(prog(c, name).kernel)
                  if s.kind == StepKind.OP and c.body[s.op].tag == T.DQ_STAGE]
        assert len(stages) == 2  # hd128: dQ in two parts of 64 columns
        assert kinds[stages[0] - 1] == StepKind.NAMED_SYNC
        assert kinds[stages[-1] + 1:stages[-1] + 3] == [StepKind.PROXY_FENCE,
                                                        StepKind.NAMED_ARRIVE]
    for name in ("dq_writer0", "dq_writer1"):
        w = [s.kind for s in prog(c, name).kernel]
        assert w == [StepKind.NAMED_SYNC, StepKind.OP, StepKind.COMMIT, StepKind.COUNTER_WAIT,
                     StepKind.NAMED_ARRIVE]
        wait = prog(c, name).kernel[3]
        assert wait.channel == "bulk" and wait.value == 0
        # the writer's groups touch no registers: no wgmma.fence opens them
        assert StepKind.FENCE not in w


def test_the_shared_buffer_chains_staging_add_and_reduce():
    """One dQ buffer (the default): consumer 0 stages, consumer 1 adds after consumer 0's turn
    (a named sync before its first add), each fences and hands on, one writer reduces."""
    c = build()
    assert [p.name for p in c.plan.programs if p.name.startswith("dq_writer")] == ["dq_writer0"]
    for name, tag in (("consumer0", T.DQ_STAGE), ("consumer1", T.DQ_ADD)):
        k = prog(c, name).kernel
        kinds = [s.kind for s in k]
        ops = [n for n, s in enumerate(k) if s.kind == StepKind.OP and c.body[s.op].tag == tag]
        assert len(ops) == 2  # hd128: dQ in two parts of 64 columns
        assert kinds[ops[0] - 1] == StepKind.NAMED_SYNC
        assert kinds[ops[-1] + 1:ops[-1] + 3] == [StepKind.PROXY_FENCE, StepKind.NAMED_ARRIVE]
    # consumer 1's add waits on the barrier consumer 0 arrives on after its staging
    c0, c1 = prog(c, "consumer0").kernel, prog(c, "consumer1").kernel
    arrive = next(s for s in c0 if s.kind == StepKind.NAMED_ARRIVE)
    assert any(s.kind == StepKind.NAMED_SYNC and s.barrier == arrive.barrier for s in c1)
    w = [s.kind for s in prog(c, "dq_writer0").kernel]
    assert w == [StepKind.NAMED_SYNC, StepKind.OP, StepKind.COMMIT, StepKind.COUNTER_WAIT,
                 StepKind.NAMED_ARRIVE]


def test_an_add_before_the_staging_it_adds_to_is_refused():
    """Consumer 1's wait for consumer 0's staging dropped: its add may read the buffer before
    the partial lands (or while the last reduce still reads it)."""
    c = build()
    k = prog(c, "consumer1").kernel
    at = next(n for n, s in enumerate(k) if s.kind == StepKind.OP
              and c.body[s.op].tag == T.DQ_ADD) - 1
    assert k[at].kind == StepKind.NAMED_SYNC
    bad = edited(c, "consumer1", [*k[:at], *k[at + 1:]])
    assert hazards(bad) & {H.SMEM_RAW, H.SMEM_WAR}


def _without(steps, kind):
    return [s for s in steps if s.kind != kind]


@pytest.mark.parametrize("writer, shared, cut", [
    ("dq_writer0", True, "keys"), ("dq_writer0", False, "keys"), ("dq_writer1", False, "keys"),
    ("dq_writer0", True, "columns")])
def test_a_dropped_reduce_wait_is_refused(writer, shared, cut):
    """With the columns cut the wait is the join's: the writer's read retired before its next
    meeting, which the consumers' staging into that copy of the buffer follows."""
    c = build(causal=True, shared_dq=shared, dq_cut=cut)
    bad = edited(c, writer, _without(prog(c, writer).kernel, StepKind.COUNTER_WAIT))
    assert H.SMEM_WAR in hazards(bad)


@pytest.mark.parametrize("writer, shared", [("dq_writer0", True), ("dq_writer0", False),
                                            ("dq_writer1", False)])
def test_the_buffer_handed_back_before_the_reduce_read_it_is_refused(writer, shared):
    c = build(shared_dq=shared)
    k = list(prog(c, writer).kernel)
    k[3], k[4] = k[4], k[3]  # the hand-back arrive before the read wait
    assert H.SMEM_WAR in hazards(edited(c, writer, k))
    loosened = [m for m in agent_mutations(c.plan, ("loosen_counter_wait",))
                if m.agent == writer and m.section == "kernel"]
    assert len(loosened) == 1
    with pytest.raises(UnsafeScheduleError, match="SMEM_WAR"):
        mutate_compiled(c, loosened[0])


@pytest.mark.parametrize("consumer", ["consumer0", "consumer1"])
def test_a_dropped_proxy_fence_or_staging_before_the_turn_is_refused(consumer):
    c = build()
    k = prog(c, consumer).kernel
    assert H.SMEM_RAW in hazards(edited(c, consumer, _without(k, StepKind.PROXY_FENCE)))
    at = next(n for n, s in enumerate(k) if s.kind == StepKind.NAMED_SYNC)
    moved = [*k[:at], k[at + 1], k[at], *k[at + 2:]]  # the staging before its turn's wait
    assert hazards(edited(c, consumer, moved)) & {H.SMEM_WAR, H.SMEM_RAW}


@pytest.mark.parametrize("ring", ["q_empty", "do_empty", "k_empty", "v_empty"])
def test_a_dropped_release_is_refused(ring):
    c = build(causal=True)
    picked = [m for m in agent_mutations(c.plan, ("drop_arrive",)) if m.ring == ring]
    assert picked
    for m in picked:
        with pytest.raises(UnsafeScheduleError, match="DEADLOCK"):
            mutate_compiled(c, m)


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_a_wrong_diagonal_start_is_refused_by_the_proof(align):
    c = build(causal=True, align=align)
    rule = attrs.evolve(c.plan.trip_rule, start_shift=1)
    bad = require_safe(attrs.evolve(c, plan=attrs.evolve(c.plan, trip_rule=rule), proof=None),
                       allow_unsafe=True)
    assert hazards(bad) == {H.MISSING_PRODUCT}
    assert "skips query block" in bad.proof.verdict.violations[0].message


def test_the_trip_rule_visits_from_the_diagonal_and_masks_the_straddling_blocks():
    r = BackwardTrips(causal=True, block_m=64, block_n=128)
    # KV block 2 (keys 256..383) of a 1000-square: rows from 256 on, blocks 4.. 15
    assert r.first_block(2, 1000, 1000) == 4 and r.trips(2, 1000, 1000) == 12
    assert r.masked_blocks(2, 1000, 1000) == 2  # rows 256..383 miss some of its keys
    assert r.trips(2, 1000, 1000, group=4) == 48
    b = attrs.evolve(r, align="bottom_right")
    # 100 queries on 1000 keys: row r sees keys up to r + 900: KV block 7 from row 0
    assert b.first_block(7, 100, 1000) == 0 and b.first_block(0, 1000, 100) == 14
    assert BackwardTrips(block_m=64, block_n=128).trip_counts((100, 300, 2)) == (4, 4, 4)
    assert r.coverage_faults() == () and b.coverage_faults() == ()


@pytest.mark.parametrize("params, text", [
    (dict(block_m=96), "-p block_m: must be a multiple of 64"),
    (dict(align="bottom_right"), "-p align: bottom_right places the causal diagonal"),
    (dict(head_dim=128, block_m=256), "-p block_m: head_dim 128 with block_m 256"),
])
def test_bad_parameters_are_one_line_naming_the_p(params, text):
    with pytest.raises(ProgramError, match=text):
        build(**params)


# --- dQ cut by columns (FlashAttention-3's cut; docs/guide/attention.md, "dQ cut by columns") --
@pytest.mark.parametrize("causal, align, deterministic", [
    (False, "top_left", False), (True, "top_left", False), (True, "bottom_right", False),
    (False, "top_left", True), (True, "bottom_right", True)])
def test_every_columns_variant_compiles_safe_with_its_two_joins(causal, align, deterministic):
    c = build(dq_cut="columns", causal=causal, align=align, deterministic=deterministic)
    assert c.proof.safe
    joins = {o.name: o for o in c.plan.orders}
    assert {o.scope for o in joins.values()} == {"join"}
    # dS: the two consumers (256 threads); dQ: both consumers and the writer's warp
    assert joins["ds"].counts == (256,) and joins["dq0"].counts == (288,)
    for name in ("consumer0", "consumer1"):
        k = prog(c, name).kernel
        tags = [c.body[s.op].tag if s.kind == StepKind.OP else s.kind for s in k]
        # dS fenced and published after dK (its own read of dS), before dQ reads every consumer's
        at = tags.index(T.WGMMA_DQ)
        assert tags[at - 3:at] == [T.WGMMA_DK, StepKind.PROXY_FENCE, StepKind.NAMED_SYNC]
        # the staged columns fenced and handed over in the same meeting as the other's
        assert tags[-3:] == [T.DQ_STAGE, StepKind.PROXY_FENCE, StepKind.NAMED_SYNC]
        assert T.DQ_ADD not in tags
    w = [s.kind for s in prog(c, "dq_writer0").kernel]
    assert w[0] == StepKind.NAMED_SYNC  # the writer meets the consumers first, then reduces


def test_the_columns_cut_needs_two_dq_buffers_and_one_ds_buffer():
    """One dQ buffer: the next staging may overwrite what the writer's reduce still reads (each
    consumer meets the writer only after staging).  One dS buffer is proven enough: a
    consumer's next gradient step comes after the dQ meeting, which the other reaches only once
    its dQ wgmma, the read of this consumer's dS, retired."""
    c = build(dq_cut="columns", causal=True)
    assert c.plan.trip_rule.causal
    reduce_then_stage = (T.DQ_REDUCE, T.DQ_STAGE)
    distances = {e.distance for e in c.edges if e.kind.name == "ANTI"
                 and (c.body[e.producer].tag, c.body[e.consumer].tag) == reduce_then_stage}
    assert distances == {2}
    edges = [attrs.evolve(e, distance=1) if e.kind.name == "ANTI"
             and (c.body[e.producer].tag, c.body[e.consumer].tag) == reduce_then_stage else e
             for e in c.edges]
    bad = require_safe(attrs.evolve(c, edges=edges, proof=None), allow_unsafe=True)
    assert H.SMEM_WAR in hazards(bad)
    crossed = [e for e in c.edges if e.kind.name == "ANTI" and c.body[e.producer].tag ==
               T.WGMMA_DQ and c.body[e.consumer].tag == T.GRAD
               and c.body[e.producer].subtile != c.body[e.consumer].subtile]
    assert crossed and {e.distance for e in crossed} == {1}


@pytest.mark.parametrize("join, agent", [("ds", "consumer1"), ("dq0", "dq_writer0")])
def test_a_dropped_meeting_or_fence_of_the_columns_cut_is_refused(join, agent):
    c = build(dq_cut="columns")
    k = prog(c, agent).kernel
    dropped = [s for s in k if not (s.kind == StepKind.NAMED_SYNC and s.channel == join)]
    assert H.DEADLOCK in hazards(edited(c, agent, dropped))
    if agent.startswith("consumer"):
        bare = [s for s in k if not (s.kind == StepKind.PROXY_FENCE and s.channel == join)]
        assert H.SMEM_RAW in hazards(edited(c, agent, bare))


def test_the_columns_cut_is_refused_where_its_columns_do_not_split_in_one_line():
    with pytest.raises(ProgramError, match="-p dq_cut: columns gives each of the 2 consumers "
                                           "64 head columns .* needs -p dq_cut=keys") as err:
        build(dq_cut="columns", head_dim=64)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("dq_cut, causal", [("columns", False), ("columns", True),
                                            ("keys", True)])
def test_the_split_gradient_step_waits_for_s_alone_and_issues_dv_before_ds(dq_cut, causal):
    """-p split_grad: S and dP in groups of their own; P waits for S with dP still in flight
    (wait 1), dV's wgmma is issued before dS, whose wait for dP leaves dV in flight (wait 1)."""
    c = build(dq_cut=dq_cut, causal=causal, split_grad=True)
    assert c.proof.safe
    k = prog(c, "consumer0").kernel
    seq = [(c.body[s.op].tag if s.kind == StepKind.OP else s.kind, s.value) for s in k
           if s.kind in (StepKind.OP, StepKind.COMMIT, StepKind.COUNTER_WAIT)]
    at = seq.index((T.PROB, 0))
    assert seq[at - 5:at + 5] == [
        (T.WGMMA_S, 0), (StepKind.COMMIT, 0), (T.WGMMA_DP, 0), (StepKind.COMMIT, 0),
        (StepKind.COUNTER_WAIT, 1), (T.PROB, 0), (T.WGMMA_DV, 0), (StepKind.COMMIT, 0),
        (StepKind.COUNTER_WAIT, 1), (T.GRAD, 0)]
    # the mask moves with P: the trip rule's masked ops are the PROB ops
    assert {c.body[i].tag for i in c.plan.trip_rule.masked_ops} == {T.PROB}


@pytest.mark.parametrize("params", [
    dict(dq_cut="columns"), dict(dq_cut="columns", causal=True, align="bottom_right"),
    dict(dq_cut="columns", deterministic=True), dict(dq_cut="columns", split_grad=True),
    dict(head_dim=64, block_m=128, dq_cut="rows", causal=True)],
    ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
def test_dk_from_registers_follows_dq_whose_staging_leaves_it_in_flight(params):
    """-p dk_rs: dK's wgmma reads dS packed in registers, so it leaves the join ds (which
    publishes dS to the dQ wgmmas alone) and is issued after dQ's; the staging waits for dQ with
    dK in flight (wait 1), and Q's stage goes back once dK retired (wait 0)."""
    c = build(dk_rs=True, **params)
    assert c.proof.safe
    ds = next(o for o in c.plan.orders if o.name == "ds")
    assert all(T.WGMMA_DK not in {c.body[i].tag for i in t.ops} for t in ds.turns)
    for name in ("consumer0", "consumer1"):
        k = prog(c, name).kernel
        seq = [(T(c.body[s.op].tag), None) if s.kind == StepKind.OP else
               (s.kind, s.value if s.kind == StepKind.COUNTER_WAIT else s.channel) for s in k
               if s.kind in (StepKind.OP, StepKind.COMMIT, StepKind.COUNTER_WAIT,
                             StepKind.ARRIVE)]
        at = seq.index((T.WGMMA_DQ, None))
        assert seq[at:at + 5] == [(T.WGMMA_DQ, None), (StepKind.COMMIT, "wgmma"),
                                  (T.WGMMA_DK, None), (StepKind.COMMIT, "wgmma"),
                                  (StepKind.COUNTER_WAIT, 1)]
        assert seq.index((T.DQ_STAGE, None)) > at + 4
        q = seq.index((StepKind.ARRIVE, "q_empty"))
        assert seq[q - 1] == (StepKind.COUNTER_WAIT, 0)


def test_dk_from_registers_with_a_loosened_or_dropped_wait_is_refused():
    """The staging's wait loosened to leave dQ in flight, or the wait before Q's release
    dropped (Q's stage rewritten while dK's wgmma still reads it): each refused."""
    c = build(dk_rs=True, dq_cut="columns")
    k = prog(c, "consumer0").kernel
    waits = [n for n, s in enumerate(k) if s.kind == StepKind.COUNTER_WAIT]
    stage_wait = next(n for n in waits if k[n].value == 1)
    release_wait = waits[-1]
    assert k[release_wait + 1].kind == StepKind.ARRIVE and k[release_wait + 1].channel == "q_empty"
    loose = list(k)
    loose[stage_wait] = attrs.evolve(k[stage_wait], value=2)
    assert H.SMEM_RAW in hazards(edited(c, "consumer0", loose))
    dropped = [s for n, s in enumerate(k) if n != release_wait]
    assert H.SMEM_WAR in hazards(edited(c, "consumer0", dropped))


def test_dk_from_registers_needs_a_joined_cut_in_one_line():
    with pytest.raises(ProgramError, match="-p dk_rs: dK from registers, after dQ, needs the "
                                           "join .* add -p dq_cut=columns") as err:
        build(dk_rs=True)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("causal, align, deterministic", [
    (False, "top_left", False), (True, "bottom_right", False), (False, "top_left", True)])
def test_every_rows_variant_compiles_safe_with_its_joins(causal, align, deterministic):
    """-p dq_cut=rows (FlashAttention-3's D 64 tile, 128 query rows): each consumer's dQ is
    its own 64 rows over every consumer's dS, so it meets the other (join ds) before its dQ
    and both meet the writer (join dq0) after staging."""
    c = build(head_dim=64, block_m=128, dq_cut="rows", causal=causal, align=align,
              deterministic=deterministic)
    assert c.proof.safe
    assert {o.name: o.scope for o in c.plan.orders} == {"dq0": "join", "ds": "join"}
    for name in ("consumer0", "consumer1"):
        tags = [c.body[s.op].tag for s in prog(c, name).kernel if s.kind == StepKind.OP]
        assert tags.count(T.WGMMA_DQ) == 1 and T.DQ_ADD not in tags  # one part at D 64


def test_the_rows_cut_needs_a_row_block_per_consumer_in_one_line():
    with pytest.raises(ProgramError, match="-p dq_cut: rows gives each of the 2 consumers 64 "
                                           "query rows .* needs -p block_m=128") as err:
        build(head_dim=64, dq_cut="rows")
    assert "\n" not in str(err.value)
