"""pipeline-core hook implementations of the ping-pong plugin (entry point ``schedules_pingpong``)."""
from __future__ import annotations

from pipeline_core.plugin_api import hookimpl

from pipeline_core_schedules_pingpong.schedule import RECORD


@hookimpl
def pipeline_core_register_schedules():
    return [RECORD]
