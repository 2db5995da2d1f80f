"""Attention's causal-forward trip rule: which KV blocks each query block visits, and which of
them the softmax masks (docs/guide/attention.md, "Causal bounds and tails").

The rule is the family's, not the core's (issue 34): :class:`LoopBounds` is a
``pipeline_core.plugin_api.TripRule`` whose problem is ``(seq_q, seq_k)``, handed to the plan
through ``AgentSpec.trip_rule``.  The core asks it whether its output tiles differ (never
uniform, so the proof runs query tiles of different counts back to back, 0 among them), a
problem to time (:meth:`LoopBounds.sample`: the square whose last query tile visits
``k_tiles`` KV blocks) and its document; the emitter writes its trips and first masked block
as C expressions (``emit_attention.tile_bounds_exprs``), and the host call ranks tile orders
by its trips (``call._order``, ``tile_order.choose``).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs

from pipeline_core.plugin_api import TripSample

if TYPE_CHECKING:
    from pipeline_core.plugin_api import CompiledSchedule


def _ints(items: Iterable[int]) -> tuple[int, ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class CausalTiles:
    """What attention's trip rules (the forward's :class:`LoopBounds`, the backward's
    ``bwd_tiles.BackwardTrips``) say alike: the tile, whether the causal mask applies, where its
    diagonal sits, and the body ops that apply it on a masked K tile."""

    causal: bool = False
    block_m: int
    block_n: int
    #: the body ops that apply the mask on a masked K tile (the forward's softmax steps, the
    #: backward's gradient steps)
    masked_ops: tuple[int, ...] = attrs.field(converter=_ints, default=())
    #: "top_left" (torch's ``is_causal``) or "bottom_right" (FlashAttention >= 2.1)
    align: str = attrs.field(default="top_left",
                             validator=attrs.validators.in_(("top_left", "bottom_right")))

    def offset(self, seq_q: int, seq_k: int) -> int:
        """The last key row 0 sees (the diagonal's shift)."""
        return seq_k - seq_q if self.align == "bottom_right" else 0


@attrs.frozen(kw_only=True)
class LoopBounds(CausalTiles):
    """How many K tiles each output tile visits, and which of them the schedule masks: one
    home for the rule the emitter, the proof and the timing model follow.

    An output tile is query block ``i`` (``block_m`` rows); a K tile is a KV block of
    ``block_n`` keys.  Without ``causal`` every output tile visits ``ceil(seq_k / block_n)``
    blocks.  With it, row ``r`` sees keys ``0 .. r + offset`` (``offset`` 0 aligns the diagonal
    top-left, as torch's ``is_causal``; ``seq_k - seq_q`` aligns it bottom-right, as
    FlashAttention's), so the blocks above the diagonal are skipped, and a query block whose
    rows see no key at all visits 0 blocks (the empty query tile).  The blocks that straddle the
    diagonal or hold keys past ``seq_k`` are the last ones an output tile visits, and
    ``masked_ops`` (the softmax steps) apply the mask on exactly those."""

    def blocks(self, seq_k: int) -> int:
        """KV blocks of the whole key sequence (the last one partial on a tail)."""
        return -(-seq_k // self.block_n)

    def trips(self, query_block: int, seq_q: int, seq_k: int) -> int:
        """The K tiles query block ``query_block`` visits: all KV blocks, or (causal) those up
        to the one holding the last key its last row sees; 0 when no row sees a key."""
        if not self.causal:
            return self.blocks(seq_k)
        last_row = min((query_block + 1) * self.block_m, seq_q) - 1
        seen = last_row + self.offset(seq_q, seq_k) + 1  # keys 0 .. seen - 1
        return max(0, min(self.blocks(seq_k), -(-seen // self.block_n)))

    def first_masked(self, query_block: int, seq_q: int, seq_k: int) -> int:
        """The first masked K tile of ``query_block``: from it to the last one it visits, the
        mask applies (the diagonal blocks, where the first row sees fewer keys than the block
        ends with, and the block holding the key tail); before it, none does."""
        trips = self.trips(query_block, seq_q, seq_k)
        first = trips - 1 if seq_k % self.block_n else trips  # the tail block
        if self.causal:
            row0 = query_block * self.block_m + self.offset(seq_q, seq_k)  # row 0 sees 0..row0
            first = min(first, max(0, (row0 + 1) // self.block_n))
        return max(0, min(first, trips))

    def masked(self, query_block: int, kv_block: int, seq_q: int, seq_k: int) -> bool:
        """Whether K tile ``kv_block`` of ``query_block`` runs the mask."""
        return (self.first_masked(query_block, seq_q, seq_k) <= kv_block
                < self.trips(query_block, seq_q, seq_k))

    # --- the TripRule the core asks (pipeline_core.tiles) ---------------------------------

    @property
    def uniform(self) -> bool:
        """Never: the kernel sets each query tile's KT and FM from the rule at run time, causal
        or not, so the proof runs tiles of different counts (0 among them) for both."""
        return False

    def trip_counts(self, problem: tuple[int, int]) -> tuple[int, ...]:
        """:meth:`trips` of every query block of ``problem`` = ``(seq_q, seq_k)``."""
        seq_q, seq_k = problem
        return tuple(self.trips(i, seq_q, seq_k) for i in range(-(-seq_q // self.block_m)))

    def masked_trips(self, problem: tuple[int, int]) -> tuple[int, ...]:
        """:meth:`first_masked` of every query block of ``problem`` = ``(seq_q, seq_k)``."""
        seq_q, seq_k = problem
        return tuple(self.first_masked(i, seq_q, seq_k)
                     for i in range(-(-seq_q // self.block_m)))

    def sample(self, k_tiles: int) -> TripSample | None:
        """Causal: one head's query tiles over the square whose last query tile visits
        ``k_tiles`` KV blocks, against the same square without the mask (``pipeline-core
        analyze``'s "causal bounds" line); not causal, nothing beyond the steady state."""
        if not self.causal:
            return None
        seq = k_tiles * self.block_n
        return TripSample(trips=self.trip_counts((seq, seq)), full=self.blocks(seq),
                          key="causal", title="causal bounds", numbers={"seq": seq},
                          problem=f"one head, {seq} queries and keys, each query tile its own "
                                  "KV blocks",
                          unit="KV blocks", names=("kv_blocks", "full_blocks"),
                          reference="without the mask")

    def document(self) -> dict[str, Any]:
        """The schedule document's ``bounds`` key."""
        return {"causal": self.causal, "block_m": self.block_m, "block_n": self.block_n,
                "align": self.align, "masked_ops": list(self.masked_ops)}


def plan_bounds(compiled: CompiledSchedule) -> LoopBounds | None:
    """The plan's trip rule when it is attention's (what the emitter and the call read)."""
    rule = compiled.plan.trip_rule
    return rule if isinstance(rule, LoopBounds) else None
