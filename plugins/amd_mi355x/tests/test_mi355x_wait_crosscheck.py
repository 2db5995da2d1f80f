"""The generic wait derivation as a cross-check of the reference's wait formulas on MI355X.

The AMD schedules keep the reference's formulas (parity).  ``derive_waits`` runs
over their emitted phases with the MI355X sync model: every emitted wait must be at
least as strict as the loosest value it proves safe.  Where it is not, that is a
finding, pinned here so it stays visible (the hazard checker's ``--tightest`` is the
independent judge of both).
"""
from __future__ import annotations

import pytest

from pipeline_core.api import compile_named
from pipeline_core.ops import Phase
from pipeline_core.sync.derive import derive_for_compiled
from pipeline_core.sync.resolve import sync_for_compiled


def _derive(schedule, params=None, warps=None, reference=True):
    """The derivation over what the reference emits (``allow_unsafe``: no repairs, no refusal)."""
    c = compile_named(schedule, params=params or {}, allow_unsafe=reference)
    return derive_for_compiled(c, sync_for_compiled(c), warps_per_group=warps)


@pytest.mark.parametrize("schedule,params", [
    ("pingpong", {}), ("4wave", {}), ("matmul-grid", {}), ("matmul-grid", {"m": "3", "n": "2"})])
def test_every_emitted_wait_is_at_least_as_strict_as_the_derived_safe_value(schedule, params):
    d = _derive(schedule, params, reference=False)  # what compile emits, at the declared warps
    assert d.looser() == () and d.unmet == ()
    vm = [s for s in d.sites if s.channel == "vm" and s.safe is not None]
    assert vm, "the derivation found the global-load needs"
    # fragment (lgkm) waits cover no need under register interlock + in-order LDS
    assert all(s.safe is None for s in d.sites if s.channel == "lgkm")


def test_where_the_reference_kernel_waits_are_exactly_the_derived_ones():
    d = _derive("pingpong")
    kernel_vm = [(s.emitted, s.safe) for s in d.sites if s.phase == Phase.KERNEL and s.channel == "vm"]
    assert kernel_vm == [(12, 12), (12, 12)]
    fourwave = _derive("4wave", warps=1)  # one warp per group: the reference's own model
    assert fourwave.site(Phase.KERNEL, 61).slack == 2  # wait_vm(8) where 10 would do


def test_findings_at_real_warp_counts():
    # 4-wave at its 4 warps: kernel[49] wait_vm(8) leaves another warp's tile in flight
    # into the epilogue, which no later wait covers before its barrier
    d = _derive("4wave", warps=4)
    assert [(s.phase, s.index, s.emitted, s.safe) for s in d.looser()] == [(Phase.KERNEL, 49, 8, 0)]
    assert {u.consumer[0] for u in d.unmet} == {Phase.EPILOGUE} and len(d.unmet) == 2
    # matmul-grid 2x3: with the reference's formulas kernel[45] wait_vm(12) was looser than
    # 0; matmul-grid is not the reference's, so its waits are settled from this derivation
    # (pipeline_core/sync/settle.py) and nothing is left looser or uncovered
    grid = _derive("matmul-grid", {"m": "2", "n": "3"})
    assert grid.looser() == () and grid.unmet == ()


def test_the_repaired_4wave_epilogue_leaves_no_need_uncovered_at_4_warps():
    # the default 4-wave compile adds WAIT_VM(0), BARRIER before its epilogue
    # (docs/design/amd-waits-and-warps.md): the epilogue needs are covered, and the
    # kernel's wait_vm(8) is no longer relied on past the loop
    d = _derive("4wave", warps=4, reference=False)
    assert d.unmet == () and d.looser() == ()
