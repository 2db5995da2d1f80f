"""List schedulers: always take the lowest-index op whose same-iteration producers are placed.

``greedy_schedule`` is the reference's partition-isolated, block-shaped variant
(a COMPUTE op closes a block), generalised from its hard-coded 2 halves x 4 blocks
to ``num_partitions`` x ``blocks_per_partition``; the reference silently returned
short orders where this raises.
"""
from __future__ import annotations

from typing import Sequence

from pipeline_core.edges import DepEdge
from pipeline_core.errors import SchedulingError
from pipeline_core.ops import Op, OpRole
from pipeline_core.scheduling.evaluate import Tables


class _Placement:
    """Placed flags plus a count of unplaced producers per op (readiness in O(1))."""

    __slots__ = ("t", "placed", "pending", "order")

    def __init__(self, t: Tables) -> None:
        self.t = t
        self.placed = [False] * t.n
        self.pending = [len(p) for p in t.preds]
        self.order: list[int] = []

    def first_ready(self, lo: int, hi: int) -> int | None:
        placed, pending = self.placed, self.pending
        for i in range(lo, hi):
            if not placed[i] and pending[i] == 0:
                return i
        return None

    def place(self, i: int) -> None:
        self.placed[i] = True
        self.order.append(i)
        for s in self.t.succs[i]:
            self.pending[s] -= 1

    def explain(self, ops: Sequence[int]) -> str:
        return "; ".join(f"{self.t.describe(i)} {self.t.blockers(i, self.placed)}" for i in ops)


def _check_shape(num_partitions: int, blocks_per_partition: int) -> None:
    if num_partitions < 1 or blocks_per_partition < 1:
        raise SchedulingError(
            f"greedy needs num_partitions >= 1 and blocks_per_partition >= 1, got "
            f"{num_partitions} x {blocks_per_partition}", strategy="GREEDY")


def greedy_order(t: Tables, num_partitions: int = 2, blocks_per_partition: int = 4) -> list[int]:
    """The block-shaped list schedule of ``t`` (see ``greedy_schedule``)."""
    _check_shape(num_partitions, blocks_per_partition)
    n = t.n
    if n == 0:
        return []
    size = n // num_partitions
    st = _Placement(t)
    for h in range(num_partitions):
        lo, hi = h * size, h * size + size
        for b in range(blocks_per_partition):
            while True:
                i = st.first_ready(lo, hi)
                if i is None:
                    raise _stuck(st, h, b, lo, hi, blocks_per_partition)
                st.place(i)
                if t.role[i] == OpRole.COMPUTE:
                    break
        left = [i for i in range(lo, hi) if not st.placed[i]]
        if left:
            raise SchedulingError(
                f"greedy: partition {h} (ops {lo}..{hi - 1}) closed its {blocks_per_partition} "
                f"blocks with ops {left} never placed: {st.explain(left)}. The reference silently "
                f"drops such ops; an edge from another partition or too many COMPUTE ops per "
                f"partition usually causes this",
                strategy="GREEDY", ops=tuple(left))
    if len(st.order) < n:
        left = list(range(size * num_partitions, n))
        raise SchedulingError(
            f"greedy: {n} ops do not split into {num_partitions} equal partitions; ops {left} "
            f"fall outside every partition and would never be placed",
            strategy="GREEDY", ops=tuple(left))
    return st.order


def _stuck(st: _Placement, h: int, b: int, lo: int, hi: int, blocks: int) -> SchedulingError:
    left = [i for i in range(lo, hi) if not st.placed[i]]
    if not left:
        return SchedulingError(
            f"greedy: partition {h} (ops {lo}..{hi - 1}) ran out of ops in block {b}: it has "
            f"fewer COMPUTE ops than the {blocks} blocks per partition",
            strategy="GREEDY", ops=())
    return SchedulingError(
        f"greedy: no ready op for block {b} of partition {h}; unplaced ops of the partition: "
        f"{st.explain(left)}", strategy="GREEDY", ops=tuple(left))


def greedy_schedule(body: Sequence[Op], edges: Sequence[DepEdge], *, num_partitions: int = 2,
                    blocks_per_partition: int = 4) -> list[int]:
    """Partition by partition, block by block: append the lowest-index ready op of the
    partition until a COMPUTE op closes the block.

    Readiness sees producers in every partition. Raises SchedulingError (naming the
    partition, block and blocked ops) when a block finds no ready op or when ops
    would be left out of the order.
    """
    return greedy_order(Tables(body, edges), num_partitions, blocks_per_partition)


def simple_greedy_order(t: Tables) -> list[int]:
    st = _Placement(t)
    for _ in range(t.n):
        i = st.first_ready(0, t.n)
        if i is None:
            left = [j for j in range(t.n) if not st.placed[j]]
            raise SchedulingError(
                f"simple greedy: no ready op after placing {len(st.order)} of {t.n}; unplaced: "
                f"{st.explain(left)} (a same-iteration cycle or self-loop)",
                strategy="SIMPLE_GREEDY", ops=tuple(left))
        st.place(i)
    return st.order


def simple_greedy_schedule(body: Sequence[Op], edges: Sequence[DepEdge]) -> list[int]:
    """Topological order that always takes the lowest-index ready op."""
    return simple_greedy_order(Tables(body, edges))
