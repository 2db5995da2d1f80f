"""pipeline-core hook implementations of the gemv family (entry point ``family_gemv``)."""
from __future__ import annotations

from pipeline_core.plugin_api import hookimpl

from pipeline_core_family_gemv.schedule import RECORD


@hookimpl
def pipeline_core_register_schedules():
    return [RECORD]


@hookimpl
def pipeline_core_register_emitters():
    from pipeline_core_family_gemv.emit import EMITTERS

    return list(EMITTERS)
