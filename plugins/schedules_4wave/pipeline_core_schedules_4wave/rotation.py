"""Cross-stage rotation edges: the 4-wave kernel's fragments read the other partition's stage.

In the 4-wave schedule a subtile-0 fragment load of partition 0 reads the LDS
stage partition 1 fills (and the reverse), so the rule tables' same-stage edges
do not describe it.  These helpers add the rotation's edges and drop the flows
the rule tables would wrongly keep.  They are a fact of this schedule, not of
the core's edge engine, so they live with it.
"""
from __future__ import annotations

from collections.abc import Sequence

from pipeline_core.plugin_api import DepEdge, DepKind, Op, OpRole


def _partition(i: int, n: int) -> int:
    return 0 if i < n // 2 else 1


def _is_cross_stage_frag(o: Op, i: int, n: int) -> bool:
    return o.role == OpRole.FRAGMENT_LOAD and o.subtile == 0 and o.stage != _partition(i, n)


def derive_cross_stage_rotation_edges(body: Sequence[Op]) -> list[DepEdge]:
    """Edges for subtile-0 frags that read the other partition's LDS stage.

    Per frag (ascending) and per matching MMA (ascending): FLOW frag -> MMA when the
    MMA is in the other partition (d 0 from partition 0, d 1 from partition 1), ANTI
    MMA -> frag (d 0) when it is in the same one, interleaved in MMA order.
    """
    n = len(body)
    out: list[DepEdge] = []
    for i, f in enumerate(body):
        if not _is_cross_stage_frag(f, i, n):
            continue
        pi = _partition(i, n)
        for j, m in enumerate(body):
            if m.role != OpRole.COMPUTE:
                continue
            matches = (f.channel == 0 and m.stage == 0) or (f.channel == 1 and m.subtile == 0)
            if not matches:
                continue
            if _partition(j, n) != pi:
                out.append(DepEdge(i, j, DepKind.FLOW, 0 if pi == 0 else 1))
            else:
                out.append(DepEdge(j, i, DepKind.ANTI, 0))
    return out


def filter_spurious_cross_stage_flow(edges: Sequence[DepEdge], body: Sequence[Op]) -> list[DepEdge]:
    """Drop FLOW edges from a cross-stage frag to a same-partition MMA (survivors keep order).

    With the rule tables this drops nothing (rule 1 already excludes such frags);
    it guards hand-written edge lists against the frag/MMA cycle.
    """
    n = len(body)
    out = []
    for e in edges:
        p, c = body[e.producer], body[e.consumer]
        if (e.kind == DepKind.FLOW and _is_cross_stage_frag(p, e.producer, n)
                and c.role == OpRole.COMPUTE
                and _partition(e.consumer, n) == _partition(e.producer, n)):
            continue
        out.append(e)
    return out
