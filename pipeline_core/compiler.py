"""compile_schedule: a declared loop body in, a proven Plan out.

Stages: body -> edges -> the registered lowering the schedule names (which orders the body
where it needs an order, places the waits and splits the loop: pipeline_core/lowering/) ->
proof.  Each is a pure function of the previous ones; plugins intervene only through the hooks
the host resolves.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from pipeline_core.compiled import CompiledSchedule  # its home; importable from here too
from pipeline_core.config import BLOCK_SCHEDULE_KNOBS, ScheduleConfig, TargetProfile
from pipeline_core.errors import ConfigError
from pipeline_core.ops import MAX_KERNEL_TAG, Op, OpRole
from pipeline_core.schedule import Schedule, ScheduleBase

if TYPE_CHECKING:
    from pipeline_core.compiled import Proof
    from pipeline_core.lowering import LoweringRecord
    from pipeline_core.plugins import PluginHost
    from pipeline_core.sync.model import SyncModel


def _tag_names(schedule: ScheduleBase, target: TargetProfile | None,
               sync: SyncModel | None) -> dict[int, str]:
    """Every tag's name the compiled schedule's views print: the cost model's, the sync
    model's (its waits, commits and barriers: a target's own sync tags, as the h100-pingpong
    target's 150 and 152, were printed ``OP150`` in the document without them), then the
    schedule's own, which win."""
    names: dict[int, str] = {}
    if target is not None:
        names.update(target.cost_model.tag_names())
    if sync is not None:
        names.update(sync.tag_names())
    names.update(schedule.tag_names())
    return names


def compile_schedule(schedule: Schedule, *, host: PluginHost | None = None, target_name: str = "",
                     params: Mapping[str, Any] | None = None,
                     allow_unsafe: bool = False, name: str = "") -> CompiledSchedule:
    """Compile ``schedule`` (an object following :class:`pipeline_core.schedule.Schedule`).

    ``name``: the name the schedule is registered under, which the compiled result and its
    document carry (default: the object's ``name``), so ``check --input`` finds the record the
    user compiled even where a factory returns an object of another name (a schedule
    re-registered for a new target: issue 39).

    ``host`` resolves plugin overrides and the lowering the schedule names; by default the
    installed plugins are used.  The last stage proves the plan race-free
    (:mod:`pipeline_core.proof`): a schedule the hazard checker does not prove safe raises
    :class:`~pipeline_core.proof.UnsafeScheduleError` unless ``allow_unsafe`` is set, which
    emits it with its hazards attached.
    """
    from pipeline_core import graph
    from pipeline_core.lowering import LoweringInput
    from pipeline_core.proof import prove, require_safe

    if host is None:
        from pipeline_core.plugins import default_host
        host = default_host()
    from pipeline_core.plugin_guard import GuardedSchedule

    if not isinstance(schedule, GuardedSchedule):  # an object from an API caller
        schedule = host.guard_schedule(schedule)

    # the schedule's methods run under the plugin guard, which checks what they return
    config = schedule.config()
    body = tuple(schedule.build_body())
    target = schedule.target
    if not isinstance(target, TargetProfile):
        target = None
    record = lowering_of(schedule, host)
    check_body_fits_target(schedule, body, target, target_name,
                           compute_channels=record.compute_channels)
    edges = tuple(host.derive_edges(schedule, body, config))
    graph.validate(body, edges)
    sched = _schedule_config(schedule, record)
    sync = _sync_of(target, target_name, host)
    tag_names = _tag_names(schedule, target, sync)
    resolved = host  # the closure below must see a host, never None

    def prove_with_host(c: CompiledSchedule) -> Proof:
        return prove(c, resolved)

    ctx = LoweringInput(schedule=schedule, body=body, edges=edges, config=config,
                        schedule_config=sched, target=target, target_name=target_name,
                        tag_names=tag_names, host=host, sync=sync, prove=prove_with_host)
    compiled = CompiledSchedule(
        schedule_name=name or schedule.name, target_name=target_name, config=config,
        schedule_config=sched, body=body, edges=edges, tag_names=tag_names,
        params=dict(params or {}), target_profile=target, plan=record.lower(ctx))
    if record.finish is not None:
        compiled = record.finish(ctx, compiled)
    return require_safe(compiled, host, allow_unsafe=allow_unsafe)


def _sync_of(target: TargetProfile | None, target_name: str, host: PluginHost
             ) -> SyncModel | None:
    """The sync model the compile is proven under: the target's, or the one the registered
    target of that name declares (None when neither is known)."""
    from pipeline_core.errors import TargetFactError, UnknownNameError
    from pipeline_core.sync.resolve import sync_for_target

    if target is not None and target.sync is not None:
        return target.sync
    try:
        return sync_for_target(target_name or None, host)
    except (TargetFactError, UnknownNameError):
        return None


def lowering_of(schedule: ScheduleBase, host: PluginHost) -> LoweringRecord:
    """The registered lowering a schedule asks for with ``lowering()`` (default "blocks");
    one no plugin registers is refused naming the schedule and the installed lowerings."""
    name = schedule.lowering()
    if not isinstance(name, str) or name not in host.lowerings:
        known = ", ".join(f'"{n}"' for n in sorted(host.lowerings))
        raise ConfigError(f"schedule {schedule.name}", "lowering", name,
                          f"a registered lowering: {known}")
    return host.get_lowering(name)


def _schedule_config(schedule: ScheduleBase, record: LoweringRecord) -> ScheduleConfig:
    """The schedule's ScheduleConfig; on a lowering that reads none of the block template's
    knobs (``config.BLOCK_SCHEDULE_KNOBS``; ``LoweringRecord.knobless``), one the schedule sets
    is refused rather than ignored (``-c`` on them is refused already, pipeline_core/api.py)."""
    sched = schedule.schedule_config()
    if record.knobless:
        default = ScheduleConfig()
        for knob in BLOCK_SCHEDULE_KNOBS:
            if getattr(sched, knob) != getattr(default, knob):
                raise ConfigError(f"schedule {schedule.name}", f"schedule_config().{knob}",
                                  getattr(sched, knob),
                                  f"its default {getattr(default, knob)!r}: the {record.name} "
                                  "lowering reads no block-template knob (its waits come from "
                                  "the target's sync model); leave it out of schedule_config()")
    return sched


def check_body_fits_target(schedule: ScheduleBase, body: tuple[Op, ...],
                           target: TargetProfile | None, target_name: str, *,
                           compute_channels: bool = False) -> None:
    """Refuse, before any work, a body the target cannot cost: every kernel tag of the body
    must be in the target's cost model (a tag the model lacks would be costed as nothing, and
    a foreign model reinterprets tags: a body compiled for another schedule's target).  What a
    lowering needs beyond that it checks itself (the block program's global-load ticks,
    pipeline_core/lowering/blocks.py)."""
    where = target_name or "(the schedule's own)"
    if target is not None:
        known = target.cost_model.costs
        missing = sorted({o.tag for o in body if o.tag <= MAX_KERNEL_TAG and o.tag not in known})
        if missing:
            names = schedule.tag_names()
            shown = ", ".join(f"{t} ({names[t]})" if t in names else str(t) for t in missing)
            raise ConfigError(f"schedule {schedule.name}", "", where,
                              f"the cost model of target {where!r} lacks kernel tag"
                              f"{'s' if len(missing) > 1 else ''} {shown} that the schedule "
                              "uses; choose a target made for this schedule (`pipeline-core "
                              "schedules` shows its default target)", flag="--target")
    for i, o in enumerate(body):  # a compute's channel= would otherwise mean nothing
        if o.role == OpRole.COMPUTE and o.channel >= 0 and not compute_channels:
            reads = o.operand_channels if o.reads is not None else (o.channel,)
            raise ConfigError(f"schedule {schedule.name}", f"build_body()[{i}].channel",
                              o.channel, "-1 on a compute op: channel= names a load's operand "
                              "channel, and a compute names the channels it reads with reads= "
                              f"(logical(..., reads={reads!r}))")
        if o.reads is not None and o.role != OpRole.COMPUTE:
            raise ConfigError(f"schedule {schedule.name}", f"build_body()[{i}].reads",
                              o.reads, f"None on a {o.role.name} op: reads= names the operand "
                              "channels a compute op reads; a load names its one channel "
                              "with channel=")
        if o.reads is not None and compute_channels:
            raise ConfigError(f"schedule {schedule.name}", f"build_body()[{i}].reads",
                              o.reads, "None under a lowering that binds a compute by its "
                              "channel= (the agents lowering: what a compute reads are the "
                              "body's edges); drop reads=")
