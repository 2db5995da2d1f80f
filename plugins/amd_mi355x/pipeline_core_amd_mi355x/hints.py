"""AMD schedule-group-barrier hints for single-buffer kernels
(docs/guide/reference-behaviours.md, "AMD hint tags").

LLVM's AMDGPU scheduler is told, through ``s_sched_group_barrier(mask, count)``,
how to interleave the kernel's DS reads, DS writes, VMEM reads and MFMAs so the
matrix core never waits on one kind of memory op. The pattern: the
non-loop-carried fragment reads each followed by MFMAs, then per LDS store a
write / MFMA / VMEM read / MFMA quartet, then the loop-carried fragment reads
each followed by MFMAs.
"""
from __future__ import annotations

from typing import Sequence

import attrs

from pipeline_core.plugin_api import (ConfigError, Entry, FrameworkTag, Op, OpRole, Phase,
                                      PipelineConfig, framework_op)

# s_sched_group_barrier masks, as the reference numbers them.
DS_READ = 0
DS_WRITE = 1
VMEM_READ = 2
MFMA = 3

#: MFMA shapes the hint arithmetic knows: 32x32 issues one MFMA per DS read, 16x16 two.
SUPPORTED_MMA_SHAPES: tuple[tuple[int, int], ...] = ((16, 16), (32, 32))
#: The MFMA sides of those shapes: the values ``-p MMA_M`` / ``MMA_N`` of default-matmul take
#: (each on its own; which pairs go together is checked here, naming the other side).
MMA_SIDES: tuple[int, ...] = tuple(sorted({side for shape in SUPPORTED_MMA_SHAPES for side in shape}))


def _positive(inst, attribute, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError("AMDScheduleHints", attribute.name, value, "a positive integer")


def _non_negative(inst, attribute, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError("AMDScheduleHints", attribute.name, value, "a non-negative integer")


@attrs.frozen
class AMDScheduleHints:
    """The kernel shape the hint pattern is computed from (one warp's MMA grid per K tile)."""

    m_mmas: int = attrs.field(validator=_positive)
    n_mmas: int = attrs.field(validator=_positive)
    k_mmas: int = attrs.field(validator=_positive)
    mma_m: int = attrs.field(validator=_positive)
    mma_n: int = attrs.field(validator=_positive)
    a_loads_per_thread: int = attrs.field(validator=_non_negative)
    b_loads_per_thread: int = attrs.field(validator=_non_negative)

    def __attrs_post_init__(self) -> None:
        if (self.mma_m, self.mma_n) not in SUPPORTED_MMA_SHAPES:
            shapes = ", ".join(f"{m}x{n}" for m, n in SUPPORTED_MMA_SHAPES)
            field = "mma_n" if self.mma_m in (16, 32) else "mma_m"
            raise ConfigError("AMDScheduleHints", field, getattr(self, field),
                              f"an MFMA shape the hint pattern knows ({shapes}); got "
                              f"{self.mma_m}x{self.mma_n}")

    @property
    def mfma_per_read_cap(self) -> int:
        """A 32x32 MFMA is long enough to hide one DS read; a 16x16 needs two."""
        return 1 if self.mma_m == self.mma_n == 32 else 2


@attrs.frozen
class HintPlan:
    """The numbers the pattern is built from (kept for tests and explanations)."""

    loop_carried_frags: int
    other_frags: int
    reads_per_frag: int
    total_mmas: int
    total_stores: int
    mmas_per_read: int
    per_store: int
    extra: int


def plan_hints(body: Sequence[Op], config: PipelineConfig, hints: AMDScheduleHints) -> HintPlan:
    """Count the body's fragment loads and split the MFMAs between reads and stores.

    A body without fragment loads has nothing to interleave the MFMAs with (the
    reference divides by zero there): that is a ConfigError.
    """
    selector = config.loop_carried.selector
    frags = [o for o in body if o.role == OpRole.FRAGMENT_LOAD]
    lc = sum(1 for o in frags if o.subtile == selector)
    nlc = len(frags) - lc
    reads_per_frag = hints.m_mmas + hints.n_mmas
    total_mmas = hints.m_mmas * hints.n_mmas * hints.k_mmas
    total_stores = hints.a_loads_per_thread + hints.b_loads_per_thread
    total_reads = reads_per_frag * (lc + nlc)
    if total_reads == 0:
        raise ConfigError("AMD schedule hints", "body", f"{len(body)} ops, no FRAGMENT_LOAD",
                          "a body with at least one fragment load: the hints spread the MFMAs "
                          "over the DS reads")
    mmas_per_read = min(hints.mfma_per_read_cap, total_mmas // total_reads)
    remaining = total_mmas - total_reads * mmas_per_read
    per_store, extra = divmod(remaining, total_stores) if total_stores > 0 else (0, 0)
    return HintPlan(lc, nlc, reads_per_frag, total_mmas, total_stores, mmas_per_read,
                    per_store, extra)


def sched_group_barrier(mask: int, count: int) -> Op:
    """``s_sched_group_barrier mask, count, 0``: the block template's hint op (mask in
    ``subtile``, count in ``wait_value``), built by the core's one constructor."""
    return framework_op(FrameworkTag.SCHED_GROUP_BARRIER, subtile=mask, wait_value=count)


def hint_ops(body: Sequence[Op], config: PipelineConfig, hints: AMDScheduleHints) -> list[Op]:
    """The SCHED_GROUP_BARRIER ops, in order (MFMA hints with count 0 included, as the reference)."""
    p = plan_hints(body, config, hints)
    out: list[Op] = []
    for _ in range(p.reads_per_frag * p.other_frags):
        out += [sched_group_barrier(DS_READ, 1), sched_group_barrier(MFMA, p.mmas_per_read)]
    for i in range(p.total_stores):
        t = p.per_store + (1 if i < p.extra else 0)
        out += [sched_group_barrier(DS_WRITE, 1), sched_group_barrier(MFMA, t // 2),
                sched_group_barrier(VMEM_READ, 1), sched_group_barrier(MFMA, t - t // 2)]
    for _ in range(p.reads_per_frag * p.loop_carried_frags):
        out += [sched_group_barrier(DS_READ, 1), sched_group_barrier(MFMA, p.mmas_per_read)]
    return out


def append_amd_hints(kernel: Sequence[Entry], body: Sequence[Op], config: PipelineConfig,
                     hints: AMDScheduleHints) -> tuple[Entry, ...]:
    """``kernel`` followed by the hint entries (phase KERNEL, time_slot = running index)."""
    out = list(kernel)
    for o in hint_ops(body, config, hints):
        out.append(Entry(o, len(out), Phase.KERNEL, False))
    return tuple(out)
