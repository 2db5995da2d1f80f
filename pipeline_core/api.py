"""Name-based entry points: what the CLI and plugin tests call."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from pipeline_core.compiler import CompiledSchedule, compile_schedule, lowering_of
from pipeline_core.config import ScheduleConfig, apply_overrides
from pipeline_core.errors import ConfigError, UnknownNameError
from pipeline_core.proof import UnencodableWaitError, UnsafeScheduleError, racing_overrides
from pipeline_core.schedule import (BuildContext, ScheduleBase, ScheduleRecord, TargetRecord,
                                    fitting_targets, parse_params, parse_target_args)

if TYPE_CHECKING:
    from pipeline_core.plugins import PluginHost


def build_named(schedule: str, *, target: str | None = None, params: Mapping[str, str] | None = None,
                target_args: Mapping[str, str] | None = None,
                config_overrides: Mapping[str, str] | None = None,
                host: PluginHost | None = None,
                reference: bool = False) -> tuple[ScheduleBase, str, dict[str, Any]]:
    """Instantiate a registered schedule on a registered target; returns (schedule, target name,
    parsed parameters).  ``reference``: the caller wants the reference's output exactly
    (:attr:`BuildContext.reference`).  The schedule comes under the plugin guard, which answers
    the protocol's optional methods it lacks (:class:`pipeline_core.schedule.ScheduleBase`)."""
    if host is None:
        from pipeline_core.plugins import default_host
        host = default_host()
    record = host.get_schedule(schedule)
    target_name = record.default_target if target is None else target
    if target is None and not target_name:
        raise UnknownNameError("target", "", host.describe(host.targets),
                               f"Schedule {schedule!r} has no default target; pass --target.",
                               given_as="--target")
    if not target_name.strip():
        raise UnknownNameError("target", target_name, host.describe(host.targets),
                               given_as="--target")
    target_record = host.get_target(target_name)
    require_fit(record, target_record, host)
    # every -p / -T / -c value is checked here, before the schedule's factory runs, whether
    # or not the schedule goes on to read it
    given = dict(params or {})
    values = parse_params(f"schedule {schedule}", record.params, given, flag="-p",
                          elsewhere={p.name: f"-T parameter of target {target_name}"
                                     for p in target_record.params})
    parse_target_args(target_record, dict(target_args or {}), schedule=record)
    check_config_overrides(dict(config_overrides or {}), host)
    ctx = BuildContext(schedule=record, params=values, explicit_params=frozenset(given),
                       target=target_record, target_args=dict(target_args or {}),
                       config_overrides=dict(config_overrides or {}), reference=reference)
    built = host.guard_schedule(record.factory(ctx))  # a plugin's factory guarded it already
    refuse_unread_knobs(schedule, built, dict(config_overrides or {}), host)
    # a value the user typed that the schedule or another knob overrides is refused
    from pipeline_core.overrides import refuse_overridden_knobs, refuse_overridden_target_args

    refuse_overridden_knobs(schedule, built, dict(config_overrides or {}))
    refuse_overridden_target_args(schedule, built, target_record, dict(target_args or {}))
    return built, target_name, values


def refuse_unread_knobs(name: str, schedule: ScheduleBase, overrides: Mapping[str, str],
                        host: PluginHost) -> None:
    """Refuse ``-c`` on a schedule whose lowering reads no knob (``LoweringRecord.knobless``):
    accepted, it would silently mean nothing.  Names the first key the user gave."""
    if not overrides:
        return
    record = lowering_of(schedule, host)
    if record.knobless:
        key, value = next(iter(overrides.items()))
        raise ConfigError(f"schedule {name}", key, value,
                          f"the {record.name} lowering reads no ScheduleConfig knob: "
                          f"{record.knobless}; drop -c {key}", flag="-c")


def require_fit(record: ScheduleRecord, target: TargetRecord, host: PluginHost, *,
                document: str = "") -> None:
    """Refuse a target the schedule is not made for (``ScheduleRecord.targets`` / ``families`` /
    ``requires``), naming both (for a contract, the capabilities the target lacks) and the
    installed targets that fit: its factory might build something on it,
    but proven under a sync model or machine the kernel does not run on
    (docs/guide/schedule-plugin.md, "Targets a schedule is made for").  Every command that
    builds a schedule by name passes here (:func:`build_named`), and ``check --input`` for the
    pair a document names (``document``: how the refusal names it)."""
    if record.fits(target):
        return
    fitting = fitting_targets(record, host.targets)
    family = f" (family {target.family})" if target.family else ""
    who = f"schedule {record.name}" if document else "it"  # the --target message names it first
    made = f"{who} is made for {record.made_for()}, not {target.name}{family}"
    lacking = record.lacks(target)
    contract = bool(lacking)
    if contract:  # the contract is what is missing: name it, and the targets that offer it
        made = f"{who} needs {', '.join(lacking)}, which target {target.name} does not offer"
    if fitting:
        choice = record.default_target if record.default_target in fitting else fitting[0]
        fix = (f"targets that {'offer it' if contract else 'fit'}: {', '.join(fitting)}; "
               f"{'compile it again with' if document else 'pass'} --target {choice}")
    else:
        fix = f"no installed target fits; install a plugin providing {record.made_for()}"
    if document:
        raise ConfigError(document, "target", target.name, f"{made}; {fix}")
    raise ConfigError(f"schedule {record.name}", "", target.name, f"{made}; {fix}",
                      flag="--target")


def require_document_fit(document: Mapping[str, Any], host: PluginHost | None = None) -> None:
    """:func:`require_fit` for the schedule and target a document names, when both are
    registered: a document compiled for a pair that does not belong together (by a version
    that did not refuse it, or edited) is refused, not proven under the wrong model.  A
    ``--target`` given to ``check`` re-checks under that target on purpose and skips this."""
    from pipeline_core.sync.resolve import document_target

    if host is None:
        from pipeline_core.plugins import default_host
        host = default_host()
    schedule, target = document.get("schedule"), document_target(document)
    if (isinstance(schedule, str) and schedule in host.schedules and target is not None
            and target in host.targets):
        require_fit(host.schedules[schedule], host.targets[target], host,
                    document="schedule document")


def schedule_warps(document: Mapping[str, Any], host: PluginHost | None = None) -> int | None:
    """The warps per group the schedule a document names runs on its target, built again from
    the document's ``params`` (:func:`~pipeline_core.lowering.declared_warps_per_group`); None
    when the document names no installed schedule and target or its params no longer build.

    Why: ``check --input`` proves the phase lists under the warps each group runs, and a
    document's ``execution`` record is only its word for that: an edited record (deleted, or
    1 group x 1 warp) would prove a racy document over fewer warps than the kernel runs."""
    from pipeline_core.errors import PipelineError
    from pipeline_core.lowering import declared_warps_per_group
    from pipeline_core.sync.resolve import document_target, target_profile

    if host is None:
        from pipeline_core.plugins import default_host
        host = default_host()
    schedule, target = document.get("schedule"), document_target(document)
    if not (isinstance(schedule, str) and schedule in host.schedules and target is not None
            and target in host.targets):
        return None
    recorded = document.get("params")
    declared = {p.name for p in host.schedules[schedule].params}
    params = {k: (str(v).lower() if isinstance(v, bool) else str(v))
              for k, v in (recorded.items() if isinstance(recorded, Mapping) else ())
              if k in declared and v is not None}
    try:
        built, _, _ = build_named(schedule, target=target, params=params, host=host)
        return declared_warps_per_group(built, target_profile(target, host))
    except PipelineError:
        return None


def check_config_overrides(overrides: Mapping[str, str], host: PluginHost) -> None:
    """Each ``-c KEY=VALUE`` names a ScheduleConfig field, parses, lies in its bound, and
    ``scheduling`` names a registered strategy (single-buffer schedules never look it up)."""
    checked = apply_overrides(ScheduleConfig(), overrides, what="ScheduleConfig", flag="-c")
    if "scheduling" in overrides and checked.scheduling not in host.strategies:
        raise UnknownNameError("scheduling strategy", checked.scheduling, sorted(host.strategies),
                               given_as="-c scheduling")


def compile_named(schedule: str, *, target: str | None = None,
                  params: Mapping[str, str] | None = None,
                  target_args: Mapping[str, str] | None = None,
                  config_overrides: Mapping[str, str] | None = None,
                  host: PluginHost | None = None, allow_unsafe: bool = False,
                  reference: bool | None = None) -> CompiledSchedule:
    """Compile a registered schedule by name, with ``-p``/``-T``/``-c`` style string arguments.

    The result is proven race-free or refused (:mod:`pipeline_core.proof`); ``allow_unsafe``
    emits it anyway, with its hazards listed (``CompiledSchedule.hazards``), and asks for the
    reference's exact output (``reference``, which defaults to ``allow_unsafe``): repairs a
    schedule makes against the reference are then off unless a parameter turns them on.
    A refusal names the racing ``-c`` knobs the caller set.
    """
    if host is None:
        from pipeline_core.plugins import default_host
        host = default_host()
    obj, target_name, values = build_named(
        schedule, target=target, params=params, target_args=target_args,
        config_overrides=config_overrides, host=host,
        reference=allow_unsafe if reference is None else reference)
    try:
        return compile_schedule(obj, host=host, target_name=target_name, params=values,
                                allow_unsafe=allow_unsafe, name=schedule)
    except UnsafeScheduleError as exc:
        knobs = racing_overrides(dict(config_overrides or {}))
        if not knobs:
            raise
        raise exc.naming_knobs(knobs) from None
    except UnencodableWaitError as exc:  # name the user's keys behind the wait
        raise exc.naming_keys({"-p": dict(params or {}), "-T": dict(target_args or {}),
                               "-c": dict(config_overrides or {})}) from None
