"""Cached framework ops for the program layer.

``Op`` validates every field on construction (~5 µs); the block templates emit
the same handful of infrastructure ops hundreds of times per compile, so they
are built once here. Ops are frozen, so sharing them is safe.
"""
from __future__ import annotations

from functools import lru_cache

from pipeline_core.ops import (NONE_OP, Op, barrier, schedule_barrier, set_prio, wait_lgkm,
                               wait_vm)

BARRIER: Op = barrier()
SCHED_BARRIER: Op = schedule_barrier()
LGKM_0: Op = wait_lgkm(0)
VM_0: Op = wait_vm(0)
PRIO_1: Op = set_prio(1)
PRIO_0: Op = set_prio(0)
NONE: Op = NONE_OP


@lru_cache(maxsize=256)
def lgkm(count: int) -> Op:
    """wait_lgkm(count), shared."""
    return wait_lgkm(count)


@lru_cache(maxsize=256)
def vm(count: int) -> Op:
    """wait_vm(count), shared."""
    return wait_vm(count)
