"""The loosest safe value of every kernel wait ("stronger than needed" report)."""
from __future__ import annotations

import attrs
import pytest

from pipeline_core.check import check_document, model_for_document

from .helpers import load, set_wait


def _strict(doc):
    """The AMD model without the in-order LDS assumption (``--no-lds-order``)."""
    return attrs.evolve(model_for_document(doc), lds_in_order=False)


# (index, counter, value, loosest safe value, max outstanding) per kernel wait, under the
# strict model (no in-order LDS).  The wait_lgkm(0) before each MMA duplicates the wait the
# compiler inserts for the fragment registers (register interlock), hence "removable"; the
# lgkm waits ahead of a barrier and the vm waits protect LDS and are tight.
STRICT = {
    "pingpong_bf16": [
        (3, "lgkm", 8, 8, 12), (5, "lgkm", 0, 8, 8), (14, "lgkm", 0, 4, 4), (22, "lgkm", 0, 8, 8),
        (29, "vm", 6, 6, 14), (38, "lgkm", 8, 8, 12), (40, "lgkm", 0, 8, 8), (49, "lgkm", 0, 4, 4),
        (57, "lgkm", 0, 8, 8), (64, "vm", 6, 6, 14)],
    "fourwave_fp8": [
        (1, "vm", 8, 8, 12), (2, "lgkm", 4, 4, 8), (10, "lgkm", 0, 4, 4), (17, "vm", 8, 8, 12),
        (18, "lgkm", 0, 4, 4), (29, "vm", 8, 12, 12), (33, "vm", 8, 8, 8), (34, "lgkm", 4, 4, 8),
        (42, "lgkm", 0, 4, 4), (49, "vm", 8, 8, 12), (50, "lgkm", 0, 4, 4), (61, "vm", 8, 10, 12)],
    "fourwave_fp8_bm64": [
        (0, "vm", 4, 4, 6), (1, "lgkm", 2, 2, 4), (7, "lgkm", 0, 2, 2), (12, "vm", 4, 4, 6),
        (13, "lgkm", 0, 2, 2), (22, "vm", 4, 6, 6), (24, "vm", 4, 4, 4), (25, "lgkm", 2, 2, 4),
        (31, "lgkm", 0, 2, 2), (36, "vm", 4, 4, 6), (37, "lgkm", 0, 2, 2), (46, "vm", 4, 5, 6)],
}


# Default model (in-order LDS): the lgkm waits whose only job is to retire a fragment read
# before a later-issued global load overwrites its buffer become removable -- ping-pong's
# wait_lgkm(8) (kernel[3]/[38]) and the 4-wave top-of-half wait_lgkm (kernel[2]/[34],
# bm64 [1]/[25]).  Every other value is as in the strict model.
_LOOSER = {"pingpong_bf16": {3: 12, 38: 12}, "fourwave_fp8": {2: 8, 34: 8},
           "fourwave_fp8_bm64": {1: 4, 25: 4}}
EXPECTED = {case: [(i, c, v, _LOOSER[case].get(i, lo), top) for i, c, v, lo, top in rows]
            for case, rows in STRICT.items()}


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_loosest_safe_values(case, strict):
    doc = load(case)
    v = check_document(doc, tightest=True, model=_strict(doc) if strict else None)
    got = [(w.index, w.counter, w.value, w.loosest_safe, w.max_outstanding) for w in v.wait_slack]
    assert got == (STRICT if strict else EXPECTED)[case]


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_slack_is_exact(case, strict):
    """The reported value is safe and one more is not (unless the wait is removable)."""
    doc = load(case)
    model = _strict(doc) if strict else None
    for w in check_document(doc, tightest=True, model=model).wait_slack:
        assert check_document(set_wait(doc, "kernel", w.index, w.loosest_safe), model=model).safe
        if not w.removable:
            assert not check_document(set_wait(doc, "kernel", w.index, w.loosest_safe + 1),
                                      model=model).safe


def test_pingpong_wait_lgkm_8_is_tight_without_in_order_lds():
    """The reference's authors call block 0's wait_lgkm(8) redundant; across the two staggered
    groups and without in-order LDS it is exactly what retires group 1's B fragment read
    before group 0's LB[s0,0].  With in-order LDS that read, issued one barrier before the
    load, is serviced first, and the wait is removable."""
    doc = load("pingpong_bf16")
    v = check_document(doc, tightest=True, model=_strict(doc))
    w = {x.index: x for x in v.wait_slack}
    assert not w[3].stronger_than_needed and not w[38].stronger_than_needed
    v9 = check_document(set_wait(doc, "kernel", 3, 9), model=_strict(doc))
    assert v9.first.site.index == 12 and v9.first.other.group == 1 and v9.first.other.index == 0
    w = {x.index: x for x in check_document(doc, tightest=True).wait_slack}
    assert w[3].removable and w[38].removable


def test_fourwave_top_of_half_lgkm_is_tight_under_the_group_model_without_in_order_lds():
    doc = load("fourwave_fp8")
    w = {x.index: x for x in check_document(doc, tightest=True, model=_strict(doc)).wait_slack}
    assert (w[2].value, w[2].loosest_safe, w[34].loosest_safe) == (4, 4, 4)
    assert w[29].removable  # wait_vm_last drains nothing from the current half
    w = {x.index: x for x in check_document(doc, tightest=True).wait_slack}
    assert w[2].removable and w[34].removable


def test_slack_not_computed_for_unsafe_schedules():
    from .helpers import TESTCFG
    v = check_document(load(TESTCFG), tightest=True, model=_strict(load(TESTCFG)))
    assert v.wait_slack == ()
    assert "slack not computed" in v.render_text()


def test_loosenings_that_rest_on_the_in_order_lds_assumption_are_labelled():
    """Ping-pong's wait_lgkm(8) is removable only if LDS services requests in order;
    the strict model keeps it tight, and the report says both."""
    from pipeline_core.check import check_document
    from tests.check.helpers import load

    verdict = check_document(load("pingpong_bf16"), tightest=True)
    by_index = {(w.phase, w.index): w for w in verdict.wait_slack}
    first = by_index[("kernel", 3)]
    assert first.value == 8 and first.removable
    assert first.loosest_safe_strict == 8
    assert "only if LDS services requests in order (strict model: tight)" in first.text()
    vm = by_index[("kernel", 29)]
    assert vm.loosest_safe == 6 and vm.loosest_safe_strict is None  # same answer either way
    assert "only if" not in vm.text()
