"""Kernel-entry dependencies of the double-buffer kernel
(docs/guide/reference-behaviours.md, "Kernel-entry deps").

Per partition slice: the first SYNC before the first MMA, the first
fragment wait, and the MMA chain. Duplicates are kept (the reference emits the
same edge twice when the first SYNC is the lgkm wait).
"""
from __future__ import annotations

from typing import Sequence

from pipeline_core.config import PipelineConfig
from pipeline_core.edges import DepEdge
from pipeline_core.ops import Entry, FrameworkTag, OpRole


def kernel_deps_double_buffer(kernel_entries: Sequence[Entry], config: PipelineConfig,
                              fragment_wait_tag: int | None = int(FrameworkTag.WAIT_LGKM)
                              ) -> tuple[DepEdge, ...]:
    """FLOW edges (distance 0) in kernel-entry indices, at most 4 per partition.

    Slices are cut by count (len // num_partitions), not at block boundaries.
    ``fragment_wait_tag`` is the tag the target's fragment waits lowered to
    (None: it has none, so no edge from a fragment wait).
    """
    parts = config.num_partitions
    length = len(kernel_entries) // parts if parts else 0
    edges: list[DepEdge] = []
    for h in range(parts):
        lo = h * length
        start = lgkm = None
        mmas: list[int] = []
        for k in range(lo, lo + length):
            op = kernel_entries[k].op
            if op.role == OpRole.COMPUTE:
                mmas.append(k)
            elif op.role == OpRole.SYNC and start is None and not mmas:
                start = k
            if fragment_wait_tag is not None and op.tag == fragment_wait_tag and lgkm is None:
                lgkm = k
        if mmas:
            if start is not None:
                edges.append(DepEdge.flow(start, mmas[0]))
            if lgkm is not None:
                edges.append(DepEdge.flow(lgkm, mmas[0]))
        if len(mmas) >= 3:
            edges.append(DepEdge.flow(mmas[0], mmas[1]))
            edges.append(DepEdge.flow(mmas[1], mmas[2]))
    return tuple(edges)
