"""Mutation testing: loosen each wait by one, remove each barrier, swap adjacent load/frag
entries; the checker must flag exactly the mutations that break safety.

"Breaks safety" is decided twice: by an explicit list reasoned out below, and by the
independent brute-force oracle (``oracle.py``), which must find a concrete failing
timing for every flagged mutation and none for the accepted ones.

Both use the AMD default model, which assumes in-order LDS (``CounterModel.lds_in_order``):
an LDS read issued before a global->LDS load is serviced before the load's data lands.
``STRICT_ONLY`` lists the mutations that are unsafe only without that assumption
(``--no-lds-order``); the oracle, run without it too, must find a failing timing for each.
"""
from __future__ import annotations

import collections

import pytest

import attrs

from pipeline_core.check import HazardKind, check_document, model_for_document
from pipeline_core.check.mutate import mutations

from .helpers import apply_fix, load
from .oracle import find_witness

LW, RB, SD, SM = "loosen_wait", "remove_barrier", "swap_data", "swap_mixed"

# Flagged mutations: (category, phase, entry index) -> first hazard.  Why, per case:
PINGPONG = {
    # Without the prologue's barrier, group 0 reads stage 0 before group 1's loads of it
    # are published (group 1 waited, but no barrier followed before group 0's kernel[0]).
    (RB, "prologue", 5): "LDS_RAW",
    # The two barriers between a group's first fragment reads and the other group's prefetch
    # into the same buffer (blocks 0/1 of each half) are each needed.
    (RB, "kernel", 4): "LDS_WAR", (RB, "kernel", 9): "LDS_WAR",
    (RB, "kernel", 39): "LDS_WAR", (RB, "kernel", 44): "LDS_WAR",
    # wait_vm(6) retires the K_PREV/"completion" load (the oldest 2 of 8 outstanding ops);
    # 7 leaves it in flight, and so does moving the last prefetch after the wait.
    (LW, "kernel", 29): "LDS_RAW", (LW, "kernel", 64): "LDS_RAW",
    (SM, "kernel", 28): "LDS_RAW", (SM, "kernel", 63): "LDS_RAW",
    # The barriers after that wait publish the other group's prefetches before the next
    # half reads them; moving the first read above the barrier has the same effect.
    (RB, "kernel", 30): "LDS_RAW", (RB, "kernel", 34): "LDS_RAW",
    (RB, "kernel", 65): "LDS_RAW", (RB, "kernel", 69): "LDS_RAW",
    (SM, "kernel", 34): "LDS_RAW",
}
FOURWAVE = {  # fourwave_fp8 (kernel indices); bm64 has the same shape at other indices
    # Bootstrap waits 14/12 retire exactly the first / first two prologue loads, so
    # loosening them, or reordering the loads they count, exposes an unretired tile.
    (LW, "prologue", 8): "LDS_RAW", (LW, "prologue", 11): "LDS_RAW",
    (SD, "prologue", 0): "LDS_RAW", (SD, "prologue", 1): "LDS_RAW",
    (SD, "prologue", 3): "LDS_RAW", (SD, "prologue", 5): "LDS_RAW",
    (SM, "prologue", 7): "LDS_RAW",
    # Top-of-half / mid-half wait_vm(8) retire the stage being read next.
    (LW, "kernel", 1): "LDS_RAW", (LW, "kernel", 17): "LDS_RAW", (LW, "kernel", 49): "LDS_RAW",
    # Moving the cross-stage B fragment load above the MMA that still needs B reg 0.
    (SM, "kernel", 24): "REG_WAR", (SM, "kernel", 56): "REG_WAR",
}
FOURWAVE_BM64 = {**{k: v for k, v in FOURWAVE.items() if k[1] == "prologue"},
                 (LW, "kernel", 0): "LDS_RAW", (LW, "kernel", 12): "LDS_RAW",
                 (LW, "kernel", 36): "LDS_RAW", (SM, "kernel", 18): "REG_WAR",
                 (SM, "kernel", 42): "REG_WAR"}
EXPECTED = {"pingpong_bf16": PINGPONG, "fourwave_fp8": FOURWAVE, "fourwave_fp8_bm64": FOURWAVE_BM64}

# Unsafe only under the strict model (no in-order LDS): an lgkm wait whose sole job is to
# retire a fragment read before a *later-issued* global load overwrites its buffer.  With
# in-order LDS the read is serviced before the load's data lands, so loosening it is harmless.
STRICT_ONLY = {
    "pingpong_bf16": {
        # wait_lgkm(8)/(9) at the top of each half: FB (4 ops) then FA (8 ops) are outstanding;
        # 8 retires FB exactly, 9 does not, and group 0's LB[s?,0] prefetch, issued one barrier
        # after group 1 read B s?.sub0, may land while that read is still in flight.
        (LW, "kernel", 3): "LDS_WAR", (LW, "kernel", 38): "LDS_WAR",
        # Swapping FB/FA makes the same wait retire nothing (FA is 8 ops).
        (SD, "kernel", 0): "LDS_WAR", (SD, "kernel", 35): "LDS_WAR",
    },
    # Top-of-half wait_lgkm(4) / (2) retires the cross-stage A read before the same group's
    # later LA[s0,0] overwrites it (program order: the read was issued first).
    "fourwave_fp8": {(LW, "kernel", 2): "LDS_WAR", (LW, "kernel", 34): "LDS_WAR"},
    "fourwave_fp8_bm64": {(LW, "kernel", 1): "LDS_WAR", (LW, "kernel", 25): "LDS_WAR"},
}


def _strict(doc):
    """The AMD model without the in-order LDS assumption (``--no-lds-order``)."""
    return attrs.evolve(model_for_document(doc), lds_in_order=False)

# (category, phase) -> mutations tried
TRIED = {
    "pingpong_bf16": {(LW, "prologue"): 2, (RB, "prologue"): 1, (SD, "prologue"): 5,
                      (SM, "prologue"): 3, (LW, "kernel"): 10, (RB, "kernel"): 16,
                      (SD, "kernel"): 8, (SM, "kernel"): 15, (LW, "epilogue"): 16,
                      (RB, "epilogue"): 13, (SD, "epilogue"): 3, (SM, "epilogue"): 12},
    "fourwave_fp8": {(LW, "prologue"): 2, (RB, "prologue"): 2, (SD, "prologue"): 7,
                     (SM, "prologue"): 4, (LW, "kernel"): 12, (RB, "kernel"): 4,
                     (SM, "kernel"): 32, (LW, "epilogue"): 15, (RB, "epilogue"): 1,
                     (SM, "epilogue"): 16},
}
TRIED["fourwave_fp8_bm64"] = TRIED["fourwave_fp8"]


def _verdicts(case):
    doc = load(case)
    return doc, [(m, check_document(m.apply(doc))) for m in mutations(doc)]


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_exactly_the_reasoned_mutations_are_flagged(case):
    _, results = _verdicts(case)
    tried = collections.Counter((m.category, m.phase) for m, _ in results)
    assert dict(tried) == TRIED[case]
    flagged = {(m.category, m.phase, m.index): v.first.kind.value for m, v in results if not v.safe}
    assert flagged == EXPECTED[case]


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_verdicts_do_not_depend_on_the_iteration_count(case):
    doc = load(case)
    for m in mutations(doc):
        md = m.apply(doc)
        assert check_document(md, iterations=2).safe == check_document(md, iterations=4).safe, m


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_the_suggested_fix_undoes_a_loosened_wait(case, strict):
    doc = load(case)
    model = _strict(doc) if strict else None
    for m in mutations(doc):
        if m.category != LW:
            continue
        bad = m.apply(doc)
        v = check_document(bad, model=model)
        if v.safe:
            continue
        fix = v.first.fix
        original = doc[m.phase][m.index]["op"]["wait_value"]
        assert (fix.action, fix.phase, fix.index, fix.value) == ("lower_wait", m.phase, m.index, original)
        assert check_document(apply_fix(bad, fix), model=model).safe


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_every_flagged_mutation_has_an_actionable_fix(case):
    _, results = _verdicts(case)
    for m, v in results:
        for x in v.violations:
            assert x.fix is not None and x.fix.text, (m, x)
            if x.kind in (HazardKind.LDS_RAW, HazardKind.LDS_WAR):
                assert x.other is not None and x.fix.action in ("lower_wait", "insert_wait",
                                                                "insert_barrier")


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_strict_model_flags_the_in_order_lds_mutations_too(case):
    """Without the assumption the flagged set is the default one plus STRICT_ONLY."""
    doc = load(case)
    flagged = {}
    for m in mutations(doc):
        md = m.apply(doc)
        v = check_document(md, model=_strict(md))
        if not v.safe:
            flagged[(m.category, m.phase, m.index)] = v.first.kind.value
    assert flagged == {**EXPECTED[case], **STRICT_ONLY[case]}


def _strict_only_cases():
    for case in sorted(STRICT_ONLY):
        doc = load(case)
        for m in mutations(doc):
            if (m.category, m.phase, m.index) in STRICT_ONLY[case]:
                yield pytest.param(case, m, id=f"{case}:{m.category}:{m.phase}[{m.index}]")


@pytest.mark.parametrize("case,mutation", list(_strict_only_cases()))
def test_oracle_needs_in_order_lds_for_the_strict_only_mutations(case, mutation):
    """The oracle finds a failing timing for each STRICT_ONLY mutation when LDS accesses may
    be overtaken by a later load's data, and none when the LDS services them in order."""
    md = mutation.apply(load(case))
    assert find_witness(md, iterations=2, trials=300, seed=7, lds_in_order=False) is not None
    assert find_witness(md, iterations=2, trials=100, seed=7) is None


def _oracle_cases():
    for case in sorted(EXPECTED):
        doc = load(case)
        for m in mutations(doc):
            yield pytest.param(case, m, id=f"{case}:{m.category}:{m.phase}[{m.index}]")


@pytest.mark.parametrize("case,mutation", list(_oracle_cases()))
def test_oracle_agrees(case, mutation):
    """Flagged <=> the brute-force oracle finds a concrete failing timing."""
    md = mutation.apply(load(case))
    safe = check_document(md, iterations=2).safe
    trials = 12 if safe else 300
    witness = find_witness(md, iterations=2, trials=trials, seed=7)
    assert (witness is None) == safe, witness
