"""A cross-CTA reduction lowered: its steps in each reducing agent's ``finish``.

Split-K (and stream-K) runs one output tile on several CTAs, the *splits*; they hand their
partial results over through global memory (docs/guide/agents.md, "Cross-CTA reductions"):
each stores its slice of the workspace, fences (release) and arrives on the tile's counter; the
arrival that brings the count to the splits is the last, and that CTA alone acquires, reads
every slice back, adds them in split order and resets the counter for its next use.  The
schedule declares the reduction (:class:`~pipeline_core.plan.ReductionSpec`); the target's
sync model says what each step is (:class:`~pipeline_core.sync.model.CrossCtaReduction`);
:mod:`pipeline_core.agents.prove_reduction` proves it over every split and arrival order.
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs

from pipeline_core.agents.holders import result_holders
from pipeline_core.errors import ProgramError
from pipeline_core.plan import AgentProgram, AgentSpec, Reduction, Ring, Step, StepKind
from pipeline_core.sync.model import REDUCTION_STEPS, SyncModel


def reduction_steps(sync: SyncModel, name: str) -> tuple[Step, ...]:
    """The reduction's steps in the order a correct one runs them, with the target's tags."""
    assert sync.reduction is not None
    return tuple(Step(kind=StepKind(k), channel=name, tag=sync.reduction.tags[k])
                 for k in REDUCTION_STEPS)


def lower_reduction(spec: AgentSpec, sync: SyncModel, programs: Sequence[AgentProgram],
                    rings: Sequence[Ring], *, owner: str, target: str
                    ) -> tuple[list[AgentProgram], Reduction | None]:
    """``programs`` with the declared reduction's steps as each reducing agent's ``finish``,
    and the lowered :class:`Reduction` (unchanged and None when the schedule declares none)."""
    red = spec.reduction
    if red is None:
        return list(programs), None
    where = f"target {target}'s " if target else ""
    if sync.reduction is None:
        raise ProgramError(f"{owner}: AgentSpec.reduction {red.name}: {where}sync model "
                           f"{sync.name} declares no cross-CTA reduction (SyncModel.reduction); "
                           "drop the reduction or compile for a target that declares one")
    if red.slice_bytes < 0:
        raise ProgramError(f"{owner}: AgentSpec.reduction {red.name}: slice_bytes="
                           f"{red.slice_bytes}; give the bytes of one agent's slice (0: not "
                           "timed)")
    agents = result_holders(programs, rings, red.agents, owner=owner,
                            what=f"AgentSpec.reduction {red.name}", verb="reduce")
    steps = reduction_steps(sync, red.name)
    out = [attrs.evolve(p, finish=steps) if p.name in agents else p for p in programs]
    return out, Reduction(name=red.name, agents=agents, slice_bytes=red.slice_bytes)
