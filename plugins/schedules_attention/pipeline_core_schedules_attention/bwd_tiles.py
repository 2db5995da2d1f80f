"""The attention backward's trip rule: which query blocks a KV block visits, and which of them
the gradient step masks (docs/guide/attention.md, "The backward").

The backward's output tile is one KV block ``j`` (``block_n`` keys) of one KV head; its K tiles
are the query blocks (``block_m`` rows) of every query head of the KV head's group, head by
head.  Row ``r`` sees keys ``0 .. r + offset`` (causal; ``offset`` 0 top-left, ``seq_k -
seq_q`` bottom-right), so KV block ``j`` is seen from row ``j * block_n - offset`` on: the
blocks above the diagonal are skipped, and a KV block no row sees visits none (its dK and dV
are 0).  The first few visited blocks straddle the diagonal and are masked.  The tails are
masked too, by the kernel (they are facts of the problem, not of the rule): rows past ``seq_q``
(the last query block of each head) and keys past ``seq_k`` (the last KV block) load as zeros
(the rank-4 tensor maps' out-of-bounds fill), and the gradient step sets their P and dS to 0.

:meth:`BackwardTrips.coverage_faults` is the rule's own proof, which the core runs with the
plan's (``pipeline_core.agents.prove``): on small problems of every shape it checks every
(query row, key) pair the mask keeps is visited, and every visited pair it drops is masked.  A
diagonal start one block late (:attr:`BackwardTrips.start_shift`, the mutation) is refused.

The deterministic kernel orders the dQ adds to each (batch, query head, query block) by the
KV block's :meth:`BackwardTrips.turn_rank` (:meth:`~BackwardTrips.turn_orders` hands the core
every query block's adders in launch order, which it proves take turns 0, 1, ..).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from pipeline_core.plugin_api import TripSample

from pipeline_core_schedules_attention.tiles import SHAPES as _SHAPES, CausalTiles


@attrs.frozen(kw_only=True)
class BackwardTrips(CausalTiles):
    """How many query blocks each KV block visits and which of them are masked: one home for
    the rule the emitter, the proof and the host call follow.  ``problem`` is ``(seq_q, seq_k,
    group)``: the query heads of one KV head (grouped-query attention) run one after another
    inside the output tile, so dK and dV sum over them in registers."""

    #: query blocks the diagonal start is moved by: 0 in every kernel; a mutation test's edit
    #: (a start one block late skips rows that see the block), which the proof refuses
    start_shift: int = 0
    #: KV blocks the turn rank is moved by: 0 in every kernel; a mutation test's edit (the
    #: first adder waits for a turn no add releases), which the proof refuses
    turn_shift: int = 0
    #: the persistent grid's order of output tiles.  False (the deterministic kernel, whose
    #: proof reads the order: :meth:`position`): heads innermost, every head's KV block j
    #: before any head's j + 1.  True: the call's order, the kernel's ``hg`` and ``snake``
    #: arguments (tile_order.py, the forward's map with a KV block's work reversed): groups of
    #: ``hg`` heads side by side, each group's KV blocks heaviest first.  Without the mask the
    #: call takes ``hg`` = 1, a head's KV blocks back to back, so the CTAs in flight share few
    #: heads, whose Q, dO and dQ accumulator rows stay in L2 (1.01-1.09x heads innermost on the
    #: H200); causal, :func:`~.tile_order.choose` balances the CTAs' work (round-robin over one
    #: head's blocks gives one CTA the heavy blocks of every head: 0.73-0.83x).  The
    #: deterministic adds keep heads innermost: each KV block waits for the one before on every
    #: query block, and a head's blocks in flight together queue along that chain (0.74-0.85x
    #: without the mask) (benchmarks/attention_bwd_main_check.py --variants,
    #: docs/guide/attention.md)
    grouped: bool = False

    def query_blocks(self, seq_q: int) -> int:
        return -(-seq_q // self.block_m)

    def kv_blocks(self, seq_k: int) -> int:
        return -(-seq_k // self.block_n)

    def first_block(self, kv_block: int, seq_q: int, seq_k: int) -> int:
        """The first query block KV block ``kv_block`` visits (``query_blocks`` when none):
        the block of the first row that sees its first key."""
        if not self.causal:
            return 0
        row = max(0, kv_block * self.block_n - self.offset(seq_q, seq_k))
        return min(self.query_blocks(seq_q), row // self.block_m + self.start_shift)

    def masked_blocks(self, kv_block: int, seq_q: int, seq_k: int) -> int:
        """How many query blocks from the first one straddle the diagonal (some row sees only
        part of the KV block): those run the mask, the later ones see every key of it."""
        if not self.causal:
            return 0
        first = self.first_block(kv_block, seq_q, seq_k)
        # query block m misses some key of the block when its first row sees less than the
        # last key: m * block_m + offset < last_key
        last_key = min((kv_block + 1) * self.block_n, seq_k) - 1
        limit = last_key - self.offset(seq_q, seq_k)
        upto = min(self.query_blocks(seq_q), -(-limit // self.block_m)) if limit > 0 else 0
        return max(0, upto - first)

    def trips(self, kv_block: int, seq_q: int, seq_k: int, group: int = 1) -> int:
        """The K tiles KV block ``kv_block`` visits: its query blocks, for each query head of
        its group."""
        return group * (self.query_blocks(seq_q) - self.first_block(kv_block, seq_q, seq_k))

    def visited(self, kv_block: int, seq_q: int, seq_k: int) -> Iterable[tuple[int, bool]]:
        """(query block, masked) of each query block ``kv_block`` visits for one head."""
        first = self.first_block(kv_block, seq_q, seq_k)
        masked = self.masked_blocks(kv_block, seq_q, seq_k)
        for m in range(first, self.query_blocks(seq_q)):
            yield m, m < first + masked

    #: :meth:`turn_rank` as the kernel's C (``nb``: the output tile's KV block); its
    #: :attr:`turn_shift` is no kernel's (the emitter refuses it)
    TURN_RANK_C = "nb"

    def turn_rank(self, kv_block: int) -> int:
        """KV block ``kv_block``'s rank among the KV blocks that add to a query block's dQ
        (its turn is ``slots * rank + slot``, a slot per dQ writer).  The visitors of a query
        block are KV blocks 0 .. some last one: :meth:`first_block` grows with the KV block, so
        every block before a visitor visits too, causal or not, from top-left or bottom-right; the
        rank is the block's index (C: ``nb``), the same for every query head of its group (each
        head's dQ rows its own part, added to by its KV head's blocks only)."""
        return kv_block + self.turn_shift

    def position(self, kv_head: int, kv_block: int, kv_heads: int, kv_blocks: int) -> int:
        """The launch position of output tile (``kv_head``, ``kv_block``) among ``kv_heads`` x
        ``kv_blocks`` (the persistent CTAs take positions in ascending order) where the order
        is the rule's (not :attr:`grouped`: heads innermost; :data:`TILE_C` its inverse, the
        kernel's).  A grouped order is the call's, which no proof reads: ValueError."""
        if self.grouped:
            raise ValueError("a grouped launch order is the call's (hg, snake): the rule "
                             "knows no position; build with grouped=False to prove turns")
        return kv_head + kv_heads * kv_block

    #: the inverse of :meth:`position` as the kernel's C declarators of ``tile`` (``BHK`` KV
    #: heads, ``NB`` KV blocks)
    TILE_C = "const int bhk = tile % BHK, nb = tile / BHK;"

    def turn_orders(self) -> Iterable[tuple[str, tuple[int, ...]]]:
        """For each query block of the small problems :meth:`problems` lists (one head of two,
        the second's tiles launched among the first's as :meth:`position` puts them), the turn
        ranks of the KV blocks adding to its dQ, in launch order; the core proves they give
        turns 0, 1, .. (agents/prove_reduction.py)."""
        for seq_q, seq_k in self.problems():
            adders: dict[int, list[int]] = {}
            blocks = self.kv_blocks(seq_k)
            for j in sorted(range(blocks), key=lambda j: self.position(0, j, 2, blocks)):
                for m, _ in self.visited(j, seq_q, seq_k):
                    adders.setdefault(m, []).append(self.turn_rank(j))
            for m in sorted(adders):
                yield (f"query block {m} of seq_q {seq_q}, seq_k {seq_k} ({self.align})",
                       tuple(adders[m]))

    # --- the TripRule the core asks (pipeline_core.tiles) ---------------------------------

    @property
    def uniform(self) -> bool:
        """Causal KV blocks visit different counts (0 among them); without the mask every one
        visits every query block of every head of its group."""
        return not self.causal

    def trip_counts(self, problem: tuple[int, int, int]) -> tuple[int, ...]:
        seq_q, seq_k, group = problem
        return tuple(self.trips(j, seq_q, seq_k, group) for j in range(self.kv_blocks(seq_k)))

    def masked_trips(self, problem: tuple[int, int, int]) -> tuple[int, ...]:
        """Each KV block's masked query blocks per head (its first ones; the kernel masks
        query block ``m`` of each head when ``m < first + masked``)."""
        seq_q, seq_k, _ = problem
        return tuple(self.masked_blocks(j, seq_q, seq_k) for j in range(self.kv_blocks(seq_k)))

    def sample(self, k_tiles: int) -> TripSample | None:
        if not self.causal:
            return None
        seq = k_tiles * self.block_m
        return TripSample(trips=self.trip_counts((seq, seq, 1)), full=self.query_blocks(seq),
                          key="causal", title="causal bounds", numbers={"seq": seq},
                          problem=f"one head, {seq} queries and keys, each KV block its own "
                                  "query blocks", unit="query blocks",
                          names=("query_blocks", "full_blocks"), reference="without the mask")

    def document(self) -> dict[str, Any]:
        return {"causal": self.causal, "block_m": self.block_m, "block_n": self.block_n,
                "align": self.align, "masked_ops": list(self.masked_ops), "loop": "query blocks",
                "order": "the call's (hg, snake)" if self.grouped else "heads innermost"}

    # --- the rule's own proof -------------------------------------------------------------

    def problems(self) -> list[tuple[int, int]]:
        """Small (seq_q, seq_k) of every shape :meth:`coverage_faults` checks."""
        out = []
        for mq, nk, tq, tk in _SHAPES:
            sq, sk = mq * self.block_m + tq, nk * self.block_n + tk
            if sq and sk:
                out.append((sq, sk))
        return out

    def coverage_faults(self) -> tuple[str, ...]:
        """Every (query row, key) pair the mask keeps lies in a visited query block of its KV
        block, and every visited pair it drops lies in a masked one; one line per fault."""
        faults: list[str] = []
        for seq_q, seq_k in self.problems():
            off = self.offset(seq_q, seq_k)
            for j in range(self.kv_blocks(seq_k)):
                seen = dict(self.visited(j, seq_q, seq_k))
                keys = range(j * self.block_n, min((j + 1) * self.block_n, seq_k))
                for m in range(self.query_blocks(seq_q)):
                    rows = range(m * self.block_m, min((m + 1) * self.block_m, seq_q))
                    keep = [not self.causal or k <= r + off for r in rows for k in keys]
                    if any(keep) and m not in seen:
                        faults.append(f"KV block {j} of seq_q {seq_q}, seq_k {seq_k} "
                                      f"({self.align}) skips query block {m}, whose rows see "
                                      "its keys: their dK, dV and dQ terms are lost")
                    elif m in seen and not all(keep) and not seen[m]:
                        faults.append(f"KV block {j} of seq_q {seq_q}, seq_k {seq_k} "
                                      f"({self.align}) visits query block {m} unmasked, whose "
                                      "rows must not see some of its keys")
                if faults:
                    return tuple(faults)
        return tuple(faults)
