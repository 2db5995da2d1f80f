"""The one timing entry point: a compiled schedule (or a schedule document) on its timing model.

Why one place: ``analyze``, ``export --format trace|png|svg``, compile's text header and the
metrics must all see the same run of the same schedule.  Two engines exist: the single-stream
model of this package for the block and ring lowerings' phase lists, and the agents model
(:mod:`pipeline_core.agents.timing`, docs/guide/agents.md "Timing model") for a warp-specialized
plan.  This function is where the choice between them is made, and the only place; both give
a :class:`~pipeline_core.simulate.Timeline` the exporters render unchanged.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from pipeline_core.simulate.engine import simulate
from pipeline_core.simulate.inputs import SimulationError
from pipeline_core.simulate.timeline import Timeline

if TYPE_CHECKING:
    from pipeline_core.compiler import CompiledSchedule


def model_run(source: "CompiledSchedule | Mapping[str, Any]", iterations: int, *,
              progress: Callable[[int, int], None] | None = None) -> Timeline:
    """``source`` run for ``iterations`` kernel iterations (K tiles for an agents plan, at least
    the plan's minimum).  SimulationError (one line) when the target gives the model no numbers."""
    plan = None if isinstance(source, Mapping) or source.plan.lockstep else source.plan
    if plan is None:
        if isinstance(source, Mapping) and source.get("agents"):
            raise SimulationError("an agents plan is modelled from the schedule, not its document: "
                                  "name the schedule (pipeline-core export SCHEDULE ...)")
        return simulate(source, iterations, progress=progress)
    from pipeline_core.agents.timing import timeline

    assert not isinstance(source, Mapping)
    target = source.target_profile
    machine = getattr(target, "agent_machine", None)
    if target is None or machine is None:
        raise SimulationError(f"target {source.target_name or '(own)'} declares no agents timing "
                              "machine (TargetProfile.agent_machine), so the plan is not modelled")
    sync = target.sync
    names = {**(sync.tag_names() if sync is not None else {}), **source.tag_names}
    tiles = max(iterations, plan.min_tiles)
    try:
        tl = timeline(plan, source.body, machine, tiles, name=source.schedule_name, names=names,
                      sync=sync, clock_ghz=target.clock_ghz)
    except SimulationError:
        raise
    except ValueError as exc:  # a deadlocked plan, too few tiles: the model's own message
        raise SimulationError(str(exc)) from None
    if progress is not None:
        progress(tiles, tiles)
    return tl
