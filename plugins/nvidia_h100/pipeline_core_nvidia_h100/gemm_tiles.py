"""The GEMM's trip rule: a persistent raster of ``ceil(M / BM) x ceil(N / BN)`` output tiles,
each visiting every one of the ``ceil(K / BK)`` K tiles (``pipeline_core.plugin_api.TripRule``,
problem ``(M, N, K)``).

Uniform, so the core's proof of the warp-specialized GEMM runs no output tiles of different
counts back to back (its proofs stay as they were); with ``-p tails=true`` the loads are
zero-filled past the matrix (TMA), so no K tile is masked.  A split-K CTA runs a share of an
output tile's K tiles: the rule counts the tile's.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable

import attrs

from pipeline_core.plugin_api import Fixup, TripSample, UniformTrips


@attrs.frozen(kw_only=True)
class RasterTrips(UniformTrips):
    """Output tiles of ``block_m x block_n`` (in the emitter's grouped raster order, which
    uniform counts make immaterial here), each visiting every K tile of ``block_k``."""

    block_m: int
    block_n: int
    block_k: int

    def trip_counts(self, problem: tuple[int, int, int]) -> tuple[int, ...]:
        m, n, k = problem
        return (-(-k // self.block_k),) * (-(-m // self.block_m) * -(-n // self.block_n))


@attrs.frozen(kw_only=True)
class _VaryingTrips:
    """What the GEMM's rules whose output tiles differ in count share: the tile's blocks, and
    not uniform (the proof also runs output tiles of different counts back to back)."""

    block_m: int
    block_n: int
    block_k: int

    @property
    def uniform(self) -> bool:
        return False


@attrs.frozen(kw_only=True)
class GroupKTrips(_VaryingTrips):
    """grouped_mm's 2-D x 2-D (``-p batch=grouped_k``; the groups split K): problem
    ``(M, N, ks)``, ``ks`` each group's K extent; every group has the same ``block_m x block_n``
    output tiles, group by group, and each of group g's visits ``ceil(ks[g] / block_k)`` K tiles
    (0 for an empty group: its tiles store zeros).  Not uniform, so the proof also runs output
    tiles of different counts back to back (empty, short, longer than the ring).  No K tile is
    masked: a group's tail is zero-filled by TMA through the group's own tensor map."""

    def trip_counts(self, problem: tuple[int, int, tuple[int, ...]]) -> tuple[int, ...]:
        m, n, ks = problem
        per_group = -(-m // self.block_m) * -(-n // self.block_n)
        return tuple(-(-k // self.block_k) for k in ks for _ in range(per_group))

    def masked_trips(self, problem: tuple[int, int, tuple[int, ...]]) -> tuple[int, ...]:
        return self.trip_counts(problem)

    def sample(self, k_tiles: int) -> TripSample | None:
        """Four groups of one output tile each: ``k_tiles`` K tiles, half of them, none, one."""
        ks = tuple(t * self.block_k for t in (k_tiles, k_tiles // 2, 0, 1))
        return TripSample(trips=self.trip_counts((self.block_m, self.block_n, ks)),
                          full=k_tiles, key="group_k", title="groups along K",
                          problem=f"4 groups of {', '.join(map(str, ks))} K",
                          reference="with every group visiting every K tile")

    def document(self) -> dict[str, object]:
        return {"block_m": self.block_m, "block_n": self.block_n, "block_k": self.block_k,
                "groups": "along K (offs, on the device)"}


#: A stream-K problem: (output tiles, K tiles per tile, CTAs of the persistent grid, stream-K
#: tiles: the last ones of the raster, shared by every CTA by K tiles; the others whole)
StreamKProblem = tuple[int, int, int, int]
#: The sample problems the proof of the fixup runs (``StreamKTrips.fixups``): small ones of
#: every kind (one stream-K tile over many CTAs, CTAs spanning three tiles, a range ending on a
#: tile's edge, all tiles stream-K) and the shapes of interest as 128x256 tiles on 132 SMs
#: (2000x5000x3000: 320 tiles of 47 K tiles; 512x28672x4096: 448 of 64; 4000^3: 512 of 63)
STREAM_K_SAMPLES: tuple[StreamKProblem, ...] = (
    (1, 5, 3, 1), (5, 7, 4, 1), (7, 4, 3, 3), (6, 3, 4, 2), (3, 5, 4, 3), (9, 6, 4, 5),
    (320, 47, 132, 56), (448, 64, 132, 52), (512, 63, 132, 116))


def stream_k_tiles(tiles: int, k_tiles: int, ctas: int) -> int:
    """The hybrid's stream-K tiles (docs/guide/matmul.md, "Stream-K"): the last, partial wave's
    ``tiles % ctas`` (all of them under one wave), 0 where the waves are whole or the stream-K
    tiles' K tiles would leave a CTA none (each CTA's share at least one K tile)."""
    sk = tiles % ctas if ctas > 0 else 0
    return sk if sk * k_tiles >= ctas else 0


@attrs.frozen(kw_only=True)
class StreamKTrips(_VaryingTrips):
    """The GEMM's stream-K trip rule (``-p stream_k=true``; docs/guide/matmul.md, "Stream-K"),
    problem :data:`StreamKProblem`: the persistent grid's ``G`` CTAs share the last ``S``
    output tiles of the raster by K tiles, then run the other ``D = tiles - S`` whole (CTA c:
    tiles c, c + G, ..).  The stream-K tiles' ``S * KT`` K tiles, tile-major, are cut into
    ``G`` contiguous ranges, CTA c's ``[c * S * KT / G, (c + 1) * S * KT / G)`` (integer
    division): each CTA gets an equal share to within one K tile, and a tile may be covered by
    two or more CTAs with uneven ranges.  Each piece of a range within one tile is a *work
    unit* (the device loop's output tile, ``kit.tiles.stream_k_tile_loop``, which computes the
    same as :meth:`units`); a unit short of its tile stores its partial sums to workspace slot
    ``2c`` (the CTA's first tile) or ``2c + 1`` (its last) and the tile's last arriver adds the
    slices in K order (:meth:`fixup_order`) before its epilogue.  Not uniform: units of
    different K-tile counts run back to back."""

    @staticmethod
    def cta_range(p: StreamKProblem, cta: int) -> tuple[int, int]:
        """CTA ``cta``'s stream-K K tiles ``[begin, end)``, tile-major over the S tiles."""
        _, kt, ctas, sk = p
        return cta * sk * kt // ctas, (cta + 1) * sk * kt // ctas

    def units(self, p: StreamKProblem, cta: int) -> list[tuple[int, int, int]]:
        """CTA ``cta``'s work units in its order, each ``(tile, first K tile, K tiles)``: its
        stream-K pieces, then its whole tiles."""
        tiles, kt, ctas, sk = p
        begin, end = self.cta_range(p, cta)
        out = []
        at = begin
        while at < end:
            t = at // kt
            stop = min(end, (t + 1) * kt)
            out.append((tiles - sk + t, at - t * kt, stop - at))
            at = stop
        out += [(t, 0, kt) for t in range(cta, tiles - sk, ctas)]
        return out

    def fixup_order(self, p: StreamKProblem, tile: int, last: int) -> list[int]:
        """The CTAs whose slices the fixup of stream-K tile ``tile`` adds, in order, when CTA
        ``last`` arrives last: the device's loop, ``first .. last CTA`` of the tile's K range,
        whoever arrived last (``pcsk::StreamK::fixup``)."""
        tiles, kt, ctas, sk = p
        i = (tile - (tiles - sk)) * kt
        first = ((i + 1) * ctas - 1) // (sk * kt)
        final = ((i + kt) * ctas - 1) // (sk * kt)
        return list(range(first, final + 1))

    def arrivals(self, p: StreamKProblem, tile: int) -> int:
        """The count the kernel compares a tile's arrivals with: its CTAs."""
        return len(self.fixup_order(p, tile, 0)) if tile >= p[0] - p[3] else 1

    def fixups(self) -> Iterable[Fixup]:
        """Every tile of :data:`STREAM_K_SAMPLES` as the kernel hands it over (the core proves
        the ranges, counts and orders: ``agents.prove_fixup``); computed once per rule."""
        return _fixups(self)

    def trip_counts(self, problem: StreamKProblem) -> tuple[int, ...]:
        """Each work unit's K tiles, CTA by CTA."""
        return tuple(n for c in range(problem[2]) for _, _, n in self.units(problem, c))

    def masked_trips(self, problem: StreamKProblem) -> tuple[int, ...]:
        return self.trip_counts(problem)

    def sample(self, k_tiles: int) -> TripSample | None:
        """One CTA's units on 5 tiles of ``k_tiles`` K tiles over 4 CTAs, 1 of them stream-K."""
        p = (5, k_tiles, 4, 1)
        return TripSample(trips=[n for _, _, n in self.units(p, 1)], full=k_tiles,
                          key="stream_k", title="stream-K",
                          problem=f"5 tiles of {k_tiles} K tiles on 4 CTAs, 1 shared",
                          reference="with every tile whole")

    def document(self) -> dict[str, object]:
        return {"block_m": self.block_m, "block_n": self.block_n, "block_k": self.block_k,
                "decomposition": "stream-K: the last partial wave shared by K tiles"}


@functools.cache
def _fixups(rule: StreamKTrips) -> tuple[Fixup, ...]:
    """:meth:`StreamKTrips.fixups`: each sample's units grouped by tile, each tile's CTAs (in
    CTA order) with their ranges, its count and, per CTA arriving last, the fixup's order."""
    out = []
    for p in STREAM_K_SAMPLES:
        parts: dict[int, list[tuple[int, int, int]]] = {}
        for c in range(p[2]):
            for tile, k0, n in rule.units(p, c):
                parts.setdefault(tile, []).append((c, k0, k0 + n))
        for tile in range(p[0]):
            ctas = [c for c, _, _ in parts.get(tile, [])]
            orders = [[ctas.index(c) if c in ctas else len(ctas)
                       for c in rule.fixup_order(p, tile, last)] for last in ctas]
            out.append(Fixup(where=f"tile {tile} of {p[0]} ({p[1]} K tiles, {p[2]} CTAs, "
                                   f"{p[3]} stream-K)",
                             k_tiles=p[1], parts=[(k0, k1) for _, k0, k1 in parts.get(tile, [])],
                             arrivals=rule.arrivals(p, tile),
                             orders=orders if len(ctas) > 1 else ()))
    return tuple(out)
