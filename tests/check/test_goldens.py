"""Every golden schedule is SAFE under the AMD default model; the findings of the stricter
models (no in-order LDS, separate warps, no register interlock) are pinned down exactly."""
from __future__ import annotations

import attrs
import pytest

from pipeline_core.check import HazardKind, check_document, model_for_document

from .helpers import PRODUCTION_DB, SINGLE_BUFFER, TESTCFG, apply_fix, load
from .oracle import find_witness


def _strict(doc):
    """The AMD model without the in-order LDS assumption (``--no-lds-order``)."""
    return attrs.evolve(model_for_document(doc), lds_in_order=False)


@pytest.mark.parametrize("case", PRODUCTION_DB + SINGLE_BUFFER + [TESTCFG])
@pytest.mark.parametrize("iterations", [1, 2, 3, 5])
def test_every_golden_is_safe(case, iterations):
    verdict = check_document(load(case), iterations=iterations)
    assert verdict.safe, verdict.render_text()
    assert verdict.violations == ()


@pytest.mark.parametrize("case,groups", [("pingpong_bf16", 2), ("fourwave_fp8", 1),
                                         ("fourwave_fp8_bm64", 1), ("default_matmul", 1)])
def test_warp_groups_come_from_the_document(case, groups):
    assert check_document(load(case)).groups == groups


@pytest.mark.parametrize("case", PRODUCTION_DB + SINGLE_BUFFER)
def test_production_goldens_are_safe_without_in_order_lds(case):
    doc = load(case)
    assert check_document(doc, model=_strict(doc)).safe


def test_testcfg_is_safe_because_the_lds_services_reads_in_order():
    """Group 1's FA0 read (kernel[1]) is issued one barrier before group 0's LA[s0,0]
    (kernel[12]) is issued, so the in-order LDS services it before that load's data lands."""
    doc = load(TESTCFG)
    v = check_document(doc)
    assert v.safe and v.model["lds_in_order"] is True
    assert "assuming in-order LDS" in v.render_text()
    assert find_witness(doc, trials=50) is None


def test_testcfg_identity_order_has_a_cross_group_war_without_in_order_lds():
    """Strict model (``--no-lds-order``): the reference's test configuration (IDENTITY order,
    manual waits) is not what runs in production: its block 1 overwrites A s0 sub0 one
    barrier after group 1 read it, but wait_lgkm(8) only retires the B fragment read before
    that barrier (a formal race: the load's data must land before the earlier read)."""
    doc = load(TESTCFG)
    strict = _strict(doc)
    v = check_document(doc, model=strict)
    assert not v.safe and v.model["lds_in_order"] is False
    first = v.first
    assert first.kind is HazardKind.LDS_WAR
    assert (first.site.phase, first.site.index, first.site.iteration, first.site.group) == \
        ("kernel", 12, 1, 0)
    assert "LOAD_A[A s0.0 K0]" == first.site.op
    assert (first.other.phase, first.other.index, first.other.group) == ("kernel", 1, 1)
    assert (first.fix.action, first.fix.phase, first.fix.index, first.fix.value) == \
        ("lower_wait", "kernel", 3, 0)
    assert {(x.kind, x.site.index) for x in v.distinct()} == {
        (HazardKind.LDS_WAR, 12), (HazardKind.LDS_WAR, 47)}
    # Applying the suggested fixes (kernel[3] and kernel[38] -> 0) makes it safe.
    fixed = doc
    for _ in range(2):
        fixed = apply_fix(fixed, check_document(fixed, model=strict).first.fix)
    assert check_document(fixed, model=strict).safe
    # The finding does not depend on the "1 lgkm op per fragment" assumption.
    prod = load(TESTCFG)
    prod["schedule_config"].update(lgkm_per_load_a=8, lgkm_per_load_b=4)
    model = attrs.evolve(model_for_document(prod), lds_in_order=False)
    assert model.cost(2, 0).ops == 8 and model.notes == ()
    assert check_document(doc, model=model).first.site.index == 12
    # And it is real without in-order LDS: a concrete timing computes garbage.
    assert find_witness(doc, trials=50, lds_in_order=False) is not None


def test_goldens_have_no_concrete_witness():
    for case in PRODUCTION_DB + SINGLE_BUFFER:
        assert find_witness(load(case), trials=15, seed=3, lds_in_order=False) is None, case
    for case in PRODUCTION_DB + SINGLE_BUFFER + [TESTCFG]:
        assert find_witness(load(case), trials=15, seed=3) is None, case


@pytest.mark.parametrize("case", ["pingpong_bf16"] + SINGLE_BUFFER)
def test_safe_when_each_warp_synchronises_only_by_barriers(case):
    assert check_document(load(case), warps_per_group=2).safe


@pytest.mark.parametrize("case,war_index,wait_index", [("fourwave_fp8", 14, 2),
                                                       ("fourwave_fp8_bm64", 10, 1)])
def test_fourwave_relies_on_a_group_acting_as_one_agent(case, war_index, wait_index):
    """With the 4 warps as separate agents the barrier-free epilogue reads other warps' last
    loads; without in-order LDS the top-of-half wait_lgkm must also be 0 (the hand-written
    value), since another warp's later LB[s0,0] may land before this warp's B read."""
    doc = load(case)
    v = check_document(doc, warps_per_group=2)
    assert not v.safe
    assert {(x.kind, x.site.phase) for x in v.distinct()} == {(HazardKind.LDS_RAW, "epilogue")}
    assert find_witness(doc, trials=50, warps_per_group=2) is not None
    v = check_document(doc, model=_strict(doc), warps_per_group=2)
    first = v.first
    assert first.kind is HazardKind.LDS_WAR
    assert (first.site.phase, first.site.index) == ("kernel", war_index)
    assert (first.fix.action, first.fix.index, first.fix.value) == ("lower_wait", wait_index, 0)
    kinds = {(x.kind, x.site.phase) for x in v.distinct()}
    assert (HazardKind.LDS_RAW, "epilogue") in kinds


@pytest.mark.parametrize("case,mma,wait", [("fourwave_fp8", (8, 40), (2, 34)),
                                           ("fourwave_fp8_bm64", (6, 30), (1, 25))])
def test_fourwave_without_register_interlock_needs_lgkm_0_at_the_top(case, mma, wait):
    doc = load(case)
    model = attrs.evolve(model_for_document(doc), register_interlock=False)
    v = check_document(doc, model=model)
    assert [(x.kind, x.site.index) for x in v.distinct()] == [
        (HazardKind.REG_RAW, mma[0]), (HazardKind.REG_RAW, mma[1])]
    assert [(x.fix.index, x.fix.value) for x in v.distinct()] == [(wait[0], 0), (wait[1], 0)]
    for _ in range(2):
        doc = apply_fix(doc, check_document(doc, model=model).first.fix)
    assert check_document(doc, model=model).safe


def test_pingpong_is_safe_without_register_interlock():
    doc = load("pingpong_bf16")
    model = attrs.evolve(model_for_document(doc), register_interlock=False)
    assert check_document(doc, model=model).safe


def test_single_buffer_needs_the_interlock_or_explicit_waits():
    doc = load("default_matmul")
    model = attrs.evolve(model_for_document(doc), register_interlock=False)
    v = check_document(doc, model=model)
    assert v.first.kind is HazardKind.REG_RAW
    assert v.first.fix.action == "insert_wait"
