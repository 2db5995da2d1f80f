"""Symbolic data flow: wrong K steps, missing and duplicate products, unloaded buffers."""
from __future__ import annotations

import copy

from pipeline_core.check import HazardKind, check_document

from .helpers import load


def _kinds(doc):
    return [(v.kind, v.site.phase, v.site.index) for v in check_document(doc).distinct()]


def test_dropped_mma_is_a_missing_product():
    doc = load("fourwave_fp8")
    doc["kernel"].pop(8)  # MMA(0, 0) of half 0
    assert _kinds(doc)[0] == (HazardKind.MISSING_PRODUCT, "kernel", 39)


def test_repeated_mma_is_a_duplicate_product():
    doc = load("fourwave_fp8")
    doc["kernel"].insert(9, copy.deepcopy(doc["kernel"][8]))
    assert _kinds(doc) == [(HazardKind.DUPLICATE_PRODUCT, "kernel", 9)]


def test_load_of_the_wrong_k_tile_mixes_k_steps():
    doc = load("fourwave_fp8")
    doc["kernel"][7]["op"]["k_offset"] = 1  # LA[s0,0] loads k+1 instead of k
    v = check_document(doc)
    assert v.first.kind is HazardKind.WRONG_K_STEP and v.first.site.index == 8
    assert "ch0#0=k3, ch1#0=k2" in v.first.message


def test_mma_on_the_wrong_quadrant():
    doc = load("pingpong_bf16")
    doc["kernel"][24]["op"]["stage"] = 0  # MMA(1,0) becomes a second MMA(0,0)
    kinds = _kinds(doc)
    assert kinds[0] == (HazardKind.DUPLICATE_PRODUCT, "kernel", 24)
    assert (HazardKind.MISSING_PRODUCT, "kernel", 59) in kinds


def test_reading_a_buffer_nobody_loaded():
    doc = load("fourwave_fp8")
    del doc["prologue"][0]  # the bootstrap read of A s0 sub0 now has no load
    v = check_document(doc)
    assert v.first.kind is HazardKind.LDS_RAW and v.first.site.index == 9
    assert "before any load" in v.first.message


def test_no_epilogue_mmas_leaves_k_steps_missing_at_the_end():
    doc = load("pingpong_bf16")
    doc["epilogue"] = [e for e in doc["epilogue"] if e["op"]["tag"] != 5]
    v = check_document(doc)
    assert {x.kind for x in v.violations} == {HazardKind.MISSING_PRODUCT}
    assert v.first.site.phase == "epilogue" and "2 of 8 K steps missing" in v.first.message


def test_every_mma_reads_one_k_step_in_the_goldens():
    """The reads the checker derives put tile k in stage k % 2 (double buffer)."""
    from pipeline_core.check import decode, model_for_document
    from pipeline_core.check.hazards import analyse
    from pipeline_core.check.trace import expand
    doc = load("pingpong_bf16")
    prog = decode(doc, model_for_document(doc))
    traces = expand(prog, 3)
    reads = analyse(prog, traces).reads
    for (t, pos), (tile, _) in reads.items():
        assert tile % 2 == traces[t].events[pos].instr.stage
