"""Lower the block template's placeholders to a target's channels and hint tags.

The block program is written once, in the template's own vocabulary (a global
wait, a fragment wait, a barrier, a priority hint, a scheduling fence; see
``_ops``).  A target's :class:`~pipeline_core.sync.BlockBinding` says what each
becomes on it: a wait on one of its channels, its barrier, one of its hint
tags, or nothing (a fragment wait on a target whose fragment loads are
synchronous, a hint the target lacks).  Entries that lower to nothing are
dropped and the phase renumbered, so kernel-entry dependencies are computed
after lowering.
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs

from pipeline_core.ops import Entry, Op
from pipeline_core.program import _ops
from pipeline_core.sync.model import SyncModel


@attrs.frozen(kw_only=True)
class Lowering:
    """placeholder tag -> the target's tag (None: the entry vanishes)."""

    tags: dict[int, int | None]

    @property
    def is_identity(self) -> bool:
        return all(k == v for k, v in self.tags.items())

    @property
    def fragment_wait_tag(self) -> int | None:
        """The tag fragment waits lower to (None: fragment loads are synchronous)."""
        return self.tags[_ops.FRAGMENT_WAIT_TAG]

    def op(self, op: Op) -> Op | None:
        if op.tag not in self.tags:
            return op
        tag = self.tags[op.tag]
        if tag is None:
            return None
        return op if tag == op.tag else op.evolve(tag=tag)

    def entries(self, entries: Sequence[Entry]) -> tuple[Entry, ...]:
        """``entries`` lowered; renumbered only when something vanished or changed."""
        if self.is_identity:
            return tuple(entries)
        out: list[Entry] = []
        for e in entries:
            op = self.op(e.op)
            if op is not None:
                out.append(Entry(op, len(out), e.phase, e.is_prefetch))
        return tuple(out)

    def kept_before(self, entries: Sequence[Entry]) -> tuple[int, ...]:
        """``k`` -> how many of ``entries[:k]`` survive (``k`` in 0..len): where a template
        position lands in :meth:`entries`'s result, so views place the blocks on the emitted
        kernel, which is shorter where the target lacks a hint (docs/guide/concepts.md)."""
        out = [0]
        for e in entries:
            out.append(out[-1] + (self.op(e.op) is not None))
        return tuple(out)


#: The template's own tags: what the reference's documents contain.
TEMPLATE = Lowering(tags={t: t for t in (_ops.BARRIER_TAG, _ops.GLOBAL_WAIT_TAG,
                                         _ops.FRAGMENT_WAIT_TAG, _ops.PRIORITY_TAG,
                                         _ops.FENCE_TAG)})


def lowering_for(sync: SyncModel | None) -> Lowering:
    """The lowering a target's sync model declares (its ``block_binding``).

    No sync model, or a model without a binding: the template's own tags.
    """
    if sync is None or sync.block_binding is None:
        return TEMPLATE
    bb = sync.block_binding
    frag = sync.channel(bb.fragment_channel).wait_tag if bb.fragment_channel else None
    return Lowering(tags={
        _ops.BARRIER_TAG: sync.barrier.tag,
        _ops.GLOBAL_WAIT_TAG: sync.channel(bb.global_channel).wait_tag,
        _ops.FRAGMENT_WAIT_TAG: frag,
        _ops.PRIORITY_TAG: bb.priority_tag,
        _ops.FENCE_TAG: bb.fence_tag,
    })
