"""A user's ``-c`` or ``-T`` that something else overrides is refused, never dropped (issue 25).

Three ways a value the user typed could be accepted and then mean nothing:

* the schedule's ``schedule_config()`` sets the knob to another value (it decides the knob
  itself, or never applies the user's ``-c``);
* another knob replaces it: under ``auto_waits=true`` the derived waits replace
  ``wait_lgkm_first`` / ``wait_vm_last``, and under ``auto_drain=true`` the derived mask
  replaces ``drain_lgkm_mask`` (pipeline_core/program/build.py);
* the schedule's ``config()`` sets a pipeline field to another value than the target built
  from the user's ``-T`` (a target parameter named after the PipelineConfig field it sets,
  e.g. a ``max_globals`` parameter -> ``block_sizing.max_globals``; ``pipeline_field_path``),
  or a non-zero ``lgkm_per_load_a/b``, which ScheduleConfig's same-named knob only backs up
  (pipeline_core/program/waits.py, ``lgkm_cost``);
* the schedule is single-buffer (pipeline depth 1): its kernel comes from the body and the
  kernel transforms, and no block-template knob or ordering strategy is read.

Each is refused with exit 2 naming the flag, what overrides it and the fix: obeying the user
instead would change what the schedule or the other knob decides behind its back.  Only the
blocks lowering reads the knobs; the others refuse every ``-c`` already
(pipeline_core/api.py, ``refuse_unread_knobs``).
"""
from __future__ import annotations

from typing import Mapping

from pipeline_core.config import (BLOCK_SCHEDULE_KNOBS, PipelineConfig, ScheduleConfig,
                                  apply_overrides, pipeline_field_path, pipeline_field_value,
                                  value_text)
from pipeline_core.errors import ConfigError
from pipeline_core.schedule import ScheduleBase, TargetRecord, parse_target_args

#: the knobs a single-buffer schedule reads none of: the block template's, and the ordering
#: strategy (depth 1 keeps the body's order; pipeline_core/compiler.py)
SINGLE_BUFFER_UNREAD = frozenset(BLOCK_SCHEDULE_KNOBS) | {"scheduling"}
#: ScheduleConfig knobs that back up the pipeline config's field of the same name (used only
#: while that is 0; pipeline_core/program/waits.py, lgkm_cost)
FALLBACKS = ("lgkm_per_load_a", "lgkm_per_load_b")
#: knob -> the knob that replaces it when on (pipeline_core/program/build.py), and what with
REPLACED_BY = {
    "wait_lgkm_first": ("auto_waits", "the derived first-block wait"),
    "wait_vm_last": ("auto_waits", "the derived last-block wait"),
    "drain_lgkm_mask": ("auto_drain", "the derived drain mask"),
}


def _replacing(key: str, sched: ScheduleConfig) -> str | None:
    """The knob that replaces ``key`` in ``sched`` (auto_drain acts only with auto_waits)."""
    rule = REPLACED_BY.get(key)
    if rule is None or not getattr(sched, rule[0]):
        return None
    if rule[0] == "auto_drain" and not sched.auto_waits:
        return None
    return rule[0]


def refuse_overridden_knobs(name: str, schedule: ScheduleBase,
                            overrides: Mapping[str, str]) -> None:
    """Refuse a ``-c KEY=VALUE`` the built schedule does not compile with (module doc)."""
    if not overrides:
        return
    given = apply_overrides(ScheduleConfig(), overrides, what="ScheduleConfig", flag="-c")
    sched = schedule.schedule_config()
    config = schedule.config()
    for key, text in overrides.items():
        used = getattr(sched, key)
        if used != getattr(given, key):
            raise ConfigError(f"schedule {name}", key, text,
                              f"the schedule's schedule_config() sets {key}={value_text(used)} "
                              f"over it (a knob the schedule decides; `pipeline-core knobs` "
                              f"lists them): drop -c {key}", flag="-c")
        if config.depth < 2:
            if key in SINGLE_BUFFER_UNREAD:
                raise ConfigError(f"schedule {name}", key, text,
                                  "a single-buffer schedule (pipeline depth 1) keeps the body's "
                                  "order and has no block template, so this knob changes "
                                  f"nothing: drop -c {key}", flag="-c")
            continue
        if key in FALLBACKS and getattr(config, key):
            raise ConfigError(f"schedule {name}", key, text,
                              f"the schedule's config() sets {key}={getattr(config, key)}, and "
                              f"this knob is read only where that is 0: drop -c {key}",
                              flag="-c")
        other = _replacing(key, sched)
        if other is not None:
            raise ConfigError(f"schedule {name}", key, text,
                              f"{other}=true replaces it by {REPLACED_BY[key][1]}: add "
                              f"-c {other}=false to set it by hand", flag="-c")


def refuse_overridden_target_args(name: str, schedule: ScheduleBase, target: TargetRecord,
                                  target_args: Mapping[str, str]) -> None:
    """Refuse a ``-T KEY=VALUE`` naming a PipelineConfig field that the schedule's ``config()``
    sets to another value (module doc)."""
    if not target_args:
        return
    values = parse_target_args(target, target_args)
    config: PipelineConfig = schedule.config()
    for key, text in target_args.items():
        path = pipeline_field_path(key)
        if path is None:
            continue
        used = pipeline_field_value(config, path)
        if used != values[key]:
            field = ".".join(path)
            raise ConfigError(f"schedule {name}", key, text,
                              f"the schedule's config() sets {field}={value_text(used)} over "
                              f"the target's value: drop -T {key}, or have config() keep "
                              f"the target's {field} "
                              '(docs/guide/concepts.md, "Block sizing")',
                              flag="-T")
