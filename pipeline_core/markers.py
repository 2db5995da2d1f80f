"""The pluggy project name and its two markers: ``@hookspec`` for the contract, ``@hookimpl``
for an implementation.

Why a module of their own: the core's own plugin (``builtin_plugin``) and every third-party
plugin mark functions with ``hookimpl`` without needing the hook contract
(``pipeline_core.hookspecs``), which names the records the plugin host exchanges; importing
the marker from here keeps the core plugin below the host that loads it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pluggy

PROJECT = "pipeline_core"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


def record_hooks(schedules: Callable[[], Sequence[Any]],
                 emitters: Callable[[], Sequence[Any]]) -> tuple[Callable[[], list[Any]], ...]:
    """A kernel family's two registration hooks, ``pipeline_core_register_schedules`` and
    ``pipeline_core_register_emitters``, from what each returns (called when the host asks,
    so a family may import its emitters then), for its plugin module to bind under those
    names::

        pipeline_core_register_schedules, pipeline_core_register_emitters = record_hooks(
            lambda: [RECORD], lambda: EMITTERS)

    Every family's plugin module would otherwise write the same two functions."""
    @hookimpl
    def pipeline_core_register_schedules() -> list[Any]:
        return list(schedules())

    @hookimpl
    def pipeline_core_register_emitters() -> list[Any]:
        return list(emitters())

    return pipeline_core_register_schedules, pipeline_core_register_emitters
