"""The pluggy project name and its two markers: ``@hookspec`` for the contract, ``@hookimpl``
for an implementation.

Why a module of their own: the core's own plugin (``builtin_plugin``) and every third-party
plugin mark functions with ``hookimpl`` without needing the hook contract
(``pipeline_core.hookspecs``), which names the records the plugin host exchanges; importing
the marker from here keeps the core plugin below the host that loads it.
"""
from __future__ import annotations

import pluggy

PROJECT = "pipeline_core"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
