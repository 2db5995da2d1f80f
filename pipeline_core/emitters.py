"""Emitters: plugins that turn a compiled schedule into source code for a kernel.

An emitter is registered beside targets and schedules (hook ``pipeline_core_register_emitters``)
and called by ``pipeline-core emit``.  The core names no vendor: what an emitter writes (CUDA C++,
HIP, ...) and which targets it serves is the plugin's business.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from pipeline_core.capabilities import Capabilities, check_capabilities
from pipeline_core.errors import ConfigError
from pipeline_core.launch import KernelLaunch
from pipeline_core.schedule import Param, TargetRecord, parse_params


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


def _check_refuses(instance: Any, attribute: Any, value: Any) -> None:
    if value is not None and not callable(value):
        raise ConfigError("EmitterRecord", "refuses", value,
                          "None or a function (compiled) -> str: why the emitter cannot write "
                          "it, '' when it can")


@attrs.frozen(kw_only=False)
class EmitterRecord:
    """``emit(compiled, **options) -> str`` writes the source of one kernel.

    An emitter is keyed by (target, kernel family), not by schedule name: ``targets`` names the
    targets it serves (empty: any), or ``requires`` the capabilities it serves (every target
    whose ``TargetRecord.offers`` cover them, whichever plugin registers it; it then writes for
    the target's ``TargetProfile.arch``, pipeline_core/capabilities.py), ``kernel_families`` the kernel families it writes (empty:
    any), each the ``kernel_family`` a schedule declares once in its ``kernel_launch()``
    (:class:`~pipeline_core.launch.KernelLaunch`), so ``pipeline-core emit`` picks the one
    emitter that serves both without ``--emitter``.  ``options`` declares the ``-O KEY=VALUE`` options it takes, each a
    :class:`~pipeline_core.schedule.Param` with its type, default and bound, as a schedule's
    ``-p``: the core parses and checks them before ``emit`` runs (an unknown key or a value out
    of its bound exits 2 naming ``-O KEY``) and passes every declared option, typed, with its
    default where the user gave none.  ``options=None`` (an emitter that declares nothing) gets
    the ``-O`` strings as typed and checks them itself.  ``refuses(compiled) -> str`` says why
    the emitter cannot write a compiled schedule of its families ("" when it can): the one
    check its ``emit`` refuses with, also asked by ``pipeline-core compile``, so that a
    geometry a schedule proves but no emitter of its family writes is said at compile, not
    first at ``emit`` (``pipeline_core.emit_choice.unwritten``).
    """

    name: str = attrs.field(validator=_check_name)
    description: str = attrs.field(validator=attrs.validators.instance_of(str))
    targets: tuple[str, ...] = attrs.field(converter=_names)
    emit: Callable[..., str] = attrs.field(validator=attrs.validators.is_callable())
    provider: str = ""  #: distribution (filled in by the plugin host)
    kernel_families: tuple[str, ...] = attrs.field(default=(), converter=_names, kw_only=True)
    options: tuple[Param, ...] | None = attrs.field(default=None, converter=_options,
                                                    validator=_check_options, kw_only=True)
    refuses: Callable[[Any], str] | None = attrs.field(default=None, kw_only=True,
                                                       validator=_check_refuses)
    requires: Capabilities | None = attrs.field(default=None, kw_only=True,
                                                validator=check_capabilities)

    def parse_options(self, given: Mapping[str, str]) -> dict[str, Any]:
        """The keyword arguments of ``emit`` for the user's ``-O`` strings (see the class)."""
        if self.options is None:
            return dict(given)
        return parse_params(f"emitter {self.name}", self.options, given, flag="-O")

    def serves(self, target: TargetRecord) -> bool:
        """Whether it writes kernels for ``target``: offering what ``requires`` names (when
        declared) and named in ``targets`` (when any is named: they narrow the contract)."""
        if self.requires is not None and not self.requires.covered_by(target.offers):
            return False
        return not self.targets or target.name in self.targets

    def serves_words(self) -> str:
        """The targets it serves, in words (listings and ``emit --emitter`` refusals)."""
        names = ", ".join(self.targets)
        if self.requires is None:
            return names or "any"
        return f"{names or 'targets'} offering {self.requires.words()}"

    def writes(self, launch: KernelLaunch | None) -> bool:
        """Whether it writes the kernel a compiled schedule declared (``CompiledSchedule.launch``;
        None: the schedule declared no kernel family, which only an any-family emitter takes)."""
        return not self.kernel_families or (launch is not None
                                            and launch.kernel_family in self.kernel_families)
