"""The schedule protocol and the records through which plugins register targets and schedules.

A *schedule* is an object with two required methods, ``config()`` and
``build_body()``; everything else is optional (see ``ScheduleBase``).  A plugin
registers a ``ScheduleRecord`` whose ``factory`` turns a ``BuildContext``
(parsed parameters, the chosen target, ``-T``/``-c`` overrides) into such an object.
"""
from __future__ import annotations

import enum
import re
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import attrs

from pipeline_core.capabilities import Capabilities, check_capabilities
from pipeline_core.config import (PipelineConfig, ScheduleConfig, TargetProfile, apply_overrides,
                                  parse_bool)
from pipeline_core.errors import ConfigError, UnknownNameError
from pipeline_core.limits import PARAM_INT, Bound, parse_int
from pipeline_core.ops import Entry, Op

if TYPE_CHECKING:
    from pipeline_core.plan import AgentSpec
    from pipeline_core.launch import KernelLaunch
    from pipeline_core.edges import DepEdge
    from pipeline_core.program.program import Program


@runtime_checkable
class Schedule(Protocol):
    """What every schedule object has: ``name``, ``config()`` (a PipelineConfig) and
    ``build_body()`` (the annotated body in execution order).

    The optional part of the protocol, every method with its default, is declared once in
    :class:`ScheduleBase` (among them ``kernel_launch() -> KernelLaunch``: the kernel family
    and launch geometry, pipeline_core/launch.py).  A schedule object need not inherit it: the
    core reads every schedule through the plugin guard
    (``pipeline_core.plugin_guard.GuardedSchedule``), which answers a method the object lacks
    with :class:`ScheduleBase`'s default.
    """

    @property
    def name(self) -> str: ...

    def config(self) -> PipelineConfig: ...

    def build_body(self) -> Sequence[Op]: ...


#: the ``wait_source()`` answers (pipeline_core/sync/settle.py)
DERIVED, REFERENCE = "derived", "reference"


class ScheduleBase:
    """The schedule protocol, declared: what the core may ask a schedule, with the defaults.

    Subclass it (the defaults then come from here), or write any object with the required
    ``name``, ``config()`` and ``build_body()``: the plugin guard answers an optional method
    the object lacks with the default below (``OPTIONAL_MEMBERS``), so the core calls
    ``schedule.tag_names()`` and never looks methods up.  docs/guide/schedule-plugin.md,
    "The schedule protocol", is the user's page.

    Four methods are the schedule's own answer to an override hook, not a second mechanism:
    the core's built-in plugin (``pipeline_core.builtin_plugin``) answers
    ``pipeline_core_derive_edges``, ``pipeline_core_explicit_blocks``,
    ``pipeline_core_bootstrap_frags`` and ``pipeline_core_kernel_transforms`` with
    ``derive_edges``, ``build_explicit_blocks``, ``bootstrap_frags`` and ``transform_kernel``,
    so a plugin's answer wins over the schedule's exactly as it wins over a core default
    (pipeline_core/hookspecs.py, "How results combine").
    """

    #: the schedule's name (required)
    name: str
    #: the TargetProfile the schedule was built for; None: the schedule carries none (its
    #: waits and proof then use the document's target, pipeline_core/sync/resolve.py)
    target: "TargetProfile | None" = None

    def config(self) -> PipelineConfig:
        """The loop's PipelineConfig (required)."""
        raise NotImplementedError(f"{type(self).__qualname__}.config()")

    def build_body(self) -> Sequence[Op]:
        """The annotated loop body in execution order (required)."""
        raise NotImplementedError(f"{type(self).__qualname__}.build_body()")

    def schedule_config(self) -> ScheduleConfig:
        """The block program's knobs (``-c``); the reference's defaults."""
        return ScheduleConfig()

    def tag_names(self) -> Mapping[int, str]:
        """Names of the kernel tags, for output (over the target cost model's names)."""
        return {}

    def forced_knobs(self) -> Mapping[str, object]:
        """The ScheduleConfig knobs (``-c``) this schedule decides itself: knob name -> the
        value it always uses, or :data:`REFUSED` when ``-c KEY`` is an error because the
        schedule sets the knob from its own parameters.  Shown by ``pipeline-core knobs``; it
        describes what the factory enforces (the factory still refuses contradicting ``-c``
        values itself)."""
        return {}

    def epilogue_prefix(self) -> Sequence[Op]:
        """Ops emitted before the derived epilogue: a schedule's repair of a race the
        template leaves (4-wave's ``WAIT_VM(0), BARRIER``); empty: the epilogue as derived."""
        return ()

    def warps_per_group(self) -> int | None:
        """Warps running one group's stream; None: the target's (pipeline_core/execution.py;
        the proof executes at least 2 on a target with a per-thread channel such as cp.async)."""
        return None

    def wait_source(self) -> str:
        """``"derived"`` settles the emitted waits and barriers from the target-neutral
        derivation before the proof, and keeps redistributed global loads on their side of
        the reads of their region; ``"reference"`` keeps the block template's wait formulas
        (the reference's own schedules, for parity), pipeline_core/sync/settle.py."""
        return DERIVED

    def lowering(self) -> str:
        """The name of a registered lowering (pipeline_core/lowering/): the core's are "blocks"
        (the reference's block program), "ring" (the N-stage ring, pipeline_core/lowering/ring.py)
        and "agents" (docs/guide/agents.md)."""
        return "blocks"

    def agents(self) -> "AgentSpec":
        """The agents lowering's roles and rings (required with ``lowering() == "agents"``)."""
        raise ConfigError(f"schedule {self.name}", "lowering", "agents",
                          "a schedule with an agents() method returning its AgentSpec")

    def kernel_launch(self) -> "KernelLaunch | None":
        """The kernel family the body is and the launch geometry it built, declared once;
        emitters are keyed by (target, kernel family) and read that geometry
        (pipeline_core/launch.py).  None: no emitter writes this schedule."""
        return None

    # --- the schedule's answers to the override hooks --------------------------------------

    def derive_edges(self, body: Sequence[Op]) -> "Sequence[DepEdge] | None":
        """The body's dependency edges; None: the core's rule tables
        (``pipeline_core_derive_edges``)."""
        return None

    def build_explicit_blocks(self, body: Sequence[Op],
                              program: "Program") -> Sequence[Sequence[Op]]:
        """One op list per block of the double-buffer program (an empty list keeps that
        block's template); empty: every block keeps it (``pipeline_core_explicit_blocks``)."""
        return []

    def bootstrap_frags(self) -> Sequence[Op]:
        """Fragment loads at the prologue tail, with ``partial_prologue_drain``
        (``pipeline_core_bootstrap_frags``)."""
        return []

    def transform_kernel(self, kernel: Sequence[Entry], body: Sequence[Op]) -> Sequence[Entry]:
        """The single-buffer kernel entries rewritten; it runs before every plugin's kernel
        transform (``pipeline_core_kernel_transforms``).  Default: unchanged."""
        return kernel


#: The members of :class:`ScheduleBase` a schedule object may lack: the guard answers them
#: with the defaults (``name``, ``config`` and ``build_body`` are required; the guard refuses a
#: factory's answer without them, pipeline_core/plugin_guard.py).
OPTIONAL_MEMBERS = frozenset(n for n in vars(ScheduleBase) if not n.startswith("_")) - {
    "config", "build_body"}


class KnobRule(enum.Enum):
    """What ``forced_knobs()`` may say about a knob other than the value it forces."""

    REFUSED = "refused"  #: the schedule sets the knob itself; ``-c KEY=...`` is an error


#: ``forced_knobs()`` value: ``-c KEY`` is refused (the schedule sets the knob from its ``-p``).
REFUSED = KnobRule.REFUSED


_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")

#: A target family (``TargetRecord.family``): an S-stage ring (depth >= 2) of asynchronous
#: global->shared copies counted in commit groups, kernel tags 0-4 costed as LOAD_A, LOAD_B
#: (global loads), FRAG_A, FRAG_B (fragment loads) and MMA (one per K tile, a 1 x 1 MMA grid),
#: and a sync model the ring lowering derives waits from.  A schedule written against that
#: shape (examples/hello_schedule) declares the family and fits every such target
#: (docs/guide/schedule-plugin.md, "Targets a schedule is made for").
COPY_RING = "copy-ring"
#: A target family: the reference's 8-warp ping-pong double buffer (the block program): kernel
#: tags 0-5 costed as LOAD_A, LOAD_B (global loads), COMPUTE, MMA_LOAD_A, MMA_LOAD_B (fragment
#: loads) and MMA, a 2x2 MMA quadrant grid in 2 partitions over 2 shared-memory stages, two
#: staggered warp groups (``PipelineConfig.ping_pong_double_buffer``, the loop every target
#: of the family starts from), and a sync model with a ``BlockBinding``.  ``pingpong`` declares it.
PING_PONG = "ping-pong"


def _check_name(inst: Any, attribute: attrs.Attribute[str], value: Any) -> None:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ConfigError(type(inst).__name__, attribute.name, value,
                          "a lower-case name of letters, digits, '-', '_' or '.'")


#: a parameter's value: of its ``Param.type`` (int, bool or str), or None for a default left unset
ParamValue = int | bool | str | None


@attrs.frozen
class Param:
    """One parameter a target or schedule accepts (``-T``/``-p KEY=VALUE``).

    An int parameter is refused outside ``bound`` (or ``choices``) before any work starts;
    without a declared bound it gets :data:`pipeline_core.limits.PARAM_INT`.  Declare here
    the whole range the value may take on its own: ``pipeline-core schedules`` / ``targets``
    list it from this record, so a factory that refused more would make the listing lie
    (``tests/test_listed_ranges.py`` checks every installed one).  The factory checks only
    what depends on other values (a multiple of another parameter), naming them.
    """

    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    type: type = attrs.field(validator=attrs.validators.in_([int, bool, str]))
    default: Any = None
    help: str = ""
    choices: tuple = ()
    bound: Bound | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(Bound)))

    @property
    def int_bound(self) -> Bound:
        """The range an int value must lie in (the declared bound, else the core's default)."""
        return self.bound or PARAM_INT

    def parse(self, owner: str, text: str, *, flag: str = "") -> Any:
        """``text`` as typed after ``flag KEY=``, parsed and checked; ConfigError names both."""
        try:
            if self.type is bool:
                value: Any = parse_bool(text)
            elif self.type is int:
                value = parse_int(text)
            else:
                value = text.strip()
        except ValueError as exc:
            allowed = f"{exc}" + (f"; expected {self.int_bound.allowed()}" if self.type is int else "")
            raise ConfigError(owner, self.name, text, allowed, flag=flag) from None
        # outside the bound or the choices: the error quotes what the listing says is allowed
        # (the choices where there are some: a negative int is outside the core's default bound
        # before it is outside a parameter's choices)
        if self.type is int and not self.int_bound.contains(value):
            raise ConfigError(owner, self.name, text.strip(), self.range_text(), flag=flag)
        if self.choices and value not in self.choices:
            raise ConfigError(owner, self.name, value, self.range_text(), flag=flag)
        return value

    @property
    def type_name(self) -> str:
        return self.type.__name__

    def range_text(self) -> str:
        """The allowed values, for listings (empty for free-form strings)."""
        if self.choices:
            return "one of " + ", ".join(map(str, self.choices))
        if self.type is int:
            return self.int_bound.allowed()
        return "true or false" if self.type is bool else ""


def _params(value: Iterable[Param]) -> tuple[Param, ...]:
    return tuple(value)


_PARAMS_VALIDATOR = attrs.validators.deep_iterable(attrs.validators.instance_of(Param))


def _names(value: Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


_NAMES_VALIDATOR = attrs.validators.deep_iterable(_check_name)


def _check_optional_name(inst: Any, attribute: attrs.Attribute[str], value: Any) -> None:
    if value != "":
        _check_name(inst, attribute, value)


@attrs.frozen
class TargetRecord:
    """A registered target: ``factory(**params)`` returns a TargetProfile."""

    name: str = attrs.field(validator=_check_name)
    description: str
    factory: Callable[..., TargetProfile] = attrs.field(validator=attrs.validators.is_callable())
    params: tuple[Param, ...] = attrs.field(default=(), converter=_params, validator=_PARAMS_VALIDATOR)
    provider: str = ""  #: distribution (filled in by the plugin host)
    #: the family of targets this one belongs to ("" : none): a name schedules written for
    #: any target of that shape declare in ``ScheduleRecord.families`` (docs/guide/schedule-plugin.md,
    #: "Targets a schedule is made for")
    family: str = attrs.field(default="", kw_only=True, validator=_check_optional_name)
    #: what the target offers (sync channels, instructions, copy kinds): every schedule whose
    #: ``requires`` it covers fits it (pipeline_core/capabilities.py); None: nothing declared
    offers: Capabilities | None = attrs.field(default=None, kw_only=True,
                                              validator=check_capabilities)


@attrs.frozen
class ScheduleRecord:
    """A registered schedule: ``factory(ctx: BuildContext)`` returns a Schedule.

    ``requires``, ``families`` and ``targets`` say which targets it is made for: every command
    refuses any other (docs/guide/schedule-plugin.md, "Targets a schedule is made for"), since a
    factory that builds on a foreign target yields a kernel proven under the wrong model.  A
    target fits when its ``offers`` cover ``requires`` (the capability contract) and, where
    ``targets`` or ``families`` are declared, it is named there or of a family listed (a
    schedule that still names its targets keeps working: the names narrow the contract).
    """

    name: str = attrs.field(validator=_check_name)
    description: str
    factory: Callable[["BuildContext"], Schedule] = attrs.field(validator=attrs.validators.is_callable())
    params: tuple[Param, ...] = attrs.field(default=(), converter=_params, validator=_PARAMS_VALIDATOR)
    default_target: str = ""
    provider: str = ""
    #: the targets the schedule is made for, by name; with ``families``, what ``--target`` may
    #: name (neither declared: any target, the factory refusing what it cannot build)
    targets: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=_names,
                                           validator=_NAMES_VALIDATOR)
    #: target families (``TargetRecord.family``) the schedule is made for: every target of one
    #: fits, whichever plugin registers it
    families: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=_names,
                                            validator=_NAMES_VALIDATOR)
    #: the capability contract (pipeline_core/capabilities.py): every target whose ``offers``
    #: cover it fits, whichever plugin registers it (``targets`` / ``families``, when given,
    #: narrow it to those named)
    requires: Capabilities | None = attrs.field(default=None, kw_only=True,
                                                validator=check_capabilities)

    def __attrs_post_init__(self) -> None:
        if (self.default_target and self.targets and not self.families
                and self.default_target not in self.targets):
            raise ConfigError(f"schedule {self.name}", "default_target", self.default_target,
                              f"one of the targets it is made for ({', '.join(self.targets)})")

    @property
    def declares_targets(self) -> bool:
        """Whether the schedule says which targets it is made for (else it takes any)."""
        return bool(self.targets or self.families or self.requires is not None)

    def fits(self, target: TargetRecord) -> bool:
        """Whether ``target`` is one the schedule is made for: its ``offers`` cover
        ``requires`` (when declared), and it is named in ``targets`` or of a family in
        ``families`` (when either is declared: with a contract they narrow it); a schedule that
        declares none of the three takes every target."""
        if self.requires is not None and not self.requires.covered_by(target.offers):
            return False
        if not (self.targets or self.families):
            return True
        return target.name in self.targets or (bool(target.family)
                                               and target.family in self.families)

    def lacks(self, target: TargetRecord) -> list[str]:
        """The capabilities of ``requires`` that ``target`` does not offer ("instruction
        wgmma", ...); empty when it offers them all or the schedule declares no contract."""
        return self.requires.missing(target.offers) if self.requires is not None else []

    def made_for(self) -> str:
        """The declaration in words, for refusals and listings ("targets h100, toy-gpu and
        family copy-ring", "target family copy-ring offering instruction mma.sync"); "any
        target" when the schedule declares none."""
        parts = []
        if self.targets:
            parts.append(f"target{'s' if len(self.targets) > 1 else ''} {', '.join(self.targets)}")
        if self.families:
            parts.append(f"target famil{'ies' if len(self.families) > 1 else 'y'} "
                         f"{', '.join(self.families)}")
        offering = f"offering {self.requires.words()}" if self.requires is not None else ""
        if offering:
            return f"{' and '.join(parts)} {offering}" if parts else f"targets {offering}"
        return " and ".join(parts) or "any target"


def fitting_targets(record: ScheduleRecord, targets: Mapping[str, TargetRecord]) -> list[str]:
    """The names of the registered ``targets`` that ``record`` is made for, sorted."""
    return sorted(name for name, target in targets.items() if record.fits(target))


@attrs.frozen
class StrategyRecord:
    """A registered scheduling strategy (see ``pipeline_core.scheduling``)."""

    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    description: str
    function: Callable = attrs.field(validator=attrs.validators.is_callable())
    provider: str = ""

    @name.validator
    def _non_empty(self, attribute: "attrs.Attribute[str]", value: str) -> None:
        if not value.strip():
            raise ConfigError("StrategyRecord", "name", value, "a non-empty strategy name")


@attrs.frozen
class KernelTransform:
    """A rewrite of the kernel entries, applied after the schedule's own transform.

    Transforms run in ``(order, name)`` order, each receiving the previous result.
    """

    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    function: Callable = attrs.field(validator=attrs.validators.is_callable())
    order: int = attrs.field(default=0, validator=attrs.validators.instance_of(int))


def parse_params(owner: str, params: Sequence[Param], given: Mapping[str, str], *,
                 flag: str = "", elsewhere: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Defaults overlaid with parsed ``given`` strings; unknown keys raise with a suggestion.

    ``flag`` (``-p`` / ``-T``) is the option the strings came from, named in errors.
    ``elsewhere`` maps keys another option takes to that option's ``FLAG of OWNER`` (the
    schedule's ``-p`` beside the target's ``-T``): a key typed after the wrong flag is named
    with the flag that takes it, since a close spelling would not find it.
    """
    by_name = {p.name: p for p in params}
    out = {p.name: p.default for p in params}
    for key, text in given.items():
        if key not in by_name:
            kind = f"{flag} parameter of {owner}" if flag else f"parameter of {owner}"
            other = (elsewhere or {}).get(key)
            hint = (f"{key} is a {other}: pass {other.split(' ', 1)[0]} {key}={text}."
                    if other else "")
            raise UnknownNameError(kind, key, sorted(by_name), hint,
                                   plural=f"parameters of {owner}")
        out[key] = by_name[key].parse(owner, text, flag=flag)
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
    #: the caller asked for exactly the reference's output (``--allow-unsafe``): repairs a
    #: schedule makes against the reference default to off (docs/guide/checker.md, "Compile proves what it
    #: emits")
    reference: bool = False

    def make_target(self, **derived: Any) -> TargetProfile:
        """Build the target: ``derived`` defaults (from the schedule) under the user's ``-T``."""
        names = {p.name for p in self.target.params}
        values = parse_target_args(self.target, self.target_args)
        for key, value in derived.items():
            if key in names and key not in self.target_args:
                values[key] = value
        return self.target.factory(**values)

    def schedule_config(self, base: ScheduleConfig | None = None) -> ScheduleConfig:
        """``base`` (the schedule's default) with the user's ``-c`` overrides applied."""
        return apply_overrides(base or ScheduleConfig(), self.config_overrides,
                               what="ScheduleConfig", flag="-c")

    def given(self, name: str) -> bool:
        return name in self.explicit_params


def parse_target_args(target: TargetRecord, target_args: Mapping[str, str], *,
                      schedule: ScheduleRecord | None = None) -> dict[str, Any]:
    """The target's parameters with the user's ``-T`` strings parsed and checked (a key that
    is ``schedule``'s ``-p`` parameter is named as such)."""
    elsewhere = ({p.name: f"-p parameter of schedule {schedule.name}" for p in schedule.params}
                 if schedule is not None else None)
    return parse_params(f"target {target.name}", target.params, target_args, flag="-T",
                        elsewhere=elsewhere)
