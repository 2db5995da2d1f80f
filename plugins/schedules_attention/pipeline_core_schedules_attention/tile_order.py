"""The persistent grid's order of output tiles, and its choice per causal call
(docs/guide/attention.md, "The causal tile order").

A persistent CTA runs tiles ``blockIdx.x, + gridDim.x, ...``: it takes one position in each
round of ``gridDim.x`` consecutive positions.  This module owns the map from position to
(head, query block), written once as C declarators for the kernel (:func:`order_exprs`) and
once in Python for the host's choice and the tests (:func:`tile_at`); a test holds the two to
the same answer on every position.

* Not causal, every tile costs the same: head-major, a head's tiles back to back (its K and
  V read once from memory).
* Causal, a query block's cost is its KV blocks (``LoopBounds.trips``), 1 to ``MT``.  The
  tiles run heaviest first, as FA3 orders them, within groups of ``hg`` heads side by side
  (few heads in flight at once, so their K and V stay in L2); with ``snake`` every other full
  round runs its positions backwards, so the CTA that took a round's heaviest tile takes the
  next round's lightest.  Which (``hg``, ``snake``) balances the CTAs depends on the heads,
  the query blocks and the grid: with groups of 8 heads, head dim 128 causal at S = 4096 (64
  heads of 32 query blocks on 132 CTAs) left its busiest CTA 1.27x the mean work, since a
  round of 132 positions spans half a group, query blocks 32 down to 16.  :func:`choose`
  picks, per call, the order whose busiest CTA has the least work under that cost (the plan's
  trips plus :data:`TILE_OVERHEAD_BLOCKS`); among near ties it keeps the default (8 heads, no
  snake), else takes the fewest heads in flight.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

#: head-group sizes :func:`choose` weighs (each with and without the snake)
GROUPS = (1, 2, 4, 8, 16)
#: what a tile costs beyond its KV blocks, in KV blocks: the prologue's S and softmax and the
#: epilogue's PV that overlap nothing of their own tile, and the store (an estimate)
TILE_OVERHEAD_BLOCKS = 1.0
#: loads within this fraction of the best count as a tie (then the default, else the fewest
#: heads in flight)
TIE = 0.01


@attrs.frozen(kw_only=True)
class TileOrder:
    """The kernel's ``hg`` and ``snake`` arguments (causal kernels read them)."""

    hg: int = 8
    snake: bool = False


def order_exprs(causal: bool, *, head: str = "bh", block: str = "tile_m", heads: str = "BH",
                blocks: str = "MT", tile: str = "tile", snake: bool = True,
                base: str = "") -> tuple[str, ...]:
    """C declarators ``p = ...``, ``bh = ...``, ``tile_m = ...`` of persistent tile index
    ``tile`` (of the kernel's ``tile, MT, BH, TILES``, ``gridDim.x`` and, causal, its ``hg``
    and ``snake`` arguments), the same for the producer and the consumers.  The one map of
    every attention kernel's order, named for each: the backward declares ``head`` and ``block``
    over ``heads`` x ``blocks`` (its block ``blocks - 1 - tile_m`` is then the heaviest-first
    rank, a KV block's: tile costs reversed for :func:`choose`); the packed varlen kernel orders
    the tiles ``tile`` of one sequence, with no snake (``snake`` False: no ``p``) and its
    heads after the sequence's first (``base``)."""
    at = f"{base} + " if base else ""
    if not causal:
        return f"{head} = {at}{tile} / {blocks}", f"{block} = {tile} % {blocks}"
    g = "(int)gridDim.x"
    rnd, lane = f"({tile} / {g})", f"({tile} % {g})"
    p = (f"p = (snake && ({rnd} & 1) && ({rnd} + 1) * {g} <= TILES) ? "
         f"{rnd} * {g} + {g} - 1 - {lane} : {tile}")
    index = "p" if snake else tile
    first = f"({index} / ({blocks} * hg)) * hg"  # the group's first head
    # the last group may be short
    n, r = f"min(hg, {heads} - {first})", f"({index} % ({blocks} * hg))"
    return (*((p,) if snake else ()), f"{head} = {at}{first} + {r} % {n}",
            f"{block} = {blocks} - 1 - {r} / {n}")


def _causal_map(t: Any, *, bh: int, mt: int, grid: int, order: TileOrder, where: Any,
                minimum: Any) -> tuple[Any, Any]:
    """(head, query block) of causal tile index ``t``, an int or a numpy array of them
    (``where`` and ``minimum``: the conditional and the minimum for that kind of value)."""
    rnd, lane = t // grid, t % grid
    p = t
    if order.snake:  # every other full round backwards
        p = where((rnd % 2 == 1) & ((rnd + 1) * grid <= bh * mt), rnd * grid + grid - 1 - lane, t)
    first = (p // (mt * order.hg)) * order.hg  # the group's first head
    heads, r = minimum(order.hg, bh - first), p % (mt * order.hg)  # the last group may be short
    return first + r % heads, mt - 1 - r // heads


def tile_at(tile: int, *, causal: bool, bh: int, mt: int, grid: int,
            order: TileOrder = TileOrder()) -> tuple[int, int]:
    """(head, query block) of persistent tile index ``tile``: :func:`order_exprs` in Python."""
    if not causal:
        return tile // mt, tile % mt
    return _causal_map(tile, bh=bh, mt=mt, grid=grid, order=order,
                       where=lambda c, a, b: a if c else b, minimum=min)


def busiest(trips: Sequence[int], *, bh: int, grid: int, order: TileOrder, np: Any) -> float:
    """The most work one CTA gets (in KV blocks, each tile its ``trips[query block]`` plus
    :data:`TILE_OVERHEAD_BLOCKS`) when ``grid`` persistent CTAs run ``bh`` heads in ``order``
    (``np``: numpy, which the call has at hand; every tile at once)."""
    mt = len(trips)
    t = np.arange(bh * mt)
    _, block = _causal_map(t, bh=bh, mt=mt, grid=grid, order=order, where=np.where,
                           minimum=np.minimum)
    cost = np.asarray(trips, dtype=np.float64)[block] + TILE_OVERHEAD_BLOCKS
    return _most_loaded(cost, grid, np)


def _most_loaded(cost: Any, grid: int, np: Any) -> float:
    """The most work one of ``grid`` round-robin CTAs gets, tile ``i`` (cost ``cost[i]``) going
    to CTA ``i % grid``."""
    return float(np.bincount(np.arange(len(cost)) % grid, weights=cost,
                             minlength=min(grid, len(cost))).max())


def _least_loaded(found: Sequence[tuple[float, TileOrder]]) -> TileOrder:
    """Of (busiest CTA's work, order) pairs, the order with the least; among those within
    :data:`TIE` of it, the default order (groups of 8, no snake: the order measured before this
    choice existed) where it is one of them, else the fewest heads in flight (the smallest
    group, then no snake)."""
    best = min(load for load, _ in found)
    near = [o for load, o in found if load <= best * (1 + TIE)]
    return TileOrder() if TileOrder() in near else min(near, key=lambda o: (o.hg, o.snake))


def choose(trips: Sequence[int], *, bh: int, grid: int, np: Any) -> TileOrder:
    """The causal order whose busiest CTA has the least work (:func:`busiest`), ties broken
    by :func:`_least_loaded`."""
    return _least_loaded([(busiest(trips, bh=bh, grid=grid, order=o, np=np), o)
                          for o in (TileOrder(hg=g, snake=s) for g in GROUPS
                                    for s in (False, True))])


def varlen_order_exprs(causal: bool) -> tuple[str, ...]:
    """The packed varlen kernel's order within a sequence (varlen_tiles.py): C declarators
    ``bh = ...``, ``tile_m = ...`` of tile ``r`` of sequence ``seq`` (its ``MTS`` query blocks
    per head, ``H`` heads; the kernel's ``hg``), the batch's tiles running sequence by sequence.
    Not causal, head-major (a head's query blocks back to back, its K and V read once); causal,
    the fixed-length causal order within the sequence (:func:`order_exprs` with no snake):
    groups of ``hg`` heads side by side, each group's query blocks heaviest first
    (:func:`varlen_choose` picks ``hg``)."""
    return order_exprs(causal, heads="H", blocks="MTS", tile="r", snake=False, base="seq * H")


#: the packed varlen kernel's position in round ``k`` (its persistent index ``k * gridDim.x +
#: blockIdx.x``; ``varlen_position``'s C: a lambda of the kernel's ``snake`` argument): with the
#: snake every other round of ``gridDim.x`` positions runs backwards.  A round's positions stay
#: its own, so each CTA's positions still only grow (its cursor over ``cu_seqlens_q`` only
#: moves on), and a last round the batch fills in part hands its tiles to the CTAs at its end.
#: Written per round, not per index: no division by ``gridDim.x`` (the varlen consumers' loop
#: then moves as few values to uniform registers as before the snake)
VARLEN_POSITION = ("auto position = [&](int k) {",
                   "    return k * (int)gridDim.x + ((snake && (k & 1)) ? (int)gridDim.x - 1 - "
                   "(int)blockIdx.x : (int)blockIdx.x);",
                   "};")


def varlen_position(t: Any, *, grid: int, snake: bool) -> Any:
    """:data:`VARLEN_POSITION` in Python: the batch position persistent index ``t`` (an int or
    a numpy array) takes."""
    if not snake:
        return t
    rnd = t // grid
    return rnd * grid + (grid - 1 - t % grid) * (rnd % 2) + (t % grid) * (1 - rnd % 2)


def varlen_tile_at(r: Any, *, heads: int, mts: int, causal: bool, hg: int = 8,
                   minimum: Any = min) -> tuple[Any, Any]:
    """(head, query block) of tile ``r`` (an int, or a numpy array of them with ``minimum``
    numpy's) of a sequence of ``mts`` query blocks per head: :func:`varlen_order_exprs` in
    Python (:func:`tile_at`'s map with no snake)."""
    if not causal:
        return r // mts, r % mts
    return _causal_map(r, bh=heads, mt=mts, grid=1, order=TileOrder(hg=hg, snake=False),
                       where=None, minimum=minimum)


def varlen_choose(trips: Sequence[int], *, heads: int, batch: int, grid: int,
                  np: Any) -> TileOrder:
    """The causal varlen kernel's ``hg`` and ``snake``: the order whose busiest CTA has the
    least work when ``batch`` sequences of one head's ``trips`` per query block (the longest
    the host knows of: ``max_seqlen_q``'s) run on ``grid`` CTAs, positions dealt round-robin
    (:func:`varlen_position`); ties as :func:`choose` breaks them.  On a batch of equal lengths
    it balances as the fixed-length call's choice does (D 128 causal, 4 x 4096: groups of 2,
    busiest CTA 1.06x the mean, against 1.15x with every head of a sequence in one group; D 64
    on 192-row tiles: groups of 8 with the snake, 1.05x, against 1.13x without it)."""
    mts = len(trips)
    r = np.arange(heads * mts)
    found = []
    for g in GROUPS:
        _, block = varlen_tile_at(r, heads=heads, mts=mts, causal=True, hg=g,
                                  minimum=np.minimum)
        cost = np.tile(np.asarray(trips, dtype=np.float64)[block] + TILE_OVERHEAD_BLOCKS, batch)
        for snake in (False, True):
            # every index of every round, the last one's past the batch dealing nothing
            at = varlen_position(np.arange(-(-len(cost) // grid) * grid), grid=grid, snake=snake)
            dealt = np.where(at < len(cost), cost[np.minimum(at, len(cost) - 1)], 0.0)
            found.append((_most_loaded(dealt, grid, np), TileOrder(hg=g, snake=snake)))
    return _least_loaded(found)
