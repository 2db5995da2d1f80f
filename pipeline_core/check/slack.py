"""Waits stronger than needed: the loosest value of each wait that keeps the schedule safe."""
from __future__ import annotations

import attrs

from pipeline_core.check.hazards import analyse
from pipeline_core.check.program import CheckProgram, Kind
from pipeline_core.check.trace import expand
from pipeline_core.check.verdict import WaitSlack

PHASES = ("kernel",)


def with_wait(program: CheckProgram, phase: str, index: int, value: int) -> CheckProgram:
    """``program`` with the wait at ``phase[index]`` set to ``value``."""
    instrs = list(program.phase(phase))
    instrs[index] = instrs[index].with_value(value)
    return program.replace_phase(phase, instrs)


def max_outstanding(program: CheckProgram, iterations: int) -> dict[tuple[str, int], int]:
    """(phase, index) of each wait -> most ops ever outstanding on its counter when reached
    (any warp, any iteration); a wait value at or above it is a no-op."""
    best: dict[tuple[str, int], int] = {}
    for t in expand(program, iterations, 1):
        for p, ev in enumerate(t.events):
            if ev.instr.kind is Kind.WAIT:
                key = (ev.instr.phase, ev.instr.index)
                best[key] = max(best.get(key, 0), t.outstanding[p])
    return best


def wait_slack(program: CheckProgram, iterations: int, warps_per_group: int = 1,
               phases: tuple[str, ...] = PHASES) -> tuple[WaitSlack, ...]:
    """For each wait of ``phases``: binary search of the largest safe value.

    Safety is monotone in a wait's value (a larger value allows a superset of
    timings), so the search needs log2(outstanding) re-checks per wait.
    """
    def is_safe(candidate: CheckProgram) -> bool:
        return not analyse(candidate, expand(candidate, iterations, warps_per_group)).violations

    def loosest(prog: CheckProgram, phase: str, ins, top: int) -> int:
        lo, hi = ins.value, top  # lo is safe (the schedule is); find the largest safe
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if is_safe(with_wait(prog, phase, ins.index, mid)):
                lo = mid
            else:
                hi = mid - 1
        return lo

    # When the model assumes in-order LDS, also search without it (if the schedule is
    # safe that way) so that a loosening resting on the assumption is labelled as such.
    strict = None
    if program.model.lds_in_order:
        candidate = attrs.evolve(program, model=attrs.evolve(program.model, lds_in_order=False))
        strict = candidate if is_safe(candidate) else None
    out = []
    ceiling = max_outstanding(program, iterations)
    for phase in phases:
        for ins in program.phase(phase):
            if ins.kind is not Kind.WAIT:
                continue
            top = max(ins.value, ceiling.get((phase, ins.index), 0))
            value = loosest(program, phase, ins, top)
            strict_value = loosest(strict, phase, ins, top) if strict is not None else None
            out.append(WaitSlack(phase, ins.index, ins.counter or "?", ins.value, value, top,
                                 strict_value if strict_value != value else None))
    return tuple(out)
