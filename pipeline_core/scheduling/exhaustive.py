"""Exhaustive searches: branch-and-bound over ready orders, minimising (makespan, VGPR peak).

``optimal_schedule`` is the reference's generic search (simple-greedy seed,
partial-bound pruning). ``optimal_schedule_with_halves`` is its "CSP" strategy:
a greedy seed, positions isolated per partition, an optional cap on global loads
per block, and the LDS-port penalty in the cost model.
"""
from __future__ import annotations

import time
from typing import Sequence

from pipeline_core.edges import DepEdge
from pipeline_core.errors import SchedulingError
from pipeline_core.ops import Op, OpRole
from pipeline_core.scheduling.evaluate import Tables, lower_bound, partial_bound, simulate
from pipeline_core.scheduling.greedy import greedy_order, simple_greedy_order

#: The reference's "no VGPR budget" sentinel.
UNLIMITED_VGPR = 999999

_PRUNE_GE = "ge"  # reject when bound >= best (can also cut equal-makespan ties)
_PRUNE_GT = "gt"  # reject when bound > best (never changes the result)


def _seed_is_final(ms: int, pk: int, lb: int, max_vgpr: int) -> bool:
    return ms == lb and (max_vgpr == UNLIMITED_VGPR or pk <= max_vgpr)


def _position_ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """Op index range each position may draw from: its partition's ops (the last takes the rest)."""
    if parts <= 1 or n < parts:
        return [(0, n)] * n
    size = n // parts
    out = []
    for pos in range(n):
        k = min(pos // size, parts - 1)
        out.append((k * size, n if k == parts - 1 else (k + 1) * size))
    return out


def _search(t: Tables, seed: list[int], lb: int, *, ranges: list[tuple[int, int]],
            max_globals: int, penalty: int, max_vgpr: int, prune: str | None,
            reject_updates_last: bool, time_limit: float | None) -> list[int]:
    """Iterative DFS with explicit per-depth state; returns the best order found (seed if none)."""
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

    def globals_in_open_block(pos: int, lo_pos: int) -> int:
        count = 0
        for k in range(pos - 1, lo_pos - 1, -1):
            r = role[order[k]]
            if r == OpRole.COMPUTE:
                break
            if r == OpRole.GLOBAL_LOAD:
                count += 1
        return count

    pos = 0
    while True:
        if deadline is not None:
            steps += 1
            if steps & 1023 == 0 and time.perf_counter() > deadline:
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
        lo_pos = pos - (pos - lo) if False else None  # placeholder, replaced below
        i = max(last_tried[pos] + 1, lo)
        descended = False
        while i < hi:
            if placed[i] or pending[i]:
                i += 1
                continue
            if (max_globals > 0 and role[i] == OpRole.GLOBAL_LOAD
                    and globals_in_open_block(pos, _first_position(ranges, pos)) >= max_globals):
                i += 1
                continue
            new_vgpr = vgpr_at[pos] + vdef[i]
            if new_vgpr > max_vgpr:
                if reject_updates_last:
                    last_tried[pos] = i
                i += 1
                continue
            place(i, pos)
            if prune is not None:
                bound = partial_bound(t, order, placed, pos)
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
