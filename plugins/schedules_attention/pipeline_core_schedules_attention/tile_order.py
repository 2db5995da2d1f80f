"""The persistent grid's order of output tiles, and its choice per causal call
(docs/guide/attention.md, "The causal tile order").

A persistent CTA takes one position in each round of ``gridDim.x`` consecutive positions: its
``blockIdx.x``-th, or with the snake in odd rounds its ``gridDim.x - 1 - blockIdx.x``-th
(:data:`POSITION`, the loop of every attention kernel with an order: :func:`loop_head`).  This
module owns that and the map from position to (head, query block), each written once as C for
the kernel (:data:`POSITION`, :func:`order_exprs`) and once in Python for the host's choice
and the tests (:func:`position`, :func:`tile_at`); tests hold the two to the same answer on
every position.

* Not causal, every tile costs the same: head-major, a head's tiles back to back (its K and
  V read once from memory).
* Causal, a query block's cost is its KV blocks (``LoopBounds.trips``), 1 to ``MT``.  The
  tiles run heaviest first, as FA3 orders them, within groups of ``hg`` heads side by side
  (few heads in flight at once, so their K and V stay in L2); with ``snake`` every other
  round runs its positions backwards (the last one too, where the tiles fill it in part), so
  the CTA that took a round's heaviest tile takes the next round's lightest.  Which (``hg``,
  ``snake``) balances the CTAs depends on the heads, the query blocks and the grid: with
  groups of 8 heads, head dim 128 causal at S = 4096 (64 heads of 32 query blocks on 132
  CTAs) left its busiest CTA 1.27x the mean work, since a round of 132 positions spans half a
  group, query blocks 32 down to 16.  :func:`choose` picks, per call, the order whose busiest
  CTA has the least work under that cost (the plan's trips plus :data:`TILE_OVERHEAD_BLOCKS`);
  among near ties the forward keeps the default (8 heads, no snake), else takes the least
  loaded; the backward takes the fewest heads in flight among them.
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


#: the persistent CTA's position in its round ``k`` (its index ``k * gridDim.x + blockIdx.x``):
#: a lambda of the kernel's ``snake`` argument, which every attention kernel with an order
#: reads (forward, packed varlen, backward; :func:`position` in Python).  With the snake every
#: odd round of ``gridDim.x`` positions runs backwards, the last one too where the tiles fill
#: it in part (its tiles then go to the CTAs at its end, and a CTA whose position lies past
#: the tiles ends): a round's positions stay its own, so each CTA's positions only grow (the
#: varlen cursor over ``cu_seqlens_q`` only moves on).  Written per round, not per index: no
#: division by ``gridDim.x`` (the varlen consumers' loop moves as few values to uniform
#: registers as it did without the snake)
POSITION = ("auto position = [&](int k) {",
            "    return k * (int)gridDim.x + ((snake && (k & 1)) ? (int)gridDim.x - 1 - "
            "(int)blockIdx.x : (int)blockIdx.x);",
            "};")


def loop_head(until: str) -> str:
    """The persistent tile loop's ``for`` over the CTA's rounds, ``tile`` its position
    (:data:`POSITION`), while ``until`` holds (``tile < TILES``; varlen: the cursor finds the
    tile), counting the ring's K tiles (``rb``) and the output tiles (``o``)."""
    return (f"for (int k = 0, tile = position(0); {until}; tile = position(++k), rb += KT, "
            "++o) {")


def position(t: Any, *, grid: int, snake: bool) -> Any:
    """:data:`POSITION` in Python: the position persistent index ``t = k * grid + lane`` (an
    int or a numpy array) takes."""
    if not snake:
        return t
    rnd, lane = t // grid, t % grid
    return rnd * grid + (grid - 1 - lane) * (rnd % 2) + lane * (1 - rnd % 2)


def dealt(tiles: int, *, grid: int, snake: bool, np: Any) -> Any:
    """The position each persistent index of every round takes (index ``i`` is CTA
    ``i % grid``'s), ``tiles`` or more where it lies past the tiles (that CTA ends)."""
    return position(np.arange(-(-tiles // grid) * grid), grid=grid, snake=snake)


def order_exprs(causal: bool, *, head: str = "bh", block: str = "tile_m", heads: str = "BH",
                blocks: str = "MT", tile: str = "tile", base: str = "") -> tuple[str, ...]:
    """C declarators ``bh = ...``, ``tile_m = ...`` of position ``tile`` (:data:`POSITION`; of
    the kernel's ``MT, BH`` and, causal, its ``hg`` argument), the same for the producer and
    the consumers.  The one map of every attention kernel's order, named for each: the
    backward declares ``head`` and ``block`` over ``heads`` x ``blocks`` (its block
    ``blocks - 1 - tile_m`` is then the heaviest-first rank, a KV block's: tile costs reversed
    for :func:`choose`); the packed varlen kernel orders the tiles ``tile`` of one sequence,
    its heads after the sequence's first (``base``)."""
    at = f"{base} + " if base else ""
    if not causal:
        return f"{head} = {at}{tile} / {blocks}", f"{block} = {tile} % {blocks}"
    first = f"({tile} / ({blocks} * hg)) * hg"  # the group's first head
    # the last group may be short
    n, r = f"min(hg, {heads} - {first})", f"({tile} % ({blocks} * hg))"
    return f"{head} = {at}{first} + {r} % {n}", f"{block} = {blocks} - 1 - {r} / {n}"


def _causal_map(p: Any, *, bh: int, mt: int, hg: int, minimum: Any) -> tuple[Any, Any]:
    """(head, query block) of causal position ``p``, an int or a numpy array of them
    (``minimum``: the minimum for that kind of value)."""
    first = (p // (mt * hg)) * hg  # the group's first head
    heads, r = minimum(hg, bh - first), p % (mt * hg)  # the last group may be short
    return first + r % heads, mt - 1 - r // heads


def tile_at(p: Any, *, causal: bool, bh: int, mt: int, order: TileOrder = TileOrder(),
            minimum: Any = min) -> tuple[Any, Any]:
    """(head, query block) of position ``p`` (an int, or a numpy array of them with
    ``minimum`` numpy's): :func:`order_exprs` in Python, the packed varlen kernel's
    :func:`varlen_order_exprs` too (a sequence's ``bh`` heads and ``mt`` query blocks)."""
    if not causal:
        return p // mt, p % mt
    return _causal_map(p, bh=bh, mt=mt, hg=order.hg, minimum=minimum)


def busiest(trips: Sequence[int], *, bh: int, grid: int, order: TileOrder, np: Any) -> float:
    """The most work one CTA gets (in KV blocks, each tile its ``trips[query block]`` plus
    :data:`TILE_OVERHEAD_BLOCKS`) when ``grid`` persistent CTAs run ``bh`` heads in ``order``
    (``np``: numpy, which the call has at hand; every tile at once)."""
    mt = len(trips)
    _, block = _causal_map(np.arange(bh * mt), bh=bh, mt=mt, hg=order.hg, minimum=np.minimum)
    return _dealt_load(np.asarray(trips, dtype=np.float64)[block] + TILE_OVERHEAD_BLOCKS,
                       grid, order.snake, np)


def _dealt_load(cost: Any, grid: int, snake: bool, np: Any) -> float:
    """The most work one of ``grid`` CTAs gets when position ``p`` costs ``cost[p]`` and the
    positions are dealt by :func:`dealt`."""
    at = dealt(len(cost), grid=grid, snake=snake, np=np)
    return _most_loaded(np.where(at < len(cost), cost[np.minimum(at, len(cost) - 1)], 0.0),
                        grid, np)


def _most_loaded(cost: Any, grid: int, np: Any) -> float:
    """The most work one of ``grid`` round-robin CTAs gets, tile ``i`` (cost ``cost[i]``) going
    to CTA ``i % grid``."""
    return float(np.bincount(np.arange(len(cost)) % grid, weights=cost,
                             minlength=min(grid, len(cost))).max())


def _least_loaded(found: Sequence[tuple[float, TileOrder]],
                  keep: TileOrder | None = TileOrder()) -> TileOrder:
    """Of (busiest CTA's work, order) pairs, the order with the least.  With ``keep`` (the
    forward's: the default order, groups of 8 and no snake, the order measured before this
    choice existed): ``keep`` where it is within :data:`TIE` of the least, else the least
    loaded (an exact tie to the smallest group, then no snake).  Without (the backward's):
    among the orders within :data:`TIE`, the fewest heads in flight (the smallest group, then
    no snake).

    Why the two differ (H200, benchmarks/attention_tiles.py and attention_bwd_main_check.py):
    the backward's KV-block CTAs share a head's Q, dO and dQ rows, and one head at a time with
    the snake ran its D 128 S 1k causal main kernel 1.175x the default; the forward's D 64 S 4k
    causal (192-row tiles) ran one head at a time, the fewest heads among its near ties, 0.94
    of the least loaded order (groups of 8 with the snake;
    results/attention_fwd_order_s24_h200.jsonl)."""
    best = min(load for load, _ in found)
    near = [o for load, o in found if load <= best * (1 + TIE)]
    if keep is None:
        return min(near, key=lambda o: (o.hg, o.snake))
    return keep if keep in near else min(found, key=lambda x: (x[0], x[1].hg, x[1].snake))[1]


def choose(trips: Sequence[int], *, bh: int, grid: int, np: Any,
           keep: TileOrder | None = TileOrder()) -> TileOrder:
    """The causal order whose busiest CTA has the least work (:func:`busiest`), ties broken
    by :func:`_least_loaded` (``keep``: the order kept among ties; None, the fewest heads in
    flight: the backward's, bwd_call.py says why)."""
    return _least_loaded([(busiest(trips, bh=bh, grid=grid, order=o, np=np), o)
                          for o in (TileOrder(hg=g, snake=s) for g in GROUPS
                                    for s in (False, True))], keep)


def varlen_order_exprs(causal: bool) -> tuple[str, ...]:
    """The packed varlen kernel's order within a sequence (varlen_tiles.py): C declarators
    ``bh = ...``, ``tile_m = ...`` of tile ``r`` of sequence ``seq`` (its ``MTS`` query blocks
    per head, ``H`` heads; the kernel's ``hg``), the batch's tiles running sequence by sequence
    at the positions :data:`POSITION` deals.  Not causal, head-major (a head's query blocks back
    to back, its K and V read once); causal, the fixed-length causal order within the sequence
    (:func:`order_exprs`): groups of ``hg`` heads side by side, each group's query blocks
    heaviest first (:func:`varlen_choose` picks ``hg`` and the snake)."""
    return order_exprs(causal, heads="H", blocks="MTS", tile="r", base="seq * H")


def varlen_choose(trips: Sequence[int], *, heads: int, batch: int, grid: int,
                  np: Any) -> TileOrder:
    """The causal varlen kernel's ``hg`` and ``snake``: the order whose busiest CTA has the
    least work when ``batch`` sequences of one head's ``trips`` per query block (the longest
    the host knows of: ``max_seqlen_q``'s) run on ``grid`` CTAs, positions dealt round-robin
    (:func:`position`); ties as :func:`choose` breaks them.  On a batch of equal lengths
    it balances as the fixed-length call's choice does (D 128 causal, 4 x 4096: groups of 2,
    busiest CTA 1.06x the mean, against 1.15x with every head of a sequence in one group; D 64
    on 192-row tiles: groups of 8 with the snake, 1.05x, against 1.13x without it)."""
    mts = len(trips)
    r = np.arange(heads * mts)
    found = []
    for g in GROUPS:
        _, block = tile_at(r, causal=True, bh=heads, mt=mts, order=TileOrder(hg=g),
                           minimum=np.minimum)
        cost = np.tile(np.asarray(trips, dtype=np.float64)[block] + TILE_OVERHEAD_BLOCKS, batch)
        for snake in (False, True):
            found.append((_dealt_load(cost, grid, snake, np), TileOrder(hg=g, snake=snake)))
    return _least_loaded(found)
