"""The Hopper kit (issue 34): one home for what every warp-specialized family shares, held by
reading the families' sources (the kit's door itself: tests/test_plugin_api_surface.py)."""
from __future__ import annotations

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.plan import Step, StepKind  # noqa: E402


def test_one_module_writes_a_steps_ring_position_and_parity():
    """The ring position / stage / parity formula has one home (``skeleton.RingState``): the
    GEMM and attention emitters each wrote their own, and the two disagreed on a ring's depth
    (issue 34).  Held by reading the warp-specialized emitters' sources."""
    import importlib
    import inspect

    from pipeline_core_nvidia_h100.skeleton import RingState

    emitters = ["pipeline_core_nvidia_h100.emit_wgmma",
                "pipeline_core_schedules_attention.emit_attention"]
    for name in emitters:
        try:
            source = inspect.getsource(importlib.import_module(name))
        except ImportError:
            continue
        assert "(rb + t" not in source and "/ STAGES +" not in source, name
        assert "RingState.of(" in source, name
    once = Step(kind=StepKind.PHASE_WAIT, channel="q_full", once=True)
    lagged = Step(kind=StepKind.PHASE_WAIT, channel="full", lag=1, phase_offset=-1)
    assert RingState.of(once, 2).stage == "(o % 2)"
    assert RingState.of(lagged, "STAGES").parity(-1) == "(((rb + t - 1) / STAGES + (-1)) & 1)"
