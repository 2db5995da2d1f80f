"""Schedules that are not the reference's own get derived waits and barriers
(pipeline_core/sync/settle.py); the reference's keep their formulas."""
from __future__ import annotations

import pytest

from pipeline_core.api import build_named, compile_named, compile_schedule
from pipeline_core.document import to_document
from pipeline_core.errors import ConfigError
from pipeline_core.proof import UnsafeScheduleError, prove
from pipeline_core.sync.settle import settle


class _Declares:
    """A schedule that answers ``wait_source()`` itself and delegates everything else."""

    def __init__(self, schedule, source):
        self._schedule = schedule
        self._source = source

    def __getattr__(self, name):
        return getattr(self._schedule, name)

    def wait_source(self):
        return self._source


def _grid(m, n):
    return build_named("matmul-grid", params={"m": str(m), "n": str(n)})[0]


def test_a_grid_the_formulas_race_on_compiles_proven_safe_with_derived_waits():
    with pytest.raises(UnsafeScheduleError, match="UNSAFE under 2 warp groups x 4 warps"):
        compile_schedule(_Declares(_grid(2, 3), "reference"))
    compiled = compile_named("matmul-grid", params={"m": "2", "n": "3"})
    assert compiled.proof.safe and compiled.hazards == []


def test_safe_formulas_are_kept_as_they_are():
    derived = compile_schedule(_Declares(_grid(2, 2), "derived"))
    formula = compile_schedule(_Declares(_grid(2, 2), "reference"))
    assert to_document(derived) == to_document(formula)


def _misplaced(blocks):
    """Loads placed across a fragment read of their region (module doc of redistribute)."""
    first, last = {}, {}
    for i, blk in enumerate(blocks):
        for op in (blk.pre_op_0, blk.pre_op_1):
            if op.is_present:
                first.setdefault((op.channel, op.stage, op.subtile), i)
                last[(op.channel, op.stage, op.subtile)] = i
    bad = []
    for i, blk in enumerate(blocks):
        for op in (blk.global_load, blk.global_load_1):
            if not op.is_present:
                continue
            region = (op.channel, op.stage, op.subtile)
            if op.is_prefetch and last.get(region, -1) > i:  # overwrites a tile still to be read
                bad.append((i, op))
            if not op.is_prefetch and i >= first.get(region, len(blocks)):  # brings it too late
                bad.append((i, op))
    return bad


@pytest.mark.parametrize("m,n", [(2, 3), (2, 4), (3, 3), (3, 4), (3, 5)])
def test_redistributed_loads_keep_their_place_relative_to_the_reads_of_their_region(m, n):
    assert _misplaced(compile_named("matmul-grid",
                                    params={"m": str(m), "n": str(n)}).plan.details.program.blocks) == []
    reference = compile_schedule(_Declares(_grid(m, n), "reference"), allow_unsafe=True)
    assert _misplaced(reference.plan.details.program.blocks)  # the reference's FIFO refill crosses one


def test_settle_adds_the_waits_and_barriers_a_racing_configuration_lacks():
    raced = compile_named("pingpong", config_overrides={"minimal_barriers": "true"},
                          allow_unsafe=True)
    assert not raced.proof.safe
    settled = settle(raced, raced.target_profile.sync, prove=prove)
    assert prove(settled).safe
    barrier = raced.target_profile.sync.barrier.tag
    count = lambda c: sum(1 for e in c.kernel if e.op.tag == barrier)  # noqa: E731
    assert count(settled) > count(raced)


def test_the_reference_schedules_keep_their_formulas():
    with pytest.raises(UnsafeScheduleError, match="-c minimal_barriers=true"):
        compile_named("pingpong", config_overrides={"minimal_barriers": "true"})


def test_a_wait_source_outside_the_two_values_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"wait_source\(\)"):
        compile_schedule(_Declares(_grid(2, 2), "formula"))


@pytest.mark.parametrize("knob", ["partial_prologue_drain", "minimal_barriers",
                                  "barrier_before_pre_ops"])
def test_a_knob_that_races_on_the_reference_is_repaired_on_a_derived_schedule(knob):
    # partial_prologue_drain needs waits before the execution model's own barriers (the
    # stagger barrier and the one after the prologue): settle places them in the prologue
    with pytest.raises(UnsafeScheduleError, match=f"-c {knob}=true"):
        compile_named("pingpong", config_overrides={knob: "true"})
    compiled = compile_named("matmul-grid", params={"m": "2", "n": "3"},
                             config_overrides={knob: "true"})
    assert compiled.proof.safe


def test_a_knob_whose_race_no_wait_repairs_is_still_refused_naming_it():
    # global_before_frag emits a block's loads before its reads: on 2 x 3 a load then
    # overwrites a tile its block still reads, which no wait or barrier can order
    with pytest.raises(UnsafeScheduleError, match="-c global_before_frag=true") as exc:
        compile_named("matmul-grid", params={"m": "2", "n": "3"},
                      config_overrides={"global_before_frag": "true"})
    assert "WRONG_K_STEP" in str(exc.value)
