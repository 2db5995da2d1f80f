"""The 4-wave cross-stage rotation edges (moved here from the core with the helpers).

Reference tests A33/A38's 4-wave part: the rotation edges' order and breakdown,
and every 4-wave golden's exact edge list.
"""
from __future__ import annotations

import pytest

from pipeline_core.document import config_from_doc, edges_from_doc, ops_from_doc
from pipeline_core.edges import DepEdge, derive_edges
from pipeline_core.ops import DepKind, OpRole

from pipeline_core_schedules_4wave.rotation import (derive_cross_stage_rotation_edges,
                                                    filter_spurious_cross_stage_flow)
from pipeline_core_schedules_4wave.schedule import four_wave_edges

F, A = DepKind.FLOW, DepKind.ANTI
CASES = ("fourwave_bf16", "fourwave_bf16_bm64", "fourwave_fp8", "fourwave_fp8_bm64",
         "fourwave_fp8_bm128_bn256", "fourwave_fp8_bm64_bn128", "fourwave_fp8_builder_defaults")


def _triples(edges):
    return [(e.producer, e.consumer, e.kind, e.distance) for e in edges]


def _body_config(golden, case):
    d = golden(case)
    return d, ops_from(d["body"]), config_from(d["config"])


def ops_from(items):
    return ops_from_doc(items)


def config_from(config):
    return config_from_doc(config)


@pytest.mark.parametrize("case", CASES)
def test_four_wave_edges_equal_golden_edges(golden, case):
    d, body, config = _body_config(golden, case)
    golden = _triples(edges_from_doc(d["edges"]))
    assert _triples(four_wave_edges(body, config)) == golden


def test_fourwave_cross_stage_edges_order_and_breakdown(golden):
    d = golden("fourwave_fp8")
    body, config = ops_from(d["body"]), config_from(d["config"])
    raw = derive_edges(body, config)
    assert filter_spurious_cross_stage_flow(raw, body) == raw  # a no-op on rule-derived edges
    assert len(raw) == 48
    cross = derive_cross_stage_rotation_edges(body)
    assert _triples(cross) == [
        (2, 7, A, 0), (5, 7, A, 0), (7, 14, F, 0), (7, 17, F, 0), (2, 10, A, 0), (8, 10, A, 0),
        (10, 14, F, 0), (10, 20, F, 0), (19, 2, F, 1), (19, 5, F, 1), (14, 19, A, 0),
        (17, 19, A, 0), (22, 2, F, 1), (22, 8, F, 1), (14, 22, A, 0), (20, 22, A, 0)]
    total = raw + cross
    assert sum(e.kind == F and e.distance == 0 for e in total) == 16
    assert sum(e.kind == F and e.distance == 1 for e in total) == 24
    assert sum(e.kind == A and e.distance == 0 for e in total) == 24


def test_filter_drops_spurious_flow_and_keeps_order(golden):
    d = golden("fourwave_fp8")
    body = ops_from(d["body"])
    # op 7 is a cross-stage frag (stage 1 in partition 0); op 2 is a partition-0 MMA.
    assert body[7].role == OpRole.FRAGMENT_LOAD and body[7].stage == 1 and body[7].subtile == 0
    edges = [DepEdge.flow(0, 1), DepEdge.flow(7, 2), DepEdge.anti(2, 7), DepEdge.flow(7, 14),
             DepEdge.flow(1, 2)]
    assert filter_spurious_cross_stage_flow(edges, body) == [edges[0], edges[2], edges[3], edges[4]]


