"""A step's place on its ring as C expressions: the one statement of ring position, stage and
parity for every warp-specialized family (issue 34; the GEMM and attention emitters each wrote
their own, and the two disagreed on a ring's depth)."""
from __future__ import annotations

from collections.abc import Sequence

import attrs

from pipeline_core.plugin_api import ProgramError, Ring, Step


@attrs.frozen(kw_only=True)
class RingState:
    """A step's place on its ring as C expressions, the one statement of it for every family
    (CUTLASS's ``PipelineState``: index and phase in one object).  ``position`` counts the
    ring's life: a once step's the CTA's output tiles (``o``), a K-loop step's the K tiles
    this CTA ran before this output tile (``rb``) plus the one it serves (``t`` minus its lag),
    so stages and parities run on across output tiles; ``depth`` is the ring's stage count (a
    kernel constant or the plan ring's number)."""

    position: str
    depth: str

    @classmethod
    def of(cls, s: Step, depth: str | int) -> "RingState":
        position = "o" if s.once else f"(rb + t - {s.lag})" if s.lag else "(rb + t)"
        return cls(position=position, depth=str(depth))

    @property
    def stage(self) -> str:
        return f"({self.position} % {self.depth})"

    def parity(self, phase_offset: int) -> str:
        """The parity of the phase ``phase_offset`` from the one this position fills."""
        return f"(({self.position} / {self.depth} + ({phase_offset})) & 1)"


def loop_tile(s: Step) -> str:
    """The K tile (a KV block) a loop step serves: ``t`` minus its lag."""
    return f"(t - {s.lag})" if s.lag else "t"


def require_ring_depths(rings: Sequence[Ring], stages: int, once_stages: int,
                        emitter: str) -> None:
    """Refuse a plan whose ``rings`` the proof ran at another depth than the kernel's buffers
    (``stages`` for the K-loop rings, ``once_stages`` for rings loaded once per output tile):
    the kernel indexes its buffers by its geometry, so a ring proven deeper or shallower is a
    ring nobody proved (and a full ring deeper than its buffers would overwrite one still
    read)."""
    for r in rings:
        want = once_stages if r.once else stages
        if r.stages != want:
            raise ProgramError(f"emitter {emitter}: the plan's ring {r.name} was proven "
                               f"{r.stages} stages deep and the kernel's geometry has {want}; "
                               "recompile the schedule (-T stages sets both)")
