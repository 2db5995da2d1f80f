"""pipeline-core plugin: the AMD 8-warp ping-pong matmul schedule (``pingpong``)."""
from __future__ import annotations

from pipeline_core_schedules_pingpong.body import logical_body, logical_half
from pipeline_core_schedules_pingpong.schedule import (PingPongSchedule, default_schedule_config,
                                                       make_pingpong)

__version__ = "0.1.0"
__all__ = ["PingPongSchedule", "default_schedule_config", "logical_body", "logical_half",
           "make_pingpong"]
