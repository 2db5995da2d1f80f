"""Hook specifications: the contract between pipeline-core and its plugins.

A plugin is a module (or object) with functions marked ``@pipeline_core.hookimpl``
whose names match the specs below; it is found through the ``pipeline_core``
entry-point group.  The core registers its own defaults through the same hooks
(``pipeline_core.builtin_plugin``).

How results combine
-------------------
* *Registration hooks* (``pipeline_core_register_*``) are collected: every
  plugin's list is merged; a duplicate name is an error naming both providers.
* *Override hooks* (``derive_edges``, ``explicit_blocks``, ``bootstrap_frags``)
  return ``None`` when a plugin has nothing to say about this schedule.  The host
  calls every implementation (in plugin-name order, never install order):
  exactly one non-``None`` answer from a plugin wins over the schedule's own
  method, which wins over the core default; two plugins answering for the same
  schedule is a conflict error naming both.  The schedule's method is the core's
  answer (``pipeline_core.builtin_plugin``; the protocol is declared in
  :class:`pipeline_core.schedule.ScheduleBase`), not a second mechanism.
* ``pipeline_core_kernel_transforms`` is collected: all transforms returned
  run in ``(order, name)`` order after the schedule's own ``transform_kernel``
  (the core's answer to this hook, which runs first).

How plugin code is run
----------------------
Every hook, factory, schedule method, strategy and transform of a plugin runs under the plugin guard (``pipeline_core.plugin_guard``): an answer
of a type other than the one documented below, or any exception (``SystemExit`` and a
``KeyboardInterrupt`` the plugin raises itself included; the user's Ctrl-C still stops the
tool) becomes a ``PluginError`` naming the plugin, its distribution and the hook (at load
time: a warning, and the plugin is dropped).  Raise a ``pipeline_core.errors`` error
(``ConfigError``...) for bad user input: it passes through unchanged, except from code that
sees none (import, the ``pipeline_core_register_*`` hooks, a command's ``add_arguments``),
where it is the plugin's failure too (a record with an invalid name, say).  Whatever a
plugin prints goes to stderr.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

# the markers' home is pipeline_core.markers; ``hookimpl`` stays importable from here
from pipeline_core.markers import PROJECT, hookimpl, hookspec  # noqa: F401

if TYPE_CHECKING:
    from pipeline_core.emitters import EmitterRecord
    from pipeline_core.lowering import LoweringRecord
    from pipeline_core.commands import CommandRecord
    from pipeline_core.config import PipelineConfig
    from pipeline_core.edges import DepEdge
    from pipeline_core.ops import Op
    from pipeline_core.program.program import Program
    from pipeline_core.schedule import (KernelTransform, Schedule, ScheduleRecord, StrategyRecord,
                                        TargetRecord)


@hookspec
def pipeline_core_register_targets() -> Sequence[TargetRecord] | None:
    """Return the targets this plugin provides.

    **When:** once per host, while it is built (every command builds one), after the
    plugin's module is imported.  A record's ``factory`` runs only when a command uses
    that target.
    **Combine:** collected from every plugin; a name two plugins register is refused
    (naming both distributions) and the rest of the host keeps working.

    :returns: a list of :class:`pipeline_core.schedule.TargetRecord`.  The factory returns a
        :class:`pipeline_core.config.TargetProfile`; its ``sync`` (a
        :class:`pipeline_core.sync.SyncModel`) is what the checker, the wait derivation and
        the timing model read, so a target without one can be compiled but never proven.

    Example::

        @hookimpl
        def pipeline_core_register_targets():
            return [TargetRecord("my-gpu", "My GPU, double buffer", factory=my_target,
                                 params=[Param("vm_per_load_a", int, 4, "vmcnt per A load")])]
    """


@hookspec
def pipeline_core_register_schedules() -> Sequence[ScheduleRecord] | None:
    """Return the schedules this plugin provides.

    **When:** once per host, while it is built.  A record's ``factory(ctx)`` runs when a
    command compiles that schedule, after ``-p``/``-T``/``-c`` are parsed and bounded.
    **Combine:** collected from every plugin; a duplicate name is refused naming both.

    :returns: a list of :class:`pipeline_core.schedule.ScheduleRecord`; each
        record's ``factory(ctx)`` receives a :class:`pipeline_core.schedule.BuildContext`
        and returns a schedule object (see :class:`pipeline_core.schedule.Schedule`).
        ``requires`` (a capability contract), ``targets`` / ``families`` declare the targets
        it is made for; ``--target`` naming any other is refused (docs/guide/schedule-plugin.md,
        "Targets a schedule is made for").

    Example::

        @hookimpl
        def pipeline_core_register_schedules():
            return [ScheduleRecord("tiny", "A 2-op example", factory=TinySchedule,
                                   default_target="my-gpu", targets=("my-gpu",))]
    """


@hookspec
def pipeline_core_register_strategies() -> Sequence[StrategyRecord] | None:
    """Return extra scheduling strategies.

    **When:** once per host, while it is built; the strategies belong to that host only
    (a second host never sees them).  ``function`` runs in the compiler's ordering stage
    when ``ScheduleConfig.scheduling`` names it.
    **Combine:** collected; a name already taken (built-ins included) is refused.

    :returns: a list of :class:`pipeline_core.schedule.StrategyRecord`; the
        ``function`` takes a :class:`pipeline_core.scheduling.SchedulingRequest`
        and returns a permutation of the body indices (checked: every index once).

    Example::

        @hookimpl
        def pipeline_core_register_strategies():
            return [StrategyRecord("REVERSED", "for testing", lambda req: ...)]
    """


@hookspec
def pipeline_core_derive_edges(schedule: Schedule, body: tuple[Op, ...],
                               config: PipelineConfig) -> Sequence[DepEdge] | None:
    """Derive the dependency edges of ``body`` for ``schedule``, or return ``None``.

    :param schedule: the schedule object being compiled.
    :param body: the annotated body (tuple of :class:`pipeline_core.ops.Op`) in execution order.
    :param config: its :class:`pipeline_core.config.PipelineConfig`.
    :returns: a list of :class:`pipeline_core.edges.DepEdge` indexing into ``body``, or ``None`` to
        leave the decision to others.

    **When:** once per compile, after the body is built and annotated with the target's
    cost model, before ordering.
    **Combine:** override hook (module docstring): exactly one plugin answer wins over the
    schedule's ``derive_edges`` method, which wins over the core's rule tables; two
    plugin answers for one schedule are a conflict naming both.

    Example::

        @hookimpl
        def pipeline_core_derive_edges(schedule, body, config):
            if schedule.name != "mine":
                return None
            return derive_edges(body, config) + [DepEdge.anti(5, 2)]
    """


@hookspec
def pipeline_core_explicit_blocks(schedule: Schedule, body: tuple[Op, ...],
                                  program: Program) -> Sequence[Sequence[Op]] | None:
    """Return one op list per block of ``program`` (empty list = use the template), or ``None``.

    **When:** once per compile on the block-program lowering (double buffer), after the
    program's waits are derived and patched, before the phases are emitted.  Explicit
    lists replace the template in the kernel phase only.
    **Combine:** override hook, like ``pipeline_core_derive_edges`` (one plugin answer >
    the schedule's ``build_explicit_blocks`` > the template).

    Example::

        @hookimpl
        def pipeline_core_explicit_blocks(schedule, body, program):
            if schedule.name == "mine":
                return [emit_minimal_barrier_block(b, False) for b in program.blocks]
    """


@hookspec
def pipeline_core_bootstrap_frags(schedule: Schedule) -> Sequence[Op] | None:
    """Return the fragment loads to issue at the prologue tail, or ``None``.

    **When:** once per compile on the block-program lowering, only with
    ``ScheduleConfig.partial_prologue_drain``, while the prologue is built; each fragment
    load is preceded by a partial wait on the target's global channel and a barrier.
    **Combine:** override hook, like ``pipeline_core_derive_edges`` (one plugin answer >
    the schedule's ``bootstrap_frags`` > none).

    Example::

        @hookimpl
        def pipeline_core_bootstrap_frags(schedule):
            if schedule.name == "mine":
                return [Op(tag=3, channel=0, role=OpRole.FRAGMENT_LOAD)]
    """


@hookspec
def pipeline_core_kernel_transforms(schedule: Schedule, target: str,
                                    config: PipelineConfig) -> Sequence[KernelTransform] | None:
    """Return kernel transforms that apply to this schedule on this target.

    :param schedule: the schedule object; :param target: the target name;
    :param config: the :class:`pipeline_core.config.PipelineConfig`.
    :returns: a list of :class:`pipeline_core.schedule.KernelTransform` (possibly empty) or
        ``None``.

    Each transform's ``function(kernel, body, config)`` returns the new entry tuple.

    **When:** once per compile on the single-buffer path, after the phases are built and
    the schedule's own ``transform_kernel`` ran.
    **Combine:** collected from all plugins; the transforms run in ``(order, name)``
    order, never install order.

    Example::

        @hookimpl
        def pipeline_core_kernel_transforms(schedule, target, config):
            if target == "my-gpu" and config.depth == 1:
                return [KernelTransform("my-hints", add_hints)]
    """


@hookspec
def pipeline_core_register_commands() -> Sequence[CommandRecord] | None:
    """Return command-line subcommands this plugin adds to ``pipeline-core``.

    Called once when the host is built (before the command line is parsed).

    :returns: a list of :class:`pipeline_core.commands.CommandRecord`: ``name``, one-line
        ``help``, ``add_arguments(parser)`` (adds the command's options to its
        ``argparse`` parser) and ``run(args, host) -> int | None`` (the exit status;
        ``None`` means 0), plus optional ``examples`` for the command's ``--help``.

    Collected; a name already taken by another plugin is a conflict naming both, and a
    built-in command's name (``compile``, ``check``...) is refused with a warning naming
    the plugin.  ``add_arguments`` and ``run`` run under the plugin guard: an exception
    there is reported as the plugin's failure (exit status 3), never as a traceback.

    Example::

        @hookimpl
        def pipeline_core_register_commands():
            return [CommandRecord("hello", "say hello", add_arguments=lambda p: None,
                                  run=lambda args, host: print("hello") or 0)]
    """


@hookspec
def pipeline_core_register_emitters() -> Sequence[EmitterRecord] | None:
    """Return the emitters this plugin provides: compiled schedule -> kernel source.

    **When:** once per host, while it is built.  ``emit(compiled, **options)`` runs when
    ``pipeline-core emit SCHEDULE --emitter NAME`` has compiled (and proven) the schedule; it
    returns the source text.  ``pipeline-core emitters`` lists them.  ``options`` declares
    the ``-O KEY=VALUE`` options (``Param`` records with type, default and bound): the core
    refuses an unknown key or a value out of its bound before ``emit`` runs, and calls it
    with every declared option typed.
    **Combine:** collected from every plugin; a name two plugins register is a conflict
    naming both.  ``emit`` runs under the plugin guard: an exception there is reported as the
    plugin's failure, never a traceback.

    :returns: a list of :class:`pipeline_core.emitters.EmitterRecord`: ``name``,
        ``description``, ``targets`` (the target names it serves; empty for any, or those whose
        ``TargetRecord.offers`` cover its ``requires``), ``emit`` and
        ``kernel_families`` (the kernel families it writes, each the ``kernel_family`` of a
        schedule's ``kernel_launch()``; empty for any).  ``pipeline-core emit`` without
        ``--emitter`` picks the one emitter serving the target and the schedule's family.

    Example::

        @hookimpl
        def pipeline_core_register_emitters():
            return [EmitterRecord("text", "entries as text", (), lambda c, **o: str(c.kernel))]
    """


@hookspec
def pipeline_core_register_lowerings() -> Sequence[LoweringRecord] | None:
    """Return the lowerings this plugin provides: an ordered body -> a Plan.

    **When:** once per host, while it is built.  ``lower`` runs in the compiler after the
    ordering stage for every schedule whose ``lowering()`` names it, and returns a
    :class:`pipeline_core.plan.Plan` (checked); ``finish``, when given, runs on the assembled
    compile before its proof.  The core registers ``blocks``, ``ring`` and ``agents``
    (pipeline_core/lowering/).
    **Combine:** collected; a name already taken (the core's included) is refused.

    :returns: a list of :class:`pipeline_core.lowering.LoweringRecord`.

    Example::

        @hookimpl
        def pipeline_core_register_lowerings():
            return [LoweringRecord("mine", "my lowering", lower=my_lower)]
    """
