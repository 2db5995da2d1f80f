"""Property: on random combinations of mutations the checker and the oracle agree."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline_core.check import check_document
from pipeline_core.check.mutate import mutations

from .helpers import load
from .oracle import find_witness

CASE = "fourwave_fp8_bm64"
DOC = load(CASE)
MUTATIONS = [m for m in mutations(DOC) if m.phase == "kernel" and m.category != "remove_barrier"]


def _apply_all(picks):
    doc = DOC
    for m in sorted(picks, key=lambda m: (m.category != "loosen_wait", -m.index)):
        doc = m.apply(doc)  # swaps last and in decreasing position: indices stay valid
    return doc


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sets(st.sampled_from(MUTATIONS), min_size=1, max_size=3))
def test_checker_and_oracle_agree_on_combined_mutations(picks):
    # overlapping swaps would move the same entry twice; keep disjoint ones
    spans = sorted((m.index, m.index + (m.category != "loosen_wait")) for m in picks)
    if any(a[1] >= b[0] for a, b in zip(spans, spans[1:])):
        return
    doc = _apply_all(picks)
    safe = check_document(doc, iterations=2).safe
    witness = find_witness(doc, iterations=2, trials=12 if safe else 400, seed=11)
    assert (witness is None) == safe, (sorted(m.description for m in picks), witness)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(0, 3), st.integers(0, 3))
def test_loosening_is_monotone(a, b):
    """Safety can only be lost by loosening waits further."""
    waits = [i for i, e in enumerate(DOC["kernel"]) if e["op"]["tag"] in (129, 130)]
    doc = load(CASE)
    safe_before = check_document(doc).safe
    for i in waits[:4]:
        doc["kernel"][i]["op"]["wait_value"] += a
    mid = check_document(doc).safe
    for i in waits[4:8]:
        doc["kernel"][i]["op"]["wait_value"] += b
    after = check_document(doc).safe
    assert safe_before >= mid >= after
