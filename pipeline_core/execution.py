"""Who runs which entries: the execution model shared by the timing model, checker and views.

The reference runs one program on every warp group and staggers them (ping-pong,
docs/guide/reference-behaviours.md, "Warp stagger"): when the warp-stagger index lies inside the
prologue, two groups run; group 0 runs ``prologue[:index]`` alone, group 1 then
passes one extra barrier, both run the rest of the prologue and a barrier, then the
kernel ``iterations`` times and the epilogue, and group 0 passes one extra barrier
at the end so the barrier counts match.  Otherwise every group runs the phases back
to back.  This module is the one statement of that rule; each consumer turns the
:class:`Slot` sequence into its own records.

``warps_per_group`` is how many warps of one group run the same stream; a schedule
declares it with a ``warps_per_group()`` method, a target with
``TargetProfile.warps_per_group`` (default 1: a group is one agent), and a target whose sync
model counts a channel per thread models at least 2 (:func:`fewest_agents`;
``pipeline_core.lowering.declared_warps_per_group`` reads the declarations).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from pipeline_core.errors import ConfigError
from pipeline_core.ops import Phase

if TYPE_CHECKING:
    from pipeline_core.sync.model import SyncModel

#: Synthetic barriers the stagger adds (the ``synthetic`` value of a :class:`Slot`).
STAGGER, LAUNCH, TAIL = "stagger", "launch", "tail"


def _at_least(lo: int):
    def check(inst, attribute, value):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ConfigError(type(inst).__name__, attribute.name, value, f"an integer >= {lo}")
    return check


@attrs.frozen(kw_only=True)
class Slot:
    """One step of a group's stream: entry ``index`` of ``phase``, or a synthetic barrier."""

    phase: Phase
    index: int  #: entry index in the phase list; -1 for a synthetic barrier
    iteration: int = -1  #: kernel iteration, 0-based; -1 in the prologue and epilogue
    synthetic: str = ""  #: STAGGER, LAUNCH or TAIL for the barriers the stagger adds


@attrs.frozen(kw_only=True)
class ExecutionModel:
    """How many warp groups run the phase lists, and whether they are staggered.

    ``stagger_index`` None: every group runs prologue, kernel and epilogue back to
    back.  Otherwise the reference's stagger, which needs exactly two groups.
    """

    groups: int = attrs.field(default=1, validator=_at_least(1))
    stagger_index: int | None = None
    warps_per_group: int = attrs.field(default=1, validator=_at_least(1))

    def __attrs_post_init__(self) -> None:
        if self.stagger_index is not None and self.groups != 2:
            raise ConfigError("ExecutionModel", "groups", self.groups,
                              "exactly 2 warp groups for a staggered schedule")

    @staticmethod
    def is_staggered(warp_stagger_index: int, prologue_len: int) -> bool:
        """The stagger applies when its index lies inside the prologue (0..len inclusive)."""
        return 0 <= warp_stagger_index <= prologue_len

    @classmethod
    def of(cls, warp_stagger_index: int, prologue_len: int, *, groups: int | None = None,
           warps_per_group: int = 1) -> "ExecutionModel":
        """The reference's model for a compiled schedule: 2 staggered groups or 1 group.

        ``groups`` forces a group count; more than one group without a stagger runs
        the same stream unstaggered.
        """
        staggered = cls.is_staggered(warp_stagger_index, prologue_len)
        if groups is None:
            groups = 2 if staggered else 1
        return cls(groups=groups, stagger_index=warp_stagger_index if staggered else None,
                   warps_per_group=warps_per_group)

    @property
    def staggered(self) -> bool:
        return self.stagger_index is not None

    def stream(self, group: int, prologue_len: int, kernel_len: int, epilogue_len: int,
               iterations: int) -> tuple[Slot, ...]:
        """The slots group ``group`` executes, in order."""
        if not 0 <= group < self.groups:
            raise ConfigError("ExecutionModel", "group", group, f"a group in 0..{self.groups - 1}")
        out: list[Slot] = []
        if self.stagger_index is not None:
            split = min(max(self.stagger_index, 0), prologue_len)
            out += [Slot(phase=Phase.PROLOGUE, index=i) for i in range(split)]
            if group == 1:
                out.append(Slot(phase=Phase.PROLOGUE, index=-1, synthetic=STAGGER))
            out += [Slot(phase=Phase.PROLOGUE, index=i) for i in range(split, prologue_len)]
            out.append(Slot(phase=Phase.PROLOGUE, index=-1, synthetic=LAUNCH))
        else:
            out += [Slot(phase=Phase.PROLOGUE, index=i) for i in range(prologue_len)]
        for it in range(iterations):
            out += [Slot(phase=Phase.KERNEL, index=i, iteration=it) for i in range(kernel_len)]
        out += [Slot(phase=Phase.EPILOGUE, index=i) for i in range(epilogue_len)]
        if self.stagger_index is not None and group == 0:
            out.append(Slot(phase=Phase.EPILOGUE, index=-1, synthetic=TAIL))
        return tuple(out)


def fewest_agents(sync: "SyncModel | None") -> int:
    """2 when a channel of ``sync`` is counted per thread with results visible to the issuer
    only (cp.async): the threads of even one warp read each other's copies, which only a
    barrier publishes, so a one-warp model would call every such barrier redundant
    (docs/guide/checker.md, "Compile proves what it emits"); else 1."""
    channels = sync.channels if sync is not None else ()
    return 2 if any(c.owner == "thread" and c.results_visible_to == "issuer" for c in channels) else 1
