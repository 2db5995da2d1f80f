"""Lowerings: how an ordered loop body becomes prologue / kernel / epilogue entries.

Two live in the core: the reference's block program (``pipeline_core.program`` with
``phases``; the AMD schedules use it) and :mod:`pipeline_core.lowering.generic`, an
N-stage ring whose waits come from :mod:`pipeline_core.sync.derive`.  A schedule
picks one with a ``lowering()`` method (``"generic"``; default: the block program).
"""
from __future__ import annotations

from pipeline_core.lowering.generic import GENERIC, GenericLowering, lower_generic

__all__ = ["GENERIC", "GenericLowering", "lower_generic"]
