"""pipeline-core hook implementations of the 4-wave plugin (entry point ``schedules_4wave``).

The override hooks answer only for :class:`FourWaveSchedule` (``None`` otherwise),
so they never interfere with other schedules.
"""
from __future__ import annotations

from pipeline_core.plugin_api import hookimpl

from pipeline_core_schedules_4wave.schedule import (RECORD, FourWaveSchedule, bootstrap_frags,
                                                    four_wave_edges, four_wave_explicit_blocks)


@hookimpl
def pipeline_core_register_schedules():
    return [RECORD]


@hookimpl
def pipeline_core_derive_edges(schedule, body, config):
    if not isinstance(schedule, FourWaveSchedule):
        return None
    return four_wave_edges(body, config)


@hookimpl
def pipeline_core_explicit_blocks(schedule, body, program):
    if not isinstance(schedule, FourWaveSchedule):
        return None
    return four_wave_explicit_blocks(program)


@hookimpl
def pipeline_core_bootstrap_frags(schedule):
    if not isinstance(schedule, FourWaveSchedule):
        return None
    return bootstrap_frags()
