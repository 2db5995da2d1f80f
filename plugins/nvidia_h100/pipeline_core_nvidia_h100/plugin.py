"""pipeline-core hook implementations of the H100 plugin (entry point ``nvidia_h100``)."""
from __future__ import annotations

from pipeline_core.plugin_api import hookimpl

from pipeline_core_nvidia_h100.multistage import SCHEDULES
from pipeline_core_nvidia_h100.pingpong import TARGETS as PINGPONG_TARGETS
from pipeline_core_nvidia_h100.warpspecialized import SCHEDULES as WS_SCHEDULES
from pipeline_core_nvidia_h100.targets import TARGETS


@hookimpl
def pipeline_core_register_targets():
    return [*TARGETS, *PINGPONG_TARGETS]


@hookimpl
def pipeline_core_register_schedules():
    return [*SCHEDULES, *WS_SCHEDULES]


@hookimpl
def pipeline_core_register_emitters():
    from pipeline_core_nvidia_h100.emit_cuda import EMITTERS
    from pipeline_core_nvidia_h100.emit_pingpong import EMITTERS as PINGPONG_EMITTERS
    from pipeline_core_nvidia_h100.emit_wgmma import EMITTERS as WGMMA_EMITTERS

    return [*EMITTERS, *PINGPONG_EMITTERS, *WGMMA_EMITTERS]
