"""The target records this plugin registers: ``mi355x`` and ``mi355x-single-buffer``."""
from __future__ import annotations

from pipeline_core.plugin_api import GLOBAL_LOAD_TICKS, Bound, Param, TargetRecord

from pipeline_core_amd_mi355x.configs import (DEFAULT_MAX_GLOBALS, DEFAULT_VM_PER_LOAD,
                                              mi355x_single_buffer_target, mi355x_target)

DOUBLE_BUFFER = "mi355x"
SINGLE_BUFFER = "mi355x-single-buffer"
#: Every target name that means "this GPU" (the hint transform applies on these).
TARGET_NAMES: frozenset[str] = frozenset({DOUBLE_BUFFER, SINGLE_BUFFER})


def _double_buffer_factory(vm_per_load_a: int = DEFAULT_VM_PER_LOAD,
                           vm_per_load_b: int = DEFAULT_VM_PER_LOAD,
                           max_globals: int = DEFAULT_MAX_GLOBALS):
    return mi355x_target(vm_per_load_a, vm_per_load_b, max_globals)


TARGETS: tuple[TargetRecord, ...] = (
    TargetRecord(
        name=DOUBLE_BUFFER,
        description="AMD MI355X (CDNA4), double-buffered LDS, 2 partitions of a 2x2 MMA quadrant grid",
        factory=_double_buffer_factory,
        params=(
            Param("vm_per_load_a", int, DEFAULT_VM_PER_LOAD, "vmcnt ticks per channel-A global load",
                  bound=GLOBAL_LOAD_TICKS),
            Param("vm_per_load_b", int, DEFAULT_VM_PER_LOAD, "vmcnt ticks per channel-B global load",
                  bound=GLOBAL_LOAD_TICKS),
            Param("max_globals", int, DEFAULT_MAX_GLOBALS,
                  "global loads per MMA block (0 = no cap, at most 2)", bound=Bound(low=0, high=2)),
        ),
    ),
    TargetRecord(
        name=SINGLE_BUFFER,
        description="AMD MI355X (CDNA4), single LDS buffer, loop-carried fragment 0",
        factory=mi355x_single_buffer_target,
    ),
)
