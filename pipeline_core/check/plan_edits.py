"""Single edits of every field of an agents plan: what a fuzz asks the prover about.

:mod:`pipeline_core.check.mutate` makes the edits a *correct* prover must refuse (a release
dropped, a wait loosened), one category at a time.  This module makes every edit a field allows,
harmful or not: each step deleted, moved, doubled, each of its fields nudged, each ring's and
program's fields nudged, each record dropped or cut short.  Two uses: the prover must answer each
with a verdict or one clear refusal, never an exception (tests/test_plan_edits.py); and an
accepted edit must be harmless, which an independent oracle judges (the same plan proven over
longer unrolls: ``benchmarks/plan_edit_audit.py``).  Edits are yielded in a fixed order, so a
sample by index is the same sample on every machine.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import attrs

from pipeline_core.tiles import varies

if TYPE_CHECKING:
    from pipeline_core.plan import AgentProgram, Plan, Step

#: the sections of an agent program holding one list of steps, and those holding iterations
FLAT = ("kernel", "finish", "store", "drain")
NESTED = ("prologue", "epilogue")


@attrs.frozen(kw_only=True)
class PlanEdit:
    """One edit: ``description`` says it in words, ``apply`` makes it on the plan it was
    generated from."""

    description: str
    #: the record field it changes ("Step.value", "Ring.arrivals", "Plan.store"); "" for an edit
    #: of a list of steps (a step deleted, doubled or moved)
    field: str = ""
    apply: Callable[["Plan"], "Plan"] = attrs.field(eq=False, repr=False)


def _step_variants(step: "Step", channels: tuple[str, ...]) -> Iterator[tuple[str, "Step"]]:
    """(what changed, the step changed) for each field a step's reader takes from it."""
    ev = attrs.evolve
    for d in (1, -1):
        yield f"lag {step.lag + d}", ev(step, lag=step.lag + d)
        yield f"phase_offset {step.phase_offset + d}", ev(step, phase_offset=step.phase_offset + d)
        yield f"output_lag {step.output_lag + d}", ev(step, output_lag=step.output_lag + d)
        yield f"peer {step.peer + d}", ev(step, peer=step.peer + d)
    for v in sorted({step.value + 1, step.value - 1, 0, step.value * 2, step.value * 3 // 4}
                    - {step.value}):
        yield f"value {v}", ev(step, value=v)
    if step.op >= 0:
        yield f"op {step.op + 1}", ev(step, op=step.op + 1)
    yield f"tag {step.tag + 1}", ev(step, tag=step.tag + 1)
    if step.barrier >= 0:
        yield f"barrier {step.barrier + 1}", ev(step, barrier=step.barrier + 1)
    yield f"once {not step.once}", ev(step, once=not step.once)
    yield f"exit {not step.exit}", ev(step, exit=not step.exit)
    for scope in sorted({"", "cta", "cluster"} - {step.scope}):
        yield f"scope {scope!r}", ev(step, scope=scope)
    for ch in channels:
        if ch != step.channel and step.channel:
            yield f"channel {ch}", ev(step, channel=ch)


def _list_edits(steps: tuple["Step", ...], channels: tuple[str, ...]
                ) -> Iterator[tuple[str, tuple["Step", ...], str]]:
    """(what changed, the list changed, the Step field changed or "") for every single edit
    of one list of steps."""
    n = len(steps)
    for i, step in enumerate(steps):
        name = f"[{i}] {step.kind.value}"
        yield f"{name} deleted", steps[:i] + steps[i + 1:], ""
        yield f"{name} doubled", steps[:i + 1] + steps[i:], ""
        if i + 1 < n:
            yield (f"{name} swapped with the next",
                   steps[:i] + (steps[i + 1], step) + steps[i + 2:], "")
            yield f"{name} moved to the end", steps[:i] + steps[i + 1:] + (step,), ""
        if i:
            yield f"{name} moved to the start", (step,) + steps[:i] + steps[i + 1:], ""
        for what, changed in _step_variants(step, channels):
            yield (f"{name} {what}", steps[:i] + (changed,) + steps[i + 1:],
                   f"Step.{what.split()[0]}")


def _program_edits(prog: "AgentProgram", channels: tuple[str, ...]
                   ) -> Iterator[tuple[str, "AgentProgram", str]]:
    ev = attrs.evolve
    for section in FLAT:
        for what, steps, field in _list_edits(getattr(prog, section), channels):
            yield f"{section}{what}", ev(prog, **{section: steps}), field
    for section in NESTED:
        iterations = getattr(prog, section)
        for j, it in enumerate(iterations):
            for what, steps, field in _list_edits(it, channels):
                changed = iterations[:j] + (steps,) + iterations[j + 1:]
                yield f"{section}[{j}]{what}", ev(prog, **{section: changed}), field
    yield "min_trips 1", ev(prog, min_trips=1), "AgentProgram.min_trips"
    for d in (1, -1):
        yield f"trip_delta {d}", ev(prog, trip_delta=d), "AgentProgram.trip_delta"
    yield "split_base 'own'", ev(prog, split_base="own"), "AgentProgram.split_base"
    for d in (1, -1):
        if prog.role.warps + d >= 1:
            yield (f"warps {prog.role.warps + d}",
                   ev(prog, role=ev(prog.role, warps=prog.role.warps + d)), "AgentRole.warps")


def _program(a: int, changed: "AgentProgram") -> Callable[["Plan"], "Plan"]:
    return lambda p: attrs.evolve(p, programs=p.programs[:a] + (changed,) + p.programs[a + 1:])


def _ring(r: int, field: str, value: Any) -> Callable[["Plan"], "Plan"]:
    return lambda p: attrs.evolve(p, rings=p.rings[:r] + (attrs.evolve(p.rings[r], **{field: value}),)
                                  + p.rings[r + 1:])


def _record(name: str, **fields: Any) -> Callable[["Plan"], "Plan"]:
    """The plan with record ``name`` dropped (no ``fields``) or with ``fields`` changed."""
    def edit(p: "Plan") -> "Plan":
        changes: dict[str, Any] = {
            name: attrs.evolve(getattr(p, name), **fields) if fields else None}
        return attrs.evolve(p, **changes)
    return edit


def plan_edits(plan: "Plan") -> Iterator[PlanEdit]:
    """Every single edit of ``plan``'s programs, rings and records, in a fixed order."""
    channels = tuple(sorted({r.name for r in plan.rings}))
    for a, prog in enumerate(plan.programs):
        for what, changed, field in _program_edits(prog, channels):
            yield PlanEdit(description=f"{prog.name} {what}", field=field,
                           apply=_program(a, changed))
    for r, ring in enumerate(plan.rings):
        variants: list[tuple[str, Any]] = [
            ("stages", ring.stages + 1), ("stages", ring.stages - 1),
            ("arrivals", ring.arrivals + 1), ("arrivals", ring.arrivals - 1),
            ("tx_bytes", ring.tx_bytes // 2), ("once", not ring.once),
            ("release_lag", ring.release_lag + 1), ("ctas", ring.ctas + 1)]
        for field, value in variants:
            yield PlanEdit(description=f"ring {ring.name} {field} {value}",
                           field=f"Ring.{field}", apply=_ring(r, field, value))
    for name in ("store", "reduction", "split", "cluster", "trip_rule"):
        record = getattr(plan, name)
        if record is None or (name == "trip_rule" and not varies(record)):
            continue  # a uniform trip rule is what the proof reads as none
        yield PlanEdit(description=f"Plan.{name} None", field=f"Plan.{name}",
                       apply=_record(name))
        agents: tuple[str, ...] = getattr(record, "agents", ())
        if len(agents) > 1:
            cut: dict[str, Any] = {"agents": agents[:1]}
            if name == "store":
                cut["barriers"] = getattr(record, "barriers")[:1]
            yield PlanEdit(description=f"Plan.{name} lists only {agents[0]}",
                           field=f"Plan.{name}", apply=_record(name, **cut))
    yield PlanEdit(description="Plan.stages + 1", field="Plan.stages",
                   apply=lambda p: attrs.evolve(p, stages=p.stages + 1))
    yield PlanEdit(description="Plan.min_tiles + 1", field="Plan.min_tiles",
                   apply=lambda p: attrs.evolve(p, min_tiles=p.min_tiles + 1))
