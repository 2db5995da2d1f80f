"""Emitters: plugins that turn a compiled schedule into source code for a kernel.

An emitter is registered beside targets and schedules (hook ``pipeline_core_register_emitters``)
and called by ``pipeline-core emit``.  The core names no vendor: what an emitter writes (CUDA C++,
HIP, ...) and which targets it serves is the plugin's business.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from pipeline_core.errors import ConfigError


def _check_name(instance: Any, attribute: Any, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("EmitterRecord", "name", value, "a non-empty emitter name")


def _names(values: Any) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen(kw_only=False)
class EmitterRecord:
    """``emit(compiled, **options) -> str`` writes the source of one kernel.

    ``targets`` names the targets it serves (empty: any), ``schedules`` the schedules it can
    write (empty: any), so ``pipeline-core emit`` picks the one emitter that serves both without
    ``--emitter``; ``-O KEY=VALUE`` options reach ``emit`` as strings.
    """

    name: str = attrs.field(validator=_check_name)
    description: str = attrs.field(validator=attrs.validators.instance_of(str))
    targets: tuple[str, ...] = attrs.field(converter=_names)
    emit: Callable[..., str] = attrs.field(validator=attrs.validators.is_callable())
    provider: str = ""  #: distribution (filled in by the plugin host)
    schedules: tuple[str, ...] = attrs.field(default=(), converter=_names, kw_only=True)

    def serves(self, target: str) -> bool:
        return not self.targets or target in self.targets

    def writes(self, schedule: str) -> bool:
        return not self.schedules or schedule in self.schedules
