"""The builder DSL: Pipe chains and BodyBuilder.

Reference tests A51-A53
(docs/guide/reference-behaviours.md, "The reference's own tests", "The pipeline DSL").
"""
from __future__ import annotations

import pytest

from golden_data import load, ops_from
from pipeline_core.costs import annotate
from pipeline_core.dsl import BodyBuilder, Pipe, annotate_pipe, pipe
from pipeline_core.errors import ConfigError
from pipeline_core.ops import Entry, KOffset, OpRole, Phase, ResourceKind, barrier, logical
from pipeline_core.ops import (NONE_OP, none_op, op, sched_group_barrier, schedule_barrier,
                               set_prio, wait_lgkm, wait_vm)
from reference_bodies import (COMPUTE, LOAD_A, LOAD_B, LOAD_DRAM, LOAD_FRAG, MMA, MMA_LOAD_A,
                              MMA_LOAD_B, SB_COMPUTE, STORE_SMEM, compute_range, load_a, load_b,
                              load_dram, load_frag, load_frags, logical_half, mi355x_cost_model,
                              mma, mma_load_a, mma_load_b, sb_compute, single_buffer_logical_body,
                              store_smem)


def _meta(ops):
    return [(o.tag, o.channel, o.stage, o.subtile, o.k_offset) for o in ops]


def _single_buffer_with_builder(t: int):
    with BodyBuilder() as b:
        b.load(LOAD_DRAM, ch=0)
        b.store(STORE_SMEM, ch=0)
        b.barrier()
        b.fan(t, LOAD_FRAG, ch=0)
        b.fan(t, SB_COMPUTE)
    return b.done()


def _pingpong_half_with_builder(h: int):
    s, os = h, 1 - h
    k_off = KOffset.K1 if h == 1 else KOffset.K0
    k_special = KOffset.K_PREV if h == 0 else KOffset.K0
    with BodyBuilder() as b:
        b.load(LOAD_A, ch=0, stage=os, sub=1, k=k_special)
        b.load(LOAD_A, ch=0, stage=s, sub=0, k=k_off)
        b.load(LOAD_B, ch=1, stage=s, sub=0, k=k_off)
        b.load(LOAD_B, ch=1, stage=s, sub=1, k=k_off)
        b.frag(MMA_LOAD_A, ch=0, stage=s, sub=0)
        b.frag(MMA_LOAD_A, ch=0, stage=s, sub=1)
        b.frag(MMA_LOAD_B, ch=1, stage=s, sub=0)
        b.frag(MMA_LOAD_B, ch=1, stage=s, sub=1)
        b.grid(2, 2, MMA)
    return b.done()


def _triple(o):
    return (o.resource, o.latency, o.role)


GM, LDS, MMA_U, SCALAR = (ResourceKind.GLOBAL_MEM, ResourceKind.LDS, ResourceKind.MMA_UNIT,
                          ResourceKind.SCALAR)


def test_a26_opdesc_metadata():
    assert _triple(load_a(0, 0)) == _triple(load_b(0, 0)) == (GM, 200, OpRole.GLOBAL_LOAD)
    assert _triple(mma_load_a(0, 0)) == _triple(mma_load_b(0, 0)) == (LDS, 20, OpRole.FRAGMENT_LOAD)
    assert _triple(op(3, MMA_U, 64, OpRole.COMPUTE, stage=0)) == (MMA_U, 64, OpRole.COMPUTE)
    assert _triple(mma(0, 0)) == (MMA_U, 16, OpRole.COMPUTE)
    assert _triple(sb_compute(0)) == (MMA_U, 64, OpRole.COMPUTE)
    for sync in (barrier(), wait_vm(0), wait_lgkm(0)):
        assert _triple(sync) == (SCALAR, 0, OpRole.SYNC)
    for fence in (set_prio(0), schedule_barrier(), sched_group_barrier(0, 1)):
        assert _triple(fence) == (SCALAR, 0, OpRole.FENCE)
    assert _triple(load_dram()) == (GM, 200, OpRole.GLOBAL_LOAD)
    assert _triple(store_smem()) == (LDS, 20, OpRole.SHARED_STORE)
    assert _triple(load_frag(0)) == (LDS, 20, OpRole.FRAGMENT_LOAD)
    assert _triple(load_frags(0, 2).ops[0]) == (LDS, 20, OpRole.FRAGMENT_LOAD)
    assert _triple(compute_range(0, 2).ops[0]) == (MMA_U, 64, OpRole.COMPUTE)
    assert (none_op().role, none_op().resource) == (OpRole.NONE, ResourceKind.NONE) == \
        (NONE_OP.role, NONE_OP.resource)


def test_a27_cost_model_annotation():
    raw = logical(LOAD_A, channel=0, stage=1, subtile=0, k_offset=KOffset.K0)
    assert _triple(raw) == (ResourceKind.NONE, 0, OpRole.NONE)
    (ann,) = annotate([raw], mi355x_cost_model())
    assert _triple(ann) == (GM, 200, OpRole.GLOBAL_LOAD)
    assert (ann.tag, ann.channel, ann.stage, ann.subtile, ann.k_offset) == (LOAD_A, 0, 1, 0, KOffset.K0)
    tags = [LOAD_A, LOAD_B, MMA_LOAD_A, MMA_LOAD_B, MMA]
    got = [_triple(o) for o in annotate([logical(t) for t in tags], mi355x_cost_model())]
    assert got == [(GM, 200, OpRole.GLOBAL_LOAD), (GM, 200, OpRole.GLOBAL_LOAD),
                   (LDS, 20, OpRole.FRAGMENT_LOAD), (LDS, 20, OpRole.FRAGMENT_LOAD),
                   (MMA_U, 16, OpRole.COMPUTE)]


def test_a51_pipeline_body_single_buffer():
    built = _single_buffer_with_builder(4)
    assert _meta(built) == _meta(single_buffer_logical_body(4))
    assert built == single_buffer_logical_body(4)


@pytest.mark.parametrize("h", [0, 1])
def test_a52_pipeline_body_pingpong(h):
    assert _meta(_pingpong_half_with_builder(h)) == _meta(logical_half(h))


def test_a53_pipeline_body_fan_and_grid():
    fan = BodyBuilder().fan(3, COMPUTE, stage=1).done()
    assert [(o.tag, o.stage, o.subtile) for o in fan] == [(COMPUTE, 1, i) for i in range(3)]
    grid = BodyBuilder().grid(2, 3, MMA).done()
    assert [(o.stage, o.subtile) for o in grid] == [(i, j) for i in range(2) for j in range(3)]
    a = BodyBuilder().load(LOAD_A, ch=0)
    c = BodyBuilder().compute(MMA)
    a.extend(c)
    assert [o.tag for o in a.done()] == [LOAD_A, MMA]
    assert len(c) == 1  # other is unchanged


def test_builder_reproduces_the_golden_logical_bodies():
    assert _single_buffer_with_builder(2) == ops_from(load("default_matmul")["logical_body"])
    assert _single_buffer_with_builder(1) == ops_from(load("default_matmul_t1")["logical_body"])
    pingpong = _pingpong_half_with_builder(0) + _pingpong_half_with_builder(1)
    assert pingpong == ops_from(load("pingpong_bf16")["logical_body"])


def test_builder_defaults():
    b = BodyBuilder().load(7).store(8).frag(9).compute(10).op(11).fan(2, 12).grid(1, 1, 13)
    ops = b.done()
    assert all((o.channel, o.stage, o.subtile) == (-1, 0, 0) for o in ops[:5])
    assert all(o.k_offset == KOffset.NONE for o in ops)
    assert all((o.resource, o.latency, o.role) == (ResourceKind.NONE, 0, OpRole.NONE) for o in ops)
    assert [o.subtile for o in ops[5:7]] == [0, 1]
    assert b.op(1, ch=1, stage=1, sub=2, k=KOffset.K_NEXT).done()[-1] == logical(
        1, channel=1, stage=1, subtile=2, k_offset=KOffset.K_NEXT)


def test_builder_barrier_is_annotated_and_passes_annotation_untouched():
    ops = BodyBuilder().barrier().load(LOAD_A, ch=0).done()
    assert ops[0] == barrier() and ops[0].role == OpRole.SYNC
    annotated = annotate(ops, mi355x_cost_model())
    assert annotated[0] == barrier() and annotated[1].latency == 200


def test_done_returns_a_copy():
    b = BodyBuilder().load(LOAD_A)
    first = b.done()
    b.load(LOAD_B)
    assert len(first) == 1 and len(b.done()) == 2


def test_fan_and_grid_reject_negative_counts():
    with pytest.raises(ConfigError):
        BodyBuilder().fan(-1, LOAD_A)
    with pytest.raises(ConfigError):
        BodyBuilder().grid(2, -1, MMA)
    assert BodyBuilder().fan(0, LOAD_A).done() == []


def test_extend_accepts_pipes_and_lists_and_rejects_non_ops():
    p = pipe(logical(LOAD_A)) >> logical(LOAD_B)
    b = BodyBuilder().extend(p).extend([logical(MMA)])
    assert [o.tag for o in b.done()] == [LOAD_A, LOAD_B, MMA]
    with pytest.raises(ConfigError):
        BodyBuilder().extend([1, 2])


# --- Pipe ----------------------------------------------------------------------------------

def test_pipe_appends_and_concatenates():
    a, b, c = logical(LOAD_A), logical(LOAD_B), logical(MMA)
    p = pipe(a) >> b
    q = p >> (pipe(c) >> a)
    assert p.ops == (a, b) and q.ops == (a, b, c, a)
    assert len(q) == 4 and list(q) == [a, b, c, a] and q[2] == c and q[1:3] == Pipe((b, c))
    assert pipe() == Pipe(())
    with pytest.raises(TypeError):
        p >> 3


def test_pipe_as_entries_and_emit_into():
    p = pipe(logical(LOAD_A)) >> logical(MMA)
    entries = p.as_entries(Phase.KERNEL, 5)
    assert entries == (Entry(logical(LOAD_A), 5, Phase.KERNEL, False),
                       Entry(logical(MMA), 6, Phase.KERNEL, False))
    out: list = []
    assert p.emit_into(out, Phase.EPILOGUE, 0) == 2
    assert [e.time_slot for e in out] == [0, 1] and out[0].phase == Phase.EPILOGUE


def test_annotate_pipe_copies_resource_latency_role_only():
    p = pipe(logical(MMA_LOAD_A, channel=0).evolve(vgpr_def=3)) >> barrier()
    q = annotate_pipe(p, mi355x_cost_model())
    assert (q[0].resource, q[0].latency, q[0].role) == (ResourceKind.LDS, 20, OpRole.FRAGMENT_LOAD)
    assert q[0].vgpr_def == 3  # annotate_ops would set 8
    assert q[1] == barrier()


def test_pipe_rejects_non_ops():
    with pytest.raises(ConfigError):
        Pipe((logical(LOAD_A), "x"))
