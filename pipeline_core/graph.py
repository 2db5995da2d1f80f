"""The loop-body dependency graph: ops, edges, ASAP/ALAP and well-formedness checks.

Only same-iteration edges (distance < 1, any kind) constrain the order inside one
iteration; edges with distance >= 1 document cross-iteration data flow and are
ignored by ASAP/ALAP and ordering, exactly as in the reference.  Timing passes run
on plain lists; the networkx view is built on demand for path finding and for
callers that want graph algorithms.
"""
from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import networkx as nx

from pipeline_core.edges import DepEdge
from pipeline_core.errors import GraphError
from pipeline_core.ops import Op, OpRole, tag_name


def _describe(i: int, ops: Sequence[Op]) -> str:
    return f"{i} ({ops[i].role.name})"


def _describe_op(i: int, ops: Sequence[Op]) -> str:
    o = ops[i]
    return f"op {i} ({tag_name(o.tag)}, {o.role.name}, stage {o.stage}, subtile {o.subtile})"


def check_edges(body: Sequence[Op], edges: Sequence[DepEdge], *, self_loops: bool = True) -> None:
    """The reference's per-edge checks, in its order: bounds, then the d == 0 self-loop.

    Negative indices count as out of bounds (the reference does not check them;
    in Python they would silently wrap around).
    """
    n = len(body)
    for k, e in enumerate(edges):
        if not (0 <= e.producer < n and 0 <= e.consumer < n):
            raise GraphError(
                f"edge {k} ({e.producer} -> {e.consumer}, {e.kind.name}, d={e.distance}) has an "
                f"op index out of bounds: the body has {n} ops (valid indices 0..{n - 1})",
                edge=k)
        if self_loops and e.distance == 0 and e.producer == e.consumer:
            raise GraphError(
                f"edge {k} is a same-iteration self-loop on {_describe_op(e.producer, body)}: "
                f"an op cannot wait for itself (use distance >= 1 for a loop-carried dependency)",
                edge=k, cycle=(e.producer,))


def same_iteration_pairs(edges: Sequence[DepEdge]) -> list[tuple[int, int]]:
    """(producer, consumer) of every ordering-relevant edge, in edge-list order."""
    return [(e.producer, e.consumer) for e in edges if e.distance < 1]


def predecessor_lists(n: int, edges: Sequence[DepEdge]) -> list[list[int]]:
    """Same-iteration producers of every op (one entry per edge, duplicates kept)."""
    preds: list[list[int]] = [[] for _ in range(n)]
    for e in edges:
        if e.distance < 1:
            preds[e.consumer].append(e.producer)
    return preds


def asap_times(latency: Sequence[int], edges: Sequence[DepEdge]) -> list[int]:
    """Earliest starts: in-place fixed point over the edge list, at most len(latency) passes.

    A same-iteration cycle is not detected here; the values after the last pass
    are returned (the reference's behaviour). ``validate`` reports cycles.
    """
    n = len(latency)
    t = [0] * n
    pairs = same_iteration_pairs(edges)
    for _ in range(n):
        changed = False
        for p, c in pairs:
            v = t[p] + latency[p]
            if v > t[c]:
                t[c] = v
                changed = True
        if not changed:
            break
    return t


def alap_times(latency: Sequence[int], edges: Sequence[DepEdge], makespan: int) -> list[int]:
    """Latest starts that still finish by ``makespan`` (edges walked forwards, relaxed backwards)."""
    n = len(latency)
    t = [makespan - lat for lat in latency]
    pairs = same_iteration_pairs(edges)
    for _ in range(n):
        changed = False
        for p, c in pairs:
            v = t[c] - latency[p]
            if v < t[p]:
                t[p] = v
                changed = True
        if not changed:
            break
    return t


def _has_same_iteration_cycle(n: int, edges: Sequence[DepEdge]) -> bool:
    """Kahn's algorithm on plain lists: cheap enough to run on every compile."""
    indeg = [0] * n
    succs: list[list[int]] = [[] for _ in range(n)]
    for e in edges:
        if e.distance < 1:
            succs[e.producer].append(e.consumer)
            indeg[e.consumer] += 1
    ready = [i for i in range(n) if indeg[i] == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for s in succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return seen != n


def _build_nx(body: Sequence[Op], edges: Sequence[DepEdge],
              latency: Sequence[int]) -> nx.MultiDiGraph:
    import networkx as nx  # lazy: only analyses and exports need the graph object

    g = nx.MultiDiGraph()
    for i, o in enumerate(body):
        g.add_node(i, op=o, latency=latency[i], resource=o.resource, role=o.role)
    for k, e in enumerate(edges):
        g.add_edge(e.producer, e.consumer, key=k, index=k, kind=e.kind, distance=e.distance)
    return g


def find_same_iteration_cycle(body: Sequence[Op], edges: Sequence[DepEdge]) -> tuple[int, ...] | None:
    """A cycle of distance < 1 edges as op indices (each op once, smallest index first), or None."""
    check_edges(body, edges, self_loops=False)
    if not _has_same_iteration_cycle(len(body), edges):
        return None
    g = _build_nx(body, [e for e in edges if e.distance < 1], [o.latency for o in body])
    import networkx as nx

    found = nx.find_cycle(g, orientation="original")
    path = [u for u, _v, _k, _d in found]
    start = path.index(min(path))
    return tuple(path[start:] + path[:start])


def _cycle_error(body: Sequence[Op], edges: Sequence[DepEdge], cycle: tuple[int, ...]) -> GraphError:
    closed = list(cycle) + [cycle[0]]
    path = " -> ".join(_describe(i, body) for i in closed)
    via = []
    for a, b in zip(closed, closed[1:]):
        k = next(k for k, e in enumerate(edges)
                 if e.producer == a and e.consumer == b and e.distance < 1)
        via.append(f"#{k} {edges[k].kind.name} d={edges[k].distance}")
    return GraphError(
        f"same-iteration dependency cycle: {path} (edges {', '.join(via)}); no order can satisfy "
        f"it, so one of these edges needs a loop distance >= 1",
        edge=None, cycle=tuple(cycle))


def validate(body: Sequence[Op], edges: Sequence[DepEdge]) -> None:
    """Raise GraphError for a bad edge index, a d == 0 self-loop, or a same-iteration cycle.

    Per-edge checks run first in the reference's order (edge by edge: bounds, then
    self-loop); the cycle check runs last. Coarse ANTI edges that an order merely
    violates are not cycles and pass.
    """
    check_edges(body, edges)
    cycle = find_same_iteration_cycle(body, edges)
    if cycle is not None:
        raise _cycle_error(body, edges, cycle)


def order_violations(edges: Sequence[DepEdge], order: Sequence[int]) -> list[tuple[int, DepEdge]]:
    """Same-iteration edges whose consumer comes before its producer in ``order``.

    Returns (edge index, edge) pairs in edge-list order; the caller decides which
    are real hazards (the reference's LDS-ANTI edges are coarser than the hazard).
    Edges touching ops missing from ``order`` are not reported.
    """
    pos = {op_index: k for k, op_index in enumerate(order)}
    out = []
    for k, e in enumerate(edges):
        if e.distance >= 1 or e.producer not in pos or e.consumer not in pos:
            continue
        if pos[e.consumer] < pos[e.producer]:
            out.append((k, e))
    return out


class LoopGraph:
    """One loop iteration: ops (nodes with latency) and dependency edges.

    The constructor checks only edge bounds (an edge into nowhere cannot be
    represented); ``validate`` does the full check. ``latencies`` overrides the
    ops' own latencies (the reference's explicit OpNode latency).
    """

    def __init__(self, body: Sequence[Op], edges: Sequence[DepEdge] = (), *,
                 latencies: Sequence[int] | None = None) -> None:
        self.ops: tuple[Op, ...] = tuple(body)
        self.edges: tuple[DepEdge, ...] = tuple(edges)
        n = len(self.ops)
        if any(not (0 <= e.producer < n and 0 <= e.consumer < n) for e in self.edges):
            check_edges(self.ops, self.edges)  # raises, in the reference's edge order
        if latencies is None:
            self.latency: list[int] = [o.latency for o in self.ops]
        else:
            if len(latencies) != n:
                raise GraphError(f"latencies has {len(latencies)} values for {n} ops")
            self.latency = [int(v) for v in latencies]
        self.preds: list[list[int]] = predecessor_lists(n, self.edges)
        self.succs: list[list[int]] = [[] for _ in range(n)]
        for e in self.edges:
            if e.distance < 1:
                self.succs[e.producer].append(e.consumer)

    def __len__(self) -> int:
        return len(self.ops)

    @cached_property
    def nx_graph(self) -> nx.MultiDiGraph:
        """networkx view: nodes carry op/latency/resource/role, edges index/kind/distance."""
        return _build_nx(self.ops, self.edges, self.latency)

    def resource(self, i: int):
        return self.ops[i].resource

    def role(self, i: int) -> OpRole:
        return self.ops[i].role

    def asap(self) -> list[int]:
        return asap_times(self.latency, self.edges)

    def alap(self, makespan: int) -> list[int]:
        return alap_times(self.latency, self.edges, makespan)

    def slack(self, makespan: int) -> list[int]:
        return [b - a for a, b in zip(self.asap(), self.alap(makespan))]

    def critical_path(self) -> int:
        """Longest same-iteration latency chain (0 for an empty body)."""
        t = self.asap()
        return max((t[i] + self.latency[i] for i in range(len(t))), default=0)

    def validate(self) -> None:
        validate(self.ops, self.edges)

    def find_cycle(self) -> tuple[int, ...] | None:
        return find_same_iteration_cycle(self.ops, self.edges)

    def order_violations(self, order: Sequence[int]) -> list[tuple[int, DepEdge]]:
        return order_violations(self.edges, order)

    def is_ready(self, i: int, placed: Sequence[bool]) -> bool:
        """All same-iteration producers of op ``i`` are placed."""
        return all(placed[p] for p in self.preds[i])
