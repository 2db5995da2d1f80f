"""``pipeline-core knobs``: every ScheduleConfig knob (``-c KEY=VALUE``) and who decides it.

Each knob's type and default come from :class:`pipeline_core.config.ScheduleConfig`, its
range from the field's validator (the bounds live in :mod:`pipeline_core.limits`), its
meaning from the field's ``help`` metadata, and which schedules force or refuse it from
each registered schedule's optional ``forced_knobs()`` (the schedule protocol,
:class:`pipeline_core.schedule.Schedule`), asked of the schedule built with its defaults.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from pipeline_core.config import ScheduleConfig, field_bound, field_help, value_text
from pipeline_core.errors import PipelineError
from pipeline_core.schedule import REFUSED

if TYPE_CHECKING:
    from pipeline_core.plugins import PluginHost


def _type_name(value: Any) -> str:
    return "bool" if isinstance(value, bool) else type(value).__name__


def _allowed(name: str, default: Any, host: "PluginHost") -> str:
    bound = field_bound(ScheduleConfig, name)
    if bound is not None:
        return bound.allowed()
    if isinstance(default, bool):
        return "true or false"
    if name == "scheduling":
        return "a registered strategy: " + ", ".join(sorted(host.strategies))
    return ""


def schedule_rules(host: "PluginHost") -> tuple[dict[str, dict[str, Any]], list[str]]:
    """``{schedule: forced_knobs()}`` for every registered schedule, and notes on those that
    could not be asked (built with their defaults; a failure names the schedule)."""
    from pipeline_core.api import build_named
    from pipeline_core.compiler import lowering_of

    rules: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    fields = attrs.fields_dict(ScheduleConfig)
    for name in sorted(host.schedules):
        try:
            schedule, _, _ = build_named(name, host=host)
            answer = dict(schedule.forced_knobs())
            lowering = lowering_of(schedule, host)
        except PipelineError as exc:
            notes.append(f"schedule {name!r} could not be built with its defaults to ask "
                         f"which knobs it forces: {exc}")
            continue
        unknown = sorted(k for k in answer if k not in fields)
        if unknown:
            notes.append(f"schedule {name!r} forces unknown knob(s) {', '.join(unknown)} "
                         "(not ScheduleConfig fields; ignored)")
        rules[name] = {k: v for k, v in answer.items() if k in fields}
        if lowering.knobless:
            notes.append(f"schedule {name!r} refuses every knob: the {lowering.name} lowering "
                         f"reads none; {lowering.knobless}")
    return rules, notes


def knob_rows(host: "PluginHost") -> tuple[list[dict[str, Any]], list[str]]:
    """One row per knob (in ScheduleConfig's field order) and the notes of schedule_rules."""
    rules, notes = schedule_rules(host)
    defaults = ScheduleConfig()
    rows = []
    for f in attrs.fields(ScheduleConfig):
        default = getattr(defaults, f.name)
        forced = {s: r[f.name] for s, r in rules.items()
                  if f.name in r and r[f.name] is not REFUSED}
        refused = [s for s, r in rules.items() if r.get(f.name) is REFUSED]
        rows.append({"name": f.name, "type": _type_name(default), "default": default,
                     "allowed": _allowed(f.name, default, host),
                     "help": field_help(ScheduleConfig, f.name),
                     "forced_by": forced, "refused_by": refused})
    return rows, notes


def render_text(rows: list[dict[str, Any]], notes: list[str]) -> str:
    """Three lines at most per knob: the signature, its meaning, who decides it."""
    lines = ["ScheduleConfig knobs (-c KEY=VALUE on compile, check, analyze, export); the "
             "defaults are ScheduleConfig's, and each schedule starts from its own config "
             "(compile --format json shows it under schedule_config):"]
    for row in rows:
        allowed = f"; {row['allowed']}" if row["allowed"] else ""
        lines.append(f"{row['name']} ({row['type']}, default {value_text(row['default'])}{allowed})")
        lines.append(f"    {row['help']}")
        if row["forced_by"]:
            lines.append("    forced by " + ", ".join(f"{s} ({value_text(v)})"
                                                     for s, v in row["forced_by"].items()))
        if row["refused_by"]:
            lines.append(f"    refused by {', '.join(row['refused_by'])} (the schedule sets it "
                         "itself: see its -p parameters)")
    lines.extend(f"note: {note}" for note in notes)
    return "\n".join(lines) + "\n"
