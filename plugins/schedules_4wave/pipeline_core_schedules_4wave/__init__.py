"""pipeline-core plugin: the AMD 4-wave matmul schedule with cross-stage rotation (``4wave``)."""
from __future__ import annotations

from pipeline_core.plugin_api import installed_version

from pipeline_core_schedules_4wave.body import FOUR_WAVE_MINI_ITERS, MiniIteration, logical_body
from pipeline_core_schedules_4wave.schedule import (FourWaveSchedule, bootstrap_frags,
                                                    builder_default_schedule_config,
                                                    four_wave_edges, four_wave_explicit_blocks,
                                                    launch_schedule_config, make_four_wave)

__version__ = installed_version("pipeline-core-schedules-4wave")  # pyproject.toml is the one source
__all__ = ["FOUR_WAVE_MINI_ITERS", "FourWaveSchedule", "MiniIteration", "bootstrap_frags",
           "builder_default_schedule_config", "four_wave_edges", "four_wave_explicit_blocks",
           "launch_schedule_config", "logical_body", "make_four_wave"]
