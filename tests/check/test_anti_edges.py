"""The reference's coarse ANTI edges that IDENTITY orders violate, judged per subtile."""
from __future__ import annotations

import pytest

from pipeline_core.check import check_document

from .helpers import SINGLE_BUFFER, TESTCFG, load

# body producer -> consumer of every violated same-iteration ANTI edge
# (docs/guide/reference-behaviours.md, "Coarse ANTI edges"),
# with True where producer and consumer touch the same LDS buffer.
KNOWN = {
    TESTCFG: {(7, 5): False, (19, 17): False},
    "fourwave_fp8": {(4, 0): False, (16, 12): False, (19, 0): True, (19, 9): False,
                     (22, 3): True, (22, 6): False},
    "fourwave_fp8_bm64": {(4, 0): False, (16, 12): False, (19, 0): True, (19, 9): False,
                          (22, 3): True, (22, 6): False},
    "pingpong_bf16": {},  # the CSP order satisfies every ANTI edge
}


@pytest.mark.parametrize("case", sorted(KNOWN))
def test_violated_anti_edges_are_the_known_ones_and_none_is_a_hazard(case):
    found = check_document(load(case)).anti_edges
    assert {(a.producer, a.consumer) for a in found} == set(KNOWN[case])
    for a in found:
        assert not a.real_hazard, a.text()
        same_buffer = KNOWN[case][(a.producer, a.consumer)]
        if same_buffer:
            assert "FLOW" in a.reason and "consumes this very load" in a.reason
        else:
            assert a.reason.startswith("disjoint at subtile granularity")


def test_a_real_hazard_on_a_violated_edge_is_reported_as_real():
    """Hoist 4-wave's LB[s0,1] (body 6, kernel[23]) above FB[s0,1] (body 1, kernel[5]): the
    ANTI edge 1 -> 6 is now violated *and* the load really overwrites the tile being read."""
    doc = load("fourwave_fp8")
    kernel = doc["kernel"]
    kernel.insert(4, kernel.pop(23))
    v = check_document(doc)
    assert not v.safe
    found = {(a.producer, a.consumer): a for a in v.anti_edges}
    assert found[(1, 6)].real_hazard and "LDS_RAW" in found[(1, 6)].reason
    assert not found[(4, 0)].real_hazard


@pytest.mark.parametrize("case", SINGLE_BUFFER)
def test_single_buffer_has_no_anti_edge_report(case):
    assert check_document(load(case)).anti_edges == ()
