"""Suggest the wait or barrier that would remove a hazard (pure; reads traces only)."""
from __future__ import annotations

from pipeline_core.check.counters import CounterSpec
from pipeline_core.check.program import Kind
from pipeline_core.check.trace import WarpTrace
from pipeline_core.check.verdict import Fix


def _where(trace: WarpTrace, pos: int) -> tuple[str, int, str]:
    ins = trace.events[pos].instr
    return ins.phase, ins.index, (ins.site if ins.index >= 0 else f"the {ins.phase}")


def _waits_between(trace: WarpTrace, counter: str, lo: int, hi: int) -> list[int]:
    return [w for w in range(lo + 1, hi) if trace.events[w].instr.kind is Kind.WAIT
            and trace.events[w].instr.counter == counter]


def _value(trace: WarpTrace, counter: CounterSpec, issued: int, at: int) -> int:
    """The largest wait value at ``at`` that still retires the op issued at ``issued``.

    Never negative (a wait after the op is at least a full drain) and never above the
    counter's encodable maximum (a smaller wait retires the op too).
    """
    n = max(trace.ops_between(counter.name, issued, at), 0) if counter.in_order else 0
    return n if counter.max_wait is None else min(n, counter.max_wait)


def _reorder_fix(trace: WarpTrace, issued: int, before: int) -> Fix:
    phase, index, site = _where(trace, before)
    return Fix("review", phase, index,
               f"{_where(trace, issued)[2]} is issued only after {site}: reorder the entries so "
               "the op is issued (and retired) first")


def _wait_fix(trace: WarpTrace, counter: CounterSpec, issued: int, before: int, why: str) -> Fix:
    if issued >= before:  # the op is issued at or after the point: no wait there can retire it
        return _reorder_fix(trace, issued, before)
    waits = _waits_between(trace, counter.name, issued, before)
    if waits:
        w = waits[-1]
        phase, index, site = _where(trace, w)
        n = _value(trace, counter, issued, w)
        return Fix("lower_wait", phase, index,
                   f"lower wait_{counter.name} at {site} from {trace.events[w].instr.value} to {n} {why}",
                   counter.name, n)
    phase, index, site = _where(trace, before)
    n = _value(trace, counter, issued, before)
    return Fix("insert_wait", phase, index, f"insert wait_{counter.name}({n}) before {site} {why}",
               counter.name, n)


def completion_fix(issuer: WarpTrace, issued: int, user: WarpTrace, use: int,
                   counter: CounterSpec | None) -> Fix:
    """How to make the async op at ``issuer[issued]`` retire before ``user[use]``.

    Same warp: a wait between them.  Other warp: a wait in the issuer before the
    last barrier whose rendezvous precedes ``use``; if no barrier separates them,
    a barrier is needed too.  ``counter`` None: the op is synchronous for its issuer
    (no counter tracks it, e.g. an H100 ``ldmatrix``; pipeline_core/check/README.md
    "Model"), so no wait can help: the fix is a reorder in one warp, a barrier
    between two.
    """
    issued_site = _where(issuer, issued)[2]
    if issuer is user:
        if counter is None:
            return _reorder_fix(issuer, issued, use)
        return _wait_fix(issuer, counter, issued, use, f"(retires {issued_site} before {_where(user, use)[2]})")
    limit = user.bphase[use]
    if counter is not None and limit >= 1 and limit < len(issuer.phase_start):
        b = issuer.phase_start[limit] - 1
        if b > issued and issuer.events[b].instr.kind is Kind.BARRIER:
            return _wait_fix(issuer, counter, issued, b,
                             f"(so {issued_site} retires before the barrier that precedes "
                             f"{_where(user, use)[2]} in {user.label})")
    phase, index, site = _where(user, use)
    if counter is None:
        return Fix("insert_barrier", phase, index,
                   f"no barrier separates {issued_site} ({issuer.label}) from {site} "
                   f"({user.label}): add a barrier between them ({issued_site} completes at "
                   "issue for its own warp; only a barrier orders it for another)")
    return Fix("insert_barrier", phase, index,
               f"no barrier separates {issued_site} ({issuer.label}) from {site} ({user.label}): "
               f"add wait_{counter.name}(0) and a barrier between them", counter.name, 0)


def move_fix(trace: WarpTrace, writer: int, reader: int) -> Fix:
    phase, index, site = _where(trace, writer)
    return Fix("move_entry", phase, index,
               f"move {site} after {_where(trace, reader)[2]} (it overwrites a register that "
               "entry still needs)")


def review_fix(trace: WarpTrace, pos: int, text: str) -> Fix:
    phase, index, _ = _where(trace, pos)
    return Fix("review", phase, index, text)
