"""Syncs the checker shows to be redundant in an emitted schedule (marked in the text view).

Two cheap, proven kinds (docs/guide/checker.md, "Redundant syncs"):

* a wait whose value is at or above the most ticks ever outstanding on its channel when it
  is reached (any warp, any iteration of the checker's run): it never waits, so it is a
  no-op; this is the checker's own ``max_outstanding`` (what ``check --tightest`` calls
  "removable" when even a no-op keeps the schedule safe);
* a barrier that follows another barrier with nothing but hints between them: every
  participant has just met, so the second meeting publishes nothing new.

``check --tightest`` goes further (the loosest safe value of every wait) at the cost of
one re-check per candidate value, too slow to run on every text view of a large grid.
"""
from __future__ import annotations

from typing import Any

from pipeline_core.ops import Entry


def duplicate_barriers(entries: tuple[Entry, ...], sync: Any) -> dict[int, str]:
    """index -> mark for each barrier right after another (only hints between them)."""
    barrier_tags = {b.tag for b in sync.barriers}
    hints = set(sync.hint_tags)
    out: dict[int, str] = {}
    last_barrier = None
    for i, e in enumerate(entries):
        tag = e.op.tag
        if tag in barrier_tags:
            if last_barrier is not None:
                out[i] = f"redundant: repeats the barrier at [{last_barrier}]"
            last_barrier = i
        elif tag not in hints:
            last_barrier = None
    return out


def noop_waits(compiled: Any, sync: Any, host: Any = None) -> dict[tuple[str, int], str]:
    """(phase, index) -> mark for each wait that never waits (empty when the run fails)."""
    from pipeline_core.check.counters import counter_model
    from pipeline_core.check.program import decode
    from pipeline_core.check.slack import max_outstanding
    from pipeline_core.document import to_document
    from pipeline_core.errors import PipelineError
    from pipeline_core.proof import PROOF_ITERATIONS

    try:
        document = to_document(compiled)
        execution = compiled.execution
        program = decode(document, counter_model(sync, document),
                         groups=execution.groups if execution is not None else None)
        ceiling = max_outstanding(program, PROOF_ITERATIONS)
    except (PipelineError, ValueError, KeyError):
        return {}
    out = {}
    for phase in ("prologue", "kernel", "epilogue"):
        for ins in program.phase(phase):
            if ins.counter is None or ins.kind.value != "wait":
                continue
            top = ceiling.get((phase, ins.index))
            if top is not None and ins.value >= top:
                out[(phase, ins.index)] = (f"redundant: never waits (at most {top} outstanding "
                                           "when reached)")
    return out


def redundant_syncs(compiled: Any, sync: Any, host: Any = None) -> dict[tuple[str, int], str]:
    """Every mark of both kinds, by (phase, entry index)."""
    if sync is None:
        return {}
    marks = noop_waits(compiled, sync, host)
    for phase in ("prologue", "kernel", "epilogue"):
        for i, text in duplicate_barriers(tuple(getattr(compiled, phase)), sync).items():
            marks.setdefault((phase, i), text)
    return marks
