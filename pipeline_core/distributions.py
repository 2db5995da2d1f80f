"""The installed plugin distributions, read from package metadata alone.

Its own module, importing nothing of the core, so that ``pipeline-core --version`` answers
from metadata without importing a plugin (or the core the plugins import): a version listing
is then fast (issue 39: at most 0.3 s of import time) and never fails on a broken plugin;
``pipeline-core plugins`` imports them and reports each one's status.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

#: The entry-point group a plugin distribution registers its plugin module under.
GROUP = "pipeline_core"


def installed_entry_points() -> list[tuple[str, str, str, EntryPoint]]:
    """(entry-point name, distribution, version, entry point) of every installed plugin, sorted
    by name then distribution (the order the plugin host loads them in)."""
    if sys.version_info >= (3, 10):
        from importlib.metadata import entry_points
    else:  # pragma: no cover
        from importlib_metadata import entry_points
    found = []
    for ep in entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        dist_name = dist.metadata["Name"] if dist is not None else "?"
        version = dist.version if dist is not None else "?"
        found.append((ep.name, dist_name, version, ep))
    return sorted(found, key=lambda t: (t[0], t[1]))


def version_lines(core_version: str) -> list[str]:
    """``pipeline-core --version``: the core's version, then each plugin distribution's once."""
    lines, seen = [f"pipeline-core {core_version}"], set()
    for _, dist, version, _ep in installed_entry_points():
        if dist not in seen:
            seen.add(dist)
            lines.append(f"  {dist} {version}")
    return lines
