"""The packed variable-length forward's trip rule and tile scheduler (docs/guide/attention.md,
"Packed variable-length batches").

A varlen batch is sequences back to back in ``[total_tokens, heads, D]`` tensors, sequence
``s`` holding query rows ``cu_seqlens_q[s] ..< cu_seqlens_q[s + 1]`` and keys
``cu_seqlens_k[s] ..< cu_seqlens_k[s + 1]``.  An output tile is (sequence, head, query block);
its K tiles are the KV blocks of its own sequence, so its trip count follows from that
sequence's lengths (:class:`VarlenBounds`: the fixed-length :class:`~.tiles.LoopBounds` per
sequence, causal or not, either alignment).  A sequence of no query row has no tile; one of no
key (or a bottom-right query block that sees none) has tiles of 0 trips, which run only Q's
once steps and store zeros.

What differs from the fixed-length rule is what lies past a sequence's end: the next
sequence's rows, not TMA's zeros.  So a KV block holding keys past the end must be masked
(the key tail's mask already is, and it compares key indices with the sequence's length, never
the loaded values), a block wholly past the end must not be visited, and query rows past the
end are computed and not stored (the clipped store).  :meth:`VarlenBounds.coverage_faults` is
the rule's own proof, which the core runs with the plan's (``pipeline_core.agents.prove``): over
batches of lengths 0, 1, uneven and around the block sizes back to back, every (row, key) pair
of a sequence the mask keeps is visited, every visited pair it drops (the next sequence's keys
among them) is masked, and no visited KV block is one no row of the tile sees.  A per-sequence
KV count one off (:attr:`VarlenBounds.kv_shift`, the mutation) is refused.

The tile scheduler (:func:`scheduled`; the kernel's C from ``emit_varlen``): the batch's tiles
sequence by sequence (``heads x ceil(seq_q / block_m)`` each, none for a sequence of no query
row), within a sequence in ``tile_order.varlen_order_exprs``'s order (head-major; causal, the
fixed-length causal order within the sequence: groups of ``hg`` heads, query blocks heaviest
first), dealt round-robin to the persistent CTAs: tile ``blockIdx.x``, ``+ gridDim.x``, ...
(causal, with ``snake`` every other round of positions backwards: ``tile_order.position``)
Each role finds a tile's sequence with a cursor over ``cu_seqlens_q`` that only moves on, so
the lengths stay on the device (no host sync, CUDA-graph capturable) and ``max_seqlen_q`` only
bounds the grid and sizes the causal groups and the snake (``tile_order.varlen_choose``: the
order that balances a batch of sequences all that long, as the fixed-length call's choice does
on equal lengths).  Why not the fixed-length grid padded to ``max_seqlen_q`` with the
positions past a sequence skipped (the first cut): the skipped positions deal the real tiles unevenly; on mixed
batches of 100-4096 tokens (16k in all, the benchmark's), not causal, the busiest CTA had
1.09-1.43x the mean work, 1.01-1.07x dealt round-robin (:func:`busiest`, the cost model of
``tile_order``).  Causal, the groups chosen from ``max_seqlen_q`` leave 1.11-1.31x on those
batches (every head of a sequence in one group: 1.10-1.15x; on 4 x 4096 that group gives
1.15x where the chosen one gives the fixed call's 1.06x).  Sorting the sequences longest first
(FA3's varlen scheduler, with a pass over the lengths before the grid) changed the round-robin
figures by under 0.05 either way in the same simulation, so the kernel keeps batch order.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from pipeline_core.plugin_api import TripSample

from pipeline_core_schedules_attention.tile_order import (TILE_OVERHEAD_BLOCKS, TileOrder,
                                                          position, tile_at)
from pipeline_core_schedules_attention.tiles import LoopBounds

#: a varlen problem: each sequence's (query rows, keys), in batch order
Lengths = tuple[tuple[int, int], ...]

#: the batches coverage_faults checks, in units of (block_m, block_n) plus tails: sequences of
#: length 0 and 1, uneven ones back to back, more queries than keys and fewer, tails of one
_BATCHES: tuple[tuple[tuple[int, int, int, int], ...], ...] = (
    ((0, 0, 0, 0), (0, 0, 1, 1), (0, 0, 17, 17), (1, 2, 1, 5)),
    ((0, 3, 1, 0), (2, 0, 3, 1), (0, 0, 0, 7), (0, 0, 5, 0), (0, 0, 1, 1)),
    ((1, 1, 0, 0), (0, 1, -1, 1), (3, 2, 0, 0), (2, 3, 17, 3), (0, 0, 0, 0)),
)


def _pairs(items: Iterable[tuple[int, int]]) -> Lengths:
    return tuple((int(q), int(k)) for q, k in items)


@attrs.frozen(kw_only=True)
class VarlenBounds(LoopBounds):
    """:class:`~.tiles.LoopBounds` per sequence of a packed batch: ``problem`` is each
    sequence's ``(seq_q, seq_k)`` (:data:`Lengths`); its output tiles are every sequence's query
    blocks in batch order, each visiting its own sequence's KV blocks (one head's: every head
    runs the same counts)."""

    #: KV blocks every tile's count is moved by: 0 in every kernel; a mutation test's edit (a
    #: per-sequence KV count one off: a block of keys lost, or the next sequence's read), which
    #: the rule's proof refuses and the emitter will not write
    kv_shift: int = 0

    def trips(self, query_block: int, seq_q: int, seq_k: int) -> int:
        """The K tiles query block ``query_block`` of a sequence of these lengths visits."""
        return max(0, super().trips(query_block, seq_q, seq_k) + self.kv_shift)

    def query_blocks(self, seq_q: int) -> int:
        """A sequence's output tiles per head (0 for a sequence of no query row)."""
        return -(-seq_q // self.block_m)

    # --- the TripRule the core asks (pipeline_core.tiles) ---------------------------------

    def trip_counts(self, problem: Any) -> tuple[int, ...]:
        """:meth:`trips` of every query block of every sequence of ``problem``, in batch
        order."""
        return tuple(self.trips(i, sq, sk) for sq, sk in _pairs(problem)
                     for i in range(self.query_blocks(sq)))

    def masked_trips(self, problem: Any) -> tuple[int, ...]:
        """:meth:`first_masked` of every query block of every sequence of ``problem``."""
        return tuple(self.first_masked(i, sq, sk) for sq, sk in _pairs(problem)
                     for i in range(self.query_blocks(sq)))

    def sample(self, k_tiles: int) -> TripSample | None:
        """One head of a mixed batch whose longest sequence's tiles visit ``k_tiles`` KV blocks
        (lengths L, L / 2 + 17, 1, 0 and L / 4), against the same tiles each visiting every
        KV block of the longest (the batch padded to it)."""
        longest = k_tiles * self.block_n
        batch = tuple((n, n) for n in (longest, longest // 2 + 17, 1, 0, longest // 4))
        return TripSample(trips=self.trip_counts(batch), full=self.blocks(longest),
                          key="varlen", title="varlen batch", numbers={"longest": longest},
                          problem=f"one head, sequences of {', '.join(str(q) for q, _ in batch)} "
                                  "tokens back to back", unit="KV blocks",
                          names=("kv_blocks", "padded_blocks"), reference="padded to the longest")

    def document(self) -> dict[str, Any]:
        return {**super().document(), "varlen": True}

    # --- the rule's own proof -------------------------------------------------------------

    def problems(self) -> list[Lengths]:
        """The batches :meth:`coverage_faults` checks (:data:`_BATCHES` scaled by the tile);
        windowed, one more: the fixed-length rule's problems (the window's edges inside, around
        and past the blocks: ``LoopBounds.proof_problems``) back to back, a sequence of no
        token and one of one between them."""
        out = [tuple((max(0, mq * self.block_m + tq), max(0, nk * self.block_n + tk))
                     for mq, nk, tq, tk in batch) for batch in _BATCHES]
        if self.windowed:
            out.append(tuple(p for pair in self.proof_problems() for p in (pair, (0, 0), (1, 1))))
        return out

    def coverage_faults(self) -> tuple[str, ...]:
        """Per batch of :meth:`problems`, per sequence and query block, the fixed-length rule's
        check at the sequence's lengths (``LoopBounds._block_faults``): every (row, key) pair
        of the sequence the mask keeps lies in a visited KV block, every visited block holds a
        key some row sees, and a visited block whose box holds keys a row must not see (past its
        window or diagonal, or past the sequence's end: the next sequence's keys) is masked;
        one line per fault."""
        faults: list[str] = []
        for batch in self.problems():
            for s, (sq, sk) in enumerate(batch):
                for i in range(self.query_blocks(sq)):
                    faults += self._block_faults(
                        i, sq, sk, f"query block {i} of sequence {s} ({sq} rows, {sk} keys) "
                                   f"of batch {list(batch)}")
                if faults:
                    return tuple(faults)
        return tuple(faults)


def scheduled(lengths_q: Sequence[int], *, heads: int, block_m: int, grid: int,
              causal: bool, hg: int = 8,
              snake: bool = False) -> list[list[tuple[int, int, int]]]:
    """The tiles each of ``grid`` persistent CTAs runs, (sequence, head, query block) in its
    order: the batch's tiles sequence by sequence, each sequence's in
    ``tile_order.tile_at``'s order (causal: groups of ``hg`` heads), CTA ``c`` taking
    the positions of indices ``c``, ``c + grid``, ... (``tile_order.position``: with
    the snake every other round backwards) until one lies past the batch: the kernel's loop
    in Python."""
    order = TileOrder(hg=hg)
    tiles = [(s, *tile_at(r, causal=causal, bh=heads, mt=-(-n // block_m), order=order))
             for s, n in enumerate(lengths_q) for r in range(heads * -(-n // block_m))]
    out = []
    for c in range(grid):
        mine, t = [], c
        while (p := position(t, grid=grid, snake=snake)) < len(tiles):
            mine.append(tiles[p])
            t += grid
        out.append(mine)
    return out


def busiest(lengths: Sequence[tuple[int, int]], rule: LoopBounds, *, heads: int,
            grid: int, hg: int = 8, snake: bool = False) -> float:
    """The busiest CTA's work over the mean (each tile its KV blocks plus
    ``tile_order.TILE_OVERHEAD_BLOCKS``) when ``grid`` CTAs run the batch's tiles
    (:func:`scheduled`)."""
    load = [sum(rule.trips(m, *lengths[s]) + TILE_OVERHEAD_BLOCKS for s, _, m in cta)
            for cta in scheduled([q for q, _ in lengths], heads=heads, block_m=rule.block_m,
                                 grid=grid, causal=rule.causal, hg=hg, snake=snake)]
    return max(load) / (sum(load) / grid)
