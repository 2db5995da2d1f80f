"""The schedulers' cost model: simulated makespan, VGPR peak and lower bounds.

Everything here runs on plain lists (``Tables``) because the search strategies
call it at every leaf; building a graph object per call would dominate.
"""
from __future__ import annotations

from typing import Sequence

from pipeline_core.edges import DepEdge
from pipeline_core.errors import SchedulingError
from pipeline_core.graph import asap_times, check_edges
from pipeline_core.ops import Op, ResourceKind

_MMA = ResourceKind.MMA_UNIT
_VALU = ResourceKind.VALU
_PORT = (ResourceKind.LDS, ResourceKind.GLOBAL_MEM)


class Tables:
    """A body flattened for the schedulers: per-op numbers and same-iteration adjacency.

    ``preds``/``succs`` hold one entry per edge with distance < 1 (any kind), so
    duplicate edges count twice in ``pending`` bookkeeping, consistently.
    """

    __slots__ = ("ops", "edges", "n", "latency", "is_mma", "is_valu", "uses_port", "role",
                 "vgpr_def", "vgpr_kill", "preds", "succs", "pred_edges")

    def __init__(self, body: Sequence[Op], edges: Sequence[DepEdge]) -> None:
        self.ops = tuple(body)
        self.edges = tuple(edges)
        check_edges(self.ops, self.edges)
        n = self.n = len(self.ops)
        self.latency = [o.latency for o in self.ops]
        self.is_mma = [o.resource == _MMA for o in self.ops]
        self.is_valu = [o.resource == _VALU for o in self.ops]
        self.uses_port = [o.resource in _PORT for o in self.ops]
        self.role = [o.role for o in self.ops]
        self.vgpr_def = [o.vgpr_def for o in self.ops]
        self.vgpr_kill = [o.vgpr_kill for o in self.ops]
        self.preds: list[list[int]] = [[] for _ in range(n)]
        self.succs: list[list[int]] = [[] for _ in range(n)]
        self.pred_edges: list[list[int]] = [[] for _ in range(n)]
        for k, e in enumerate(self.edges):
            if e.distance < 1:
                self.preds[e.consumer].append(e.producer)
                self.succs[e.producer].append(e.consumer)
                self.pred_edges[e.consumer].append(k)

    def describe(self, i: int) -> str:
        o = self.ops[i]
        return f"{i} (tag {o.tag}, {o.role.name}, stage {o.stage}, subtile {o.subtile})"

    def blockers(self, i: int, placed: Sequence[bool]) -> str:
        """Why op ``i`` is not ready: its unplaced same-iteration producers, with edge numbers."""
        parts = []
        for k in self.pred_edges[i]:
            e = self.edges[k]
            if not placed[e.producer]:
                parts.append(f"{e.producer} ({self.role[e.producer].name}) via edge #{k} "
                             f"{e.kind.name} d={e.distance}")
        return "waits for " + ", ".join(parts) if parts else "ready"


def run_prefix(t: Tables, order: Sequence[int], count: int, penalty: int = 0):
    """Simulate ``order[:count]``: the one evaluator every cost and bound is built on.

    Returns (finish, mma_free, valu_free, port_free, vgpr_peak); ops not simulated
    have finish 0, and a producer later in the order counts as finish 0 (as in the
    reference, an order that violates an edge is evaluated without error).
    """
    finish = [0] * t.n
    latency, preds, is_mma, is_valu, uses_port = t.latency, t.preds, t.is_mma, t.is_valu, t.uses_port
    vdef, vkill = t.vgpr_def, t.vgpr_kill
    mma_free = valu_free = port_free = 0
    live = peak = 0
    for k in range(count):
        i = order[k]
        start = 0
        for p in preds[i]:
            f = finish[p]
            if f > start:
                start = f
        if is_mma[i]:
            if mma_free > start:
                start = mma_free
        elif is_valu[i]:
            if valu_free > start:
                start = valu_free
        if penalty > 0 and uses_port[i]:
            if port_free > start:
                start = port_free
            port_free = start + penalty
        end = start + latency[i]
        finish[i] = end
        if is_mma[i]:
            mma_free = end
        elif is_valu[i]:
            valu_free = end
        live += vdef[i]
        if live > peak:
            peak = live
        live -= vkill[i]
    return finish, mma_free, valu_free, port_free, peak


def simulate(t: Tables, order: Sequence[int], penalty: int = 0) -> tuple[int, int]:
    """(makespan, vgpr_peak) of ``order``; producers later in the order count as finish 0."""
    finish, _, _, _, peak = run_prefix(t, order, len(order), penalty)
    return (max(finish) if finish else 0), peak


def check_order(t: Tables, order: Sequence[int], who: str = "evaluate_schedule") -> None:
    """An order must be a permutation of the body's indices."""
    if len(order) == t.n and sorted(order) == list(range(t.n)):
        return
    seen = set(order)
    missing = [i for i in range(t.n) if i not in seen]
    extra = sorted({i for i in order if not 0 <= i < t.n} | {i for i in seen if list(order).count(i) > 1})
    raise SchedulingError(
        f"{who}: the order has {len(order)} entries for {t.n} ops and is not a permutation "
        f"(missing ops {missing}, out-of-range or repeated {extra})",
        ops=tuple(missing or extra))


def evaluate_schedule(body: Sequence[Op], edges: Sequence[DepEdge], order: Sequence[int],
                      penalty: int = 0) -> tuple[int, int]:
    """(makespan, VGPR peak) of executing ``body`` in ``order``.

    MMA and VALU ops serialise on their own unit; with ``penalty`` > 0 each LDS or
    global op also holds the LDS port for ``penalty`` cycles. An order that violates
    an edge is evaluated without error (the reference does the same).
    """
    t = Tables(body, edges)
    check_order(t, order)
    return simulate(t, order, penalty)


def evaluate_makespan(body: Sequence[Op], edges: Sequence[DepEdge], order: Sequence[int],
                      penalty: int = 0) -> int:
    return evaluate_schedule(body, edges, order, penalty)[0]


def lower_bound(t: Tables, penalty: int = 0) -> int:
    asap = asap_times(t.latency, t.edges)
    n = t.n
    bound = max((asap[i] + t.latency[i] for i in range(n)), default=0)
    for flags in (t.is_mma, t.is_valu):
        total = sum(t.latency[i] for i in range(n) if flags[i])
        if total > 0:
            bound = max(bound, min(asap[i] for i in range(n) if flags[i]) + total)
    if penalty > 0:
        bound = max(bound, penalty * sum(t.uses_port))
    return bound


def asap_lower_bound(body: Sequence[Op], edges: Sequence[DepEdge], penalty: int = 0) -> int:
    """Max of the critical path, the serial MMA bound, the serial VALU bound and the port bound."""
    return lower_bound(Tables(body, edges), penalty)


def partial_bound(t: Tables, order: Sequence[int], placed: Sequence[bool], pos: int) -> int:
    """Bound for completing a prefix: positions 0..pos simulated (no penalty), rest by unit."""
    finish, mma_free, valu_free, _, _ = run_prefix(t, order, pos + 1)
    worst = max(finish, default=0)
    latency, is_mma, is_valu = t.latency, t.is_mma, t.is_valu
    rest_mma = rest_valu = 0
    for i in range(t.n):
        if not placed[i]:
            if is_mma[i]:
                rest_mma += latency[i]
            elif is_valu[i]:
                rest_valu += latency[i]
    return max(mma_free + rest_mma, valu_free + rest_valu, worst)


def topological_order(t: Tables) -> list[int]:
    """Ops in a same-iteration topological order (lowest index first); cyclic ops are left out."""
    pending = [len(p) for p in t.preds]
    ready = [i for i in range(t.n) if pending[i] == 0]
    ready.reverse()
    out = []
    while ready:
        i = ready.pop()
        out.append(i)
        for s in t.succs[i]:
            pending[s] -= 1
            if pending[s] == 0:
                ready.append(s)
    return out


def penalised_partial_bound(t: Tables, order: Sequence[int], placed: Sequence[bool], pos: int,
                            penalty: int, topo: Sequence[int]) -> int:
    """A tighter bound than ``partial_bound`` for the same prefix, valid for penalised leaves.

    The prefix's simulated times are exact (evaluation is sequential), so the bound
    adds the earliest finish of every unplaced op given the prefix (a relaxation of
    the remaining dependency chains) and the serial MMA, VALU and LDS-port work left.
    """
    finish, mma_free, valu_free, port_free, _ = run_prefix(t, order, pos + 1, penalty)
    worst = max(finish, default=0)
    latency, preds, is_mma, is_valu, port = t.latency, t.preds, t.is_mma, t.is_valu, t.uses_port
    rest_mma = rest_valu = rest_port = 0
    min_port_lat = None
    for i in topo:
        if placed[i]:
            continue
        start = 0
        for p in preds[i]:
            if finish[p] > start:
                start = finish[p]
        if is_mma[i]:
            rest_mma += latency[i]
            if mma_free > start:
                start = mma_free
        elif is_valu[i]:
            rest_valu += latency[i]
            if valu_free > start:
                start = valu_free
        if penalty > 0 and port[i]:
            rest_port += 1
            if min_port_lat is None or latency[i] < min_port_lat:
                min_port_lat = latency[i]
            if port_free > start:
                start = port_free
        finish[i] = start + latency[i]
        if finish[i] > worst:
            worst = finish[i]
    bound = max(worst, mma_free + rest_mma, valu_free + rest_valu)
    if rest_port:
        bound = max(bound, port_free + penalty * (rest_port - 1) + min_port_lat)
    return bound


def partial_lower_bound(body: Sequence[Op], edges: Sequence[DepEdge], order: Sequence[int],
                        placed: Sequence[bool], pos: int) -> int:
    """The branch-and-bound test: a lower bound on any completion of ``order[:pos + 1]``.

    ``placed`` marks the ops already in the prefix (the candidate at ``pos`` included).
    """
    return partial_bound(Tables(body, edges), order, placed, pos)
