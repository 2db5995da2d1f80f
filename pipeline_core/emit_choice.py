"""Which emitter writes which schedule, on which target: what ``pipeline-core emitters`` lists,
what ``emit`` suggests when no emitter serves the target it compiled for, and what ``compile``
warns of when every emitter of the schedule's kernel family refuses its geometry
(docs/guide/records.md, "Commands and emitters").

Apart from :mod:`pipeline_core.emitters` (the record, which the plugin host imports) since it
builds schedules through :mod:`pipeline_core.api`, which imports the host.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pipeline_core.emitters import EmitterRecord
from pipeline_core.launch import KernelLaunch
from pipeline_core.schedule import TargetRecord

if TYPE_CHECKING:
    from pipeline_core.compiled import CompiledSchedule
    from pipeline_core.plugins import PluginHost


def targets_with_emitter(emitters: Iterable[EmitterRecord], launch: KernelLaunch | None,
                         fitting: Iterable[TargetRecord]) -> list[str]:
    """The names of the ``fitting`` targets (those the schedule is made for) that some emitter
    of ``emitters`` serves for the kernel ``launch`` declares, by name or by capability, sorted:
    what ``pipeline-core emit`` suggests when no emitter serves the target it compiled for.  An
    emitter that serves any target adds none (it would have served that one)."""
    records = [record for record in emitters if record.writes(launch)
               and (record.targets or record.requires is not None)]
    return sorted({target.name for target in fitting
                   if any(record.serves(target) for record in records)})


def schedules_written(record: EmitterRecord, host: PluginHost) -> list[str]:
    """The installed schedules ``record`` writes a kernel for, sorted: each built with its
    defaults on every target it is made for that the emitter serves, and kept when the kernel
    family it declares (``kernel_launch()``) is one the emitter writes (what ``pipeline-core
    emitters`` lists).  Building runs no scheduler; a schedule whose defaults do not build
    there is left out, as ``emit`` would refuse it."""
    from pipeline_core.api import build_named
    from pipeline_core.errors import PipelineError
    from pipeline_core.schedule import fitting_targets

    written = []
    for name, schedule in sorted(host.schedules.items()):
        for target in fitting_targets(schedule, host.targets):
            if not record.serves(host.targets[target]):
                continue
            try:
                built, _, _ = build_named(name, target=target, host=host)
            except PipelineError:
                continue
            if record.writes(built.kernel_launch()):
                written.append(name)
                break
    return written



def unwritten(compiled: CompiledSchedule, host: PluginHost) -> str:
    """One line when the emitters that serve ``compiled``'s target and write its kernel family
    all refuse it (each one's :attr:`EmitterRecord.refuses` reason, named), else "" (one of
    them writes it, or there is none to ask: a schedule need not have an emitter).  So a
    geometry the compile proves but ``emit`` would refuse is said at compile."""
    target = host.targets.get(compiled.target_name)
    found = [record for _, record in sorted(host.emitters.items())
             if target is not None and record.serves(target) and record.writes(compiled.launch)]
    reasons = []
    for record in found:
        why = record.refuses(compiled) if record.refuses is not None else ""
        if not why:
            return ""
        reasons.append(f"emitter {record.name}: {why}")
    if not reasons:
        return ""
    return (f"no emitter writes this {compiled.schedule_name} kernel (`pipeline-core emit` "
            f"would refuse it): {'; '.join(reasons)}")
