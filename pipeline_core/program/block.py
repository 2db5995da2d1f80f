"""One MMA-centred block of the double-buffer program and its two emitters.

A block holds up to two fragment loads, up to two global loads, one MMA and the
waits/fences around them. ``BlockSpec.expand`` is the reference's template
(docs/guide/reference-behaviours.md, "The block template"); ``emit_minimal_barrier_block`` is the
4-wave emitter (docs/guide/reference-behaviours.md, "Minimal-barrier block emitter").
The counters (``entry_count``, ``mma_position``,
``post_barrier_lgkm_position``) always describe the template, even when a
program emits an explicit list for the block
(docs/guide/reference-behaviours.md, "The off-by-ones kept for parity").
"""
from __future__ import annotations

from typing import Iterator

import attrs

from pipeline_core.ops import NONE_OP, Op
from pipeline_core.program import _ops

#: Op slots, named as in the golden ``blocks`` JSON.
SLOT_NAMES: tuple[str, ...] = ("mma", "pre_op_0", "pre_op_1", "global_load", "global_load_1",
                               "entry_wait", "entry_wait_lgkm", "pre_sync", "fused_mma")

#: The 13 boolean flags, named as in the golden ``blocks[].flags`` JSON.
FLAG_NAMES: tuple[str, ...] = (
    "pre_mma_barrier", "pre_mma_set_prio", "post_mma_barrier", "post_mma_set_prio",
    "post_barrier_lgkm", "post_barrier_sched", "trailing_sched_barrier", "global_load_prefetch",
    "global_load_1_prefetch", "drain_lgkm_before_loads", "global_before_frag",
    "barrier_before_pre_ops", "wrap_waits_with_sched_barrier")



@attrs.frozen
class BlockSpec:
    """One MMA block: data slots, wait slots and emission flags (absent slot = NONE_OP).

    Defaults are the reference's: every barrier/set_prio flag on, every
    optional behaviour off.
    """

    mma: Op
    pre_op_0: Op = NONE_OP
    pre_op_1: Op = NONE_OP
    global_load: Op = NONE_OP
    global_load_1: Op = NONE_OP
    entry_wait: Op = NONE_OP
    entry_wait_lgkm: Op = NONE_OP
    pre_sync: Op = NONE_OP
    fused_mma: Op = NONE_OP
    pre_mma_barrier: bool = True
    pre_mma_set_prio: bool = True
    post_mma_barrier: bool = True
    post_mma_set_prio: bool = True
    post_barrier_lgkm: bool = True
    post_barrier_sched: bool = False
    trailing_sched_barrier: bool = False
    global_load_prefetch: bool = False
    global_load_1_prefetch: bool = False
    drain_lgkm_before_loads: bool = False
    global_before_frag: bool = False
    barrier_before_pre_ops: bool = False
    wrap_waits_with_sched_barrier: bool = False

    # --- small queries --------------------------------------------------------
    @property
    def num_pre_ops(self) -> int:
        """Present fragment loads (0-2)."""
        return self.pre_op_0.is_present + self.pre_op_1.is_present

    @property
    def num_globals(self) -> int:
        """Present global loads (0-2)."""
        return self.global_load.is_present + self.global_load_1.is_present

    @property
    def has_frag(self) -> bool:
        return self.pre_op_0.is_present or self.pre_op_1.is_present

    @property
    def has_global(self) -> bool:
        return self.global_load.is_present or self.global_load_1.is_present

    @property
    def has_prefetch(self) -> bool:
        """Either global slot is flagged as a prefetch."""
        return self.global_load_prefetch or self.global_load_1_prefetch

    def frags(self) -> Iterator[Op]:
        """The present fragment loads, slot order."""
        if self.pre_op_0.is_present:
            yield self.pre_op_0
        if self.pre_op_1.is_present:
            yield self.pre_op_1

    def global_loads(self) -> Iterator[tuple[Op, bool]]:
        """The present global loads with their prefetch flags, slot order."""
        if self.global_load.is_present:
            yield self.global_load, self.global_load_prefetch
        if self.global_load_1.is_present:
            yield self.global_load_1, self.global_load_1_prefetch

    def flags(self) -> dict[str, bool]:
        """The 13 flags by name (the golden ``flags`` object)."""
        return {name: getattr(self, name) for name in FLAG_NAMES}

    def evolve(self, **changes) -> "BlockSpec":
        return attrs.evolve(self, **changes)

    # --- wrap conditions (shared by template and counters) ---------------------
    @property
    def _entry_wrapped(self) -> bool:
        return self.wrap_waits_with_sched_barrier and (
            self.entry_wait.is_present or self.entry_wait_lgkm.is_present)

    @property
    def _sync_wrapped(self) -> bool:
        return self.wrap_waits_with_sched_barrier and (
            self.pre_sync.is_present or self.pre_mma_barrier)

    # --- template sections -----------------------------------------------------
    def _entry_section(self) -> list[tuple[Op, bool]]:
        out: list[tuple[Op, bool]] = []
        wrapped = self._entry_wrapped
        if wrapped:
            out.append((_ops.FENCE, False))
        if self.entry_wait.is_present:
            out.append((self.entry_wait, False))
        if self.entry_wait_lgkm.is_present:
            out.append((self.entry_wait_lgkm, False))
        if self.entry_wait.is_present:
            # Cross-warp LDS visibility fence after the vm drain
            # (docs/guide/reference-behaviours.md, "Cross-warp LDS visibility barrier").
            out.append((_ops.BARRIER, False))
        if wrapped:
            out.append((_ops.FENCE, False))
        return out

    def _load_section(self) -> list[tuple[Op, bool]]:
        frags = [(o, False) for o in (self.pre_op_0, self.pre_op_1) if o.is_present]
        globs = [(o, f) for o, f in ((self.global_load, self.global_load_prefetch),
                                     (self.global_load_1, self.global_load_1_prefetch))
                 if o.is_present]
        drain = [(_ops.FRAGMENT_DRAIN, False)] if self.drain_lgkm_before_loads else []
        if self.global_before_frag:
            return globs + drain + frags
        return frags + drain + globs

    def _sync_section(self) -> list[tuple[Op, bool]]:
        out: list[tuple[Op, bool]] = []
        wrapped = self._sync_wrapped
        if wrapped:
            out.append((_ops.FENCE, False))
        if self.pre_sync.is_present:
            out.append((self.pre_sync, False))
        if self.pre_mma_barrier:
            out.append((_ops.BARRIER, False))
            if self.post_barrier_sched:
                out.append((_ops.FENCE, False))
            if self.post_barrier_lgkm:
                out.append((_ops.FRAGMENT_DRAIN, False))
        if wrapped:
            out.append((_ops.FENCE, False))
        return out

    def _before_mma(self) -> list[tuple[Op, bool]]:
        out = self._entry_section()
        if self.barrier_before_pre_ops:
            out += self._sync_section() + self._load_section()
        else:
            out += self._load_section() + self._sync_section()
        if self.pre_mma_set_prio:
            out.append((_ops.PRIORITY_HIGH, False))
        return out

    def _from_mma(self) -> list[tuple[Op, bool]]:
        out = [(self.mma, False)]  # emitted even when it is the NONE placeholder (7.1)
        if self.fused_mma.is_present:
            out.append((self.fused_mma, False))
        if self.post_mma_set_prio:
            out.append((_ops.PRIORITY_LOW, False))
        if self.post_mma_barrier:
            out.append((_ops.BARRIER, False))
            if self.trailing_sched_barrier:
                out.append((_ops.FENCE, False))
        return out

    # --- public template API -----------------------------------------------------
    def expand(self) -> list[tuple[Op, bool]]:
        """The template expansion: (op, is_prefetch) in emission order.

        Only the two global slots can carry is_prefetch = True (from their flags).
        """
        return self._before_mma() + self._from_mma()

    def pre_sync_offset(self) -> int | None:
        """Offset of ``pre_sync`` in the template expansion (None: the block has none): the
        wait the ``wait_lgkm_first`` / ``wait_vm_last`` knobs set, for views that report it."""
        if not self.pre_sync.is_present:
            return None
        before = self._entry_section()
        if not self.barrier_before_pre_ops:
            before += self._load_section()
        return len(before) + (1 if self._sync_wrapped else 0)

    def entry_count(self) -> int:
        """Number of entries the template emits."""
        return len(self._before_mma()) + len(self._from_mma())

    def mma_position(self) -> int:
        """Offset of the MMA inside the template expansion."""
        return len(self._before_mma())

    def post_barrier_lgkm_position(self) -> int:
        """The reference's counting formula for the post-barrier wait_lgkm(0) offset.

        Reproduced with its off-by-ones
        (docs/guide/reference-behaviours.md, "The off-by-ones kept for parity") because the golden
        ``blocks`` report it: in the default layout it counts both wrappers of
        the sync group; in the barrier-before-pre-ops layout it counts
        entry_wait as 1. -1 when the wait is not emitted.
        """
        if not (self.post_barrier_lgkm and self.pre_mma_barrier):
            return -1
        ew = self.entry_wait.is_present
        ewl = self.entry_wait_lgkm.is_present
        ps = self.pre_sync.is_present
        entry_wrap = 2 if self._entry_wrapped else 0
        if self.barrier_before_pre_ops:
            before = ew + ewl + ps + entry_wrap + (1 if self._sync_wrapped else 0)
        else:
            before = (2 * ew + ewl + self.pre_op_0.is_present + self.pre_op_1.is_present
                      + self.drain_lgkm_before_loads + self.global_load.is_present
                      + self.global_load_1.is_present + ps + entry_wrap
                      + (2 if self._sync_wrapped else 0))
        return before + 1 + (1 if self.post_barrier_sched else 0)


def emit_minimal_barrier_block(block: BlockSpec, wrap_waits: bool,
                               global_before_frag: bool = False) -> list[Op]:
    """The 4-wave emitter: entry group, loads (fenced apart), sync group, MMA.

    Reads only the wait slots, the load slots, pre_mma_barrier,
    post_barrier_lgkm and the mma (docs/guide/reference-behaviours.md,
    "Minimal-barrier block emitter"). The scheduling fence
    between frags and globals stops the target compiler hoisting a fragment
    read above a global->shared load under cross-stage rotation, so it is
    always emitted when the block has both (a target without a fence hint
    drops it when the template is lowered).
    """
    out: list[Op] = []
    group_a = wrap_waits and (block.entry_wait.is_present or block.entry_wait_lgkm.is_present)
    if group_a:
        out.append(_ops.FENCE)
    if block.entry_wait.is_present:
        out.append(block.entry_wait)
    if block.entry_wait_lgkm.is_present:
        out.append(block.entry_wait_lgkm)
    if block.entry_wait.is_present:
        out.append(_ops.BARRIER)
    if group_a:
        out.append(_ops.FENCE)

    frags = [o for o in (block.pre_op_0, block.pre_op_1) if o.is_present]
    globs = [o for o in (block.global_load, block.global_load_1) if o.is_present]
    first, second = (globs, frags) if global_before_frag else (frags, globs)
    out += first
    if frags and globs:
        out.append(_ops.FENCE)
    out += second

    group_b = wrap_waits and (block.pre_sync.is_present or block.pre_mma_barrier)
    if group_b:
        out.append(_ops.FENCE)
    if block.pre_sync.is_present:
        out.append(block.pre_sync)
    if block.pre_mma_barrier:
        out.append(_ops.BARRIER)
        if block.post_barrier_lgkm:
            out.append(_ops.FRAGMENT_DRAIN)
    if group_b:
        out.append(_ops.FENCE)
    out.append(block.mma)
    return out
