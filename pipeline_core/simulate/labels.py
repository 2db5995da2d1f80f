"""Labels and summaries of a timeline, shared by the text, trace and picture exporters.
"""
from __future__ import annotations

from typing import Any, Mapping

from pipeline_core.ops import MAX_KERNEL_TAG, tag_name
from pipeline_core.simulate.timeline import GroupTimeline, Step, Summary, Timeline
from pipeline_core.sync.model import SyncModel


# --- labels shared by the exporters -------------------------------------------

def step_label(step: Step, names: Mapping[int, str] | None = None,
               barrier_name: str = "barrier", sync: SyncModel | None = None,
               channel_of: Mapping[int, int] | None = None) -> str:
    """The step in the shared op notation: ``LOAD_A[A s1.1 K-1]``, ``MMA[m0,n1]``,
    ``cp.async.wait_group 2`` (with the target's ``sync``; ``wait_vm(6)`` without one)."""
    from pipeline_core.export.notation import op_text

    if step.instr.text:
        return step.instr.text
    o = step.op
    kind = step.timing.kind
    if kind == "barrier":
        base = (sync.isa_text(o.tag) if sync is not None else None) or barrier_name
        return base + (f" ({step.note})" if step.note else "")
    if sync is None or sync.isa_text(o.tag, wait_value=o.wait_value, subtile=o.subtile) is None:
        name = tag_name(o.tag, names)
        if kind in ("wait", "priority"):
            return f"{name.lower()}({o.wait_value})"
        if kind == "hint" and step.timing.hint_format:
            return f"{name.lower()}({step.timing.hint_format.format(subtile=o.subtile, wait_value=o.wait_value)})"
        if o.tag > MAX_KERNEL_TAG:
            return name.lower()
    return op_text(o, names, sync, channel_of)


def timeline_label(tl: Timeline, step: Step) -> str:
    """``step`` of ``tl`` in the shared op notation, with the timeline's names and sync model."""
    return step_label(step, tl.tag_names, tl.barrier_name, tl.sync, tl.channel_of)


def step_args(step: Step, names: Mapping[int, str] | None = None) -> dict[str, Any]:
    """The step's identity and operands, for trace-event args and tooltips."""
    o = step.op
    args: dict[str, Any] = {
        "op": tag_name(o.tag, names), "group": step.group, "phase": step.phase.name,
        "iteration": step.iteration, "entry_index": step.entry, "stream_index": step.seq,
        "stage": o.stage, "subtile": o.subtile, "k_offset": o.k_offset.name, "channel": o.channel,
        "role": o.role.name, "resource": step.resource.name, "latency": step.latency,
    }
    if step.timing.kind in ("wait", "priority") or step.timing.hint_format:
        args["wait_value"] = o.wait_value
    if step.counter:
        args[f"{step.counter}_ops"] = step.counter_cost
    if step.is_prefetch:
        args["is_prefetch"] = True
    if step.note:
        args["note"] = step.note
    return args


def outstanding_series(group: GroupTimeline, counter: str) -> list[tuple[int, int]]:
    """(cycle, outstanding ticks) change points of one group's sync channel ``counter``."""
    deltas: dict[int, int] = {}
    for s in group.steps:
        if s.counter == counter and s.counter_cost:
            deltas[s.start] = deltas.get(s.start, 0) + s.counter_cost
            deltas[s.end] = deltas.get(s.end, 0) - s.counter_cost
    out, level = [], 0
    for t in sorted(deltas):
        if deltas[t]:
            level += deltas[t]
            out.append((t, level))
    return out


def _period(s: Summary) -> str:
    if s.period == 1 or s.window[1] - s.window[0] < 2:
        return ""
    return ", no period found" if s.period == 0 else f", period {s.period}"


def format_summary(tl: Timeline, summary: Summary | None = None) -> str:
    """A few lines for terminals and reports."""
    s = summary or tl.summary()
    lines = [
        f"{tl.name}: {s.groups} warp group(s), {s.iterations} kernel iterations",
        f"  makespan {s.makespan} cycles; steady state {s.steady_state_cycles:.1f} cycles/iteration "
        f"(iterations {s.window[0]}..{s.window[1] - 1}{_period(s)}); MMA bound {s.mma_bound_cycles} "
        f"(ratio {s.ratio_to_mma_bound:.2f})",
        f"  MMA unit busy {s.mma_busy} cycles: {100 * s.mma_utilisation:.1f}% of the run, "
        f"{100 * s.steady_mma_utilisation:.1f}% in the steady state",
    ]
    for g in tl.groups:
        reasons = ", ".join(f"{k} {v}" for k, v in g.stalls_by_reason().items()) or "none"
        lines.append(f"  {g.title}: {g.stall_cycles} stall cycles ({reasons})")
    return "\n".join(lines)
