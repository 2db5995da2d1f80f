"""Flattened problem tables and lower bounds for the exact scheduler (and the metrics).

The evaluator (``scheduling.evaluate.simulate``) walks an order: an op starts when
its same-iteration producers have finished; MMA ops also wait for the MMA unit,
VALU ops for the VALU, and with an LDS-contention penalty every LDS / global op
holds the LDS port for ``penalty`` cycles.  Partition isolation means every op of
partition k is placed before any op of partition k+1, so on each of those
"machines" the partitions run in order.

Everything a bound needs is precomputed here once: same-iteration adjacency
(deduplicated), machine of each op, static ASAP heads, static tails (longest
latency path after an op finishes) and the partition of every op and position.
``NodeBound`` turns a partial schedule's state into a makespan lower bound that is
valid for every completion:

* critical path: dynamic head (from placed finish times and machine free times)
  + latency + tail of every unplaced op;
* per machine and partition, a one-machine relaxation with heads and tails
  (jobs sorted by head; for each suffix: head + remaining work + smallest tail),
  chained across partitions because partition k+1 starts on the machine only
  after partition k is done.
"""
from __future__ import annotations

import heapq
from typing import Sequence

from pipeline_core.edges import DepEdge
from pipeline_core.graph import check_edges, find_same_iteration_cycle
from pipeline_core.errors import GraphError
from pipeline_core.ops import Op, OpRole, ResourceKind

#: machine codes (an op's serial unit); the LDS port is separate (``port``).
FREE, MMA, VALU = 0, 1, 2


def position_ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """Op index range each position may take (the CSP's partition isolation).

    Identical to the reference-style CSP: partitions of ``n // parts`` ops, the
    last one taking the remainder; one partition (or fewer ops than partitions)
    means no isolation.
    """
    if parts <= 1 or n < parts:
        return [(0, n)] * n
    size = n // parts
    out = []
    for pos in range(n):
        k = min(pos // size, parts - 1)
        out.append((k * size, n if k == parts - 1 else (k + 1) * size))
    return out


class Problem:
    """A body flattened for the exact search and the metrics (plain lists, built once)."""

    __slots__ = ("ops", "edges", "n", "penalty", "lat", "mach", "port", "is_global", "is_frag",
                 "is_compute", "vdef", "vkill", "preds", "succs", "topo", "asap", "tail",
                 "ranges", "part_of", "parts", "part_bounds", "mma_by_part", "valu_by_part",
                 "port_by_part", "any_kill", "total_def")

    def __init__(self, body: Sequence[Op], edges: Sequence[DepEdge], *, penalty: int = 0,
                 num_partitions: int = 1) -> None:
        self.ops = tuple(body)
        self.edges = tuple(edges)
        check_edges(self.ops, self.edges)
        cycle = find_same_iteration_cycle(self.ops, self.edges)
        if cycle is not None:
            raise GraphError(f"same-iteration dependency cycle through ops {list(cycle)}: no "
                             "order can satisfy it", cycle=cycle)
        n = self.n = len(self.ops)
        self.penalty = penalty
        self.lat = [o.latency for o in self.ops]
        self.mach = [MMA if o.resource == ResourceKind.MMA_UNIT
                     else VALU if o.resource == ResourceKind.VALU else FREE for o in self.ops]
        self.port = [penalty > 0 and o.resource in (ResourceKind.LDS, ResourceKind.GLOBAL_MEM)
                     for o in self.ops]
        self.is_global = [o.role == OpRole.GLOBAL_LOAD for o in self.ops]
        self.is_frag = [o.role == OpRole.FRAGMENT_LOAD for o in self.ops]
        self.is_compute = [o.role == OpRole.COMPUTE for o in self.ops]
        self.vdef = [o.vgpr_def for o in self.ops]
        self.vkill = [o.vgpr_kill for o in self.ops]
        self.any_kill = any(self.vkill)
        self.total_def = sum(self.vdef)
        preds: list[set[int]] = [set() for _ in range(n)]
        for e in self.edges:
            if e.distance < 1:
                preds[e.consumer].add(e.producer)
        self.preds = [sorted(p) for p in preds]
        self.succs = [[] for _ in range(n)]
        for c in range(n):
            for p in self.preds[c]:
                self.succs[p].append(c)
        self.topo = _topological(n, self.preds, self.succs)
        self.asap = [0] * n
        for i in self.topo:
            self.asap[i] = max((self.asap[p] + self.lat[p] for p in self.preds[i]), default=0)
        self.tail = [0] * n
        for i in reversed(self.topo):
            self.tail[i] = max((self.lat[c] + self.tail[c] for c in self.succs[i]), default=0)
        self.ranges = position_ranges(n, num_partitions)
        bounds: list[tuple[int, int]] = []
        for r in self.ranges:
            if not bounds or bounds[-1] != r:
                bounds.append(r)
        self.part_bounds = bounds
        self.parts = len(bounds)
        self.part_of = [0] * n
        for k, (lo, hi) in enumerate(bounds):
            for i in range(lo, hi):
                self.part_of[i] = k
        self.mma_by_part = [[i for i in range(lo, hi) if self.mach[i] == MMA] for lo, hi in bounds]
        self.valu_by_part = [[i for i in range(lo, hi) if self.mach[i] == VALU] for lo, hi in bounds]
        self.port_by_part = [[i for i in range(lo, hi) if self.port[i]] for lo, hi in bounds]

    def simulate(self, order: Sequence[int]) -> tuple[int, int]:
        """(makespan, VGPR peak): the evaluator's semantics (unplaced producers count as 0)."""
        finish = [0] * self.n
        mma_free = valu_free = port_free = live = peak = 0
        pen = self.penalty
        for i in order:
            start = 0
            for p in self.preds[i]:
                if finish[p] > start:
                    start = finish[p]
            m = self.mach[i]
            if m == MMA and mma_free > start:
                start = mma_free
            elif m == VALU and valu_free > start:
                start = valu_free
            if self.port[i]:
                if port_free > start:
                    start = port_free
                port_free = start + pen
            finish[i] = end = start + self.lat[i]
            if m == MMA:
                mma_free = end
            elif m == VALU:
                valu_free = end
            live += self.vdef[i]
            if live > peak:
                peak = live
            live -= self.vkill[i]
        return (max(finish) if finish else 0), peak


def _topological(n: int, preds: list[list[int]], succs: list[list[int]]) -> list[int]:
    pending = [len(p) for p in preds]
    ready = [i for i in range(n) if not pending[i]]
    out = []
    while ready:
        i = ready.pop()
        out.append(i)
        for s in succs[i]:
            pending[s] -= 1
            if not pending[s]:
                ready.append(s)
    return out


def chain_bound(jobs: list[tuple[int, int, int]], start: int) -> tuple[int, int]:
    """One machine, jobs (head, work, tail), nothing before ``start``.

    Returns (time the machine finishes all the work, makespan lower bound).  The
    bound is the preemptive Jackson schedule (always run the released job with
    the longest tail): the optimum of the preemptive relaxation, so a lower bound
    on every non-preemptive order of these jobs.
    """
    if not jobs:
        return start, start
    jobs.sort()
    heap: list[tuple[int, int]] = []
    t = start
    best = start
    i, k = 0, len(jobs)
    push, pop = heapq.heappush, heapq.heappop
    while i < k or heap:
        if not heap and jobs[i][0] > t:
            t = jobs[i][0]
        while i < k and jobs[i][0] <= t:
            r, p, q = jobs[i]
            push(heap, (-q, p))
            i += 1
        negq, p = pop(heap)
        nxt = jobs[i][0] if i < k else None
        if nxt is None or t + p <= nxt:
            t += p
            if t - negq > best:
                best = t - negq
        else:
            push(heap, (negq, p - (nxt - t)))
            t = nxt
    return t, best


class NodeBound:
    """Makespan lower bound of any completion of a partial schedule (see module docstring)."""

    __slots__ = ("pb", "head")

    def __init__(self, pb: Problem) -> None:
        self.pb = pb
        self.head = [0] * pb.n

    def __call__(self, placed: Sequence[bool], finish: Sequence[int], mma_free: int,
                 valu_free: int, port_free: int, cur_max: int, first_part: int) -> int:
        pb = self.pb
        lat, preds, mach, port, asap, tail = pb.lat, pb.preds, pb.mach, pb.port, pb.asap, pb.tail
        head = self.head
        best = cur_max
        for i in pb.topo:
            if placed[i]:
                continue
            h = asap[i]
            for p in preds[i]:
                v = finish[p] if placed[p] else head[p] + lat[p]
                if v > h:
                    h = v
            m = mach[i]
            if m == MMA:
                if mma_free > h:
                    h = mma_free
            elif m == VALU:
                if valu_free > h:
                    h = valu_free
            if port[i] and port_free > h:
                h = port_free
            head[i] = h
            v = h + lat[i] + tail[i]
            if v > best:
                best = v
        for by_part, free, is_port in ((pb.mma_by_part, mma_free, False),
                                       (pb.valu_by_part, valu_free, False),
                                       (pb.port_by_part, port_free, True)):
            t = free
            pen = pb.penalty
            for k in range(first_part, pb.parts):
                if is_port:
                    jobs = [(head[i], pen, lat[i] + tail[i] - pen)
                            for i in by_part[k] if not placed[i]]
                else:
                    jobs = [(head[i], lat[i], tail[i]) for i in by_part[k] if not placed[i]]
                if not jobs:
                    continue
                t, b = chain_bound(jobs, t)
                if b > best:
                    best = b
        return best


def root_bound(pb: Problem) -> int:
    """The NodeBound of the empty schedule (valid for every order that respects the edges)."""
    return NodeBound(pb)([False] * pb.n, [0] * pb.n, 0, 0, 0, 0, 0)
