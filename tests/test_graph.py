"""The loop dependency graph: ASAP/ALAP, validation, cycles, order violations.

Reference tests A1-A8, A10, A22 and B1-B8
(docs/guide/reference-behaviours.md, "The reference's own tests"), plus golden checks.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golden_data import DOUBLE_BUFFER_CASES, CASES, edges_from, load, op_from, ops_from
from pipeline_core.edges import DepEdge, derive_edges
from pipeline_core.errors import GraphError
from pipeline_core.graph import (LoopGraph, alap_times, asap_times, find_same_iteration_cycle,
                                 order_violations, validate)
from pipeline_core.ops import (DepKind, KOffset, OpRole, ResourceKind, barrier, op, wait_vm)
from reference_bodies import (load_a, load_b, mi355x_double_buffer, mma, mma_load_a,
                              pingpong_body)

F, A = DepKind.FLOW, DepKind.ANTI


def _global_load(tag: int = 0, lat: int = 200):
    return op(tag, ResourceKind.GLOBAL_MEM, lat, OpRole.GLOBAL_LOAD)


def _frag_load(tag: int = 3, lat: int = 20):
    return op(tag, ResourceKind.LDS, lat, OpRole.FRAGMENT_LOAD)


def _mma(tag: int = 5, lat: int = 16):
    return op(tag, ResourceKind.MMA_UNIT, lat, OpRole.COMPUTE)


# --- reference tests A ---------------------------------------------------------

def test_a1_opnode_resource_assignment():
    g = LoopGraph([load_a(0, 0, KOffset.K0, vm_cost=4), mma_load_a(0, 0), mma(0, 0), barrier()])
    assert [g.resource(i) for i in range(4)] == [ResourceKind.GLOBAL_MEM, ResourceKind.LDS,
                                                  ResourceKind.MMA_UNIT, ResourceKind.SCALAR]
    assert g.latency[3] == 0


def test_a2_linear_chain_asap():
    body = [load_a(0, 0), wait_vm(0), mma_load_a(0, 0), mma(0, 0)]
    g = LoopGraph(body, [DepEdge.flow(0, 1), DepEdge.flow(1, 2), DepEdge.flow(2, 3)])
    g.validate()
    assert g.asap() == [0, 200, 200, 220]


def test_a3_diamond_asap():
    body = [load_a(0, 0), load_b(0, 0), barrier(), mma(0, 0)]
    edges = [DepEdge.flow(0, 2), DepEdge.flow(1, 2), DepEdge.flow(2, 3), DepEdge.anti(3, 0, 1)]
    g = LoopGraph(body, edges)
    g.validate()
    t = g.asap()
    assert t[2] == 200 and t[3] == 200


def test_a4_loop_carried_edges_skip_asap():
    g = LoopGraph([load_a(0, 0), mma(0, 0)], [DepEdge.anti(1, 0, 1)])
    assert g.asap() == [0, 0]


def _identity_kernel_ldg():
    """The reference's _extract_ldg on the IDENTITY ping-pong kernel (golden test config)."""
    d = load("pingpong_testcfg_identity_manual_waits")
    kernel = [op_from(e["op"]) for e in d["kernel"]]
    keep = (OpRole.GLOBAL_LOAD, OpRole.FRAGMENT_LOAD, OpRole.COMPUTE)
    positions = [k for k, o in enumerate(kernel) if o.role in keep]
    ops = [kernel[k] for k in positions]
    return ops, derive_edges(ops, mi355x_double_buffer()), positions


def test_a5_pp_extract_ldg():
    ops, edges, _ = _identity_kernel_ldg()
    validate(ops, edges)
    assert len(ops) == 24
    roles = [o.role for o in ops]
    assert roles.count(OpRole.GLOBAL_LOAD) == 8
    assert roles.count(OpRole.FRAGMENT_LOAD) == 8
    assert roles.count(OpRole.COMPUTE) == 8
    assert len(edges) == 54
    assert sum(e.kind == F and e.distance == 0 for e in edges) == 22
    assert sum(e.kind == F and e.distance >= 1 for e in edges) == 18
    assert sum(e.kind == A for e in edges) == 14


def test_a6_interleaved_ldg_asap():
    ops, edges, _ = _identity_kernel_ldg()
    t = LoopGraph(ops, edges).asap()
    assert t[3] >= 20 and t[15] > t[3] and t[18] > t[6]
    assert (t[3], t[15], t[6], t[18]) == (20, 220, 20, 220)


def test_a7_interleaved_c2_validation():
    ops, edges, positions = _identity_kernel_ldg()
    flow0 = [e for e in edges if e.kind == F and e.distance == 0]
    for e in flow0:
        assert positions[e.consumer] > positions[e.producer], e
    assert len(positions) == 24
    assert len(flow0) == 22
    assert sum(e.kind == A and e.distance == 0 for e in edges) == 14


def test_a8_pp_build_ldg():
    declared = pingpong_body(max_globals=1)
    declared_edges = derive_edges(declared, mi355x_double_buffer())
    validate(declared, declared_edges)
    extracted, extracted_edges, _ = _identity_kernel_ldg()
    assert len(declared) == len(extracted) == 24
    for d, x in zip(declared, extracted):
        assert (d.tag, d.stage, d.subtile, d.latency) == (x.tag, x.stage, x.subtile, x.latency)
        if d.role == OpRole.GLOBAL_LOAD:
            assert d.k_offset == x.k_offset
    assert len(declared_edges) == 54
    remaining = list(extracted_edges)
    for e in declared_edges:
        remaining.remove(e)  # raises if there is no distinct equal edge
    assert remaining == []


def test_a10_prefetch_marking_in_kernel_body():
    d = load("pingpong_testcfg_identity_manual_waits")
    kernel = d["kernel"]
    flagged = [e for e in kernel if e["is_prefetch"]]
    assert len(flagged) == 7
    assert all(e["op"]["role"] == OpRole.GLOBAL_LOAD and e["op"]["k_offset"] != KOffset.K_PREV
               for e in flagged)
    plain_globals = [e for e in kernel if not e["is_prefetch"] and e["op"]["role"] == OpRole.GLOBAL_LOAD]
    assert len(plain_globals) == 1 and plain_globals[0]["op"]["k_offset"] == KOffset.K_PREV
    # The body-level notion agrees: 7 prefetch loads, the K_PREV one is not.
    body = pingpong_body()
    assert sum(o.is_prefetch for o in body if o.role == OpRole.GLOBAL_LOAD) == 7


def test_a22_compute_alap():
    body = [load_a(0, 0), mma_load_a(0, 0), mma(0, 0)]
    g = LoopGraph(body, [DepEdge.flow(0, 1), DepEdge.flow(1, 2)])
    asap = g.asap()
    makespan = asap[2] + 16
    assert makespan == 236
    assert g.alap(makespan) == [0, 200, 220] == asap
    assert g.slack(makespan) == [0, 0, 0]


# --- reference tests B (framework only) ----------------------------------------

def test_b1_opnode_resource_from_opdesc():
    g = LoopGraph([_global_load(), _frag_load(), _mma()])
    assert [g.resource(i) for i in range(3)] == [ResourceKind.GLOBAL_MEM, ResourceKind.LDS,
                                                  ResourceKind.MMA_UNIT]


def test_b2_opnode_latency_from_opdesc():
    assert LoopGraph([_global_load(lat=123)]).latency == [123]
    assert LoopGraph([_global_load(lat=123)], latencies=[99]).latency == [99]


def test_b3_linear_chain_asap():
    g = LoopGraph([_global_load(), _frag_load(), _mma()], [DepEdge.flow(0, 1), DepEdge.flow(1, 2)])
    assert g.asap() == [0, 200, 220]


def test_b4_diamond_asap():
    g = LoopGraph([_global_load(lat=200), _global_load(lat=100), _mma()],
                  [DepEdge.flow(0, 2), DepEdge.flow(1, 2)])
    assert g.asap()[2] == 200


def test_b5_loop_carried_edges_skip_asap():
    g = LoopGraph([_global_load(), _mma()], [DepEdge.flow(0, 1, 1)])
    assert g.asap() == [0, 0]


def test_b6_compute_alap():
    g = LoopGraph([_global_load(), _frag_load(), _mma()], [DepEdge.flow(0, 1), DepEdge.flow(1, 2)])
    assert g.alap(236) == [0, 200, 220]


def test_b7_alap_slack():
    g = LoopGraph([_global_load(), _mma(), _global_load(lat=50)], [DepEdge.flow(0, 1)])
    makespan = g.asap()[1] + 16
    assert makespan == 216
    assert g.alap(makespan)[2] == 166
    assert g.slack(makespan)[2] > 0 and g.slack(makespan)[:2] == [0, 0]


def test_b8_validate_catches_self_loop():
    with pytest.raises(GraphError) as err:
        validate([_global_load(), _mma()], [DepEdge.flow(0, 1), DepEdge.flow(1, 1)])
    assert err.value.edge == 1
    assert "self-loop" in str(err.value) and "op 1" in str(err.value)


# --- negative tests -----------------------------------------------------------------

def _six_ops():
    return [_global_load(), _global_load(1), _frag_load(), _mma(), _global_load(), _frag_load()]


def test_same_iteration_cycle_names_the_path():
    body = _six_ops()
    edges = [DepEdge.flow(0, 2), DepEdge.flow(3, 5), DepEdge.flow(5, 3)]
    with pytest.raises(GraphError) as err:
        validate(body, edges)
    msg = str(err.value)
    assert "same-iteration dependency cycle: 3 (COMPUTE) -> 5 (FRAGMENT_LOAD) -> 3 (COMPUTE)" in msg
    assert "#1 FLOW d=0" in msg and "#2 FLOW d=0" in msg
    assert err.value.cycle == (3, 5)
    assert find_same_iteration_cycle(body, edges) == (3, 5)


def test_cycle_through_negative_distance_counts_as_same_iteration():
    body = _six_ops()
    edges = [DepEdge.flow(1, 4), DepEdge(4, 2, DepKind.ANTI, -1), DepEdge.flow(2, 1)]
    with pytest.raises(GraphError) as err:
        validate(body, edges)
    assert err.value.cycle == (1, 4, 2)
    assert "1 (GLOBAL_LOAD) -> 4 (GLOBAL_LOAD) -> 2 (FRAGMENT_LOAD) -> 1 (GLOBAL_LOAD)" in str(err.value)


def test_loop_carried_back_edge_is_not_a_cycle():
    validate(_six_ops(), [DepEdge.flow(3, 5), DepEdge.flow(5, 3, 1)])


def test_asap_on_a_cycle_stops_after_n_passes():
    body = [_global_load(lat=10), _frag_load(lat=5)]
    t = asap_times([o.latency for o in body], [DepEdge.flow(0, 1), DepEdge.flow(1, 0)])
    assert len(t) == 2  # terminates without error, as the reference does


@pytest.mark.parametrize("edge", [DepEdge.flow(0, 6), DepEdge.flow(7, 1), DepEdge.flow(-1, 2)])
def test_edge_index_out_of_range(edge):
    with pytest.raises(GraphError) as err:
        validate(_six_ops(), [DepEdge.flow(0, 1), DepEdge.flow(1, 2), edge])
    assert err.value.edge == 2
    assert "edge 2" in str(err.value) and "out of bounds" in str(err.value)
    with pytest.raises(GraphError):
        LoopGraph(_six_ops(), [edge])


def test_validate_reports_the_first_bad_edge_in_edge_order():
    with pytest.raises(GraphError) as err:
        validate(_six_ops(), [DepEdge.flow(2, 2), DepEdge.flow(0, 9)])
    assert err.value.edge == 0 and "self-loop" in str(err.value)


def test_negative_distance_self_loop_is_a_cycle_not_a_self_loop_error():
    with pytest.raises(GraphError) as err:
        validate(_six_ops(), [DepEdge(2, 2, DepKind.FLOW, -1)])
    assert err.value.edge is None and err.value.cycle == (2,)


# --- goldens -------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
def test_golden_bodies_validate(case):
    d = load(case)
    validate(ops_from(d["body"]), edges_from(d["edges"]))


@pytest.mark.parametrize("case", DOUBLE_BUFFER_CASES)
def test_golden_asap(case):
    d = load(case)
    body = ops_from(d["body"])
    assert LoopGraph(body, edges_from(d["edges"])).asap() == d["scheduler"]["asap"]


def test_golden_identity_order_violations():
    pp = load("pingpong_testcfg_identity_manual_waits")
    got = order_violations(edges_from(pp["edges"]), range(24))
    assert [(e.producer, e.consumer, e.kind) for _, e in got] == [(7, 5, A), (19, 17, A)]
    fw = load("fourwave_fp8")
    got = order_violations(edges_from(fw["edges"]), range(24))
    assert [(e.producer, e.consumer) for _, e in got] == [(4, 0), (16, 12), (19, 0), (19, 9),
                                                          (22, 3), (22, 6)]
    assert all(e.kind == A for _, e in got)
    k, e = got[0]
    assert edges_from(fw["edges"])[k] == e


def test_networkx_view_carries_attributes():
    d = load("pingpong_bf16")
    g = LoopGraph(ops_from(d["body"]), edges_from(d["edges"]))
    view = g.nx_graph
    assert view.number_of_nodes() == 24 and view.number_of_edges() == 54
    assert view.nodes[3]["latency"] == 16
    data = view.get_edge_data(0, 3)[0]
    assert data["kind"] == F and data["distance"] == 0 and data["index"] == 0


# --- properties --------------------------------------------------------------------------

@st.composite
def _dags(draw):
    n = draw(st.integers(1, 9))
    lat = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=20))
    edges = [DepEdge.flow(min(a, b), max(a, b)) for a, b in pairs if a != b]
    edges = draw(st.permutations(edges))
    return lat, edges


@settings(max_examples=150, deadline=None)
@given(_dags())
def test_asap_is_the_longest_path_whatever_the_edge_order(dag):
    lat, edges = dag
    expect = [0] * len(lat)
    for j in range(len(lat)):  # edges go low -> high, so index order is topological
        for e in edges:
            if e.consumer == j:
                expect[j] = max(expect[j], expect[e.producer] + lat[e.producer])
    assert asap_times(lat, edges) == expect
    makespan = max(t + l for t, l in zip(expect, lat))
    alap = alap_times(lat, edges, makespan)
    assert all(a >= s for a, s in zip(alap, expect))
