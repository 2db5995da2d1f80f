"""compile_schedule: a declared loop body in, prologue / kernel / epilogue entries out.

Stages: body -> edges -> order (the strategy the host registered under
``ScheduleConfig.scheduling``) -> lowering (blocks, waits, phases).  Each is a
pure function of the previous ones; plugins intervene only through the hooks
the host resolves.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import attrs

from pipeline_core.config import PipelineConfig, ScheduleConfig
from pipeline_core.edges import DepEdge
from pipeline_core.errors import ConfigError, ProgramError
from pipeline_core.execution import ExecutionModel, declared_warps_per_group
from pipeline_core.ops import Entry, Op, Phase
from pipeline_core.schedule import Schedule

if TYPE_CHECKING:
    from pipeline_core.config import TargetProfile
    from pipeline_core.plugins import PluginHost
    from pipeline_core.program import KernelProgram, Program


@attrs.frozen
class CompiledSchedule:
    """Everything a kernel needs to unroll the pipelined loop, plus how it was derived."""

    schedule_name: str
    target_name: str
    config: PipelineConfig
    schedule_config: ScheduleConfig
    body: tuple[Op, ...]
    edges: tuple[DepEdge, ...]
    prologue: tuple[Entry, ...]
    kernel: tuple[Entry, ...]
    epilogue: tuple[Entry, ...]
    kernel_deps: tuple[DepEdge, ...]
    warp_stagger_index: int
    tag_names: Mapping[int, str] = attrs.field(factory=dict)
    #: double-buffer only: the KernelProgram build result (program, order, derived waits)
    kernel_program: KernelProgram | None = None
    bootstrap_frags: tuple[Op, ...] = ()
    params: Mapping[str, Any] = attrs.field(factory=dict)
    #: the schedule's TargetProfile (its sync model and clock), when the schedule carries one
    target_profile: Any = None
    #: who runs which entries (groups, stagger, warps per group); see pipeline_core.execution
    execution: Any = None

    @property
    def is_double_buffer(self) -> bool:
        return self.kernel_program is not None

    @property
    def program(self) -> Program | None:
        return self.kernel_program.program if self.kernel_program is not None else None

    @property
    def order(self) -> tuple[int, ...]:
        if self.kernel_program is None:
            return tuple(range(len(self.body)))
        return tuple(self.kernel_program.order)

    def phases(self) -> dict[Phase, tuple[Entry, ...]]:
        return {Phase.PROLOGUE: self.prologue, Phase.KERNEL: self.kernel, Phase.EPILOGUE: self.epilogue}


def _tag_names(schedule: Schedule, target: TargetProfile | None) -> dict[int, str]:
    names: dict[int, str] = {}
    if target is not None:
        names.update(target.cost_model.tag_names())
    own = getattr(schedule, "tag_names", None)
    if callable(own):
        names.update(own())
    return names


def compile_schedule(schedule: Schedule, *, host: PluginHost | None = None, target_name: str = "",
                     params: Mapping[str, Any] | None = None) -> CompiledSchedule:
    """Compile ``schedule`` (an object following :class:`pipeline_core.schedule.Schedule`).

    ``host`` resolves plugin overrides; by default the installed plugins are used.
    """
    from pipeline_core import graph, phases
    from pipeline_core.ordering import schedule_order
    from pipeline_core.program import build_kernel_program, kernel_deps_double_buffer

    if host is None:
        from pipeline_core.plugins import default_host
        host = default_host()

    config = schedule.config()
    if not isinstance(config, PipelineConfig):
        raise ConfigError(f"schedule {schedule.name}", "config()", type(config).__name__,
                          "a PipelineConfig")
    body = tuple(schedule.build_body())
    for i, o in enumerate(body):
        if not isinstance(o, Op):
            raise ConfigError(f"schedule {schedule.name}", f"build_body()[{i}]", o, "an Op")
    edges = tuple(host.derive_edges(schedule, body, config))
    graph.validate(body, edges)

    target = getattr(schedule, "target", None)
    tag_names = _tag_names(schedule, target)
    if config.depth >= 2:
        sched = _schedule_config(schedule)
        order = schedule_order(body, config, sched, edges,
                               strategy=host.get_strategy(sched.scheduling))
        result = build_kernel_program(body, config, sched, edges, order=order)
        program = result.program
        explicit = host.explicit_blocks(schedule, body, program)
        if explicit:
            explicit = tuple(tuple(block) for block in explicit)
            if len(explicit) != len(program.blocks):
                raise ProgramError(
                    f"schedule {schedule.name}: explicit blocks give {len(explicit)} op lists for "
                    f"{len(program.blocks)} program blocks; return exactly one list per block "
                    "(an empty list keeps the template)")
            program = attrs.evolve(program, explicit_blocks=explicit)
            result = attrs.evolve(result, program=program)
        bootstrap = tuple(host.bootstrap_frags(schedule) or ())
        prologue = phases.derive_prologue(program, config, sched, bootstrap)
        kernel = program.expand(Phase.KERNEL)
        epilogue = phases.derive_epilogue(program, config)
        kernel_deps = tuple(kernel_deps_double_buffer(kernel, config))
    else:
        sched = _schedule_config(schedule)
        result = None
        bootstrap = ()
        prologue = phases.default_prologue(body, config)
        kernel = phases.default_kernel(body)
        own = getattr(schedule, "transform_kernel", None)
        if callable(own):
            kernel = tuple(own(kernel, body))
        for transform in host.kernel_transforms(schedule, target_name, config):
            kernel = tuple(transform.function(kernel, body, config))
        epilogue = phases.default_epilogue(body, config)
        kernel_deps = edges
    stagger = phases.warp_stagger_index(config, body, len(prologue))
    execution = ExecutionModel.of(stagger, len(prologue),
                                  warps_per_group=declared_warps_per_group(schedule, target))
    return CompiledSchedule(
        schedule_name=schedule.name, target_name=target_name, config=config,
        schedule_config=sched, body=body, edges=edges, prologue=tuple(prologue),
        kernel=tuple(kernel), epilogue=tuple(epilogue), kernel_deps=tuple(kernel_deps),
        warp_stagger_index=stagger, tag_names=tag_names, kernel_program=result,
        bootstrap_frags=bootstrap, params=dict(params or {}), target_profile=target,
        execution=execution)


def _schedule_config(schedule: Schedule) -> ScheduleConfig:
    own = getattr(schedule, "schedule_config", None)
    sched = own() if callable(own) else ScheduleConfig()
    if not isinstance(sched, ScheduleConfig):
        raise ConfigError(f"schedule {schedule.name}", "schedule_config()", type(sched).__name__,
                          "a ScheduleConfig")
    return sched
