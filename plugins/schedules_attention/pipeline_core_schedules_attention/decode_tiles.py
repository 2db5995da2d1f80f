"""Decoding's trip rule: which KV blocks each split of a decode output tile visits, which of them
the softmax masks, which pages the producer gathers them from, and how the splits' partial
outputs are combined (docs/guide/attention.md, "Decoding over a KV cache").

A decode step has few query tokens per sequence (``sq``, 1 to 16; up to 128 to verify
speculated tokens) against a long cache of keys.  The kernel packs the query heads of one KV
head (the GQA group) with the tokens into the 64 rows of one wgmma tile, token-major: row ``r``
is token ``t0 + r // HB`` of query head ``HB * chunk + r % HB`` of the group (:func:`tile_shape`:
``HB`` the group rounded up to a power of two, at most 64; ``TB = 64 / HB`` tokens per tile), so
one pass over a KV head's pages serves every query head that reads it.  Where a KV head's
queries fit in 8 or 16 rows, the kernel takes a narrow tile of that many rows instead
(:func:`narrow_rows`; the queries become wgmma's N: attention_decode.cuh, "Narrow tiles"), packed
the same way.  An output tile is
(sequence, KV head, head chunk, token block); with split-KV, ``splits`` CTAs share it, each
visiting an even share of its KV blocks, and the last to finish combines their partial outputs
(the core's cross-CTA reduction, ``AgentSpec.reduction``; :meth:`DecodeBounds.fixups` gives the
proof each tile's shares and the combine's order, split 0 first, so the result's bits never
depend on which split came last).

Which keys a row sees: every key of its sequence (``cache_seqlens[b]`` of them), or, causal
with ``sq > 1``, keys up to ``len - sq + t`` (the diagonal aligned bottom-right: the last token
is the newest key), as FlashAttention's ``flash_attn_with_kvcache``.  The token block's KV
blocks are those its last token sees (the forward's :class:`~.tiles.LoopBounds` at
``block_m = TB``, bottom-right: one home for the causal bounds), and its masked ones those past
its first token's last key or holding the sequence's end.

Pages: the cache is ``[pages, page_size, Hkv, D]`` read through ``block_table[b]``, or a
contiguous ``[B, capacity, Hkv, D]`` (one page per sequence, ``page_size`` 0 here).  The
producer copies a KV block in chunks of ``R = gcd(page_size, block_n)`` rows, each from one
page: it reads the chunk's table entry, then issues the copy at that page (the index in a
register the copy's coordinates take).  A chunk wholly past the sequence's end reads no entry
(the table's row may end there) and copies from page -1, outside the tensor: TMA writes zeros
and still counts the bytes.  The keys past the end inside the last chunk are the page's own
rows, any bits; the mask drops their scores, and the kernel clears their V rows before PV
(``pcat::decode_pv``), since 0 x NaN is NaN.  :meth:`DecodeBounds.coverage_faults` proves all
of it over sequences of length 0, 1, one page + 1, around the blocks, pages smaller than a
block, larger, and not a power of two; a split's start one block off, a chunk copied with the
previous chunk's table entry (the read moved after its use), a short counter, and a combine
that skips a split are refused (the mutation fields).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from pipeline_core.plugin_api import Fixup, TripSample

from pipeline_core_schedules_attention.tiles import LoopBounds

#: rows of a decode output tile: one consumer warp group's wgmma M
DECODE_ROWS = 64
#: rows of the narrow tiles (attention_decode.cuh, "Narrow tiles"), fewest first: the queries are
#: wgmma's N, the keys its M, where a GQA group's heads and the tokens fit in 8 or 16 rows
NARROW_ROWS = (8, 16)


def tile_shape(group: int, rows: int = DECODE_ROWS) -> tuple[int, int, int]:
    """``(HB, TB, HC)`` for a GQA group of ``group`` query heads in tiles of ``rows`` rows: the
    heads per tile (the group rounded up to a power of two, at most ``rows``), the tokens per
    tile and the head chunks per KV head.  A power of two keeps a row's token and head a shift
    and a mask apart; a group that is not one reads the next group's heads into the spare rows
    (computed, never stored)."""
    hb = min(rows, 1 << max(0, (group - 1).bit_length()))
    return hb, rows // hb, -(-group // hb)


def narrow_rows(group: int, tokens: int) -> int:
    """The fewest rows of a narrow tile that hold every query of a KV head (the group's heads
    to a power of two times the tokens to one), so one tile a KV head reads its pages once, as
    the 64-row tile does; 0 where none does."""
    for rows in NARROW_ROWS:
        hb, tb, hc = tile_shape(group, rows)
        if hc == 1 and tb >= tokens:
            return rows
    return 0


def chunk_rows(page_size: int, block_n: int) -> int:
    """The rows one copy brings (one page's share of a KV block) for a cache of pages of
    ``page_size`` rows: the whole block on a contiguous cache (``page_size`` 0), else
    ``gcd(page_size, block_n)``, so no chunk crosses a page; the kernel's ``page_chunks`` is
    ``block_n`` over it."""
    return block_n if page_size == 0 else math.gcd(page_size, block_n)


def _ints(items: Iterable[int]) -> tuple[int, ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class DecodeProblem:
    """One decode launch as the rule sees it: each sequence's cache length, the query tokens
    per sequence, the tokens per tile (``TB``), the splits and the page size (0: contiguous)."""

    lengths: tuple[int, ...] = attrs.field(converter=_ints)
    sq: int
    tokens: int
    splits: int = 1
    page_size: int = 0

    def __str__(self) -> str:
        pages = f"pages of {self.page_size}" if self.page_size else "contiguous"
        return (f"lengths {list(self.lengths)}, {self.sq} tokens ({self.tokens} a tile), "
                f"{self.splits} split(s), {pages}")


@attrs.frozen(kw_only=True)
class Split:
    """One split of one output tile: its first KV block, its count and its first masked block
    (global block indices: the kernel's ``KF``, ``KT``, ``FM``)."""

    first: int
    trips: int
    first_masked: int


@attrs.frozen(kw_only=True)
class DecodeBounds:
    """The decode kernel's trip rule (the module says what it is); ``split`` whether the kernel
    is the split-KV one (its problems then have 2 or more splits, combined by the reduction)."""

    causal: bool
    block_n: int
    split: bool = False
    #: copies per KV block (the kernel's ``-p page_chunks``), each ``block_n / chunks`` rows
    chunks: int = 1
    #: the body ops that apply the mask on a masked K tile (the softmax steps)
    masked_ops: tuple[int, ...] = attrs.field(converter=_ints, default=())
    # --- mutations: 0 / -1 in every kernel; a test's edit, which the proof refuses ---------
    #: KV blocks every split's first block is moved by
    split_shift: int = 0
    #: chunks each copy's table entry lags (1: a chunk copied at the page the previous chunk's
    #: read gave, as when the read of its own entry is moved after the copy)
    page_lag: int = 0
    #: added to the count each tile's counter must reach
    arrivals_shift: int = 0
    #: a split the combine leaves out (-1: none)
    skip_split: int = -1

    # --- the rule ------------------------------------------------------------------------

    def _rows(self, tokens: int) -> LoopBounds:
        return LoopBounds(causal=self.causal, block_m=tokens, block_n=self.block_n,
                          align="bottom_right" if self.causal else "top_left")

    def blocks(self, length: int) -> int:
        return -(-length // self.block_n)

    def visited(self, qt: int, tokens: int, sq: int, length: int) -> int:
        """The KV blocks token block ``qt`` visits over all its splits (those its last token
        sees)."""
        return self._rows(tokens).trips(qt, sq, length)

    def first_masked(self, qt: int, tokens: int, sq: int, length: int) -> int:
        """Its first masked KV block (global): past its first token's last key, or the one
        holding the sequence's end."""
        return self._rows(tokens).first_masked(qt, sq, length)

    def splits_of(self, qt: int, tokens: int, sq: int, length: int,
                  splits: int) -> tuple[Split, ...]:
        """Each split's share: ``ceil(visited / splits)`` blocks each, in order (the last ones
        shorter or empty)."""
        nb = self.visited(qt, tokens, sq, length)
        per = -(-nb // splits)
        fm = self.first_masked(qt, tokens, sq, length)
        return tuple(Split(first=s * per + self.split_shift,
                           trips=max(0, min(per, nb - s * per)), first_masked=fm)
                     for s in range(splits))

    def copies(self, block: int, length: int, page_size: int) -> Iterator[tuple[int, int, int]]:
        """The copies of KV block ``block`` in order: ``(first key, table entry, row in the
        page)``; entry -1 for a chunk wholly past the end (no read, page -1: zeros).  A
        contiguous cache (``page_size`` 0) has one copy at entry 0 (the sequence's own rows).
        ``page_lag`` (a mutation) gives each copy the entry read ``page_lag`` chunks before."""
        r = self.block_n // self.chunks
        reads = []
        for c in range(self.chunks):
            key = block * self.block_n + c * r
            if page_size == 0:
                reads.append((key, 0 if key < length else -1, key))
            elif key < length:
                reads.append((key, key // page_size, key % page_size))
            else:
                reads.append((key, -1, 0))
        for c, (key, _, _) in enumerate(reads):
            _, entry, row = reads[max(0, c - self.page_lag)]
            yield key, entry, row

    # --- the TripRule the core asks (pipeline_core.tiles) ---------------------------------

    @property
    def uniform(self) -> bool:
        """Never: each split's count follows its sequence's length, read at run time."""
        return False

    def tiles(self, problem: DecodeProblem) -> Iterator[tuple[int, int, Split]]:
        """``(sequence, token block, split)`` of every output tile's splits in launch order
        (one KV head's: every head and head chunk runs the same)."""
        for b, length in enumerate(problem.lengths):
            for qt in range(-(-problem.sq // problem.tokens)):
                for sp in self.splits_of(qt, problem.tokens, problem.sq, length,
                                         problem.splits):
                    yield b, qt, sp

    def trip_counts(self, problem: DecodeProblem) -> tuple[int, ...]:
        return tuple(sp.trips for _, _, sp in self.tiles(problem))

    def masked_trips(self, problem: DecodeProblem) -> tuple[int, ...]:
        """Each split's first masked K tile counted from its own first block."""
        return tuple(max(0, min(sp.trips, sp.first_masked - sp.first))
                     for _, _, sp in self.tiles(problem))

    def sample(self, k_tiles: int) -> TripSample | None:
        """A batch of uneven lengths whose longest visits ``k_tiles`` KV blocks, one token,
        against every sequence padded to the longest."""
        longest = k_tiles * self.block_n
        lengths = (longest, longest // 2 + 17, 1, 0, longest // 4)
        problem = DecodeProblem(lengths=lengths, sq=1, tokens=DECODE_ROWS // 8,
                                splits=2 if self.split else 1)
        return TripSample(trips=self.trip_counts(problem), full=k_tiles, key="decode",
                          title="decode batch", numbers={"longest": longest},
                          problem=f"one KV head, cache lengths {', '.join(map(str, lengths))}",
                          unit="KV blocks", names=("kv_blocks", "padded_blocks"),
                          reference="padded to the longest")

    def document(self) -> dict[str, Any]:
        return {"decode": True, "causal": self.causal, "block_n": self.block_n,
                "split": self.split, "chunks": self.chunks, "masked_ops": list(self.masked_ops)}

    # --- the rule's own proof -------------------------------------------------------------

    def problems(self) -> list[DecodeProblem]:
        """The launches :meth:`coverage_faults` and :meth:`fixups` check: lengths 0, 1, 7, a
        block and around it, one page + 1, several blocks with tails; 1, 3, 16 and 17 tokens
        over tiles of 1, 2, 8 and 64 tokens; contiguous, pages smaller than a block, larger,
        and not a power of two; splits 1 (unsplit kernel) or 2, 3, 5 (split)."""
        n, r = self.block_n, self.block_n // self.chunks
        out = []
        # the page sizes this kernel's chunks serve (the call's rule, chunk_rows): contiguous
        # and pages of whole blocks for one copy a block, else pages of r rows and of 3r (not
        # a power of two)
        for page in ((0, n, 2 * n) if self.chunks == 1 else (r, 3 * r)):
            lengths = tuple(sorted({0, 1, 7, n - 1, n, n + 1, (page or n) + 1, 3 * n + 5,
                                    5 * n}))
            for sq in (1, 3, 16, 17):
                for tokens in (1, 2, 8, 64):
                    for splits in ((2, 3, 5) if self.split else (1,)):
                        out.append(DecodeProblem(lengths=lengths, sq=sq, tokens=tokens,
                                                 splits=splits, page_size=page))
        return out

    def coverage_faults(self) -> tuple[str, ...]:
        """Per problem, output tile and split: every key a row sees lies in exactly one split's
        KV blocks, every visited block holds a key some row sees, a visited block some row
        does not see whole is masked; every copy of a visited block reads its keys from the
        page its table entry names, no copy crosses a page or reads an entry past the
        sequence's pages, and the keys past the end are zeroed or masked.  One line per fault,
        the first problem's only."""
        for problem in self.problems():
            faults = [f for b, length in enumerate(problem.lengths)
                      for qt in range(-(-problem.sq // problem.tokens))
                      for f in self._tile_faults(problem, b, length, qt)]
            if faults:
                return tuple(faults)
        return ()

    def _tile_faults(self, p: DecodeProblem, b: int, length: int, qt: int) -> list[str]:
        n = self.block_n
        where = f"token block {qt} of sequence {b} ({length} keys) of {p}"
        t0, t1 = qt * p.tokens, min(p.sq, (qt + 1) * p.tokens) - 1
        # each row's last key (its keys are 0 .. last)
        lasts = [length - 1 if not self.causal else min(length - 1, length - p.sq + t)
                 for t in range(t0, t1 + 1)]
        seen = max(lasts) + 1  # keys 0 .. seen - 1 some row sees
        whole = min(lasts) + 1  # keys 0 .. whole - 1 every row sees
        visits: dict[int, int] = {}
        out: list[str] = []
        for s, sp in enumerate(self.splits_of(qt, p.tokens, p.sq, length, p.splits)):
            for j in range(sp.first, sp.first + sp.trips):
                visits[j] = visits.get(j, 0) + 1
                if j * n >= seen:
                    out.append(f"{where}: split {s} visits KV block {j}, which no row sees")
                elif (j + 1) * n > whole and j < sp.first_masked:
                    out.append(f"{where}: split {s} visits KV block {j} unmasked, whose keys "
                               "past a row's last (or the sequence's end) it must not see")
                out += self._chunk_faults(where, j, length, p.page_size)
        for j in range(self.blocks(seen)):
            if visits.get(j, 0) == 0:
                out.append(f"{where}: no split visits KV block {j}, whose keys its rows see: "
                           "their terms are lost")
            elif visits[j] > 1:
                out.append(f"{where}: {visits[j]} splits visit KV block {j}: its terms are "
                           "counted twice")
        return out

    def _chunk_faults(self, where: str, j: int, length: int, page: int) -> list[str]:
        r = self.block_n // self.chunks
        pages = -(-length // page) if page else 1
        out = []
        for key, entry, row in self.copies(j, length, page):
            live = range(key, min(key + r, length))  # the chunk's keys inside the sequence
            if not live:
                if entry != -1:
                    out.append(f"{where}: the copy of keys {key}.. past the end reads table "
                               f"entry {entry} (the table's row may end before it)")
                continue
            if entry < 0 or entry >= pages:
                out.append(f"{where}: the copy of keys {key}.. reads table entry {entry}, "
                           f"outside the sequence's {pages} pages")
                continue
            want = key // page if page else 0
            if entry != want or (page and row != key % page):
                out.append(f"{where}: keys {key}..{live[-1]} are copied from table entry "
                           f"{entry} row {row}, not entry {want} row "
                           f"{key % page if page else key}: the copy used another chunk's "
                           "page (its table read after its use)")
            elif page and row + r > page:
                out.append(f"{where}: the copy of keys {key}..{key + r - 1} crosses the end "
                           f"of page entry {entry}")
        return out

    def fixups(self) -> Iterable[Fixup]:
        """Each output tile of the split problems as its reduction hands it over: the splits'
        KV ranges (an empty split's at the tile's end), the count its counter reaches, and
        the combine's order whichever split arrives last: 0, 1, ... (the same bits every
        run)."""
        if not self.split:
            return ()
        out = []
        for problem in self.problems():
            for b, length in enumerate(problem.lengths):
                for qt in range(-(-problem.sq // problem.tokens)):
                    nb = self.visited(qt, problem.tokens, problem.sq, length)
                    shares = self.splits_of(qt, problem.tokens, problem.sq, length,
                                            problem.splits)
                    parts = [(min(sp.first, nb), min(sp.first, nb) + sp.trips)
                             for sp in shares]
                    order = tuple(s for s in range(problem.splits) if s != self.skip_split)
                    out.append(Fixup(where=f"token block {qt} of sequence {b} of {problem}",
                                     k_tiles=nb, parts=parts,
                                     arrivals=problem.splits + self.arrivals_shift,
                                     orders=(order,) * problem.splits))
        return out


#: what a split costs beyond its KV blocks, in KV blocks: the Q load and the prologue, the
#: partial's store and its share of the combine (an estimate; benchmarks/attention_decode.py)
SPLIT_OVERHEAD_BLOCKS = 1.5
#: the most (output tile, split) pairs a launch may have: the workspace holds one partial each
MAX_SLOTS_PER_SM = 4


def choose_splits(tiles: int, kv_blocks: int, sms: int) -> int:
    """The split count from the wave model: ``tiles`` output tiles of ``kv_blocks`` KV blocks
    each (the cache's capacity: the lengths live on the device) on ``sms`` persistent CTAs,
    each split costing its ``ceil(kv_blocks / s)`` blocks plus
    :data:`SPLIT_OVERHEAD_BLOCKS`; the fewest splits within 2% of the least time, at most
    :data:`MAX_SLOTS_PER_SM` x ``sms`` pairs (the workspace) and ``kv_blocks`` splits."""
    if tiles <= 0 or kv_blocks <= 1:
        return 1
    best: list[tuple[float, int]] = []
    for s in range(1, kv_blocks + 1):
        if s > 1 and tiles * s > MAX_SLOTS_PER_SM * sms:
            break
        waves = -(-tiles * s // sms)
        best.append((waves * (-(-kv_blocks // s) + (SPLIT_OVERHEAD_BLOCKS if s > 1 else 0)),
                     s))
    least = min(t for t, _ in best)
    return min(s for t, s in best if t <= least * 1.02)
