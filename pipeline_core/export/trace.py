"""Chrome trace-event / Perfetto JSON of a modelled execution (``export --format trace``).

Why: Perfetto (ui.perfetto.dev) shows which warp group holds the MMA unit, where waits stall
and which loads are in flight, with zoom and search, from a plain JSON file.

Layout (one process per kind of track, every tid unique in the file):

* pid 1 "warp groups": one thread per group (per agent of a warp-specialized plan, named after
  its role) with nested slices: phase / iteration spans,
  then per instruction a ``stall: ...`` slice (cat ``stall``, what it waited on in args) and
  a slice for the issue itself; markers (set_prio, schedule_barrier) are thread instants;
  barrier releases are process instants; the outstanding ticks of each of the target's sync
  channels (e.g. vmcnt / lgkmcnt) are counters; flow arrows (``ph`` s/f, cat ``retire``) run
  from each load to the wait that retires it (:func:`retired_by`).
* pid 2 "MMA unit": one thread; each MMA is a slice named after its group.
* pid 3 "LDS (in flight)" and pid 4 "global memory (in flight)": one thread per lane;
  overlapping in-flight ops go to different lanes so slices never partially overlap.

Time scale: ``ts``/``dur`` are microseconds and **1 µs = 1 model cycle** by default (integers,
so Perfetto's "16 us" reads as 16 cycles). The target's clock, which converts cycles to real
time, is stated in ``otherData`` when the target declares one.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline_core.ops import OpRole, ResourceKind
from pipeline_core.simulate import (Stall, Step, Timeline, outstanding_series, step_args,
                                    timeline_label)

PID_GROUPS, PID_MMA, PID_LDS, PID_GLOBAL, PID_VALU = 1, 2, 3, 4, 5
_UNIT_PROCESS = {ResourceKind.MMA_UNIT: (PID_MMA, "MMA unit"),
                 ResourceKind.LDS: (PID_LDS, "LDS (in flight)"),
                 ResourceKind.GLOBAL_MEM: (PID_GLOBAL, "global memory (in flight)"),
                 ResourceKind.VALU: (PID_VALU, "VALU")}
_CATEGORY = {OpRole.GLOBAL_LOAD: "global_load", OpRole.FRAGMENT_LOAD: "fragment_load",
             OpRole.SHARED_STORE: "shared_store", OpRole.COMPUTE: "mma", OpRole.SYNC: "sync",
             OpRole.FENCE: "fence", OpRole.VALU_COMPUTE: "valu"}


def group_tid(group: int) -> int:
    return PID_GROUPS * 1000 + group


def lane_tid(pid: int, lane: int) -> int:
    return pid * 1000 + lane


class _Events:
    """Collects events; converts cycles to trace microseconds."""

    def __init__(self, scale: float):
        self.items: list[dict[str, Any]] = []
        self.scale = scale

    def ts(self, cycles: int) -> int | float:
        v = cycles * self.scale
        return int(v) if float(v).is_integer() else v

    def meta(self, pid: int, tid: int, name: str, args: dict[str, Any]) -> None:
        self.items.append({"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args})

    def slice(self, pid: int, tid: int, name: str, cat: str, start: int, end: int,
              args: dict[str, Any]) -> None:
        self.items.append({"name": name, "cat": cat, "ph": "X", "ts": self.ts(start),
                           "dur": self.ts(end - start), "pid": pid, "tid": tid, "args": args})

    def instant(self, pid: int, tid: int, name: str, cat: str, at: int, scope: str,
                args: dict[str, Any]) -> None:
        self.items.append({"name": name, "cat": cat, "ph": "i", "s": scope, "ts": self.ts(at),
                           "pid": pid, "tid": tid, "args": args})

    def counter(self, pid: int, tid: int, name: str, at: int, value: int) -> None:
        self.items.append({"name": name, "cat": "counter", "ph": "C", "ts": self.ts(at), "pid": pid,
                           "tid": tid, "args": {"outstanding": value}})


def _blocker_args(tl: Timeline, st: Stall) -> dict[str, Any]:
    args: dict[str, Any] = {"cycles": st.cycles, "reason": st.reason, "detail": st.detail}
    if st.blocker_seq is not None and st.blocker_seq >= 0:
        b = tl.step(st.blocker_group, st.blocker_seq)
        args.update({"waited_on": timeline_label(tl, b),
                     "waited_on_group": b.group,
                     "waited_on_phase": b.phase.name, "waited_on_iteration": b.iteration,
                     "waited_on_entry_index": b.entry})
    return args


def _group_events(ev: _Events, tl: Timeline) -> None:
    names = tl.tag_names
    for g in tl.groups:
        tid = group_tid(g.group)
        for span in g.spans:
            ev.slice(PID_GROUPS, tid, span.label, "phase", span.start, span.end,
                     {"phase": span.phase.name, "iteration": span.iteration,
                      "first_stream_index": span.first_seq, "last_stream_index": span.last_seq})
        for s in g.steps:
            if s.stall is not None:
                ev.slice(PID_GROUPS, tid, f"stall: {_stall_name(s, s.stall)}", "stall", s.ready,
                         s.start, _blocker_args(tl, s.stall))
            label = timeline_label(tl, s)
            args = step_args(s, names)
            if s.is_marker:
                ev.instant(PID_GROUPS, tid, label, "marker", s.start, "t", args)
                continue
            args.update({"ready": s.ready, "start": s.start, "end": s.end,
                         "stall_cycles": s.stall_cycles})
            ev.slice(PID_GROUPS, tid, label, _CATEGORY.get(s.op.role, "op"), s.start, s.issue_end,
                     args)
        for counter, label in tl.channels:
            for at, value in outstanding_series(g, counter):
                ev.counter(PID_GROUPS, tid, f"{g.title} {label}", at, value)
    for b in tl.barriers:
        ev.instant(PID_GROUPS, group_tid(0), f"{tl.barrier_name} #{b.ordinal} released", "barrier",
                   b.release, "p", {"ordinal": b.ordinal,
                                    "arrivals": [{"group": gr, "stream_index": sq, "cycle": at}
                                                 for gr, sq, at in b.arrivals]})


def retired_by(steps: tuple[Step, ...], wait: Step) -> list[Step]:
    """The loads a wait retires: issued before it on its channel, still in flight when the
    group reached it, and complete when it issued (the ones it actually waited for)."""
    channel = wait.timing.waits_on
    return [s for s in steps[:wait.seq] if s.counter == channel and s.counter_cost
            and s.end > wait.ready and s.end <= wait.start and s.timing.kind == "op"]


def _flow_events(ev: _Events, tl: Timeline) -> None:
    """Flow arrows (trace-event ``ph: s`` / ``f``) from each load to the wait that retires it;
    Perfetto draws them between the load's slice and the wait's slice."""
    flow = 0
    for g in tl.groups:
        tid = group_tid(g.group)
        for w in g.steps:
            if w.timing.kind != "wait":
                continue
            for load in retired_by(g.steps, w):
                flow += 1
                name = f"{timeline_label(tl, w)} retires {timeline_label(tl, load)}"
                ev.items.append({"name": name, "cat": "retire", "ph": "s", "id": flow,
                                 "ts": ev.ts(load.start), "pid": PID_GROUPS, "tid": tid})
                ev.items.append({"name": name, "cat": "retire", "ph": "f", "bp": "e", "id": flow,
                                 "ts": ev.ts(w.start), "pid": PID_GROUPS, "tid": tid})


def _stall_name(s: Step, stall: Stall) -> str:
    if s.timing.kind == "wait":
        return f"{stall.reason} <= {s.op.wait_value}"
    return stall.reason


def _unit_events(ev: _Events, tl: Timeline) -> None:
    names = tl.tag_names
    for b in sorted(tl.busy, key=lambda b: (b.resource, b.lane, b.start)):
        pid, _ = _UNIT_PROCESS.get(b.resource, (PID_VALU, b.resource.name))
        step = tl.step(b.group, b.seq)
        args = step_args(step, names)
        args.update({"start": b.start, "end": b.end, "lane": b.lane})
        ev.slice(pid, lane_tid(pid, b.lane), f"G{b.group} {timeline_label(tl, step)}",
                 _CATEGORY.get(step.op.role, "op"), b.start, b.end, args)


def _metadata(ev: _Events, tl: Timeline) -> None:
    ev.meta(PID_GROUPS, group_tid(0), "process_name", {"name": f"warp groups: {tl.name}"})
    ev.meta(PID_GROUPS, group_tid(0), "process_sort_index", {"sort_index": PID_GROUPS})
    for g in tl.groups:
        ev.meta(PID_GROUPS, group_tid(g.group), "thread_name", {"name": g.title})
        ev.meta(PID_GROUPS, group_tid(g.group), "thread_sort_index", {"sort_index": g.group})
    for resource, (pid, title) in _UNIT_PROCESS.items():
        lanes = tl.lanes(resource)
        if resource != ResourceKind.MMA_UNIT and not lanes:
            continue
        lanes = max(lanes, 1)
        ev.meta(pid, lane_tid(pid, 0), "process_name", {"name": title})
        ev.meta(pid, lane_tid(pid, 0), "process_sort_index", {"sort_index": pid})
        for lane in range(lanes):
            name = title if lanes == 1 else f"{title.split(' (')[0]} lane {lane}"
            ev.meta(pid, lane_tid(pid, lane), "thread_name", {"name": name})
            ev.meta(pid, lane_tid(pid, lane), "thread_sort_index", {"sort_index": lane})


def to_trace(tl: Timeline, *, time_scale: float = 1.0) -> dict[str, Any]:
    """The trace document; ``time_scale`` = trace µs per cycle (1.0: 1 µs = 1 cycle)."""
    ev = _Events(time_scale)
    _metadata(ev, tl)
    _group_events(ev, tl)
    _unit_events(ev, tl)
    _flow_events(ev, tl)
    meta = [e for e in ev.items if e["ph"] == "M"]
    rest = sorted((e for e in ev.items if e["ph"] != "M"),
                  key=lambda e: (e["pid"], e["tid"], e["ts"], -e.get("dur", 0), _PH_ORDER[e["ph"]]))
    summary = tl.summary() if tl.iterations >= 1 else None
    other = {
        "schedule": tl.name,
        "time_unit": f"1 trace microsecond = {_fmt(1 / time_scale)} model cycle(s)",
        **({"clock_ghz": _fmt(tl.model.clock_ghz), "ns_per_cycle": _fmt(1 / tl.model.clock_ghz)}
           if tl.model.clock_ghz else {}),
        "iterations": str(tl.iterations),
        "warp_groups": str(len(tl.groups)),
        "makespan_cycles": str(tl.makespan),
        "model": tl.model_text,
    }
    if summary is not None:
        other.update({
            "steady_state_cycles_per_iteration": _fmt(summary.steady_state_cycles),
            "steady_state_window": f"iterations {summary.window[0]}..{summary.window[1] - 1}",
            "mma_bound_cycles_per_iteration": str(summary.mma_bound_cycles),
            "mma_utilisation": _fmt(summary.mma_utilisation),
        })
    # displayTimeUnit is only a display hint (Perfetto ignores it); "ms" is the format's default
    return {"traceEvents": meta + rest, "displayTimeUnit": "ms", "otherData": other}


_PH_ORDER = {"X": 0, "i": 1, "C": 2, "s": 3, "f": 4}


def _fmt(x: float) -> str:
    return f"{x:.4g}" if isinstance(x, float) and not float(x).is_integer() else str(int(x))


def dumps(tl: Timeline, *, time_scale: float = 1.0) -> str:
    return json.dumps(to_trace(tl, time_scale=time_scale), separators=(",", ":")) + "\n"


def write(tl: Timeline, path: str | Path, *, time_scale: float = 1.0) -> None:
    Path(path).write_text(dumps(tl, time_scale=time_scale))
