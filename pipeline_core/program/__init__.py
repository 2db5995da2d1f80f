"""The double-buffer block program: construction, redistribution, waits, verification.

Split as the reference's design notes wished: ``block`` (one block and its
emitters), ``program`` (blocks -> entries), ``construct`` (ordered body ->
blocks), ``redistribute`` (global-load cap), ``waits`` (derived waits and
drains), ``verify`` (structural checks), ``build`` (the whole pipeline) and
``kernel_deps`` (kernel-entry dependencies).
"""
from __future__ import annotations

from pipeline_core.program.block import (FLAG_NAMES, SLOT_NAMES, BlockSpec,
                                         emit_minimal_barrier_block)
from pipeline_core.program.build import KernelProgram, build_kernel_program
from pipeline_core.program.construct import construct_blocks, main_wait_vm
from pipeline_core.program.kernel_deps import kernel_deps_double_buffer
from pipeline_core.program.program import Program
from pipeline_core.program.redistribute import redistribute_globals
from pipeline_core.program.verify import RULES, check_program, verify_program
from pipeline_core.program.waits import (apply_auto_drain, apply_auto_waits, derive_drain_mask,
                                         derive_waits)

__all__ = [
    "BlockSpec", "FLAG_NAMES", "SLOT_NAMES", "emit_minimal_barrier_block",
    "Program",
    "construct_blocks", "main_wait_vm",
    "redistribute_globals",
    "derive_waits", "derive_drain_mask", "apply_auto_drain", "apply_auto_waits",
    "RULES", "check_program", "verify_program",
    "KernelProgram", "build_kernel_program",
    "kernel_deps_double_buffer",
]
