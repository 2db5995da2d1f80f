"""Schedule metrics and ``pipeline-core analyze``: bounds, utilisation, ResMII / RecMII / MII."""
from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golden_data import config_from, edges_from, load, ops_from
from pipeline_core.edges import DepEdge
from pipeline_core.metrics import (analyze_order, format_metrics, iteration_bounds, rec_mii,
                                   res_mii)
from pipeline_core.ops import Op, OpRole, ResourceKind

MMA = dict(resource=ResourceKind.MMA_UNIT, role=OpRole.COMPUTE)
LDS = dict(resource=ResourceKind.LDS, role=OpRole.FRAGMENT_LOAD)
GLOBAL = dict(resource=ResourceKind.GLOBAL_MEM, role=OpRole.GLOBAL_LOAD)


def _golden(case):
    d = load(case)
    return d, ops_from(d["body"]), edges_from(d["edges"]), config_from(d["config"])


def test_pingpong_golden_metrics():
    d, body, edges, config = _golden("pingpong_bf16")
    m = analyze_order(body, edges, d["scheduler"]["order"], num_partitions=2,
                      max_globals=config.block_sizing.max_globals)
    assert (m.makespan, m.vgpr_peak) == (420, 96)
    assert m.bounds.critical_path == d["scheduler"]["asap_lower_bound"] == 420
    assert m.bounds.mma_serial == 20 + 8 * 16  # earliest MMA (ASAP 20) + all MMA latency
    assert m.bounds.best == 420 and m.gap == 0 and m.bounds_apply
    assert m.mma_cycles == 128 and m.mma_utilisation == pytest.approx(128 / 420)
    # one MMA unit: 8 MMAs of 16 cycles; the LDS buffer recurrence load -> frag -> (ANTI) reload
    assert m.res_mii == 128
    assert m.rec_mii == 220 and m.mii == 220
    assert m.recurrence.latency == 220 and m.recurrence.distance == 1


def test_fourwave_identity_documented_coarse_edge_case():
    """IDENTITY violates 6 LDS-ANTI edges: the ASAP bound (292) exceeds the makespan (272)."""
    d, body, edges, _config = _golden("fourwave_fp8")
    m = analyze_order(body, edges, d["scheduler"]["order"])
    assert m.makespan == 272 and m.bounds.critical_path == d["scheduler"]["asap_lower_bound"] == 292
    assert m.violated_edges == 6 and not m.bounds_apply and m.gap < 0
    assert "violates 6" in format_metrics(m)


def test_rec_mii_is_the_worst_latency_over_distance_cycle():
    a = Op(tag=0, latency=10, **MMA)
    b = Op(tag=1, latency=5, **MMA)
    c = Op(tag=2, latency=7, **LDS)
    edges = [DepEdge.flow(0, 1), DepEdge.flow(1, 0, 1)]
    assert rec_mii([a, b], edges)[0] == 15
    assert rec_mii([a, b], [DepEdge.flow(0, 1), DepEdge.flow(1, 0, 2)])[0] == 8  # ceil(15 / 2)
    # two recurrences: the worse one wins and is reported
    edges = [DepEdge.flow(0, 1), DepEdge.flow(1, 0, 1), DepEdge.flow(0, 2), DepEdge.flow(2, 0, 1)]
    value, cycle = rec_mii([a, b, c], edges)
    assert value == 17 and set(cycle.ops) == {0, 2} and (cycle.latency, cycle.distance) == (17, 1)
    # no loop-carried edge: no recurrence
    assert rec_mii([a, b], [DepEdge.flow(0, 1)]) == (0, None)


def test_res_mii_is_the_busiest_unit():
    ops = [Op(tag=0, latency=16, **MMA)] * 3 + [Op(tag=1, latency=20, **LDS)] * 4
    assert res_mii(ops) == 48
    assert res_mii(ops, penalty=20) == 80  # 4 port ops x 20 cycles


def test_resource_bound_with_penalty():
    ops = [Op(tag=0, latency=200, **GLOBAL), Op(tag=1, latency=20, **LDS),
           Op(tag=2, latency=20, **LDS)]
    b = iteration_bounds(ops, [], penalty=8)
    assert b.resource == 2 * 8 + 20
    assert b.partition >= 200


def _random_dag(rng: random.Random, n: int):
    kinds = [MMA, LDS, GLOBAL, dict(resource=ResourceKind.VALU, role=OpRole.VALU_COMPUTE)]
    ops = [Op(tag=i % 8, latency=rng.choice([0, 4, 16, 20, 200]), **rng.choice(kinds))
           for i in range(n)]
    edges = [DepEdge(p, c, rng.choice([0, 1]), rng.choice([0, 0, 1]))
             for c in range(n) for p in range(c) if rng.random() < 0.25]
    edges += [DepEdge(c, p, 0, 1) for c in range(n) for p in range(c) if rng.random() < 0.05]
    return ops, edges


def _random_topological_order(rng, ops, edges):
    preds = {i: {e.producer for e in edges if e.consumer == i and e.distance < 1}
             for i in range(len(ops))}
    order, placed = [], set()
    while len(order) < len(ops):
        ready = [i for i in range(len(ops)) if i not in placed and preds[i] <= placed]
        i = rng.choice(ready)
        order.append(i)
        placed.add(i)
    return order


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10**9), st.integers(1, 12), st.sampled_from([0, 4, 30]))
def test_bounds_never_exceed_the_makespan_of_an_edge_respecting_order(seed, n, penalty):
    rng = random.Random(seed)
    ops, edges = _random_dag(rng, n)
    order = _random_topological_order(rng, ops, edges)
    m = analyze_order(ops, edges, order, penalty=penalty)
    assert m.bounds_apply
    b = m.bounds
    for value in (b.critical_path, b.mma_serial, b.valu_serial, b.resource, b.partition):
        assert value <= m.makespan
    assert 0 <= m.mma_utilisation <= 1
    assert m.mii >= m.res_mii and m.mii >= m.rec_mii


def test_partition_bound_holds_for_partition_isolated_orders():
    rng = random.Random(3)
    for _ in range(100):
        ops, edges = _random_dag(rng, 8)
        # keep only edges that point forward across the halves, so halves can be isolated
        edges = [e for e in edges if not (e.distance < 1 and e.producer >= 4 > e.consumer)]
        half0 = _random_topological_order(rng, ops[:4], [e for e in edges if e.producer < 4 and e.consumer < 4])
        half1 = _random_topological_order(
            rng, ops[4:], [DepEdge(e.producer - 4, e.consumer - 4, e.kind, e.distance)
                           for e in edges if e.producer >= 4 and e.consumer >= 4])
        order = half0 + [4 + i for i in half1]
        m = analyze_order(ops, edges, order, penalty=rng.choice([0, 8]), num_partitions=2)
        assert m.bounds.partition <= m.makespan


def test_steady_state_of_an_emitted_kernel():
    from pipeline_core.api import compile_named
    from pipeline_core.metrics import analyze_compiled

    m = analyze_compiled(compile_named("pingpong"), iterations=8)
    s = m.steady
    assert s is not None and s.groups == 2
    assert s.mma_bound_cycles == 2 * 128  # both warp groups' MMAs share the unit
    assert s.cycles_per_iteration >= s.mma_bound_cycles
    assert s.ratio_to_mma_bound == pytest.approx(s.cycles_per_iteration / s.mma_bound_cycles)
    doc = m.to_dict()
    assert doc["steady_state"]["groups"] == 2 and doc["mii"] == 220


def test_analyze_cli_text_and_json(cli):
    result = cli("analyze", "pingpong")
    assert result.exit_code == 0, result.stderr
    for text in ("makespan 420", "critical path 420", "MMA-serial 148", "ResMII 128",
                 "RecMII 220", "MII 220", "cycles/iteration", "MMA-bound limit"):
        assert text in result.stdout
    doc = json.loads(cli("analyze", "pingpong", "--json", "--no-timing").stdout)
    assert doc["makespan"] == 420 and doc["steady_state"] is None and doc["strategy"] == "CSP"
    assert cli("analyze", "pingpong", "--iterations", "1").exit_code == 2


def test_analyze_cli_optimal(cli):
    result = cli("analyze", "pingpong", "-c", "lds_contention_penalty=8", "-c", "scheduling=GREEDY",
                 "--optimal", "5", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["optimal"]["proven_optimal"]
    assert doc["optimal"]["makespan"] <= doc["makespan"]
    assert doc["optimal"]["order_gap"] == doc["makespan"] - doc["optimal"]["lower_bound"]
