"""The block template's placeholder ops, built once.

The template speaks of *global* waits, *fragment* waits, a barrier, a priority
hint and a scheduling fence.  Its placeholders carry the reference's tags
(128-133, which the reference's documents use); :mod:`pipeline_core.program.binding`
lowers them to the target's channels and hint tags once the phases are built.

``Op`` validates every field on construction (~5 µs); the templates emit the same
handful of placeholders hundreds of times per compile, so they are built once
here.  Ops are frozen, so sharing them is safe.
"""
from __future__ import annotations

from functools import lru_cache

from pipeline_core.ops import NONE_OP, FrameworkTag, Op, OpRole, ResourceKind

#: the template's placeholder tags (the reference's own numbering)
BARRIER_TAG = int(FrameworkTag.BARRIER)
GLOBAL_WAIT_TAG = int(FrameworkTag.WAIT_VM)
FRAGMENT_WAIT_TAG = int(FrameworkTag.WAIT_LGKM)
PRIORITY_TAG = int(FrameworkTag.SET_PRIO)
FENCE_TAG = int(FrameworkTag.SCHEDULE_BARRIER)


def _sync(tag: int, value: int = 0) -> Op:
    return Op(tag=tag, wait_value=value, resource=ResourceKind.SCALAR, role=OpRole.SYNC)


def _hint(tag: int, value: int = 0) -> Op:
    return Op(tag=tag, wait_value=value, resource=ResourceKind.SCALAR, role=OpRole.FENCE)


BARRIER: Op = _sync(BARRIER_TAG)
FENCE: Op = _hint(FENCE_TAG)
FRAGMENT_DRAIN: Op = _sync(FRAGMENT_WAIT_TAG, 0)
GLOBAL_DRAIN: Op = _sync(GLOBAL_WAIT_TAG, 0)
PRIORITY_HIGH: Op = _hint(PRIORITY_TAG, 1)
PRIORITY_LOW: Op = _hint(PRIORITY_TAG, 0)
NONE: Op = NONE_OP


@lru_cache(maxsize=256)
def fragment_wait(count: int) -> Op:
    """Wait until at most ``count`` fragment-channel ticks are pending (shared)."""
    return _sync(FRAGMENT_WAIT_TAG, count)


@lru_cache(maxsize=256)
def global_wait(count: int) -> Op:
    """Wait until at most ``count`` global-channel ticks are pending (shared)."""
    return _sync(GLOBAL_WAIT_TAG, count)
