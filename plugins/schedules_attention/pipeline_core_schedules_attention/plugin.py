"""pipeline-core hook implementations of the attention plugin (entry point
``schedules_attention``)."""
from __future__ import annotations

from pipeline_core.plugin_api import hookimpl

from pipeline_core_schedules_attention.schedule import RECORD


@hookimpl
def pipeline_core_register_schedules():
    return [RECORD]


@hookimpl
def pipeline_core_register_emitters():
    from pipeline_core_schedules_attention.emit_attention import EMITTERS

    return list(EMITTERS)
