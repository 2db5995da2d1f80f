"""EXACT: a provably minimal-makespan order under the CSP's constraints, fast enough for 100+ ops.

Same problem as the reference's CSP (``exhaustive.optimal_schedule_with_halves``):
positions are isolated per partition, an op is placed only when its same-iteration
producers are, at most ``max_globals_per_block`` global loads per block, a hard
VGPR budget, the objective (makespan, VGPR peak) costed by the same evaluator
(LDS-port penalty included), the greedy seed as the first incumbent and the same
early exit.  It also returns the same order: the CSP keeps the first leaf, in
lexicographic order of op indices, that is strictly better than everything before
it, i.e. the lexicographically smallest optimal order (or the seed when nothing
beats it).  EXACT finds that order without enumerating the leaves:

1. *Optimise*: depth-first branch and bound, children tried in best-bound order,
   to find the optimal value and prove it.  Pruning:
   * partial lower bounds (``bounds.NodeBound``): critical path from the prefix's
     real finish times plus per-partition one-machine relaxations of the MMA unit,
     VALU and LDS port;
   * dominance memo: two prefixes that placed the same ops (with the same open-block
     counters) are compared on the few numbers their futures depend on (machine
     free times, finish times of placed ops whose successors are still unplaced,
     makespan and peak so far); a prefix no better than one already explored is cut;
   * symmetry breaking: interchangeable ops (same costs, role, partition,
     producers and consumers) are placed in index order;
   * commuting pairs: two adjacent ops that neither depend on each other nor
     share a unit (nor touch block or VGPR state) give the same state in either
     order, so only the increasing-index order is explored.
2. *Canonical order*: when the optimum beats the seed, a lexicographic DFS with
   the optimum as the bound finds the lexicographically first optimal order (all
   the reductions above keep that order reachable: each only removes an order
   whose lexicographically smaller twin has the same value).

A search that hits its time limit returns the best order found with the proven
lower bound and the gap (``ExactResult``), and says so.
"""
from __future__ import annotations

import math
import sys
import time
from typing import Callable, Sequence

import attrs

from pipeline_core.edges import DepEdge
from pipeline_core.errors import SchedulingError
from pipeline_core.ops import Op
from pipeline_core.scheduling.bounds import MMA, VALU, NodeBound, Problem, root_bound
from pipeline_core.scheduling.evaluate import Tables, lower_bound
from pipeline_core.scheduling.greedy import greedy_order
from pipeline_core.scheduling.registry import SchedulingRequest

#: The reference's "no VGPR budget" sentinel.
UNLIMITED_VGPR = 999999
#: Default time budget of the registered strategy (seconds).
DEFAULT_TIME_LIMIT = 60.0
#: Largest number of prefix states the dominance memo keeps (memory guard).
MEMO_LIMIT = 1_500_000


@attrs.frozen
class ExactResult:
    """What an exact search found and what it proved.

    ``lower_bound`` is proven for every valid order; ``proven_optimal`` means no
    valid order has a smaller makespan (``gap`` = makespan - lower_bound = 0).
    ``canonical`` says the order is the one the reference's CSP returns (the seed,
    or the lexicographically first optimal order).
    """

    order: tuple[int, ...]
    makespan: int
    vgpr_peak: int
    lower_bound: int
    proven_optimal: bool
    gap: int
    nodes: int
    time: float
    status: str  #: "seed-at-bound", "optimal", "time-limit", "no-valid-order"
    seed_makespan: int | None
    root_bound: int
    canonical: bool = True
    seed_valid: bool = True

    @property
    def gap_ratio(self) -> float:
        return self.gap / self.makespan if self.makespan else 0.0

    def summary(self) -> str:
        state = "optimal" if self.proven_optimal else f"gap {self.gap} ({self.gap_ratio:.1%})"
        return (f"makespan {self.makespan}, lower bound {self.lower_bound}, {state}, "
                f"{self.nodes} nodes, {self.time:.2f}s [{self.status}]")


class _Timeout(Exception):
    pass


class _Found(Exception):
    pass


class _Search:
    """One DFS engine for both phases; all state in flat lists with undo."""

    def __init__(self, pb: Problem, *, max_globals: int, max_vgpr: int, block_slots: int,
                 deadline: float | None, progress: Callable | None) -> None:
        self.pb = pb
        n = pb.n
        self.max_globals = max_globals
        self.max_vgpr = max_vgpr
        self.block_slots = block_slots
        self.deadline = deadline
        self.progress = progress
        self.bound = NodeBound(pb)
        self.nodes = 0
        self.memo_size = 0
        self.twin_prev = _twins(pb)
        self.block_rules = max_globals > 0 or block_slots > 0
        # state
        self.placed = [False] * n
        self.pending = [len(p) for p in pb.preds]
        self.open_succ = [len(s) for s in pb.succs]
        self.finish = [0] * n
        self.order: list[int] = []
        self.mask = 0
        self.mma_free = self.valu_free = self.port_free = 0
        self.cur_max = 0
        self.live = self.peak = 0
        self.open_globals = 0  # the CSP's count: globals since the last COMPUTE in this partition
        self.blk_frags = self.blk_globals = 0  # per block, for block_slots
        self.rem_mma = sum(pb.lat[i] for i in range(n) if pb.mach[i] == MMA)
        self.rem_valu = sum(pb.lat[i] for i in range(n) if pb.mach[i] == VALU)
        self.rem_port = sum(pb.port)
        self.min_port_lat = min((pb.lat[i] for i in range(n) if pb.port[i]), default=0)
        self.static_cp = sorted(((pb.asap[i] + pb.lat[i] + pb.tail[i], i) for i in range(n)),
                                reverse=True)
        self.memo: dict = {}
        self.last_report = time.perf_counter()
        self.open_lb: float = math.inf

    # --- moves ---------------------------------------------------------------------------
    def place(self, i: int):
        pb = self.pb
        saved = (self.mma_free, self.valu_free, self.port_free, self.cur_max, self.live,
                 self.peak, self.open_globals, self.blk_frags, self.blk_globals)
        start = 0
        finish = self.finish
        for p in pb.preds[i]:
            if finish[p] > start:
                start = finish[p]
        m = pb.mach[i]
        if m == MMA:
            if self.mma_free > start:
                start = self.mma_free
        elif m == VALU:
            if self.valu_free > start:
                start = self.valu_free
        if pb.port[i]:
            if self.port_free > start:
                start = self.port_free
            self.port_free = start + pb.penalty
            self.rem_port -= 1
        end = start + pb.lat[i]
        finish[i] = end
        if m == MMA:
            self.mma_free = end
            self.rem_mma -= pb.lat[i]
        elif m == VALU:
            self.valu_free = end
            self.rem_valu -= pb.lat[i]
        if end > self.cur_max:
            self.cur_max = end
        self.live += pb.vdef[i]
        if self.live > self.peak:
            self.peak = self.live
        self.live -= pb.vkill[i]
        pos = len(self.order)
        lo = pb.ranges[pos][0]
        if pos == lo:  # first position of a partition: the CSP's look-back stops here
            self.open_globals = 0
        if pb.is_compute[i]:
            self.open_globals = 0
            self.blk_frags = self.blk_globals = 0
        elif pb.is_global[i]:
            self.open_globals += 1
            self.blk_globals += 1
        elif pb.is_frag[i]:
            self.blk_frags += 1
        self.placed[i] = True
        self.mask |= 1 << i
        self.order.append(i)
        for s in pb.succs[i]:
            self.pending[s] -= 1
        for p in pb.preds[i]:
            self.open_succ[p] -= 1
        return saved

    def unplace(self, i: int, saved) -> None:
        pb = self.pb
        (self.mma_free, self.valu_free, self.port_free, self.cur_max, self.live, self.peak,
         self.open_globals, self.blk_frags, self.blk_globals) = saved
        if pb.port[i]:
            self.rem_port += 1
        m = pb.mach[i]
        if m == MMA:
            self.rem_mma += pb.lat[i]
        elif m == VALU:
            self.rem_valu += pb.lat[i]
        self.placed[i] = False
        self.mask &= ~(1 << i)
        self.order.pop()
        for s in pb.succs[i]:
            self.pending[s] += 1
        for p in pb.preds[i]:
            self.open_succ[p] += 1

    # --- candidate filter ------------------------------------------------------------------
    def candidates(self) -> list[int]:
        pb = self.pb
        pos = len(self.order)
        lo, hi = pb.ranges[pos]
        placed, pending, twin_prev = self.placed, self.pending, self.twin_prev
        first_of_part = pos == lo
        open_g = 0 if first_of_part else self.open_globals
        last = self.order[-1] if self.order and not first_of_part else -1
        out = []
        slots = self.block_slots
        last_pos = slots and pos == hi - 1
        for c in range(lo, hi):
            if placed[c] or pending[c]:
                continue
            tp = twin_prev[c]
            if tp >= 0 and not placed[tp]:
                continue
            if pb.is_global[c]:
                if self.max_globals > 0 and open_g >= self.max_globals:
                    continue
                if slots and self.blk_globals >= slots:
                    continue
            elif pb.is_frag[c]:
                if slots and self.blk_frags >= slots:
                    continue
            if last_pos and not pb.is_compute[c]:
                continue
            if self.live + pb.vdef[c] > self.max_vgpr:
                continue
            if 0 <= c < last and self._commutes(last, c):
                continue
            out.append(c)
        return out

    def _commutes(self, a: int, b: int) -> bool:
        """Placing a then b gives the same state as b then a (b was ready before a)."""
        pb = self.pb
        if a in pb.preds[b]:
            return False
        ma, mb = pb.mach[a], pb.mach[b]
        if ma != 0 and ma == mb:
            return False
        if pb.port[a] and pb.port[b]:
            return False
        if self.block_rules and (pb.is_compute[a] or pb.is_compute[b]):
            return False
        if pb.any_kill and (pb.vdef[a] or pb.vkill[a] or pb.vdef[b] or pb.vkill[b]):
            return False
        return True

    # --- dominance ---------------------------------------------------------------------
    def state_vector(self) -> tuple:
        """What the future of this prefix depends on, each entry "smaller is better".

        Machine free times; the makespan so far unless the remaining work forces a
        later end anyway; peak and live VGPRs when some op kills VGPRs (otherwise both
        follow from the placed set); then, in op-index order, the finish time of every
        placed op with an unplaced consumer, or 0 when no consumer can start before it
        finishes anyway (the consumer's unit is busy longer, or its static ASAP is later).
        """
        pb = self.pb
        finish, open_succ, placed = self.finish, self.open_succ, self.placed
        mma_free, valu_free, port_free = self.mma_free, self.valu_free, self.port_free
        asap, mach, port, succs = pb.asap, pb.mach, pb.port, pb.succs
        g = 0
        if self.rem_mma:
            g = mma_free + self.rem_mma
        if self.rem_valu and valu_free + self.rem_valu > g:
            g = valu_free + self.rem_valu
        if self.rem_port:
            v = port_free + pb.penalty * (self.rem_port - 1) + self.min_port_lat
            if v > g:
                g = v
        for v, i in self.static_cp:
            if not placed[i]:
                if v > g:
                    g = v
                break
        vec = [mma_free, valu_free, port_free, self.cur_max if self.cur_max > g else 0]
        if pb.any_kill:
            vec.append(self.peak)
            vec.append(self.live)
        for i in range(self.hi_placed):
            if not placed[i] or not open_succ[i]:
                continue
            f = finish[i]
            floor = None
            for c in succs[i]:
                if placed[c]:
                    continue
                m = mach[c]
                fl = mma_free if m == MMA else valu_free if m == VALU else 0
                if port[c] and port_free > fl:
                    fl = port_free
                if asap[c] > fl:
                    fl = asap[c]
                if floor is None or fl < floor:
                    floor = fl
            vec.append(f if f > floor else 0)
        return tuple(vec)

    @property
    def hi_placed(self) -> int:
        pos = len(self.order)
        return self.pb.ranges[pos - 1][1] if pos else 0

    def dominated(self) -> bool:
        """True if an explored prefix of the same ops and block counters is at least as good.

        Otherwise this prefix is remembered (and the ones it beats are forgotten).
        """
        pos = len(self.order)
        og = self.open_globals if self.max_globals and pos < self.pb.n and \
            self.pb.ranges[pos][0] != pos else 0
        key = (self.mask, og, self.blk_frags if self.block_slots else 0,
               self.blk_globals if self.block_slots else 0)
        vec = self.state_vector()
        bucket = self.memo.get(key)
        if bucket is None:
            if self.memo_size < MEMO_LIMIT:
                self.memo[key] = [vec]
                self.memo_size += 1
            return False
        for old in bucket:
            for a, b in zip(old, vec):
                if a > b:
                    break
            else:
                return True
        keep = [old for old in bucket if any(a < b for a, b in zip(old, vec))]
        keep.append(vec)
        self.memo_size += len(keep) - len(bucket)
        self.memo[key] = keep
        return False

    # --- bound ---------------------------------------------------------------------------------
    def node_bound(self) -> int:
        pos = len(self.order)
        part = self.pb.part_of[self.pb.ranges[pos][0]] if pos < self.pb.n else self.pb.parts
        return self.bound(self.placed, self.finish, self.mma_free, self.valu_free, self.port_free,
                          self.cur_max, part)

    def peak_bound(self) -> int:
        """The final VGPR peak is at least the peak so far; without kills it is the total."""
        return self.peak if self.pb.any_kill else self.pb.total_def

    def tick(self, best: int | None, phase: str) -> None:
        self.nodes += 1
        if self.nodes & 255:
            return
        now = time.perf_counter()
        if self.deadline is not None and now > self.deadline:
            raise _Timeout
        if self.progress is not None and now - self.last_report >= 0.5:
            self.last_report = now
            self.progress(phase=phase, nodes=self.nodes, best=best, depth=len(self.order))

    # --- phase 1: optimise -------------------------------------------------------------------
    def optimise(self, inc_order: list[int] | None, inc_value: tuple[int, int]):
        """DFS branch and bound in best-bound order; returns (order, value) of the best leaf."""
        self.best_order = inc_order
        self.best = inc_value
        self.memo = {}
        self.memo_size = 0
        try:
            self._opt()
        except _Timeout:
            return False
        return True

    def _opt(self) -> None:
        pb = self.pb
        if len(self.order) == pb.n:
            value = (self.cur_max, self.peak)
            if value < self.best:
                self.best = value
                self.best_order = list(self.order)
            return
        children = []
        for c in self.candidates():
            saved = self.place(c)
            b = self.node_bound()
            if (b, self.peak_bound()) < self.best:
                children.append((b, c))
            self.unplace(c, saved)
        children.sort()
        for k, (b, c) in enumerate(children):
            saved = self.place(c)
            try:
                if (b, self.peak_bound()) < self.best and not self.dominated():
                    try:
                        self.tick(self.best[0], "optimise")
                    except _Timeout:
                        self.open_lb = min(self.open_lb, b)
                        raise
                    self._opt()
            except _Timeout:
                if k + 1 < len(children):
                    self.open_lb = min(self.open_lb, children[k + 1][0])
                raise
            finally:
                self.unplace(c, saved)

    # --- phase 2: the lexicographically first order of a given value -------------------------------
    def first_at_most(self, target: tuple[int, int]) -> list[int] | None:
        self.memo = {}
        self.memo_size = 0
        self.target = target
        self.found = None
        try:
            self._lex()
        except _Found:
            return self.found
        except _Timeout:
            return None
        return None

    def _lex(self) -> None:
        pb = self.pb
        if len(self.order) == pb.n:
            if (self.cur_max, self.peak) <= self.target:
                self.found = list(self.order)
                raise _Found
            return
        for c in self.candidates():
            saved = self.place(c)
            try:
                if (self.node_bound(), self.peak_bound()) <= self.target and not self.dominated():
                    self.tick(self.target[0], "canonical order")
                    self._lex()
            finally:
                self.unplace(c, saved)


def _twins(pb: Problem) -> list[int]:
    """For each op, the previous interchangeable op (same everything, same neighbours), or -1."""
    seen: dict = {}
    out = [-1] * pb.n
    for i, o in enumerate(pb.ops):
        key = (pb.part_of[i], o.role, o.resource, o.latency, o.vgpr_def, o.vgpr_kill,
               pb.port[i], tuple(pb.preds[i]), tuple(pb.succs[i]))
        if key in seen:
            out[i] = seen[key]
        seen[key] = i
    return out


def exact_schedule(body: Sequence[Op], edges: Sequence[DepEdge], *, max_globals_per_block: int = 0,
                   lds_contention_penalty: int = 0, max_vgpr: int = UNLIMITED_VGPR,
                   num_partitions: int = 2, blocks_per_partition: int = 4,
                   time_limit: float | None = DEFAULT_TIME_LIMIT, block_slots: int = 0,
                   progress: Callable | None = None) -> ExactResult:
    """Solve the CSP's problem exactly (see the module docstring); never raises on a timeout."""
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    penalty = lds_contention_penalty
    pb = Problem(body, edges, penalty=penalty, num_partitions=num_partitions)
    n = pb.n
    tables = Tables(body, edges)
    ref_lb = lower_bound(tables, penalty)
    rb = max(ref_lb, root_bound(pb)) if n else 0
    try:
        seed = greedy_order(tables, num_partitions, blocks_per_partition) if n else []
    except SchedulingError:
        seed = None
    if seed is not None:
        seed_value = pb.simulate(seed)
        # the reference's early exit, first: the seed reaches the ASAP bound and fits
        if seed_value[0] == ref_lb and (max_vgpr == UNLIMITED_VGPR or seed_value[1] <= max_vgpr):
            return ExactResult(tuple(seed), seed_value[0], seed_value[1], ref_lb, True, 0, 0,
                               time.perf_counter() - t0, "seed-at-bound", seed_value[0], rb)
    else:
        seed_value = (math.inf, math.inf)
    search = _Search(pb, max_globals=max_globals_per_block, max_vgpr=max_vgpr,
                     block_slots=block_slots, deadline=deadline, progress=progress)
    finished = search.optimise(list(seed) if seed is not None else None, seed_value)
    best_order, best_value = search.best_order, search.best
    nodes = search.nodes
    if best_order is None:
        raise SchedulingError(
            "EXACT: no order satisfies the constraints (partition isolation, producers first, "
            "max globals per block, VGPR budget)" + ("" if finished else " within the time limit"),
            strategy="EXACT")
    if finished:
        lb = best_value[0]
    else:
        lb = max(rb, min(search.open_lb, best_value[0]))
    canonical = True
    if finished and seed is not None and best_value < seed_value:
        search.deadline = None if deadline is None else max(deadline, time.perf_counter() + 5.0)
        lex = search.first_at_most(best_value)
        nodes = search.nodes
        if lex is not None:
            best_order = lex
        else:
            canonical = False
    elif not finished:
        canonical = False
    ms, pk = pb.simulate(best_order)
    lb = min(lb, ms)
    status = "optimal" if finished else "time-limit"
    return ExactResult(tuple(best_order), ms, pk, int(lb), finished, int(ms - lb), nodes,
                       time.perf_counter() - t0, status,
                       None if seed is None else seed_value[0], int(rb), canonical)


def exact_strategy(request: SchedulingRequest) -> list[int]:
    """The EXACT strategy: ``exact_schedule`` with the request's constraints."""
    limit = DEFAULT_TIME_LIMIT if request.time_limit is None else request.time_limit
    from pipeline_core.scheduling.progress import terminal_progress

    result = exact_schedule(
        request.body, request.edges, max_globals_per_block=request.max_globals_per_block,
        lds_contention_penalty=request.lds_contention_penalty, max_vgpr=request.max_vgpr,
        num_partitions=request.num_partitions, blocks_per_partition=request.blocks_per_partition,
        time_limit=limit, progress=terminal_progress("EXACT"))
    if not result.proven_optimal:
        print(f"EXACT: time limit reached: {result.summary()}", file=sys.stderr)
    return list(result.order)
