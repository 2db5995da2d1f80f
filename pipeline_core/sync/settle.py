"""Derived waits and barriers for schedules that are not the reference's own.

The reference's schedules (ping-pong, 4-wave, the default matmul) keep their wait
formulas, so their output stays entry-for-entry the reference's.  Every other
schedule (matmul-grid, the example, DSL bodies, third-party schedules) declares
``wait_source() == "derived"`` or nothing, and its emitted phases are settled
here before the proof stage:

1. every wait takes the target-neutral derivation's value
   (:func:`pipeline_core.sync.derive.derive_waits`) wherever that is stricter than
   the one the block template wrote: a formula that is already safe stays as it
   is (the derivation's value is the loosest safe one), a looser one is tightened;
2. a need no wait or barrier covers (the derivation's unmet needs, and the
   cross-warp needs of the real warp count) is met by the wait or the wait and
   barrier the hazard checker names for it, one at a time, until the schedule is
   proven or no such repair is left (then the proof stage refuses it as before).

Why the checker's fix for step 2: the derivation only places values on waits
that exist; where a wait or a barrier is missing it reports the need, and the
checker's fix for that need is the same rule (docs/guide/architecture.md, "Architecture").
"""
from __future__ import annotations

from typing import Callable

import attrs

from pipeline_core.check.verdict import LAUNCH, STAGGER, Fix
from pipeline_core.compiled import CompiledSchedule, Proof
from pipeline_core.errors import ConfigError
from pipeline_core.ops import Entry, Op, OpRole, Phase, ResourceKind
from pipeline_core.schedule import DERIVED, REFERENCE, ScheduleBase
from pipeline_core.sync.model import SyncModel

#: repairs one settle may make (each is one wait, one lowered wait or a wait and a barrier)
MAX_REPAIRS = 64

_PHASES = {"prologue": Phase.PROLOGUE, "kernel": Phase.KERNEL, "epilogue": Phase.EPILOGUE}


def wait_source(schedule: ScheduleBase) -> str:
    """``schedule.wait_source()``, checked: "reference" keeps the template's formulas, "derived"
    (the default) settles waits and barriers here."""
    value = schedule.wait_source()
    if value not in (DERIVED, REFERENCE):
        raise ConfigError(f"schedule {schedule.name}", "wait_source()", value,
                          f'"{DERIVED}" or "{REFERENCE}"')
    return value


def _renumber(items: list[Entry], phase: Phase) -> tuple[Entry, ...]:
    return tuple(Entry(e.op, i, phase, e.is_prefetch) for i, e in enumerate(items))


def _sync_op(tag: int, value: int = 0) -> Op:
    return Op(tag=tag, wait_value=value, resource=ResourceKind.SCALAR, role=OpRole.SYNC)


def _tighten(compiled: CompiledSchedule, sync: SyncModel) -> CompiledSchedule:
    from pipeline_core.sync.derive import derive_for_compiled

    derivation = derive_for_compiled(compiled, sync)
    looser = {(s.phase, s.index): s.safe for s in derivation.looser()}
    if not looser:
        return compiled
    phases = {}
    for phase, items in compiled.phases().items():
        phases[phase] = tuple(
            attrs.evolve(e, op=e.op.evolve(wait_value=looser[(phase, i)]))
            if (phase, i) in looser else e for i, e in enumerate(items))
    return _with_phases(compiled, phases)


def _with_phases(compiled: CompiledSchedule, phases: dict[Phase, tuple[Entry, ...]],
                 stagger: int | None = None) -> CompiledSchedule:
    return compiled.with_entries(prologue=phases[Phase.PROLOGUE], kernel=phases[Phase.KERNEL],
                                 epilogue=phases[Phase.EPILOGUE],
                                 stagger_index=compiled.warp_stagger_index if stagger is None
                                 else stagger)


def _apply(compiled: CompiledSchedule, fix: Fix, sync: SyncModel) -> CompiledSchedule | None:
    """``compiled`` with the checker's ``fix`` applied; None when it is not a wait/barrier fix."""
    if fix.counter is None or fix.value is None:
        return None
    index = fix.index
    before_stagger = False
    phase: Phase | None
    execution = compiled.execution
    if fix.phase == LAUNCH and fix.action == "insert_wait":
        # before the execution model's barrier after the prologue: the prologue's end
        phase, index = Phase.PROLOGUE, len(compiled.prologue)
    elif (fix.phase == STAGGER and fix.action == "insert_wait" and execution is not None
          and execution.stagger_index is not None):
        # before group 1's stagger barrier: the last entry of the prologue's first part
        phase, before_stagger = Phase.PROLOGUE, True
        index = min(max(execution.stagger_index, 0), len(compiled.prologue))
    else:
        phase = _PHASES.get(fix.phase)
    if phase is None or index < 0:
        return None
    try:
        channel = sync.channel(fix.counter)
    except (KeyError, ValueError, LookupError):
        return None
    phases = dict(compiled.phases())
    items = list(phases[phase])
    if index > len(items):
        return None
    stagger = None
    if fix.action == "lower_wait":
        if index >= len(items) or items[index].op.tag != channel.wait_tag:
            return None
        e = items[index]
        if fix.value >= e.op.wait_value:
            return None
        items[index] = attrs.evolve(e, op=e.op.evolve(wait_value=fix.value))
    elif fix.action in ("insert_wait", "insert_barrier"):
        new = [_sync_op(channel.wait_tag, fix.value)]
        if fix.action == "insert_barrier":
            new.append(_sync_op(sync.barrier.tag))
        items[index:index] = [Entry(o, 0, phase, False) for o in new]
        if before_stagger:
            stagger = index + len(new)
        elif phase == Phase.PROLOGUE and index < compiled.warp_stagger_index <= len(phases[phase]):
            stagger = compiled.warp_stagger_index + len(new)
        elif phase == Phase.PROLOGUE and compiled.warp_stagger_index > len(phases[phase]):
            stagger = compiled.warp_stagger_index + len(new)  # stays past the prologue's end
    else:
        return None
    phases[phase] = _renumber(items, phase)
    return _with_phases(compiled, phases, stagger)


def settle(compiled: CompiledSchedule, sync: SyncModel, *,
           prove: Callable[[CompiledSchedule], Proof]) -> CompiledSchedule:
    """``compiled`` with derived waits and the missing waits/barriers added (module doc).

    ``prove`` is the proof stage (the compiler passes ``pipeline_core.proof.prove`` with its
    host): the repair loop asks it for the hazards left, and this layer, below the prover,
    takes it as an argument instead of importing it, as it takes ``sync``, the sync model the
    proof runs under.
    """
    compiled = _tighten(compiled, sync)
    applied: set[Fix] = set()
    for _ in range(MAX_REPAIRS):
        proof = prove(compiled)
        verdict = proof.verdict
        if verdict is None or verdict.safe:
            return attrs.evolve(compiled, proof=proof)  # the proof stage keeps this one
        repaired = None
        for violation in verdict.distinct():
            fix = violation.fix
            if fix is None or fix in applied:  # a repair that did not help is not repeated
                continue
            repaired = _apply(compiled, fix, sync)
            if repaired is not None:
                applied.add(fix)
                break
        if repaired is None:
            break
        compiled = repaired
    return compiled
