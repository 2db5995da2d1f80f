"""Dependency edges and the declarative edge rules that derive them from a body."""
from __future__ import annotations

import attrs

from pipeline_core.ops import DepKind


@attrs.frozen
class DepEdge:
    """producer -> consumer, with kind and loop distance (0 = same iteration).

    Indices point into the body the edge was derived from.
    """

    producer: int
    consumer: int
    kind: DepKind = attrs.field(default=DepKind.FLOW, converter=DepKind)
    distance: int = 0

    @classmethod
    def flow(cls, p: int, c: int, d: int = 0) -> "DepEdge":
        return cls(p, c, DepKind.FLOW, d)

    @classmethod
    def anti(cls, p: int, c: int, d: int = 0) -> "DepEdge":
        return cls(p, c, DepKind.ANTI, d)

    @property
    def same_iteration(self) -> bool:
        """Ordering-relevant edge (the reference treats distance < 1 as same-iteration)."""
        return self.distance < 1
