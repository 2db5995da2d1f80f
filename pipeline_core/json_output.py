"""What every JSON document pipeline-core prints carries: a format version, its generator, a schema.

A reader checks ``format_version`` before it trusts a key, and ``generator`` says which
core and which plugin distributions produced the document (two documents that differ
although their command lines agree usually differ there).  The JSON Schemas (draft
2020-12) ship as package data under ``pipeline_core/schemas/``; docs/document-format.md
describes the schedule document they formalise.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from pipeline_core.plugins import PluginHost

#: Version of every JSON document the command line prints.  It changes only when a key
#: changes meaning or disappears; new keys may appear within a version (readers ignore
#: keys they do not know).
FORMAT_VERSION = 1
GENERATOR_NAME = "pipeline-core"

#: The shipped schema of each document kind, by file name under ``pipeline_core/schemas``.
SCHEMAS: Mapping[str, str] = {
    "schedule": "schedule-document.schema.json",
    "verdict": "check-verdict.schema.json",
    "analyze": "analyze-report.schema.json",
    "listing": "listing.schema.json",
}


def generator(host: "PluginHost | None") -> dict[str, Any]:
    """``{"name", "version", "plugins": {distribution: version}}`` for the plugins that ran.

    Only plugins that loaded count (failed and disabled ones produced nothing); a module
    loaded with ``--plugin`` or registered in-process is keyed by its module name.
    Sorted by key, so the document is the same whatever the install order.  ``None``
    means the installed plugins (the default host).
    """
    from pipeline_core import __version__
    from pipeline_core.plugin_guard import DEVELOPMENT, IN_PROCESS

    if host is None:
        from pipeline_core.plugins import default_host
        host = default_host()
    plugins: dict[str, str] = {}
    for info in host.plugins:
        if info.name == "core" or info.failed or info.status == "disabled":
            continue
        if info.distribution in (DEVELOPMENT, IN_PROCESS):
            plugins[info.module] = info.distribution
        else:
            plugins[info.distribution] = info.version
    return {"name": GENERATOR_NAME, "version": __version__,
            "plugins": dict(sorted(plugins.items()))}


def stamped(document: Mapping[str, Any], host: "PluginHost | None") -> dict[str, Any]:
    """``document`` with ``format_version`` and ``generator`` first (replacing any it had)."""
    rest = {k: v for k, v in document.items() if k not in ("format_version", "generator")}
    return {"format_version": FORMAT_VERSION, "generator": generator(host), **rest}


def dumps(document: Mapping[str, Any], host: "PluginHost | None") -> str:
    """The stamped document as the command line prints it (indented, one trailing newline)."""
    return json.dumps(stamped(document, host), indent=2) + "\n"


def load_schema(kind: str) -> dict[str, Any]:
    """The shipped JSON Schema of ``kind`` (a key of :data:`SCHEMAS`)."""
    from importlib.resources import files

    text = files("pipeline_core").joinpath("schemas").joinpath(SCHEMAS[kind]).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def reference_schema() -> dict[str, Any]:
    """The schedule document's content contract without our provenance keys.

    The reference implementation's documents (the goldens) agree with ours on every
    content key but have no ``format_version`` and a free-text ``generator``: they are
    validated against ``$defs/document`` of the schedule schema, which this returns as a
    schema of its own.  What we print must also pass the full schema, which requires both.
    """
    full = load_schema("schedule")
    return {"$schema": full["$schema"], "$defs": full["$defs"], "$ref": "#/$defs/document"}
