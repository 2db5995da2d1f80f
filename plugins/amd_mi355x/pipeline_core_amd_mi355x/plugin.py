"""pipeline-core hook implementations of the MI355X plugin (entry point ``amd_mi355x``)."""
from __future__ import annotations

from pipeline_core.plugin_api import KernelTransform, hookimpl

from pipeline_core_amd_mi355x.default_matmul import RECORD as DEFAULT_MATMUL
from pipeline_core_amd_mi355x.hints import AMDScheduleHints, append_amd_hints
from pipeline_core_amd_mi355x.targets import TARGET_NAMES, TARGETS

HINTS_TRANSFORM = "amd-sched-group-hints"


@hookimpl
def pipeline_core_register_targets():
    return list(TARGETS)


@hookimpl
def pipeline_core_register_schedules():
    return [DEFAULT_MATMUL]


@hookimpl
def pipeline_core_kernel_transforms(schedule, target, config):
    """AMD sched-group-barrier hints for single-buffer schedules that carry ``amd_hints``.

    Any schedule (ours or another plugin's) opts in by exposing an
    :class:`AMDScheduleHints` as ``amd_hints``; the hints only make sense on
    this GPU and on the single-buffer path.
    """
    hints = getattr(schedule, "amd_hints", None)
    if target not in TARGET_NAMES or config.depth != 1 or not isinstance(hints, AMDScheduleHints):
        return None

    def add_hints(kernel, body, cfg):
        return append_amd_hints(kernel, body, cfg, hints)

    return [KernelTransform(HINTS_TRANSFORM, add_hints)]
