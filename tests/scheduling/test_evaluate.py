"""The schedulers' cost model and bounds.

Reference tests A23, A24, A47-A49 and B9-B11
(docs/guide/reference-behaviours.md, "The reference's own tests"), plus golden metrics.
"""
from __future__ import annotations

import pytest

from golden_data import DOUBLE_BUFFER_CASES, edges_from, load, ops_from
from pipeline_core.edges import DepEdge
from pipeline_core.errors import SchedulingError
from pipeline_core.ops import OpRole, ResourceKind, op
from pipeline_core.scheduling.evaluate import (asap_lower_bound, evaluate_makespan,
                                               evaluate_schedule, partial_lower_bound)

GM, LDS, MMA_U, VALU = (ResourceKind.GLOBAL_MEM, ResourceKind.LDS, ResourceKind.MMA_UNIT,
                        ResourceKind.VALU)


def _op(tag, res, lat, role=OpRole.NONE, **kw):
    return op(tag, res, lat, role, **kw)


def _chain():
    """GM 200 -> LDS 20 -> MMA 16 (tags 0, 3, 5)."""
    body = [_op(0, GM, 200, OpRole.GLOBAL_LOAD), _op(3, LDS, 20, OpRole.FRAGMENT_LOAD),
            _op(5, MMA_U, 16, OpRole.COMPUTE)]
    return body, [DepEdge.flow(0, 1), DepEdge.flow(1, 2)]


def test_a23_evaluate_makespan_linear_chain():
    body, edges = _chain()
    assert evaluate_makespan(body, edges, [0, 1, 2]) == 236


def test_a24_evaluate_makespan_serial_mma():
    body = [_op(5, MMA_U, 16, OpRole.COMPUTE), _op(5, MMA_U, 16, OpRole.COMPUTE)]
    assert evaluate_makespan(body, [], [0, 1]) == 32


@pytest.mark.parametrize("name", ["a47", "b9"])
def test_a47_b9_lds_contention_zero_is_noop(name):
    body, edges = _chain()
    assert evaluate_schedule(body, edges, [0, 1, 2]) == evaluate_schedule(body, edges, [0, 1, 2], 0)
    assert evaluate_makespan(body, edges, [0, 1, 2], 0) == 236


@pytest.mark.parametrize("name", ["a48", "b10"])
def test_a48_b10_lds_contention_penalty_increases_makespan(name):
    body, _ = _chain()
    assert evaluate_makespan(body, [DepEdge.flow(1, 2)], [0, 1, 2]) == 200
    body = [_op(0, GM, 10, OpRole.GLOBAL_LOAD), _op(0, GM, 10, OpRole.GLOBAL_LOAD),
            _op(3, LDS, 20, OpRole.FRAGMENT_LOAD)]
    assert evaluate_makespan(body, [], [0, 1, 2], 0) == 20
    assert evaluate_makespan(body, [], [0, 1, 2], 15) == 50  # starts 0, 15, 30


@pytest.mark.parametrize("name", ["a49", "b11"])
def test_a49_b11_lds_contention_lower_bound(name):
    body = [_op(0, GM, 10), _op(0, GM, 10), _op(3, LDS, 10), _op(3, LDS, 10), _op(5, MMA_U, 16)]
    assert asap_lower_bound(body, [], 0) == 16
    assert asap_lower_bound(body, [], 20) == 80


def test_valu_and_mma_units_are_independent():
    body = [_op(5, MMA_U, 16), _op(6, VALU, 10), _op(5, MMA_U, 16), _op(6, VALU, 10)]
    assert evaluate_makespan(body, [], [0, 1, 2, 3]) == 32
    # the lower bound takes the max of the two serial bounds, not their sum
    assert asap_lower_bound(body, []) == 32


def test_lower_bound_ignores_zero_latency_units():
    body = [_op(5, MMA_U, 0), _op(0, GM, 7)]
    assert asap_lower_bound(body, []) == 7
    assert asap_lower_bound([], []) == 0


def test_producer_later_in_the_order_counts_as_finished_at_zero():
    body, edges = _chain()
    # consumer first: the violated edges add nothing, so everything starts at 0
    assert evaluate_makespan(body, edges, [2, 1, 0]) == 200


def test_vgpr_peak_tracks_def_then_kill():
    body = [_op(3, LDS, 20, vgpr_def=8), _op(5, MMA_U, 16, vgpr_def=4, vgpr_kill=8),
            _op(3, LDS, 20, vgpr_def=8)]
    assert evaluate_schedule(body, [], [0, 1, 2]) == (20, 12)
    assert evaluate_schedule(body, [], [0, 2, 1]) == (20, 20)


def test_order_must_be_a_permutation():
    body, edges = _chain()
    with pytest.raises(SchedulingError) as err:
        evaluate_schedule(body, edges, [0, 1])
    assert "missing ops [2]" in str(err.value) and err.value.ops == (2,)
    with pytest.raises(SchedulingError):
        evaluate_schedule(body, edges, [0, 1, 1])
    assert evaluate_schedule([], [], []) == (0, 0)


def test_partial_lower_bound_counts_the_candidate_as_placed():
    body = [_op(5, MMA_U, 16), _op(5, MMA_U, 16), _op(5, MMA_U, 16), _op(0, GM, 100)]
    placed = [True, False, False, False]
    # prefix [0]: mma_free 16 + two MMAs left (32) vs the finish so far (16)
    assert partial_lower_bound(body, [], [0, -1, -1, -1], placed, 0) == 48
    placed = [True, False, False, True]
    assert partial_lower_bound(body, [], [0, 3, -1, -1], placed, 1) == 100


@pytest.mark.parametrize("case", DOUBLE_BUFFER_CASES)
def test_golden_order_metrics_and_lower_bound(case):
    d = load(case)
    body, edges = ops_from(d["body"]), edges_from(d["edges"])
    sched = d["scheduler"]
    got = evaluate_schedule(body, edges, sched["order"], sched["lds_contention_penalty"])
    assert got == (sched["order_metrics"]["makespan"], sched["order_metrics"]["vgpr_peak"])
    ident = evaluate_schedule(body, edges, list(range(len(body))))
    assert ident == (sched["identity_metrics"]["makespan"], sched["identity_metrics"]["vgpr_peak"])
    assert asap_lower_bound(body, edges, sched["lds_contention_penalty"]) == sched["asap_lower_bound"]


def test_fourwave_identity_beats_its_lower_bound():
    """Violated ANTI edges are costed as free, so the achieved makespan is below the bound."""
    d = load("fourwave_fp8")
    body, edges = ops_from(d["body"]), edges_from(d["edges"])
    assert evaluate_makespan(body, edges, range(24)) == 272 < asap_lower_bound(body, edges) == 292
