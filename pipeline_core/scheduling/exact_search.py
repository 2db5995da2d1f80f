"""The depth-first engine behind EXACT: state, moves, rules, dominance and the two searches.

A node is a prefix of the order.  Its state is kept in flat lists and a few
integers with undo (``place`` / ``unplace``), so a move costs O(degree).  Which
ops may come next (``candidates``) follows the CSP exactly: the position's
partition, producers placed, the cap on global loads since the last COMPUTE
(the look-back stops at the partition start) and the VGPR budget.  Block mode
adds the program's own limits so that every order compiles (``BlockRules``).
"""
from __future__ import annotations

import math
import time
from typing import Callable, Sequence

import attrs

from pipeline_core.scheduling.bounds import MMA, PORT, VALU, NodeBound, Problem

#: Frag and global slots of a program block (``program.construct.MAX_SLOTS``).
BLOCK_SLOTS = 2
#: Largest number of prefix states the dominance memo keeps (memory guard).
MEMO_LIMIT = 1_500_000


@attrs.frozen
class BlockRules:
    """Limits of the block program, checked while searching (block mode only).

    A block (the ops up to and including a COMPUTE) holds at most ``frag_slots``
    fragment loads and ``global_slots`` global loads; every partition ends with a
    COMPUTE, so blocks never straddle partitions; with ``stagger_rule`` (no
    globals cap: the warp-stagger LDS race check) a block at positions
    1 .. blocks_per_partition-2 holding a global load into its own partition's
    stage must not be followed by a block reading that stage.
    """

    frag_slots: int = BLOCK_SLOTS
    global_slots: int = BLOCK_SLOTS
    blocks_per_partition: int = 4
    stagger_rule: bool = False


class Timeout(Exception):
    """Raised inside the DFS when the deadline passes or the node budget is spent."""


class _Found(Exception):
    pass


class Search:
    """DFS over prefixes; ``optimise`` proves the best value, ``first_at_most`` finds the
    lexicographically first order of at most a given value."""

    def __init__(self, pb: Problem, *, max_globals: int, max_vgpr: int,
                 blocks: BlockRules | None, deadline: float | None,
                 progress: Callable | None) -> None:
        self.pb = pb
        n = pb.n
        self.max_globals = max_globals
        self.max_vgpr = max_vgpr
        self.blocks = blocks
        self.deadline = deadline
        #: total nodes this search may visit (None: no budget); a budget in nodes, unlike
        #: the deadline, cuts the search at the same place on every machine
        self.node_budget: int | None = None
        self.progress = progress
        gcap = max_globals
        if blocks is not None:
            gcap = min(gcap, blocks.global_slots) if gcap > 0 else blocks.global_slots
        self.bound = NodeBound(pb, gcap, blocks.frag_slots if blocks is not None else 0)
        self.nodes = 0
        self.twin_prev = _twins(pb)
        self.block_rules = max_globals > 0 or blocks is not None
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
        # block mode: open-block contents, blocks closed in this partition, stagger flags
        self.blk_frags = self.blk_globals = 0
        self.blk_index = 0
        self.blk_own_global = False
        self.no_frag_stage = -1
        self.rem_mma = sum(pb.lat[i] for i in range(n) if pb.mach[i] == MMA)
        self.rem_valu = sum(pb.lat[i] for i in range(n) if pb.mach[i] == VALU)
        self.rem_port = sum(pb.port)
        self.min_port_lat = min((pb.lat[i] for i in range(n) if pb.port[i]), default=0)
        parts = pb.parts
        self.rem_comp = [sum(pb.is_compute[i] for i in range(lo, hi)) for lo, hi in pb.part_bounds]
        self.rem_frag = [sum(pb.is_frag[i] for i in range(lo, hi)) for lo, hi in pb.part_bounds]
        self.rem_glob = [sum(pb.is_global[i] for i in range(lo, hi)) for lo, hi in pb.part_bounds]
        assert len(self.rem_comp) == parts
        # block mode: a block's global-load limit (the CSP's cap too, blocks never straddle
        # partitions), and each global load's fragment-load producers in its own partition
        self.global_cap = 0
        if blocks is not None:
            self.global_cap = min(max_globals, blocks.global_slots) if max_globals > 0 \
                else blocks.global_slots
        self.part_globals = [[i for i in range(lo, hi) if pb.is_global[i]] for lo, hi in pb.part_bounds]
        self.frag_preds = [[q for q in pb.preds[i] if pb.is_frag[q] and pb.part_of[q] == pb.part_of[i]]
                           for i in range(n)]
        self.static_cp = sorted(((pb.asap[i] + pb.lat[i] + pb.tail[i], i) for i in range(n)),
                                reverse=True)
        self.memo: dict = {}
        self.last_report = time.perf_counter()
        self.open_lb: float = math.inf
        self.best_order: list[int] | None = None
        self.best: tuple = (math.inf, math.inf)

    # --- moves -------------------------------------------------------------------------------
    def place(self, i: int):
        """Append op ``i``; returns what ``unplace`` needs to restore the state."""
        pb = self.pb
        saved = (self.mma_free, self.valu_free, self.port_free, self.cur_max, self.live,
                 self.peak, self.open_globals, self.blk_frags, self.blk_globals, self.blk_index,
                 self.blk_own_global, self.no_frag_stage)
        finish = self.finish
        start = 0
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
        k = pb.part_of[pb.ranges[pos][0]]
        if pos == pb.ranges[pos][0]:  # a partition starts: the CSP's look-back stops here
            self.open_globals = 0
            self.blk_frags = self.blk_globals = self.blk_index = 0
            self.blk_own_global = False
            self.no_frag_stage = -1
        if pb.is_compute[i]:
            if self.blocks is not None and self.blocks.stagger_rule:
                b = self.blk_index
                if self.blk_own_global and 1 <= b <= self.blocks.blocks_per_partition - 2:
                    self.no_frag_stage = k
                else:
                    self.no_frag_stage = -1
            self.open_globals = self.blk_frags = self.blk_globals = 0
            self.blk_own_global = False
            self.blk_index += 1
            self.rem_comp[pb.part_of[i]] -= 1
        elif pb.is_global[i]:
            self.open_globals += 1
            self.blk_globals += 1
            if pb.ops[i].stage == k:
                self.blk_own_global = True
            self.rem_glob[pb.part_of[i]] -= 1
        elif pb.is_frag[i]:
            self.blk_frags += 1
            self.rem_frag[pb.part_of[i]] -= 1
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
         self.open_globals, self.blk_frags, self.blk_globals, self.blk_index,
         self.blk_own_global, self.no_frag_stage) = saved
        if pb.port[i]:
            self.rem_port += 1
        m = pb.mach[i]
        if m == MMA:
            self.rem_mma += pb.lat[i]
        elif m == VALU:
            self.rem_valu += pb.lat[i]
        k = pb.part_of[i]
        if pb.is_compute[i]:
            self.rem_comp[k] += 1
        elif pb.is_global[i]:
            self.rem_glob[k] += 1
        elif pb.is_frag[i]:
            self.rem_frag[k] += 1
        self.placed[i] = False
        self.mask &= ~(1 << i)
        self.order.pop()
        for s in pb.succs[i]:
            self.pending[s] += 1
        for p in pb.preds[i]:
            self.open_succ[p] += 1

    def assume_partitions(self, k: int) -> None:
        """Start from partition ``k`` with an optimistic past (for a decomposition bound).

        Partitions before ``k`` count as placed, each op finishing at its earliest time
        and each unit free at its earliest time, both from the root relaxation.  Any real
        prefix of those partitions has the same placed set and rule state and a state
        no better in any entry, so the optimum from here is a lower bound for all orders.
        """
        pb = self.pb
        self.node_bound()
        head, done = list(self.bound.head), dict(self.bound.done)
        lo = pb.part_bounds[k][0]
        for i in range(lo):
            self.placed[i] = True
            self.mask |= 1 << i
            self.order.append(i)
            self.finish[i] = head[i] + pb.lat[i]
            for c in pb.succs[i]:
                self.pending[c] -= 1
            for p in pb.preds[i]:
                self.open_succ[p] -= 1
            self.live += pb.vdef[i] - pb.vkill[i]
        self.peak = max(self.live, 0)
        self.mma_free = done.get((MMA, k - 1), 0)
        self.valu_free = done.get((VALU, k - 1), 0)
        self.port_free = done.get((PORT, k - 1), 0) if pb.penalty else 0
        self.rem_mma = sum(pb.lat[i] for i in range(lo, pb.n) if pb.mach[i] == MMA)
        self.rem_valu = sum(pb.lat[i] for i in range(lo, pb.n) if pb.mach[i] == VALU)
        self.rem_port = sum(pb.port[lo:])
        for j in range(k):
            self.rem_comp[j] = self.rem_frag[j] = self.rem_glob[j] = 0

    # --- rules ----------------------------------------------------------------------------------
    def allowed(self, c: int, csp_rules: bool = True) -> bool:
        """May op ``c`` take the next position?

        Always: its partition's position, producers placed, and block mode's limits.
        ``csp_rules``: also the CSP's globals cap and VGPR budget (the CSP does not
        hold its seed to those two).
        """
        pb = self.pb
        pos = len(self.order)
        lo, hi = pb.ranges[pos]
        if not lo <= c < hi or self.placed[c] or self.pending[c]:
            return False
        first = pos == lo
        if csp_rules:
            if (pb.is_global[c] and self.max_globals > 0
                    and (0 if first else self.open_globals) >= self.max_globals):
                return False
            if self.live + pb.vdef[c] > self.max_vgpr:
                return False
        blocks = self.blocks
        if blocks is not None:
            bf = 0 if first else self.blk_frags
            bg = 0 if first else self.blk_globals
            if pb.is_global[c] and bg >= blocks.global_slots:
                return False
            if pb.is_frag[c]:
                if bf >= blocks.frag_slots:
                    return False
                if not first and self.no_frag_stage >= 0 and pb.ops[c].stage == self.no_frag_stage:
                    return False
            if pos == hi - 1 and not pb.is_compute[c]:
                return False
        return True

    def candidates(self) -> list[int]:
        """Allowed ops in index order, minus symmetric and commuting duplicates."""
        pb = self.pb
        pos = len(self.order)
        lo, hi = pb.ranges[pos]
        placed, pending, twin_prev = self.placed, self.pending, self.twin_prev
        last = self.order[-1] if self.order and pos != lo else -1
        out = []
        for c in range(lo, hi):
            if placed[c] or pending[c]:
                continue
            tp = twin_prev[c]
            if tp >= 0 and not placed[tp]:
                continue
            if not self.allowed(c):
                continue
            if c < last and self._commutes(last, c):
                continue
            out.append(c)
        return out

    def blocks_feasible(self, csp_rules: bool = True) -> bool:
        """Block mode: the rest of the current partition still fits its remaining blocks.

        ``csp_rules``: count the CSP's globals cap as a block limit too.
        """
        blocks = self.blocks
        if blocks is None:
            return True
        pb = self.pb
        pos = len(self.order)
        if pos == pb.n:
            return True
        lo = pb.ranges[pos][0]
        k = pb.part_of[lo]
        c = self.rem_comp[k]
        f, g = self.rem_frag[k], self.rem_glob[k]
        if c == 0:
            return f == 0 and g == 0
        first = pos == lo
        bf = 0 if first else self.blk_frags
        bg = 0 if first else self.blk_globals
        fs, gs = blocks.frag_slots, self.global_cap if csp_rules else blocks.global_slots
        if f > fs * c - bf or g > gs * c - bg:
            return False
        if not g:
            return True
        # Hall's condition for global loads that wait for fragment loads of this partition:
        # with p of those still unplaced, a load cannot come before the block in which the
        # p-th of them can be placed (fs per block), so the loads whose earliest block is e
        # or later must fit in the blocks from e on.
        placed = self.placed
        free0 = fs - bf
        late = [0] * (c + 1)
        for i in self.part_globals[k]:
            if placed[i]:
                continue
            p = 0
            for q in self.frag_preds[i]:
                if not placed[q]:
                    p += 1
            e = 0 if p <= free0 else -(-(p - free0) // fs)
            if e >= c:
                return False
            late[e] += 1
        total = 0
        for e in range(c - 1, -1, -1):
            total += late[e]
            if total > gs * (c - e) - (bg if e == 0 else 0):
                return False
        return True

    def _commutes(self, a: int, b: int) -> bool:
        """Placing a then b gives the same state as b then a (b was ready before a)."""
        pb = self.pb
        if a in pb.preds[b]:
            return False
        ma, mb = pb.mach[a], pb.mach[b]
        if ma and ma == mb:
            return False
        if pb.port[a] and pb.port[b]:
            return False
        if self.block_rules and (pb.is_compute[a] or pb.is_compute[b]):
            return False
        if pb.any_kill and (pb.vdef[a] or pb.vkill[a] or pb.vdef[b] or pb.vkill[b]):
            return False
        return True

    def is_valid(self, order: Sequence[int], csp_rules: bool = True) -> bool:
        """Does ``order`` obey the rules (replayed from the empty prefix)? See ``allowed``."""
        saved = []
        ok = True
        for i in order:
            if not self.allowed(i, csp_rules):
                ok = False
                break
            saved.append((i, self.place(i)))
            if not self.blocks_feasible(csp_rules):
                ok = False
                break
        for i, s in reversed(saved):
            self.unplace(i, s)
        return ok and len(order) == self.pb.n

    # --- dominance ---------------------------------------------------------------------------
    def state_vector(self) -> tuple:
        """What the future of this prefix depends on, each entry "smaller is better".

        Machine free times; the makespan so far unless the remaining work forces a
        later end anyway; peak and live VGPRs when some op kills VGPRs (otherwise both
        follow from the placed set); then, in op-index order, the finish time of every
        placed op with an unplaced consumer, or 0 when no consumer can start before it
        finishes anyway (the consumer's unit is free later, or its static ASAP is later).
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
        pos = len(self.order)
        for i in range(pb.ranges[pos - 1][1] if pos else 0):
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
            assert floor is not None  # open_succ[i] > 0: some successor is unplaced
            vec.append(f if f > floor else 0)
        return tuple(vec)

    def state_key(self) -> tuple:
        """Prefixes are comparable only with the same placed set and the same rule state."""
        pb = self.pb
        pos = len(self.order)
        at_start = pos == pb.n or pb.ranges[pos][0] == pos
        og = 0 if at_start or not self.max_globals else self.open_globals
        if self.blocks is None or at_start:
            return (self.mask, og)
        return (self.mask, og, self.blk_frags, self.blk_globals, self.blk_own_global,
                self.no_frag_stage)

    def dominated(self) -> bool:
        """True if an explored prefix with the same key is at least as good in every entry.

        Otherwise this prefix is remembered and the ones it beats are forgotten.
        """
        key = self.state_key()
        vec = self.state_vector()
        bucket = self.memo.get(key)
        if bucket is None:
            if len(self.memo) < MEMO_LIMIT:
                self.memo[key] = [vec]
            return False
        for old in bucket:
            for a, b in zip(old, vec):
                if a > b:
                    break
            else:
                return True
        keep = [old for old in bucket if any(a < b for a, b in zip(old, vec))]
        keep.append(vec)
        self.memo[key] = keep
        return False

    # --- bounds -----------------------------------------------------------------------------
    def node_bound(self) -> int:
        pb = self.pb
        pos = len(self.order)
        if pos == pb.n:
            return self.cur_max
        lo = pb.ranges[pos][0]
        if lo == pos:
            og = of = 0
        elif self.blocks is not None:
            og, of = max(self.open_globals, self.blk_globals), self.blk_frags
        else:
            og, of = self.open_globals, 0
        return self.bound(self.placed, self.finish, self.mma_free, self.valu_free, self.port_free,
                          self.cur_max, pb.part_of[lo], og, of)

    def peak_bound(self) -> int:
        """The final VGPR peak is at least the peak so far; without kills it is the total."""
        return self.peak if self.pb.any_kill else self.pb.total_def

    def tick(self, best, phase: str) -> None:
        self.nodes += 1
        if self.node_budget is not None and self.nodes > self.node_budget:
            raise Timeout
        if self.nodes & 127:
            return
        now = time.perf_counter()
        if self.deadline is not None and now > self.deadline:
            raise Timeout
        if self.progress is not None and now - self.last_report >= 0.5:
            self.last_report = now
            self.progress(phase=phase, nodes=self.nodes, best=best, depth=len(self.order))

    # --- phase 1: optimise ----------------------------------------------------------------------
    def optimise(self, inc_order: list[int] | None, inc_value: tuple,
                 stop_at: float = -math.inf) -> bool:
        """Best-bound-first branch and bound from the incumbent; False on a timeout.

        Ties with the incumbent are cut: a leaf replaces it only when strictly
        better in (makespan, peak), as in the CSP.  ``stop_at``: a proven lower bound
        on the makespan; a leaf reaching it ends the search (without VGPR kills the
        peak is the same for every order, so nothing better can follow).
        """
        self.best_order = inc_order
        self.best = inc_value
        self.memo = {}
        self.open_lb = math.inf
        self.stop_at = stop_at if not self.pb.any_kill else -math.inf
        try:
            self._opt()
        except Timeout:
            return False
        except _Found:
            pass
        return True

    def _opt(self) -> None:
        pb = self.pb
        if len(self.order) == pb.n:
            value = (self.cur_max, self.peak)
            if value < self.best:
                self.best = value
                self.best_order = list(self.order)
                if value[0] <= self.stop_at:
                    raise _Found
            return
        children = []
        for c in self.candidates():
            saved = self.place(c)
            if self.blocks_feasible():
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
                    except Timeout:
                        self.open_lb = min(self.open_lb, b)
                        raise
                    self._opt()
            except Timeout:
                if k + 1 < len(children):
                    self.open_lb = min(self.open_lb, children[k + 1][0])
                raise
            finally:
                self.unplace(c, saved)

    # --- phase 2: the lexicographically first order of at most a value --------------------------
    def first_at_most(self, target: tuple, *, use_bounds: bool = True,
                      node_limit: int | None = None) -> list[int] | None:
        """Lexicographic DFS: the first valid order with (makespan, peak) <= ``target``.

        Returns None when there is none, or on a timeout or after ``node_limit`` nodes
        (``self.timed_out``; a node budget keeps the outcome independent of the machine).
        """
        self.memo = {}
        self.target = target
        self.use_bounds = use_bounds
        self.node_limit = None if node_limit is None else self.nodes + node_limit
        self.found: list[int] | None = None
        self.timed_out = False
        try:
            self._lex()
        except _Found:
            return self.found
        except Timeout:
            self.timed_out = True
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
                if not self.blocks_feasible():
                    continue
                if self.use_bounds and (self.node_bound(), self.peak_bound()) > self.target:
                    continue
                if not self.dominated():
                    self.tick(self.target[0], "canonical order")
                    if self.node_limit is not None and self.nodes > self.node_limit:
                        raise Timeout
                    self._lex()
            finally:
                self.unplace(c, saved)


def _twins(pb: Problem) -> list[int]:
    """For each op, the previous interchangeable op (same fields and neighbours), or -1.

    Interchangeable ops give the same value and validity in either order, so only
    the increasing-index order is searched (it is the lexicographically smaller one).
    """
    seen: dict = {}
    out = [-1] * pb.n
    for i, o in enumerate(pb.ops):
        key = (pb.part_of[i], attrs.evolve(o, subtile=0), pb.port[i], tuple(pb.preds[i]),
               tuple(pb.succs[i]))
        if key in seen:
            out[i] = seen[key]
        seen[key] = i
    return out
