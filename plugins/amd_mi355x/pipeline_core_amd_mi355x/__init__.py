"""pipeline-core plugin for AMD MI355X: cost models, pipeline configs, targets, AMD
schedule-group-barrier hints, tile geometry helpers and the single-buffer default matmul.

Schedule plugins for this GPU (ping-pong, 4-wave) import the helpers from here.
"""
from __future__ import annotations

from pipeline_core.plugin_api import installed_version

from pipeline_core_amd_mi355x.configs import (mi355x_double_buffer, mi355x_single_buffer,
                                              mi355x_single_buffer_target, mi355x_target)
from pipeline_core_amd_mi355x.cost_models import mi355x_cost_model, mi355x_single_buffer_cost_model
from pipeline_core_amd_mi355x.geometry import (DTYPES, FOUR_WAVE_LAYOUT, PINGPONG_LAYOUT,
                                               KernelGeometry, LaunchDefaults, TileShape, WarpLayout,
                                               four_wave_launch_defaults, pingpong_launch_defaults,
                                               tile_launch_defaults)
from pipeline_core_amd_mi355x.geometry import derive_safe_max_globals
from pipeline_core_amd_mi355x.hints import AMDScheduleHints, append_amd_hints, hint_ops
from pipeline_core_amd_mi355x.tags import (CHANNEL_A, CHANNEL_B, DOUBLE_BUFFER_TAG_NAMES,
                                           SINGLE_BUFFER_TAG_NAMES, DoubleBufferTag,
                                           SingleBufferTag)
from pipeline_core_amd_mi355x.targets import DOUBLE_BUFFER, SINGLE_BUFFER

__version__ = installed_version("pipeline-core-amd-mi355x")  # pyproject.toml is the one source

__all__ = [
    "AMDScheduleHints", "CHANNEL_A", "CHANNEL_B", "DOUBLE_BUFFER", "DOUBLE_BUFFER_TAG_NAMES",
    "DTYPES", "DoubleBufferTag", "FOUR_WAVE_LAYOUT", "KernelGeometry", "LaunchDefaults", "PINGPONG_LAYOUT",
    "SINGLE_BUFFER", "SINGLE_BUFFER_TAG_NAMES", "SingleBufferTag", "TileShape", "WarpLayout",
    "append_amd_hints", "derive_safe_max_globals", "four_wave_launch_defaults", "hint_ops", "mi355x_cost_model",
    "mi355x_double_buffer", "mi355x_single_buffer", "mi355x_single_buffer_cost_model",
    "mi355x_single_buffer_target", "mi355x_target", "pingpong_launch_defaults",
    "tile_launch_defaults",
]
