"""pipeline-core hook implementations of the matmul-grid plugin (entry point ``schedules_matmul_grid``)."""
from __future__ import annotations

from pipeline_core.plugin_api import hookimpl

from pipeline_core_schedules_matmul_grid.schedule import RECORD


@hookimpl
def pipeline_core_register_schedules():
    return [RECORD]
