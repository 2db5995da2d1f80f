"""The schedule protocol and the records through which plugins register targets and schedules.

A *schedule* is an object with two required methods, ``config()`` and
``build_body()``; everything else is optional (see ``Schedule``).  A plugin
registers a ``ScheduleRecord`` whose ``factory`` turns a ``BuildContext``
(parsed parameters, the chosen target, ``-T``/``-c`` overrides) into such an object.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import attrs

from pipeline_core.config import (PipelineConfig, ScheduleConfig, TargetProfile, apply_overrides,
                                  parse_bool, parse_int)
from pipeline_core.errors import ConfigError, UnknownNameError
from pipeline_core.ops import Op


@runtime_checkable
class Schedule(Protocol):
    """What the compiler needs from a schedule.

    Required: ``config()`` (a PipelineConfig) and ``build_body()`` (the annotated
    body in execution order).  Optional methods, looked up with ``getattr``:

    * ``schedule_config() -> ScheduleConfig`` (default: ``ScheduleConfig()``);
    * ``derive_edges(body) -> list[DepEdge]`` (default: the rule tables);
    * ``transform_kernel(kernel, body) -> entries`` (single-buffer only);
    * ``build_explicit_blocks(body, program) -> list[list[Op]]`` (double-buffer only);
    * ``bootstrap_frags() -> list[Op]`` (used with partial_prologue_drain);
    * ``tag_names() -> dict[int, str]`` (names of the kernel tags, for output).
    """

    @property
    def name(self) -> str: ...

    def config(self) -> PipelineConfig: ...

    def build_body(self) -> Sequence[Op]: ...


_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


def _check_name(inst: Any, attribute: attrs.Attribute[str], value: Any) -> None:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ConfigError(type(inst).__name__, attribute.name, value,
                          "a lower-case name of letters, digits, '-', '_' or '.'")


@attrs.frozen
class Param:
    """One parameter a target or schedule accepts (``-T``/``-p KEY=VALUE``)."""

    name: str
    type: type = attrs.field(validator=attrs.validators.in_([int, bool, str]))
    default: Any = None
    help: str = ""
    choices: tuple = ()

    def parse(self, owner: str, text: str) -> Any:
        try:
            if self.type is bool:
                value: Any = parse_bool(text)
            elif self.type is int:
                value = parse_int(text)
            else:
                value = text.strip()
        except ValueError as exc:
            raise ConfigError(owner, self.name, text, str(exc)) from None
        if self.choices and value not in self.choices:
            raise ConfigError(owner, self.name, value,
                              f"one of {', '.join(map(str, self.choices))}")
        return value

    @property
    def type_name(self) -> str:
        return self.type.__name__


def _params(value: Iterable[Param]) -> tuple[Param, ...]:
    return tuple(value)


@attrs.frozen
class TargetRecord:
    """A registered target: ``factory(**params)`` returns a TargetProfile."""

    name: str = attrs.field(validator=_check_name)
    description: str
    factory: Callable[..., TargetProfile]
    params: tuple[Param, ...] = attrs.field(default=(), converter=_params)
    provider: str = ""  #: distribution (filled in by the plugin host)


@attrs.frozen
class ScheduleRecord:
    """A registered schedule: ``factory(ctx: BuildContext)`` returns a Schedule."""

    name: str = attrs.field(validator=_check_name)
    description: str
    factory: Callable[["BuildContext"], Schedule]
    params: tuple[Param, ...] = attrs.field(default=(), converter=_params)
    default_target: str = ""
    provider: str = ""


@attrs.frozen
class StrategyRecord:
    """A registered scheduling strategy (see ``pipeline_core.scheduling``)."""

    name: str
    description: str
    function: Callable
    provider: str = ""


@attrs.frozen
class KernelTransform:
    """A rewrite of the kernel entries, applied after the schedule's own transform.

    Transforms run in ``(order, name)`` order, each receiving the previous result.
    """

    name: str
    function: Callable
    order: int = 0


def parse_params(owner: str, params: Sequence[Param], given: Mapping[str, str]) -> dict[str, Any]:
    """Defaults overlaid with parsed ``given`` strings; unknown keys raise with a suggestion."""
    by_name = {p.name: p for p in params}
    out = {p.name: p.default for p in params}
    for key, text in given.items():
        if key not in by_name:
            raise UnknownNameError(f"parameter of {owner}", key, sorted(by_name))
        out[key] = by_name[key].parse(owner, text)
    return out


@attrs.frozen
class BuildContext:
    """What a schedule factory receives: its parameters and the target to build on.

    ``params`` holds every declared parameter (defaults filled in);
    ``explicit_params`` names those the user gave.  ``target_args`` are the
    user's ``-T`` strings and ``config_overrides`` the ``-c`` strings.
    """

    schedule: ScheduleRecord
    params: Mapping[str, Any]
    explicit_params: frozenset
    target: TargetRecord
    target_args: Mapping[str, str] = attrs.field(factory=dict)
    config_overrides: Mapping[str, str] = attrs.field(factory=dict)

    def make_target(self, **derived: Any) -> TargetProfile:
        """Build the target: ``derived`` defaults (from the schedule) under the user's ``-T``."""
        names = {p.name for p in self.target.params}
        values = parse_params(f"target {self.target.name}", self.target.params, self.target_args)
        for key, value in derived.items():
            if key in names and key not in self.target_args:
                values[key] = value
        return self.target.factory(**values)

    def schedule_config(self, base: ScheduleConfig | None = None) -> ScheduleConfig:
        """``base`` (the schedule's default) with the user's ``-c`` overrides applied."""
        return apply_overrides(base or ScheduleConfig(), self.config_overrides,
                               what="ScheduleConfig")

    def given(self, name: str) -> bool:
        return name in self.explicit_params
