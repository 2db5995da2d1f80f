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
from pipeline_core.scheduling.exhaustive import position_ranges
from pipeline_core.ops import Op, OpRole, ResourceKind

#: machine codes (an op's serial unit); the LDS port is separate (``port``).
FREE, MMA, VALU = 0, 1, 2
#: pseudo-unit code for the LDS port (used when grouping producers)
PORT = 3


class Problem:
    """A body flattened for the exact search and the metrics (plain lists, built once)."""

    __slots__ = ("ops", "edges", "n", "penalty", "lat", "mach", "port", "is_global", "is_frag",
                 "is_compute", "vdef", "vkill", "preds", "succs", "topo", "asap", "tail",
                 "ranges", "part_of", "parts", "part_bounds", "mma_by_part", "valu_by_part",
                 "port_by_part", "compute_by_part", "any_kill", "total_def", "unit_preds",
                 "load_preds")

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
        self.succs: list[list[int]] = [[] for _ in range(n)]
        for c in range(n):
            for p in self.preds[c]:
                self.succs[p].append(c)
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
        self.compute_by_part = [[i for i in range(lo, hi) if self.is_compute[i]] for lo, hi in bounds]
        self.topo = _topological(n, self.preds, self.succs)
        self.asap = [0] * n
        for i in self.topo:
            self.asap[i] = max((self.asap[p] + self.lat[p] for p in self.preds[i]), default=0)
        self.tail = [0] * n
        for i in reversed(self.topo):
            self.tail[i] = self._static_tail(i)
        # producers grouped by the serial unit they use (only groups of two or more matter)
        self.unit_preds = []
        for i in range(n):
            groups = []
            for unit in (MMA, VALU):
                g = [p for p in self.preds[i] if self.mach[p] == unit]
                if len(g) > 1:
                    groups.append((unit, g))
            g = [p for p in self.preds[i] if self.port[p]]
            if len(g) > 1:
                groups.append((PORT, g))
            self.unit_preds.append(tuple(groups))
        # producers that are global (kind 0) or fragment (kind 1) loads, by (partition, kind)
        self.load_preds = []
        for i in range(n):
            by: dict[tuple[int, int], list[int]] = {}
            for p in self.preds[i]:
                if self.is_global[p] or self.is_frag[p]:
                    by.setdefault((self.part_of[p], 0 if self.is_global[p] else 1), []).append(p)
            self.load_preds.append(tuple(by.items()))

    def _static_tail(self, i: int) -> int:
        """Cycles from op i's finish to the end: longest path, and its consumers that share a
        serial unit run one after another (Jackson's rule: longest tail first)."""
        lat, tail, succs = self.lat, self.tail, self.succs[i]
        best = max((lat[c] + tail[c] for c in succs), default=0)
        for unit in (MMA, VALU):
            group = sorted((tail[c], lat[c]) for c in succs if self.mach[c] == unit)
            done = 0
            for q, p in reversed(group):
                done += p
                if done + q > best:
                    best = done + q
        if self.penalty:
            port_tails = sorted(lat[c] + tail[c] - self.penalty for c in succs if self.port[c])
            done = 0
            for q in reversed(port_tails):
                done += self.penalty
                if done + q > best:
                    best = done + q
        return best

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
    """Makespan lower bound of any completion of a partial schedule (see module docstring).

    Block limits sharpen the LDS-port relaxation.  With at most ``global_cap``
    global loads (``frag_cap`` fragment loads) per block, the j-th of them still to
    come needs u(j) more COMPUTE ops before it in the order; a COMPUTE comes after
    all its producers, so that load follows, on the port, the port ops those
    COMPUTEs wait for.  Taking the u(j) COMPUTEs whose port producers can start
    earliest gives the j-th load a release time (and the j-th load to start is the
    j-th in the order, so its release is also at least the j-th smallest head).
    The port relaxation is solved once more with those releases (the loads of one
    kind made identical, with their smallest tail, so the assignment cannot matter).
    """

    __slots__ = ("pb", "head", "anc", "global_cap", "frag_cap", "INFEASIBLE", "done")

    def __init__(self, pb: Problem, global_cap: int = 0, frag_cap: int = 0) -> None:
        self.pb = pb
        self.head = [0] * pb.n
        self.anc = [-1] * pb.n
        on = pb.penalty > 0
        self.global_cap = global_cap if on else 0
        self.frag_cap = frag_cap if on else 0
        self.INFEASIBLE = 1 << 60
        #: after a call: {(unit, k): the unit's earliest finish of partitions <= k}
        self.done: dict[tuple[int, int], int] = {}

    def __call__(self, placed: Sequence[bool], finish: Sequence[int], mma_free: int,
                 valu_free: int, port_free: int, cur_max: int, first_part: int,
                 open_globals: int = 0, open_frags: int = 0) -> int:
        """``open_globals`` / ``open_frags``: loads already in the open block of ``first_part``."""
        pb = self.pb
        lat, preds, mach, port, asap, tail = pb.lat, pb.preds, pb.mach, pb.port, pb.asap, pb.tail
        head, anc = self.head, self.anc
        ranks = self.global_cap or self.frag_cap
        unit_preds, pen = pb.unit_preds, pb.penalty
        best = cur_max
        for i in pb.topo:
            if placed[i]:
                continue
            h = asap[i]
            a = -1
            for p in preds[i]:
                if placed[p]:
                    v = finish[p]
                else:
                    v = head[p] + lat[p]
                    if ranks:
                        pa = head[p] if port[p] else -1
                        if anc[p] > pa:
                            pa = anc[p]
                        if pa > a:
                            a = pa
                if v > h:
                    h = v
            for unit, group in unit_preds[i]:
                # unplaced producers sharing a unit run one after another before i starts
                hs = sorted((head[p], lat[p]) for p in group if not placed[p])
                if len(hs) < 2:
                    continue
                t = 0
                if unit == PORT:
                    for hp, _lp in hs:
                        t = (hp if hp > t else t) + pen
                    v = t - pen + min(lp for _hp, lp in hs)
                else:
                    for hp, lp in hs:
                        t = (hp if hp > t else t) + lp
                    v = t
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
            anc[i] = a
            v = h + lat[i] + tail[i]
            if v > best:
                best = v
        if ranks:
            best = self._ranked_heads(placed, first_part, open_globals, open_frags, best)
            if best >= self.INFEASIBLE:
                return best
        done = self.done = {}
        for unit, by_part, free in ((MMA, pb.mma_by_part, mma_free),
                                    (VALU, pb.valu_by_part, valu_free)):
            t = free
            for k in range(first_part, pb.parts):
                jobs = [(head[i], lat[i], tail[i]) for i in by_part[k] if not placed[i]]
                if jobs:
                    t, b = chain_bound(jobs, t)
                    if b > best:
                        best = b
                done[(unit, k)] = t
        if pen:
            t = port_free
            for k in range(first_part, pb.parts):
                ops = [i for i in pb.port_by_part[k] if not placed[i]]
                done[(PORT, k)] = t
                if not ops:
                    continue
                t1, b = chain_bound([(head[i], pen, lat[i] + tail[i] - pen) for i in ops], t)
                if b > best:
                    best = b
                if ranks:
                    first = k == first_part
                    t2, b = self._ranked_port(ops, k, t, placed, open_globals if first else 0,
                                              open_frags if first else 0)
                    if b > best:
                        best = b
                    if t2 > t1:
                        t1 = t2
                t = done[(PORT, k)] = t1
        return best

    def _releases(self, group: list[int], cap: int, free_slots: int,
                  computes: list[int]) -> list[int] | None:
        """Release of the j-th load of ``group`` still to come (non-decreasing in j), or None
        when the group cannot fit the blocks left (``computes``: sorted COMPUTE ancestors)."""
        if len(group) > free_slots + cap * len(computes):
            return None
        pen = self.pb.penalty
        out = []
        for j, h in enumerate(sorted(self.head[i] for i in group), start=1):
            if j > free_slots:
                e = computes[-(-(j - free_slots) // cap) - 1]
                if e >= 0 and e + pen > h:
                    h = e + pen
            out.append(h)
        return out

    def _rank_table(self, placed: Sequence[bool], first_part: int, open_globals: int,
                    open_frags: int):
        """{(partition, kind): (group, releases)} for global (0) and fragment (1) loads."""
        pb = self.pb
        table = {}
        for k in range(first_part, pb.parts):
            computes = None
            for kind, cap, open_, flags in ((0, self.global_cap, open_globals, pb.is_global),
                                            (1, self.frag_cap, open_frags, pb.is_frag)):
                if not cap:
                    continue
                group = [i for i in pb.port_by_part[k] if flags[i] and not placed[i]]
                if not group:
                    continue
                if computes is None:
                    computes = sorted(self.anc[i] for i in pb.compute_by_part[k] if not placed[i])
                rel = self._releases(group, cap, cap - open_ if k == first_part else cap, computes)
                if rel is None:
                    return None
                table[(k, kind)] = (group, rel)
        return table

    def _ranked_heads(self, placed: Sequence[bool], first_part: int, open_globals: int,
                      open_frags: int, best: int) -> int:
        """Second head pass: an op waiting for s loads of one ranked group cannot start before
        s of its ranks have started, one penalty apart, and the last of them has finished."""
        table = self._rank_table(placed, first_part, open_globals, open_frags)
        if table is None:
            return self.INFEASIBLE
        if not table:
            return best
        pb, head = self.pb, self.head
        lat, preds, tail, load_preds, pen = pb.lat, pb.preds, pb.tail, pb.load_preds, pb.penalty
        for i in pb.topo:
            if placed[i]:
                continue
            h = head[i]
            for p in preds[i]:
                if not placed[p]:
                    v = head[p] + lat[p]
                    if v > h:
                        h = v
            for key, group in load_preds[i]:
                entry = table.get(key)
                if entry is None:
                    continue
                waiting = [p for p in group if not placed[p]]
                if not waiting:
                    continue
                rel = entry[1]
                t = rel[0]
                for j in range(1, len(waiting)):
                    t = t + pen if t + pen > rel[j] else rel[j]
                v = t + min(lat[p] for p in waiting)
                if v > h:
                    h = v
            head[i] = h
            v = h + lat[i] + tail[i]
            if v > best:
                best = v
        return best

    def _ranked_port(self, ops: list[int], k: int, start: int, placed: Sequence[bool],
                     open_globals: int, open_frags: int) -> tuple[int, int]:
        """The port relaxation of partition ``k`` with block-rank releases (class docstring)."""
        pb, pen = self.pb, self.pb.penalty
        lat, tail, head = pb.lat, pb.tail, self.head
        table = self._rank_table(placed, k, open_globals, open_frags)
        if table is None:
            return self.INFEASIBLE, self.INFEASIBLE
        ranked = [table[(k, kind)] for kind in (0, 1) if (k, kind) in table]
        if not ranked:
            return start, start
        in_group = {i for group, _ in ranked for i in group}
        jobs = [(head[i], pen, lat[i] + tail[i] - pen) for i in ops if i not in in_group]
        for group, rel in ranked:
            q = min(lat[i] + tail[i] - pen for i in group)
            jobs.extend((r, pen, q) for r in rel)
        return chain_bound(jobs, start)


def root_bound(pb: Problem, global_cap: int = 0, frag_cap: int = 0) -> int:
    """The NodeBound of the empty schedule (valid for every partition-isolated valid order)."""
    return NodeBound(pb, global_cap, frag_cap)([False] * pb.n, [0] * pb.n, 0, 0, 0, 0, 0)
