"""Attention's causal-forward trip rule: which KV blocks each query block visits, and which of
them the softmax masks (docs/guide/attention.md, "Causal bounds and tails").

The rule is the family's, not the core's (issue 34): :class:`LoopBounds` is a
``pipeline_core.plugin_api.TripRule`` whose problem is ``(seq_q, seq_k)``, handed to the plan
through ``AgentSpec.trip_rule``.  The core asks it whether its output tiles differ (never
uniform, so the proof runs query tiles of different counts back to back, 0 among them), a
problem to time (:meth:`LoopBounds.sample`: the square whose last query tile visits
``k_tiles`` KV blocks) and its document; the emitter writes its trips and first masked block
as C expressions (``emit_attention.tile_bounds_exprs``), and the host call ranks tile orders
by its trips (``call._order``, ``tile_order.choose``).  A sliding window (``window_left``,
``window_right``) bounds each query block's KV blocks on both sides (``kv_first``, and
``left_masked`` beside ``first_masked``; emit_window.py writes them), and
:meth:`LoopBounds.coverage_faults` is the rule's own proof, which the core runs with the plan's
(docs/guide/attention.md, "Sliding windows and softcap").
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


#: (seq_q, seq_k) of the problems attention's rules' proofs check (the forward's here, the
#: backward's in bwd_tiles.py), in block units plus tails (scaled by the rule's block sizes):
#: square, more queries, more keys, tails of one row and of one key
SHAPES = ((1, 1, 0, 0), (2, 2, 0, 0), (3, 1, 5, 0), (1, 3, 0, 7), (2, 3, 1, 1), (3, 2, 17, 3),
          (0, 1, 1, 0), (1, 0, 0, 1), (4, 2, 0, 0), (2, 4, 0, 0))
#: the most keys of a window's span the forward rule's proof adds to its problems (a wider
#: window is wider than every problem: unbounded there); the check then takes under a second
PROOF_SPAN = 4096


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

    #: the sliding window's reach left and right of the diagonal, in keys (-1: unbounded, as
    #: FlashAttention's ``window_size``): row ``r`` sees keys ``r + offset - window_left ..
    #: r + offset + window_right``; causal is a right reach of 0 (``window_right`` stays -1)
    window_left: int = -1
    window_right: int = -1
    #: KV blocks the window's first visited block is moved by: 0 in every kernel; a mutation
    #: test's edit (a window start one block late loses keys), which the rule's proof refuses
    #: and the emitter will not write
    start_shift: int = 0

    @property
    def windowed(self) -> bool:
        """Whether a sliding window bounds the keys (a left reach, or a right reach without
        the causal mask): the kernel then starts each tile at :meth:`kv_first`."""
        return self.window_left >= 0 or (self.window_right >= 0 and not self.causal)

    @property
    def right(self) -> int | None:
        """The right reach in keys (0 causal), None when unbounded."""
        return 0 if self.causal else (self.window_right if self.window_right >= 0 else None)

    def blocks(self, seq_k: int) -> int:
        """KV blocks of the whole key sequence (the last one partial on a tail)."""
        return -(-seq_k // self.block_n)

    def row_keys(self, row: int, seq_q: int, seq_k: int) -> tuple[int, int]:
        """The first and last key row ``row`` sees (first > last: none)."""
        off, right = self.offset(seq_q, seq_k), self.right
        lo = 0 if self.window_left < 0 else max(0, row + off - self.window_left)
        return lo, seq_k - 1 if right is None else min(seq_k - 1, row + off + right)

    def _rows(self, query_block: int, seq_q: int) -> tuple[int, int]:
        """The first and last stored row of ``query_block``."""
        return query_block * self.block_m, min((query_block + 1) * self.block_m, seq_q) - 1

    def kv_first(self, query_block: int, seq_q: int, seq_k: int) -> int:
        """The first KV block ``query_block`` visits: the one holding the first key its first
        row sees (0 without a left reach)."""
        if not self.windowed:
            return 0
        return self.row_keys(self._rows(query_block, seq_q)[0], seq_q, seq_k)[0] \
            // self.block_n + self.start_shift

    def trips(self, query_block: int, seq_q: int, seq_k: int) -> int:
        """The K tiles query block ``query_block`` visits: all KV blocks, or (causal) those up
        to the one holding the last key its last row sees; windowed, from :meth:`kv_first` to
        that one; 0 when no row sees a key."""
        if self.windowed:
            first, last = self._rows(query_block, seq_q)
            lo, hi = self.row_keys(first, seq_q, seq_k)[0], self.row_keys(last, seq_q, seq_k)[1]
            return hi // self.block_n - self.kv_first(query_block, seq_q, seq_k) + 1 \
                if lo <= hi else 0
        if not self.causal:
            return self.blocks(seq_k)
        last_row = min((query_block + 1) * self.block_m, seq_q) - 1
        seen = last_row + self.offset(seq_q, seq_k) + 1  # keys 0 .. seen - 1
        return max(0, min(self.blocks(seq_k), -(-seen // self.block_n)))

    def first_masked(self, query_block: int, seq_q: int, seq_k: int) -> int:
        """The first masked K tile of ``query_block`` (counted from :meth:`kv_first`): from it
        to the last one it visits, the mask applies (the diagonal blocks or the window's right
        edge, where the first row sees fewer keys than the block ends with, and the block
        holding the key tail); before it, none does but the window's left edge
        (:meth:`left_masked`)."""
        trips = self.trips(query_block, seq_q, seq_k)
        if self.windowed:
            first = self.blocks(seq_k) - (seq_k % self.block_n != 0)  # the tail block
            if self.right is not None:  # blocks past the first row's last key
                reach = query_block * self.block_m + self.offset(seq_q, seq_k) + self.right + 1
                first = min(first, max(0, reach) // self.block_n)
            return max(0, min(first - self.kv_first(query_block, seq_q, seq_k), trips))
        first = trips - 1 if seq_k % self.block_n else trips  # the tail block
        if self.causal:
            row0 = query_block * self.block_m + self.offset(seq_q, seq_k)  # row 0 sees 0..row0
            first = min(first, max(0, (row0 + 1) // self.block_n))
        return max(0, min(first, trips))

    def left_masked(self, query_block: int, seq_q: int, seq_k: int) -> int:
        """How many of ``query_block``'s first K tiles straddle the window's left edge (its
        last row's first key lies past their first key): those run the mask too."""
        if self.window_left < 0:
            return 0
        last = self._rows(query_block, seq_q)[1]
        edge = max(0, last + self.offset(seq_q, seq_k) - self.window_left)
        upto = -(-edge // self.block_n) - self.kv_first(query_block, seq_q, seq_k)
        return max(0, min(upto, self.trips(query_block, seq_q, seq_k)))

    def masked(self, query_block: int, kv_block: int, seq_q: int, seq_k: int) -> bool:
        """Whether K tile ``kv_block`` of ``query_block`` (counted from :meth:`kv_first`)
        runs the mask."""
        return (kv_block < self.left_masked(query_block, seq_q, seq_k)
                or self.first_masked(query_block, seq_q, seq_k) <= kv_block
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
        """Causal or windowed: one head's query tiles over the square whose last query tile
        visits ``k_tiles`` KV blocks (windowed: ``k_tiles`` blocks past the window), against
        the same square without the mask (``pipeline-core analyze``'s "causal bounds" or
        "window bounds" line); neither, nothing beyond the steady state."""
        if not (self.causal or self.windowed):
            return None
        span = max(0, self.window_left) + max(0, self.window_right) if self.windowed else 0
        seq = k_tiles * self.block_n + span
        word = "window" if self.windowed else "causal"
        return TripSample(trips=self.trip_counts((seq, seq)), full=self.blocks(seq),
                          key=word, title=f"{word} bounds", numbers={"seq": seq},
                          problem=f"one head, {seq} queries and keys, each query tile its own "
                                  "KV blocks",
                          unit="KV blocks", names=("kv_blocks", "full_blocks"),
                          reference="without the mask")

    def document(self) -> dict[str, Any]:
        """The schedule document's ``bounds`` key (the window's reach where one is set)."""
        window = ({"window": [self.window_left, self.window_right]} if self.windowed else {})
        return {"causal": self.causal, "block_m": self.block_m, "block_n": self.block_n,
                "align": self.align, "masked_ops": list(self.masked_ops), **window}

    # --- the rule's own proof -------------------------------------------------------------

    def proof_problems(self) -> list[tuple[int, int]]:
        """Small (seq_q, seq_k) :meth:`coverage_faults` checks: :data:`SHAPES` scaled by the
        tile (and one of no full block), and again with the window's span (and half of it; at
        most :data:`PROOF_SPAN`) added to both lengths, so the window's edges fall inside,
        around and past the blocks, and some rows see no key."""
        span = max(0, self.window_left) + max(0, self.window_right) if self.windowed else 0
        span = min(span, PROOF_SPAN)  # past it, the problems see a window wider than them
        out: list[tuple[int, int]] = []
        for extra in sorted({0, span, span // 2 + 1} if span else {0}):
            for mq, nk, tq, tk in (*SHAPES, (0, 0, 17, 5)):
                sq, sk = mq * self.block_m + tq + extra, nk * self.block_n + tk + extra
                if sq and sk and (sq, sk) not in out:
                    out.append((sq, sk))
        return out

    def coverage_faults(self) -> tuple[str, ...]:
        """Per problem of :meth:`proof_problems` and query block: every (row, key) pair the mask
        keeps lies in a visited KV block, every visited block holds a key some row sees, and a
        visited block some stored row does not see whole (a key past its reach on either side,
        or past the sequence) is masked; one line per fault (each row's keys are one interval,
        :meth:`row_keys`, so the check is per row and block, not per pair)."""
        faults: list[str] = []
        for sq, sk in self.proof_problems():
            for i in range(-(-sq // self.block_m)):
                faults += self._block_faults(i, sq, sk)
            if faults:
                return tuple(faults)
        return ()

    def _block_faults(self, i: int, sq: int, sk: int, where: str = "") -> list[str]:
        """Query block ``i``'s faults at these lengths (``where``: how its lines name it; the
        varlen rule names the batch): its rows' keys are each one interval clipped to the
        sequence (:meth:`row_keys`), so a box's keys past ``sk`` (TMA's zeros, or a packed
        batch's next sequence) are ones no row sees and must be masked or not visited."""
        where = where or (f"query block {i} of seq_q {sq}, seq_k {sk} ({self.align}, window "
                          f"{self.window_left}, {self.window_right})")
        first_row, last_row = self._rows(i, sq)
        seen = [self.row_keys(r, sq, sk) for r in range(first_row, last_row + 1)]
        trips, kf, n = self.trips(i, sq, sk), self.kv_first(i, sq, sk), self.block_n
        start, end = kf * n, (kf + trips) * n  # the visited keys' boxes
        for lo, hi in seen:
            if lo <= hi and (lo < start or hi >= end):
                return [f"{where} skips keys {lo}..{hi} of its rows' window outside its KV "
                        f"blocks {kf}..{kf + trips - 1}: their terms are lost"]
        out: list[str] = []
        for t in range(trips):
            a, b = (kf + t) * n, (kf + t + 1) * n - 1
            if not any(lo <= b and hi >= a for lo, hi in seen if lo <= hi):
                out.append(f"{where} visits KV block {kf + t}, which none of its rows sees")
            elif not self.masked(i, t, sq, sk) and not all(lo <= a and b <= hi
                                                             for lo, hi in seen):
                out.append(f"{where} visits KV block {kf + t} unmasked, whose box holds keys "
                           "its rows must not see (past the window, the diagonal or the "
                           "sequence's end)")
        return out


def plan_bounds(compiled: CompiledSchedule) -> LoopBounds | None:
    """The plan's trip rule when it is attention's (what the emitter and the call read)."""
    rule = compiled.plan.trip_rule
    return rule if isinstance(rule, LoopBounds) else None
