"""compile_schedule: a declared loop body in, prologue / kernel / epilogue entries out.

Stages: body -> edges -> order (the strategy the host registered under
``ScheduleConfig.scheduling``) -> lowering (blocks, waits, phases).  Each is a
pure function of the previous ones; plugins intervene only through the hooks
the host resolves.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import attrs

from pipeline_core.compiled import CompiledSchedule  # its home; importable from here too
from pipeline_core.config import (BLOCK_SCHEDULE_KNOBS, PipelineConfig, ScheduleConfig,
                                  TargetProfile)
from pipeline_core.edges import DepEdge
from pipeline_core.errors import ConfigError, ProgramError
from pipeline_core.execution import ExecutionModel, declared_warps_per_group
from pipeline_core.limits import GLOBAL_LOAD_TICKS
from pipeline_core.ops import MAX_KERNEL_TAG, Op, OpRole, Phase, entries
from pipeline_core.schedule import LOWERINGS, Schedule, ScheduleBase

if TYPE_CHECKING:
    from pipeline_core.plugins import PluginHost
    from pipeline_core.sync.model import SyncModel


def _tag_names(schedule: ScheduleBase, target: TargetProfile | None) -> dict[int, str]:
    names: dict[int, str] = {}
    if target is not None:
        names.update(target.cost_model.tag_names())
    names.update(schedule.tag_names())
    return names


def compile_schedule(schedule: Schedule, *, host: PluginHost | None = None, target_name: str = "",
                     params: Mapping[str, Any] | None = None,
                     allow_unsafe: bool = False) -> CompiledSchedule:
    """Compile ``schedule`` (an object following :class:`pipeline_core.schedule.Schedule`).

    ``host`` resolves plugin overrides; by default the installed plugins are used.  The last
    stage proves the result race-free (:mod:`pipeline_core.proof`): a schedule the hazard
    checker does not prove safe raises :class:`~pipeline_core.proof.UnsafeScheduleError`
    unless ``allow_unsafe`` is set, which emits it with its hazards attached.
    """
    from pipeline_core import graph, phases
    from pipeline_core.ordering import schedule_order
    from pipeline_core.program import build_kernel_program, kernel_deps_double_buffer
    from pipeline_core.program.binding import lowering_for
    from pipeline_core.program.verify import check_explicit_blocks
    from pipeline_core.sync.settle import DERIVED, settle, wait_source

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
    lowering_name = _lowering_name(schedule)
    check_body_fits_target(schedule, body, config, target, target_name,
                           block_program=lowering_name == "blocks")
    edges = tuple(host.derive_edges(schedule, body, config))
    graph.validate(body, edges)

    tag_names = _tag_names(schedule, target)
    if lowering_name == "agents":
        return _compile_agents(schedule, body, edges, config, target, target_name, tag_names,
                               params, host, allow_unsafe)
    if lowering_name == "generic":
        from pipeline_core.lowering.generic import lower_generic
        target, sync = _require_sync(schedule, target, "generic", "its waits")
        sched = _schedule_config(schedule, "generic")
        warps = declared_warps_per_group(schedule, target)
        lowered = lower_generic(body, sync, stages=config.depth,
                                execution=ExecutionModel(warps_per_group=warps),
                                schedule=schedule.name, config=config)
        prologue, kernel, epilogue = lowered.prologue, lowered.kernel, lowered.epilogue
        compiled = CompiledSchedule(
            schedule_name=schedule.name, target_name=target_name, config=config,
            schedule_config=sched, body=body, edges=edges, prologue=prologue, kernel=kernel,
            epilogue=epilogue, kernel_deps=(), warp_stagger_index=len(prologue) + 1,
            tag_names=tag_names, params=dict(params or {}), target_profile=target,
            execution=ExecutionModel(warps_per_group=warps), lowering="generic",
            launch=schedule.kernel_launch())
        from pipeline_core.proof import require_safe

        return require_safe(compiled, host, allow_unsafe=allow_unsafe)
    explicit_source = ""
    if config.depth >= 2:
        sched = _schedule_config(schedule)
        order = schedule_order(body, config, sched, edges,
                               strategy=host.get_strategy(sched.scheduling))
        derived = wait_source(schedule) == DERIVED
        result = build_kernel_program(body, config, sched, edges, order=order,
                                      keep_reads_first=derived)
        program = result.program
        explicit_source, explicit = host.explicit_blocks_with_source(schedule, body, program)
        if explicit:
            explicit = tuple(tuple(block) for block in explicit)
            if len(explicit) != len(program.blocks):
                raise ProgramError(
                    f"schedule {schedule.name}: explicit blocks from {explicit_source} give "
                    f"{len(explicit)} op lists for {len(program.blocks)} program blocks; return "
                    "exactly one list per block (an empty list keeps the template)")
            program = attrs.evolve(program, explicit_blocks=explicit)
            findings = check_explicit_blocks(program, explicit_source)
            if findings:
                raise findings[0]
            result = attrs.evolve(result, program=program)
        if not any(explicit):
            explicit_source = ""  # every block keeps its template
        bootstrap = tuple(host.bootstrap_frags(schedule) or ())
        prologue = phases.derive_prologue(program, config, sched, bootstrap)
        kernel = program.expand(Phase.KERNEL)
        epilogue = phases.derive_epilogue(program, config)
        lowering = lowering_for(getattr(target, "sync", None))
        prologue, kernel, epilogue = (lowering.entries(p) for p in (prologue, kernel, epilogue))
        kernel_deps = tuple(kernel_deps_double_buffer(kernel, config, lowering.fragment_wait_tag))
    else:
        sched = _schedule_config(schedule)
        result = None
        bootstrap = ()
        prologue = phases.default_prologue(body, config)
        kernel = phases.default_kernel(body)
        # the schedule's own transform_kernel first (the core's answer), then the plugins'
        for transform in host.kernel_transforms(schedule, target_name, config):
            kernel = tuple(transform.function(kernel, body, config))
        epilogue = phases.default_epilogue(body, config)
        lowering = lowering_for(getattr(target, "sync", None))
        prologue, kernel, epilogue = (lowering.entries(p) for p in (prologue, kernel, epilogue))
        kernel_deps = edges
    prefix = list(schedule.epilogue_prefix())
    if prefix:
        epilogue = entries(prefix + [e.op for e in epilogue], Phase.EPILOGUE)
    stagger = phases.warp_stagger_index(config, body, len(prologue))
    if config.warp_stagger.enabled and not ExecutionModel.is_staggered(stagger, len(prologue)):
        # an enabled stagger must split the prologue: past it, one warp group would be proven
        # (check --input refuses such a document too, pipeline_core/check/program.py)
        raise ConfigError(f"schedule {schedule.name}", "warp_stagger.fixed_amount", stagger,
                          f"a warp-stagger index in 0..{len(prologue)} for a prologue of "
                          f"{len(prologue)} entries")
    execution = ExecutionModel.of(stagger, len(prologue),
                                  warps_per_group=declared_warps_per_group(schedule, target))
    compiled = CompiledSchedule(
        schedule_name=schedule.name, target_name=target_name, config=config,
        schedule_config=sched, body=body, edges=edges, prologue=tuple(prologue),
        kernel=tuple(kernel), epilogue=tuple(epilogue), kernel_deps=tuple(kernel_deps),
        warp_stagger_index=stagger, tag_names=tag_names, kernel_program=result,
        bootstrap_frags=bootstrap, params=dict(params or {}), target_profile=target,
        execution=execution, explicit_source=explicit_source, launch=schedule.kernel_launch())
    from pipeline_core.proof import prove, require_safe

    if wait_source(schedule) == DERIVED:
        compiled = settle(compiled, host, prove=lambda c: prove(c, host))
        if result is not None and compiled.kernel is not kernel:  # entries were added
            compiled = attrs.evolve(compiled, kernel_deps=tuple(kernel_deps_double_buffer(
                compiled.kernel, config, lowering.fragment_wait_tag)))

    return require_safe(compiled, host, allow_unsafe=allow_unsafe)


def _lowering_name(schedule: ScheduleBase) -> str:
    """The lowering a schedule asks for with ``lowering()``: "blocks" (default), "generic" or
    "agents" (warp-specialized programs, pipeline_core.agents)."""
    name = schedule.lowering()
    if name not in LOWERINGS:
        raise ConfigError(f"schedule {schedule.name}", "lowering", name,
                          '"blocks", "generic" or "agents"')
    return name


def _require_sync(schedule: ScheduleBase, target: TargetProfile | None, lowering: str,
                  derives: str) -> tuple[TargetProfile, SyncModel]:
    """``target`` and its sync model, refused unless it declares one: the generic and agents
    lowerings derive their sync from it."""
    if target is None or target.sync is None:
        raise ConfigError(f"schedule {schedule.name}", "lowering", lowering,
                          f"a target with a sync model (TargetProfile.sync): the {lowering} "
                          f"lowering derives {derives} from it", flag="--target")
    return target, target.sync


def _compile_agents(schedule: ScheduleBase, body: tuple[Op, ...], edges: tuple[DepEdge, ...],
                    config: PipelineConfig, target: TargetProfile | None, target_name: str,
                    tag_names: Mapping[int, str], params: Mapping[str, Any] | None,
                    host: PluginHost, allow_unsafe: bool) -> CompiledSchedule:
    """The agents lowering: the schedule's roles -> one program per agent, proven by the
    agents checker (docs/guide/agents.md)."""
    from pipeline_core.agents.inject import lower_agents
    from pipeline_core.proof import require_safe

    owner = f"schedule {schedule.name}"
    target, sync = _require_sync(schedule, target, "agents", "its rings and waits")
    plan = lower_agents(body, edges, sync, stages=config.depth, spec=schedule.agents(),
                        owner=owner, target=target_name)
    compiled = CompiledSchedule(
        schedule_name=schedule.name, target_name=target_name, config=config,
        schedule_config=_schedule_config(schedule, "agents"), body=body, edges=edges, prologue=(),
        kernel=(), epilogue=(), kernel_deps=(), warp_stagger_index=0, tag_names=tag_names,
        params=dict(params or {}), target_profile=target, lowering="agents", agents=plan,
        launch=schedule.kernel_launch())
    return require_safe(compiled, host, allow_unsafe=allow_unsafe)


def _schedule_config(schedule: ScheduleBase, lowering: str = "blocks") -> ScheduleConfig:
    """The schedule's ScheduleConfig; on the ring and agents lowerings, which read none of the
    block template's knobs (``config.BLOCK_SCHEDULE_KNOBS``), one the schedule sets is refused
    rather than ignored (``-c`` on them is refused already, pipeline_core/api.py)."""
    sched = schedule.schedule_config()
    if lowering != "blocks":
        default = ScheduleConfig()
        for knob in BLOCK_SCHEDULE_KNOBS:
            if getattr(sched, knob) != getattr(default, knob):
                raise ConfigError(f"schedule {schedule.name}", f"schedule_config().{knob}",
                                  getattr(sched, knob),
                                  f"its default {getattr(default, knob)!r}: the {lowering} "
                                  "lowering reads no block-template knob (its waits come from "
                                  "the target's sync model); leave it out of schedule_config()")
    return sched


def check_body_fits_target(schedule: ScheduleBase, body: tuple[Op, ...], config: PipelineConfig,
                           target: TargetProfile | None, target_name: str, *,
                           block_program: bool = True) -> None:
    """Refuse, before any work, a body the target cannot cost or count.

    * every kernel tag of the body must be in the target's cost model: a tag the
      model lacks would be costed as nothing, and a foreign model reinterprets tags
      (a body compiled for another schedule's target);
    * on the blocks lowering (``block_program``), a global load must add ticks to the global
      channel (vm per load >= 1), or every derived global wait is 0 and protects nothing;
      the ring and agents lowerings count through the target's sync model and never read
      those fields (``config.BLOCK_PIPELINE_FIELDS``).
    """
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
    for o in body if block_program else ():
        if o.role == OpRole.GLOBAL_LOAD and config.vm_per_channel(o.channel) < 1:
            field = "vm_per_load_a" if o.channel == 0 else "vm_per_load_b"
            raise ConfigError(f"target {where}", field, config.vm_per_channel(o.channel),
                              f"{GLOBAL_LOAD_TICKS.allowed()}: schedule "
                              f"{schedule.name}'s global loads on channel {o.channel} would never "
                              "add ticks to the target's global channel, so every global wait "
                              "would derive to 0 and protect "
                              "nothing")
