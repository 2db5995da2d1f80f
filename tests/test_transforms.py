"""Body transforms: single-buffer reorder, per-segment optimisation, MMA block interleave.

Reference tests A13-A18, A35, A54-A56 and B12-B14
(docs/guide/reference-behaviours.md, "The reference's own tests", "Body transforms"),
and the goldens' bodies.
"""
from __future__ import annotations

import pytest

from golden_data import CASES, config_from, load, ops_from
from pipeline_core.config import BlockSizing, FragOrder, LoopCarried
from pipeline_core.costs import annotate
from pipeline_core.edges import derive_edges
from pipeline_core.errors import TransformError
from pipeline_core.ops import FrameworkTag, KOffset, OpRole, barrier, logical, wait_lgkm
from pipeline_core.transforms import (double_buffer_reorder, mma_block_interleave,
                                      optimize_within_barriers, single_buffer_reorder)
from reference_bodies import (LOAD_A, LOAD_B, LOAD_DRAM, LOAD_FRAG, MMA, MMA_LOAD_A, MMA_LOAD_B,
                              SB_COMPUTE, STORE_SMEM, default_matmul_body, golden_cost_model,
                              load_a, load_b, load_dram, load_frag, logical_pingpong_body,
                              mi355x_cost_model, mi355x_double_buffer, mi355x_single_buffer,
                              mi355x_single_buffer_cost_model,
                              mma, mma_load_a, mma_load_b, pingpong_body, sb_compute,
                              single_buffer_logical_body, store_smem)

K0, KP = KOffset.K0, KOffset.K_PREV


def _sig(ops):
    """(tag, subtile) per op: what the reference tests compare."""
    return [(o.tag, o.subtile) for o in ops]


def _half0():
    """The 12 inputs of test_mma_block_interleave_2x2 (annotated, inline costs)."""
    return [load_a(1, 1, KP), load_a(0, 0, K0), load_b(0, 0, K0), load_b(0, 1, K0),
            mma_load_a(0, 0), mma_load_a(0, 1), mma_load_b(0, 0), mma_load_b(0, 1),
            mma(0, 0), mma(0, 1), mma(1, 0), mma(1, 1)]


# --- single buffer ---------------------------------------------------------------------

def test_a13_single_buffer_transform_t2():
    body = [load_dram(), store_smem(), barrier(), load_frag(0), load_frag(1), sb_compute(0),
            sb_compute(1)]
    out = single_buffer_reorder(body, mi355x_single_buffer())
    assert _sig(out) == [(LOAD_FRAG, 1), (SB_COMPUTE, 0), (FrameworkTag.BARRIER, 0),
                         (STORE_SMEM, 0), (LOAD_DRAM, 0), (SB_COMPUTE, 1),
                         (FrameworkTag.BARRIER, 0), (LOAD_FRAG, 0)]
    assert out[2] == barrier() and out[6] == barrier()


def test_a14_single_buffer_transform_t1():
    body = [load_dram(), store_smem(), barrier(), load_frag(0), sb_compute(0)]
    out = single_buffer_reorder(body, mi355x_single_buffer())
    assert _sig(out) == [(SB_COMPUTE, 0), (FrameworkTag.BARRIER, 0), (STORE_SMEM, 0),
                         (LOAD_DRAM, 0), (FrameworkTag.BARRIER, 0), (LOAD_FRAG, 0)]


def test_a15_single_buffer_transform_matches_body():
    body = [load_dram(), store_smem(), barrier(), load_frag(0), load_frag(1), sb_compute(0),
            sb_compute(1)]
    assert default_matmul_body(2) == single_buffer_reorder(body, mi355x_single_buffer())
    assert len(default_matmul_body(2)) == 8


def test_a17_config_single_buffer_default():
    config = mi355x_single_buffer()
    assert (config.depth, config.prefetch, config.drain_passes) == (1, 1, 2)
    assert config.loop_carried.selector == 0 and config.mma_serial
    out = default_matmul_body(2)
    assert out[0].role == OpRole.FRAGMENT_LOAD and out[0].subtile == 1


def test_single_buffer_reorder_keeps_length_plus_one():
    for t in (1, 2, 4):
        assert len(default_matmul_body(t)) == 2 * t + 3 + 1


def test_single_buffer_reorder_rejects_unannotated_ops():
    with pytest.raises(TransformError) as err:
        single_buffer_reorder(single_buffer_logical_body(2), mi355x_single_buffer())
    msg = str(err.value)
    assert err.value.ops == (0, 1, 3, 4, 5, 6)
    assert "op 0 (OP0, NONE, channel 0, stage 0, subtile 0)" in msg
    assert "annotate" in msg


def test_single_buffer_reorder_names_carried_frags_lost_without_a_carried_role():
    config = mi355x_single_buffer().evolve(loop_carried=LoopCarried.none())
    body = [load_dram(), store_smem(), barrier(), load_frag(0), load_frag(1), sb_compute(0),
            sb_compute(1)]
    with pytest.raises(TransformError) as err:
        single_buffer_reorder(body, config)
    assert err.value.ops == (3,)
    assert "op 3 (OP2, FRAGMENT_LOAD, channel 0, stage 0, subtile 0)" in str(err.value)


def test_single_buffer_reorder_rejects_duplicating_roles():
    config = mi355x_single_buffer().evolve(loop_carried=LoopCarried(OpRole.COMPUTE, 0))
    body = [load_dram(), store_smem(), barrier(), load_frag(1), sb_compute(0), sb_compute(1)]
    with pytest.raises(TransformError) as err:
        single_buffer_reorder(body, config)
    assert err.value.ops == (4,) and "twice" in str(err.value)


def test_single_buffer_reorder_of_empty_body():
    assert single_buffer_reorder([], mi355x_single_buffer()) == [barrier(), barrier()]


# --- optimize within barriers ----------------------------------------------------------------

def test_a35_optimize_within_barriers_single_buffer():
    config = mi355x_single_buffer()
    reordered = single_buffer_reorder(
        annotate(single_buffer_logical_body(4), mi355x_single_buffer_cost_model()), config)
    out = optimize_within_barriers(reordered, config)
    assert len(out) == len(reordered)
    syncs = [i for i, o in enumerate(reordered) if o.role == OpRole.SYNC]
    assert [i for i, o in enumerate(out) if o.role == OpRole.SYNC] == syncs
    for e in derive_edges(out, config):
        if e.distance == 0:
            assert e.producer < e.consumer, e
    assert out == reordered  # the MI355X bodies are already optimal per segment


def test_optimize_within_barriers_reorders_a_segment():
    # double-buffer rules: register FLOW frag -> MMA (same half, config match)
    config = mi355x_double_buffer()
    body = [mma(0, 0), mma_load_a(0, 0), mma_load_b(0, 0), wait_lgkm(0), mma(0, 0),
            mma(0, 0), mma(0, 0), mma(0, 0)]
    edges = derive_edges(body, config)
    assert [(e.producer, e.consumer) for e in edges if e.distance == 0][:2] == [(1, 0), (2, 0)]
    out = optimize_within_barriers(body, config)
    assert out[3] == wait_lgkm(0)  # SYNC (waits too) stays in place
    assert out[:3] == [body[1], body[2], body[0]]
    assert out[4:] == body[4:]


# --- MMA block interleave -----------------------------------------------------------------

def test_a16_mma_block_interleave_2x2():
    # The reference's Pipe version ignores max_globals: that is max_globals=0 here.
    out = mma_block_interleave(_half0(), mi355x_double_buffer(), max_globals=0)
    assert [(o.tag, o.stage, o.subtile) for o in out] == [
        (MMA_LOAD_B, 0, 0), (MMA_LOAD_A, 0, 0), (LOAD_A, 1, 1), (MMA, 0, 0),
        (MMA_LOAD_B, 0, 1), (MMA, 0, 1),
        (MMA_LOAD_A, 0, 1), (LOAD_A, 0, 0), (LOAD_B, 0, 0), (MMA, 1, 0),
        (LOAD_B, 0, 1), (MMA, 1, 1)]


def test_mma_block_interleave_list_version_caps_globals():
    out = mma_block_interleave(_half0(), mi355x_double_buffer(max_globals=1))
    assert [(o.tag, o.subtile) for o in out] == [
        (MMA_LOAD_B, 0), (MMA_LOAD_A, 0), (LOAD_A, 1), (MMA, 0),
        (MMA_LOAD_B, 1), (LOAD_A, 0), (MMA, 1),
        (MMA_LOAD_A, 1), (LOAD_B, 0), (MMA, 0),
        (LOAD_B, 1), (MMA, 1)]


def test_a18_config_block_sizing():
    config = mi355x_double_buffer(max_globals=0).evolve(block_sizing=BlockSizing.uniform(3))
    out = mma_block_interleave(_half0(), config)
    assert [o.tag for o in out[:3]] == [MMA_LOAD_B, MMA_LOAD_A, MMA]


def test_frag_order_a_first():
    config = mi355x_double_buffer().evolve(frag_order=FragOrder.a_first())
    out = mma_block_interleave(_half0(), config)
    assert [o.tag for o in out[:2]] == [MMA_LOAD_A, MMA_LOAD_B]


@pytest.mark.parametrize("max_globals", [0, 1])
def test_pingpong_body_from_logical_body(max_globals):
    body = pingpong_body(max_globals)
    assert len(body) == 24
    assert [i for i, o in enumerate(body) if o.role == OpRole.COMPUTE] == \
        ([3, 6, 9, 11, 15, 18, 21, 23] if max_globals == 1 else [3, 5, 9, 11, 15, 17, 21, 23])
    if max_globals == 0:  # docs/guide/reference-behaviours.md, "Ping-pong":
        # FB0 FA0 LA M00 | FB1 M01 | FA1 LA LB M10 | LB M11
        assert [(o.tag, o.stage, o.subtile) for o in body[:12]] == [
            (MMA_LOAD_B, 0, 0), (MMA_LOAD_A, 0, 0), (LOAD_A, 1, 1), (MMA, 0, 0),
            (MMA_LOAD_B, 0, 1), (MMA, 0, 1),
            (MMA_LOAD_A, 0, 1), (LOAD_A, 0, 0), (LOAD_B, 0, 0), (MMA, 1, 0),
            (LOAD_B, 0, 1), (MMA, 1, 1)]


def test_double_buffer_reorder_odd_length_gives_the_rest_to_the_last_half():
    config = mi355x_double_buffer(max_globals=0).evolve(block_sizing=BlockSizing(5, 2, 0))
    extra = load_b(1, 1, K0)
    out = double_buffer_reorder(_half0() + _half0() + [extra], config)
    assert len(out) == 25
    assert out.index(extra) >= 12
    assert out[:12] == mma_block_interleave(_half0(), config)


# --- dropped ops are errors -------------------------------------------------------------------

def test_interleave_names_a_global_that_never_fits():
    body = _half0() + [load_b(0, 1, K0)]
    config = mi355x_double_buffer(max_globals=1)
    with pytest.raises(TransformError) as err:
        mma_block_interleave(body, config)
    assert err.value.ops == (12,)
    msg = str(err.value)
    assert "op 12 (OP1, GLOBAL_LOAD, channel 1, stage 0, subtile 1)" in msg
    assert "never fit" in msg and "max_globals 1" in msg


def test_interleave_names_a_frag_no_mma_uses():
    body = _half0() + [mma_load_a(0, 2), mma_load_b(0, 0)]
    with pytest.raises(TransformError) as err:
        mma_block_interleave(body, mi355x_double_buffer())
    assert err.value.ops == (12, 13)
    assert "op 12 (OP3, FRAGMENT_LOAD, channel 0, stage 0, subtile 2)" in str(err.value)


def test_interleave_names_ops_of_other_roles():
    body = _half0()[:6] + [barrier()] + _half0()[6:] + [logical(MMA_LOAD_A, channel=2)]
    with pytest.raises(TransformError) as err:
        mma_block_interleave(body, mi355x_double_buffer())
    assert err.value.ops == (6, 13)
    msg = str(err.value)
    assert "op 6 (BARRIER, SYNC, channel -1, stage 0, subtile 0)" in msg
    assert "op 13 (OP3, NONE, channel 2" in msg


def test_double_buffer_reorder_names_body_indices():
    body = annotate(logical_pingpong_body(), mi355x_cost_model())
    body = body[:16] + [body[16].evolve(subtile=7)] + body[17:]  # frag A (s1, 0) -> subtile 7
    with pytest.raises(TransformError) as err:
        double_buffer_reorder(body, mi355x_double_buffer())
    assert err.value.ops == (16,)
    assert "op 16 (OP3, FRAGMENT_LOAD, channel 0, stage 1, subtile 7)" in str(err.value)


# --- goldens ------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
def test_golden_body_from_logical_body(case):
    d = load(case)
    config = config_from(d["config"])
    annotated = annotate(ops_from(d["logical_body"]), golden_cost_model(d))
    if case.startswith("default_matmul"):
        reordered = single_buffer_reorder(annotated, config)
        assert reordered == ops_from(d["reordered_body_before_optimize"])
        assert optimize_within_barriers(reordered, config) == ops_from(d["body"])
    elif case.startswith("pingpong"):
        assert double_buffer_reorder(annotated, config) == ops_from(d["body"])
    else:  # 4-wave: annotated, never reordered
        assert annotated == ops_from(d["body"])


def test_fixture_bodies_match_the_goldens():
    assert pingpong_body(1) == ops_from(load("pingpong_bf16")["body"])
    model = mi355x_single_buffer_cost_model()
    assert annotate(default_matmul_body(2), model) == ops_from(load("default_matmul")["body"])
    assert annotate(default_matmul_body(1), model) == ops_from(load("default_matmul_t1")["body"])


