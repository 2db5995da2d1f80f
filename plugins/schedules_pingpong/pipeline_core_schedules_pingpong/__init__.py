"""pipeline-core plugin: the AMD 8-warp ping-pong matmul schedule (``pingpong``)."""
from __future__ import annotations

from pipeline_core.plugin_api import installed_version

from pipeline_core_schedules_pingpong.body import logical_body, logical_half
from pipeline_core_schedules_pingpong.schedule import (PingPongSchedule, default_schedule_config,
                                                       make_pingpong)

__version__ = installed_version("pipeline-core-schedules-pingpong")  # pyproject.toml is the one source
__all__ = ["PingPongSchedule", "default_schedule_config", "logical_body", "logical_half",
           "make_pingpong"]
