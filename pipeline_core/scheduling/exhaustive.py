"""Exhaustive searches: branch-and-bound over ready orders, minimising (makespan, VGPR peak).

``optimal_schedule`` is the reference's generic search (simple-greedy seed,
partial-bound pruning). ``optimal_schedule_with_halves`` is its "CSP" strategy:
a greedy seed, positions isolated per partition, an optional cap on global loads
per block, and the LDS-port penalty in the cost model. Both are result-identical
to the reference (the CSP's extra pruning only skips subtrees that cannot win).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Sequence

from pipeline_core.edges import DepEdge
from pipeline_core.errors import SchedulingError
from pipeline_core.ops import Op, OpRole
from pipeline_core.scheduling.evaluate import (Tables, lower_bound, partial_bound,
                                               penalised_partial_bound, simulate,
                                               topological_order)
from pipeline_core.scheduling.greedy import greedy_order, simple_greedy_order

#: The reference's "no VGPR budget" sentinel.
UNLIMITED_VGPR = 999999

_PRUNE_GE = "ge"  # reject when bound >= best (can also cut equal-makespan ties)
_PRUNE_GT = "gt"  # reject when bound > best (never changes the result)


def _seed_is_final(ms: int, pk: int, lb: int, max_vgpr: int) -> bool:
    return ms == lb and (max_vgpr == UNLIMITED_VGPR or pk <= max_vgpr)


def position_ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """Op index range each position may draw from: its partition's ops (the last takes the rest).

    Positions and ops share partition boundaries, so a range's start is also the
    first position of that partition.
    """
    if parts <= 1 or n < parts:
        return [(0, n)] * n
    size = n // parts
    out = []
    for pos in range(n):
        k = min(pos // size, parts - 1)
        out.append((k * size, n if k == parts - 1 else (k + 1) * size))
    return out


def _search(t: Tables, seed: list[int], lb: int, *, ranges: list[tuple[int, int]],
            max_globals: int, block_slots: int, penalty: int, max_vgpr: int, prune: str | None,
            bound_fn, time_limit: float | None, node_limit: int | None = None,
            on_cut: Callable[[str], None] | None = None) -> list[int]:
    """Iterative DFS with explicit per-depth state; returns the best order found (seed if none).

    ``last_tried[pos]`` is the last candidate tried at depth ``pos``; candidates are
    tried in increasing index order, so leaves are visited in lexicographic order.
    ``node_limit`` (search steps) stops the search at the same point on every machine;
    ``time_limit`` (seconds) depends on the machine's speed.  ``on_cut`` is told which
    budget ("node-limit" or "time-limit") cut the search, when one does.
    """
    n = t.n
    best = list(seed)
    best_ms, best_pk = simulate(t, best, penalty)
    order = [-1] * n
    placed = [False] * n
    pending = [len(p) for p in t.preds]
    last_tried = [-1] * n
    vgpr_at = [0] * (n + 1)
    role, succs, vdef, vkill = t.role, t.succs, t.vgpr_def, t.vgpr_kill
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    steps = 0

    def place(i: int, pos: int) -> None:
        placed[i] = True
        order[pos] = i
        for s in succs[i]:
            pending[s] -= 1

    def unplace(i: int) -> None:
        placed[i] = False
        for s in succs[i]:
            pending[s] += 1

    def in_open_block(want: OpRole, pos: int, lo_pos: int) -> int:
        """Ops of role ``want`` since the last COMPUTE, looking back no further than the
        partition start."""
        count = 0
        for k in range(pos - 1, lo_pos - 1, -1):
            r = role[order[k]]
            if r == OpRole.COMPUTE:
                break
            if r == want:
                count += 1
        return count

    def shape_ok(i: int, pos: int, lo: int, hi: int) -> bool:
        """The globals cap, then (with block_slots) the block program's shape: slot limits
        per block and each partition ending with a COMPUTE."""
        r = role[i]
        if max_globals > 0 and r == OpRole.GLOBAL_LOAD \
                and in_open_block(r, pos, lo) >= max_globals:
            return False
        if block_slots <= 0:
            return True
        if pos == hi - 1 and r != OpRole.COMPUTE:
            return False
        if r in (OpRole.FRAGMENT_LOAD, OpRole.GLOBAL_LOAD):
            return in_open_block(r, pos, lo) < block_slots
        return True

    pos = 0
    while True:
        steps += 1
        if node_limit is not None and steps > node_limit:
            if on_cut is not None:
                on_cut("node-limit")
            return best
        if deadline is not None and steps & 1023 == 0 and time.perf_counter() > deadline:
            if on_cut is not None:
                on_cut("time-limit")
            return best
        if pos == n:
            ms, pk = simulate(t, order, penalty)
            if pk <= max_vgpr and (ms < best_ms or (ms == best_ms and pk < best_pk)):
                best, best_ms, best_pk = list(order), ms, pk
            if best_ms == lb and best_pk == 0:
                return best
            pos -= 1
            unplace(order[pos])
            continue
        lo, hi = ranges[pos]
        i = max(last_tried[pos] + 1, lo)
        descended = False
        while i < hi:
            new_vgpr = vgpr_at[pos] + vdef[i]
            if placed[i] or pending[i] or not shape_ok(i, pos, lo, hi) or new_vgpr > max_vgpr:
                i += 1  # (the reference may or may not record last_tried here: no effect)
                continue
            place(i, pos)
            if prune is not None:
                bound = bound_fn(order, placed, pos)
                if bound > best_ms or (prune == _PRUNE_GE and bound == best_ms):
                    unplace(i)
                    last_tried[pos] = i
                    i += 1
                    continue
            last_tried[pos] = i
            vgpr_at[pos + 1] = new_vgpr - vkill[i]
            pos += 1
            descended = True
            break
        if not descended:
            last_tried[pos] = -1
            if pos == 0:
                return best
            pos -= 1
            unplace(order[pos])


def optimal_schedule(body: Sequence[Op], edges: Sequence[DepEdge], max_vgpr: int = UNLIMITED_VGPR,
                     *, time_limit: float | None = None) -> list[int]:
    """Minimum-(makespan, VGPR peak) ready order, seeded by simple greedy.

    Returns the seed at once when it already reaches the lower bound (and fits the
    budget). A candidate is pruned when the partial lower bound is >= the best
    makespan so far. The seed stays the incumbent even over budget (reference).
    ``time_limit`` (seconds) returns the incumbent when exceeded.
    """
    t = Tables(body, edges)
    seed = simple_greedy_order(t)
    ms, pk = simulate(t, seed)
    lb = lower_bound(t)
    if _seed_is_final(ms, pk, lb, max_vgpr):
        return seed
    return _search(t, seed, lb, ranges=position_ranges(t.n, 1), max_globals=0, block_slots=0,
                   penalty=0, max_vgpr=max_vgpr, prune=_PRUNE_GE,
                   bound_fn=lambda order, placed, pos: partial_bound(t, order, placed, pos),
                   time_limit=time_limit)


def optimal_schedule_with_halves(body: Sequence[Op], edges: Sequence[DepEdge], *,
                                 max_globals_per_block: int = 0, block_slots: int = 0,
                                 lds_contention_penalty: int = 0,
                                 max_vgpr: int = UNLIMITED_VGPR, num_partitions: int = 2,
                                 blocks_per_partition: int = 4,
                                 time_limit: float | None = None,
                                 node_limit: int | None = None,
                                 on_cut: Callable[[str], None] | None = None) -> list[int]:
    """The CSP strategy: partition-isolated exhaustive search seeded by ``greedy_schedule``.

    Position p may only take ops of p's partition. With ``max_globals_per_block`` > 0
    a GLOBAL_LOAD candidate is skipped once the open block (ops since the last
    COMPUTE in this partition) holds that many. ``block_slots`` > 0 (an extension;
    0 keeps the reference's behaviour) searches only orders the block program can
    hold: at most that many frags and globals before each MMA, and every partition
    ending with a COMPUTE. Leaves are costed with the LDS-port penalty. The seed is
    never checked against these rules and is returned as-is when it reaches the
    penalised lower bound (the reference's behaviour, which the BF16 ping-pong
    goldens rely on).

    The reference searches without pruning. This port prunes with a penalty-aware
    partial lower bound, only where that cannot change the result: a subtree is cut
    when no leaf in it could replace the incumbent (bound > best, or bound >= best
    when no op kills VGPRs, so every order has the same peak). Without a
    ``time_limit`` the result therefore equals the reference's; with one that
    expires (or a ``node_limit`` of search steps, which expires at the same point on every
    machine), the best order found so far is returned.
    """
    t = Tables(body, edges)
    try:
        seed = greedy_order(t, num_partitions, blocks_per_partition)
    except SchedulingError as exc:
        raise SchedulingError(f"CSP: the greedy seed failed, so there is no complete order to "
                              f"start from: {exc}", strategy="CSP", ops=exc.ops) from exc
    ms, pk = simulate(t, seed, lds_contention_penalty)
    lb = lower_bound(t, lds_contention_penalty)
    if _seed_is_final(ms, pk, lb, max_vgpr):
        return seed
    prune = _PRUNE_GT if any(t.vgpr_kill) else _PRUNE_GE
    topo = topological_order(t)
    penalty = lds_contention_penalty
    return _search(t, seed, lb, ranges=position_ranges(t.n, num_partitions),
                   max_globals=max_globals_per_block, block_slots=block_slots,
                   penalty=penalty, max_vgpr=max_vgpr, prune=prune,
                   bound_fn=lambda order, placed, pos: penalised_partial_bound(
                       t, order, placed, pos, penalty, topo),
                   time_limit=time_limit, node_limit=node_limit, on_cut=on_cut)
