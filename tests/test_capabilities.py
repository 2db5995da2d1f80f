"""Capability contracts (pipeline_core/capabilities.py, issue 39): a schedule or an emitter
fits every target whose offer covers its contract; names and families narrow it."""
from __future__ import annotations

import pytest

from pipeline_core.capabilities import Capabilities
from pipeline_core.emitters import EmitterRecord
from pipeline_core.errors import ConfigError
from pipeline_core.schedule import ScheduleRecord, TargetRecord

RING = Capabilities(channels="cp_async", instructions=("mma.sync", "ldmatrix"), copies="cp.async")
HOPPER = Capabilities(channels=("cp_async", "mbarrier"), instructions=("mma.sync", "ldmatrix",
                                                                        "wgmma"),
                      copies=("cp.async", "cp.async.bulk.tensor"))


def _target(name: str, offers: Capabilities | None = None, family: str = "") -> TargetRecord:
    return TargetRecord(name, "t", lambda: None, family=family, offers=offers)


def test_missing_names_each_capability_by_kind_in_order():
    needs = Capabilities(channels="mbarrier", instructions="wgmma", copies="cp.async.bulk.tensor")
    assert needs.missing(RING) == ["sync channel mbarrier", "instruction wgmma",
                                   "copy kind cp.async.bulk.tensor"]
    assert needs.missing(HOPPER) == [] and needs.covered_by(HOPPER)
    assert RING.covered_by(HOPPER) and not HOPPER.covered_by(RING)
    assert RING.missing(None) == ["sync channel cp_async", "instruction ldmatrix",
                                  "instruction mma.sync", "copy kind cp.async"]
    assert Capabilities().covered_by(None)


def test_words_and_json():
    assert RING.words() == ("sync channel cp_async, instructions ldmatrix, mma.sync, "
                            "copy kind cp.async")
    assert Capabilities().words() == "nothing"
    assert RING.as_dict() == {"channels": ["cp_async"], "instructions": ["ldmatrix", "mma.sync"],
                              "copies": ["cp.async"]}


def test_a_blank_name_is_refused():
    with pytest.raises(ConfigError):
        Capabilities(instructions=(" mma.sync",))
    with pytest.raises(ConfigError):
        TargetRecord("t", "d", lambda: None, offers="mma.sync")  # not a Capabilities record


def test_a_contract_fits_every_target_that_offers_it():
    record = ScheduleRecord("mine", "d", lambda ctx: None, requires=RING)
    assert record.declares_targets
    assert record.fits(_target("a", RING)) and record.fits(_target("b", HOPPER))
    assert not record.fits(_target("c")) and record.lacks(_target("c"))[0] == "sync channel cp_async"
    assert record.made_for() == ("targets offering sync channel cp_async, instructions ldmatrix, "
                                 "mma.sync, copy kind cp.async")


def test_names_and_families_narrow_a_contract():
    """A schedule that still names its targets keeps working: the names narrow the contract."""
    named = ScheduleRecord("mine", "d", lambda ctx: None, targets=("a",), requires=RING)
    assert named.fits(_target("a", RING)) and not named.fits(_target("b", RING))
    assert not named.fits(_target("a"))  # named, but lacking the contract
    family = ScheduleRecord("mine", "d", lambda ctx: None, families=("ring",), requires=RING)
    assert family.fits(_target("b", RING, family="ring"))
    assert not family.fits(_target("b", RING)) and not family.fits(_target("c", family="ring"))
    assert family.made_for() == ("target family ring offering sync channel cp_async, "
                                 "instructions ldmatrix, mma.sync, copy kind cp.async")


def test_an_emitter_serves_a_capability_and_names_narrow_it():
    emit = EmitterRecord("e", "d", (), lambda c: "", requires=RING)
    assert emit.serves(_target("a", RING)) and emit.serves(_target("b", HOPPER))
    assert not emit.serves(_target("c"))
    assert emit.serves_words() == ("targets offering sync channel cp_async, instructions "
                                   "ldmatrix, mma.sync, copy kind cp.async")
    named = EmitterRecord("e", "d", ("a",), lambda c: "")
    assert named.serves(_target("a")) and not named.serves(_target("b", RING))
    assert EmitterRecord("e", "d", (), lambda c: "").serves(_target("any"))
