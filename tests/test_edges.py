"""Edge derivation: rule tables and the goldens' exact edge lists (4-wave rotation: its plugin).

Reference tests A33, A34, A38
(docs/guide/reference-behaviours.md, "The reference's own tests", "Edge rules").
"""
from __future__ import annotations

from collections import Counter

import pytest

from golden_data import CASES, config_from, edges_from, load, ops_from
from pipeline_core.edges import (DOUBLE_BUFFER_RULES, SINGLE_BUFFER_RULES, DepEdge, EdgeRule,
                                 apply_edge_rules, derive_edges, double_buffer_edge_rules,
                                 rules_for, single_buffer_edge_rules)
from pipeline_core.errors import ConfigError
from pipeline_core.ops import DepKind, OpRole
from reference_bodies import (default_matmul_body, mi355x_double_buffer, mi355x_single_buffer,
                              pingpong_body)

F, A = DepKind.FLOW, DepKind.ANTI


def _triples(edges):
    return [(e.producer, e.consumer, e.kind, e.distance) for e in edges]


def _derive_like_golden(case: str):
    d = load(case)
    body, config = ops_from(d["body"]), config_from(d["config"])
    return derive_edges(body, config)


#: the 4-wave goldens add the schedule's cross-stage rotation edges (plugins/schedules_4wave)
@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith("fourwave")])
def test_derived_edges_equal_golden_edges(case):
    golden = edges_from(load(case)["edges"])
    got = _derive_like_golden(case)
    assert len(got) == len(golden)
    for k, (g, e) in enumerate(zip(golden, got)):
        assert (e.producer, e.consumer, e.kind, e.distance) == \
            (g.producer, g.consumer, g.kind, g.distance), f"edge {k}"


def test_a33_rule_based_edges_match_double_buffer():
    body, config = pingpong_body(), mi355x_double_buffer()
    by_rules = apply_edge_rules(body, config, double_buffer_edge_rules())
    assert Counter(_triples(by_rules)) == Counter(_triples(derive_edges(body, config)))
    assert len(by_rules) == 54


def test_a34_rule_based_edges_match_single_buffer():
    body, config = default_matmul_body(2), mi355x_single_buffer()
    by_rules = apply_edge_rules(body, config, single_buffer_edge_rules())
    assert Counter(_triples(by_rules)) == Counter(_triples(derive_edges(body, config)))
    assert len(by_rules) == 8


def test_a38_edge_rule_count():
    assert len(DOUBLE_BUFFER_RULES) == 5
    assert len(SINGLE_BUFFER_RULES) == 8


def test_rules_for_picks_the_table_by_depth():
    assert rules_for(mi355x_single_buffer()) is SINGLE_BUFFER_RULES
    assert rules_for(mi355x_double_buffer()) is DOUBLE_BUFFER_RULES
    assert rules_for(mi355x_double_buffer().evolve(depth=3)) is DOUBLE_BUFFER_RULES


def test_pingpong_edge_breakdown_and_layout():
    edges = derive_edges(pingpong_body(), mi355x_double_buffer())
    assert sum(e.kind == F and e.distance == 0 for e in edges) == 22
    assert sum(e.kind == F and e.distance == 1 for e in edges) == 18
    assert sum(e.kind == A for e in edges) == 14
    # rule 1 = 0-15, rule 2 = 16-19, rule 3 = 20-23, rule 4 = 24-39, rule 5 = 40-53
    assert all(e.kind == F and e.distance == 0 for e in edges[:20])
    assert all(e.kind == F and e.distance == 1 for e in edges[20:24])
    assert _triples(edges[24:26]) == [(2, 13, F, 0), (2, 19, F, 0)]
    assert all(e.distance == 1 for e in edges[26:40])
    assert all(e.kind == A and e.distance == 0 for e in edges[40:])


def test_single_buffer_edges_t2_exact():
    edges = derive_edges(default_matmul_body(2), mi355x_single_buffer())
    assert _triples(edges) == [(0, 5, F, 0), (2, 3, F, 0), (3, 6, F, 0), (6, 7, F, 0),
                               (0, 2, A, 0), (7, 1, F, 1), (4, 3, F, 1), (7, 3, A, 1)]


def test_single_buffer_edges_t1_and_t4_exact():
    t1 = derive_edges(default_matmul_body(1), mi355x_single_buffer())
    assert _triples(t1) == [(1, 2, F, 0), (2, 4, F, 0), (4, 5, F, 0), (5, 0, F, 1),
                            (3, 2, F, 1), (5, 2, A, 1)]
    t4 = derive_edges(default_matmul_body(4), mi355x_single_buffer())
    assert _triples(t4) == [(0, 7, F, 0), (1, 8, F, 0), (2, 9, F, 0), (4, 5, F, 0),
                            (5, 10, F, 0), (10, 11, F, 0), (0, 4, A, 0), (1, 4, A, 0),
                            (2, 4, A, 0), (11, 3, F, 1), (6, 5, F, 1), (11, 5, A, 1)]


@pytest.mark.parametrize("t", [1, 2, 3, 4, 6])
def test_single_buffer_edge_count_is_2t_plus_4(t):
    assert len(derive_edges(default_matmul_body(t), mi355x_single_buffer())) == 2 * t + 4


def test_edge_rule_records_validate():
    with pytest.raises(ConfigError) as err:
        EdgeRule(OpRole.COMPUTE, OpRole.COMPUTE, same_half=True, cross_half=True, name="bad")
    assert "bad" in str(err.value) and "cross_half" in str(err.value)
    with pytest.raises(ConfigError):
        EdgeRule(OpRole.COMPUTE, OpRole.COMPUTE, producer_half=2)
    with pytest.raises(ConfigError):
        EdgeRule(OpRole.COMPUTE, OpRole.COMPUTE, loop_distance=-2)
    with pytest.raises(ConfigError):
        EdgeRule(OpRole.COMPUTE, OpRole.COMPUTE, k_offset_filter=3)
    with pytest.raises(ConfigError):
        EdgeRule(OpRole.COMPUTE, OpRole.COMPUTE, match_stage=1)
    rule = EdgeRule(2, 3)
    assert rule.producer_role is OpRole.FRAGMENT_LOAD and rule.dep_kind is DepKind.FLOW


def test_k_offset_filter_consumer_must_be_k_prev():
    body, config = pingpong_body(), mi355x_double_buffer()
    only_kprev = EdgeRule(OpRole.FRAGMENT_LOAD, OpRole.GLOBAL_LOAD, DepKind.ANTI, 0,
                          match_channel=True, match_stage=True, k_offset_filter=1)
    edges = apply_edge_rules(body, config, [only_kprev])
    # the K_PREV load (op 2: channel 0, stage 1) is read by the two stage-1 A frags
    assert _triples(edges) == [(13, 2, A, 0), (19, 2, A, 0)]


def test_ordinal_and_first_match_only():
    body, config = default_matmul_body(4), mi355x_single_buffer()
    first_only = EdgeRule(OpRole.FRAGMENT_LOAD, OpRole.COMPUTE, producer_ordinal=1,
                          first_match_only=True)
    assert _triples(apply_edge_rules(body, config, [first_only])) == [(1, 3, F, 0)]
    every = EdgeRule(OpRole.FRAGMENT_LOAD, OpRole.COMPUTE, producer_ordinal=1)
    assert [e.consumer for e in apply_edge_rules(body, config, [every])] == [3, 7, 8, 9]
