"""The aligned-barrier rule: staggered warp groups may not meet at an aligned barrier kind.

An aligned barrier (NVIDIA ``bar.sync`` / ``__syncthreads``) needs every warp of the CTA at the
same barrier instruction; the ping-pong stagger puts warp group 1 one barrier behind group 0, so
the groups meet at different instructions.  The checker refuses such a program by name, whatever
barrier kind the target lists first, and accepts the same program with a non-aligned kind.
"""
from __future__ import annotations

import json

import attrs
import pytest

from pipeline_core.check.checker import check_document
from pipeline_core.check.counters import counter_model
from pipeline_core.check.program import DocumentError
from pipeline_core.ops import FrameworkTag
from pipeline_core.sync import BarrierKind
from pipeline_core.sync.resolve import sync_for_target
from pipeline_core.testing import run_cli

ALIGNED_TAG = 160  #: a second barrier kind of the test model, aligned


@pytest.fixture(scope="module")
def pingpong_doc():
    return json.loads(run_cli(["compile", "pingpong", "--format", "json"]).stdout)


def _sync(*, aligned_first: bool):
    amd = sync_for_target("mi355x")
    plain = amd.barriers[0]
    aligned = BarrierKind(tag=ALIGNED_TAG, name="bar.sync", aligned=True)
    kinds = (aligned, plain) if aligned_first else (plain, aligned)
    return attrs.evolve(amd, barriers=kinds)


def _with_aligned_barriers(doc):
    out = json.loads(json.dumps(doc))
    for phase in ("prologue", "kernel", "epilogue"):
        for e in out[phase]:
            if e["op"]["tag"] == int(FrameworkTag.BARRIER):
                e["op"]["tag"] = ALIGNED_TAG
    return out


def test_a_staggered_program_with_aligned_barrier_entries_is_refused(pingpong_doc):
    doc = _with_aligned_barriers(pingpong_doc)
    model = counter_model(_sync(aligned_first=False), doc)
    with pytest.raises(DocumentError, match=r"prologue\[5\]: bar.sync is an aligned barrier .*"
                                            r"warp_stagger_index 4 staggers 2 warp groups"):
        check_document(doc, model=model)


def test_the_stagger_barriers_of_an_aligned_first_kind_are_refused_too(pingpong_doc):
    model = counter_model(_sync(aligned_first=True), pingpong_doc)
    with pytest.raises(DocumentError, match="warp_stagger_index: bar.sync is an aligned barrier"):
        check_document(pingpong_doc, model=model)


def test_every_declared_barrier_kind_is_a_rendezvous_and_non_aligned_ones_pass(pingpong_doc):
    model = counter_model(_sync(aligned_first=False), pingpong_doc)
    assert model.is_rendezvous(ALIGNED_TAG) and model.aligned_barrier(ALIGNED_TAG) == "bar.sync"
    assert model.aligned_barrier(int(FrameworkTag.BARRIER)) is None
    assert check_document(pingpong_doc, model=model).safe


def test_an_unstaggered_program_may_use_the_aligned_kind(pingpong_doc):
    doc = _with_aligned_barriers(pingpong_doc)
    doc["config"]["warp_stagger"]["enabled"] = False  # as the compiler writes an unstaggered one:
    doc["warp_stagger_index"] = len(doc["prologue"]) + 1  # past the prologue, one group
    doc["execution"]["groups"] = 1
    model = counter_model(_sync(aligned_first=True), doc)
    assert check_document(doc, model=model).groups == 1
