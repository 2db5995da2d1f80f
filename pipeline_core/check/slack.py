"""Waits stronger than needed: the loosest value of each wait that keeps the schedule safe."""
from __future__ import annotations

from pipeline_core.check.program import CheckProgram, Kind
from pipeline_core.check.trace import expand
from pipeline_core.check.verdict import WaitSlack

PHASES = ("kernel",)


def with_wait(program: CheckProgram, phase: str, index: int, value: int) -> CheckProgram:
    """``program`` with the wait at ``phase[index]`` set to ``value``."""
    instrs = list(program.phase(phase))
    instrs[index] = instrs[index].with_value(value)
    return program.replace_phase(phase, instrs)


def max_outstanding(program: CheckProgram, phase: str, index: int, iterations: int) -> int:
    """Most ops ever outstanding on the wait's counter when it is reached (any warp, iteration)."""
    best = 0
    for t in expand(program, iterations, 1):
        for p, ev in enumerate(t.events):
            if ev.instr.phase == phase and ev.instr.index == index:
                best = max(best, t.outstanding[p])
    return best


def wait_slack(program: CheckProgram, iterations: int, warps_per_group: int = 1,
               phases: tuple[str, ...] = PHASES) -> tuple[WaitSlack, ...]:
    """For each wait of ``phases``: binary search of the largest safe value.

    Safety is monotone in a wait's value (a larger value allows a superset of
    timings), so the search needs log2(outstanding) re-checks per wait.
    """
    from pipeline_core.check.checker import is_safe

    out = []
    for phase in phases:
        for ins in program.phase(phase):
            if ins.kind is not Kind.WAIT:
                continue
            top = max(ins.value, max_outstanding(program, phase, ins.index, iterations))
            lo, hi = ins.value, top  # lo is safe (the schedule is); find the largest safe
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if is_safe(with_wait(program, phase, ins.index, mid), iterations, warps_per_group):
                    lo = mid
                else:
                    hi = mid - 1
            out.append(WaitSlack(phase, ins.index, ins.counter or "?", ins.value, lo, top))
    return tuple(out)
