"""pipeline-core plugin: the ping-pong double-buffer matmul with an m x n MMA grid (``matmul-grid``)."""
from __future__ import annotations

from pipeline_core.plugin_api import installed_version

from pipeline_core_schedules_matmul_grid.body import logical_body, logical_partition, ops_per_partition
from pipeline_core_schedules_matmul_grid.schedule import (MatmulGridSchedule, default_schedule_config,
                                                          make_matmul_grid)

__version__ = installed_version("pipeline-core-schedules-matmul-grid")  # pyproject.toml is the one source
__all__ = ["MatmulGridSchedule", "default_schedule_config", "logical_body", "logical_partition",
           "make_matmul_grid", "ops_per_partition"]
