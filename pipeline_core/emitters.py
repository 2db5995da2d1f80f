"""Emitters: plugins that turn a compiled schedule into source code for a kernel.

An emitter is registered beside targets and schedules (hook ``pipeline_core_register_emitters``)
and called by ``pipeline-core emit``.  The core names no vendor: what an emitter writes (CUDA C++,
HIP, ...) and which targets it serves is the plugin's business.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from pipeline_core.errors import ConfigError
from pipeline_core.launch import KernelLaunch
from pipeline_core.schedule import Param, parse_params

if TYPE_CHECKING:
    from pipeline_core.plugins import PluginHost


def _check_name(instance: Any, attribute: Any, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("EmitterRecord", "name", value, "a non-empty emitter name")


def _names(values: Any) -> tuple[str, ...]:
    return tuple(values)


def _options(values: Iterable[Param] | None) -> tuple[Param, ...] | None:
    return None if values is None else tuple(values)


def _check_options(instance: Any, attribute: Any, value: tuple[Any, ...] | None) -> None:
    if value is not None and not all(isinstance(p, Param) for p in value):
        raise ConfigError("EmitterRecord", "options", value, "None or a tuple of Param records")


@attrs.frozen(kw_only=False)
class EmitterRecord:
    """``emit(compiled, **options) -> str`` writes the source of one kernel.

    An emitter is keyed by (target, kernel family), not by schedule name: ``targets`` names the
    targets it serves (empty: any), ``kernel_families`` the kernel families it writes (empty:
    any), each the ``kernel_family`` a schedule declares once in its ``kernel_launch()``
    (:class:`~pipeline_core.launch.KernelLaunch`), so ``pipeline-core emit`` picks the one
    emitter that serves both without ``--emitter``.  ``options`` declares the ``-O KEY=VALUE`` options it takes, each a
    :class:`~pipeline_core.schedule.Param` with its type, default and bound, as a schedule's
    ``-p``: the core parses and checks them before ``emit`` runs (an unknown key or a value out
    of its bound exits 2 naming ``-O KEY``) and passes every declared option, typed, with its
    default where the user gave none.  ``options=None`` (an emitter that declares nothing) gets
    the ``-O`` strings as typed and checks them itself.
    """

    name: str = attrs.field(validator=_check_name)
    description: str = attrs.field(validator=attrs.validators.instance_of(str))
    targets: tuple[str, ...] = attrs.field(converter=_names)
    emit: Callable[..., str] = attrs.field(validator=attrs.validators.is_callable())
    provider: str = ""  #: distribution (filled in by the plugin host)
    kernel_families: tuple[str, ...] = attrs.field(default=(), converter=_names, kw_only=True)
    options: tuple[Param, ...] | None = attrs.field(default=None, converter=_options,
                                                    validator=_check_options, kw_only=True)

    def parse_options(self, given: Mapping[str, str]) -> dict[str, Any]:
        """The keyword arguments of ``emit`` for the user's ``-O`` strings (see the class)."""
        if self.options is None:
            return dict(given)
        return parse_params(f"emitter {self.name}", self.options, given, flag="-O")

    def serves(self, target: str) -> bool:
        return not self.targets or target in self.targets

    def writes(self, launch: KernelLaunch | None) -> bool:
        """Whether it writes the kernel a compiled schedule declared (``CompiledSchedule.launch``;
        None: the schedule declared no kernel family, which only an any-family emitter takes)."""
        return not self.kernel_families or (launch is not None
                                            and launch.kernel_family in self.kernel_families)


def targets_with_emitter(emitters: Iterable[EmitterRecord], launch: KernelLaunch | None,
                         fits: Callable[[str], bool]) -> list[str]:
    """The target names some emitter of ``emitters`` serves for the kernel ``launch`` declares,
    among those ``fits`` accepts (the targets the schedule is made for), sorted: what
    ``pipeline-core emit`` suggests when no emitter serves the target it compiled for.  An
    emitter that serves any target adds none (it would have served that one)."""
    return sorted({target for record in emitters if record.writes(launch)
                   for target in record.targets if fits(target)})


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
            if not record.serves(target):
                continue
            try:
                built, _, _ = build_named(name, target=target, host=host)
            except PipelineError:
                continue
            if record.writes(built.kernel_launch()):
                written.append(name)
                break
    return written

