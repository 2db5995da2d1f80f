"""Lowerings: how an ordered loop body becomes a :class:`~pipeline_core.plan.Plan`.

A lowering is registered by name through the ``pipeline_core_register_lowerings`` hook
(:class:`LoweringRecord`); a schedule picks one with its ``lowering()`` method.  The core
registers three (``pipeline_core.builtin_plugin``):

* ``blocks`` (:mod:`.blocks`): the reference's block program (``pipeline_core.program`` with
  ``phases``; the AMD schedules use it), its waits from the reference's formulas or derived;
* ``ring`` (:mod:`.ring`): an N-stage ring of shared-memory stages whose waits come from the
  target-neutral derivation (:mod:`pipeline_core.sync.derive`);
* ``agents`` (:mod:`.agents`): one program per warp role, meeting on mbarrier rings
  (docs/guide/agents.md).

Each returns a Plan and nothing else; every reader takes the Plan whichever lowering built it.
This package is the one place that knows which lowering is which (docs/guide/concepts.md,
"The Plan").
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from pipeline_core.config import PipelineConfig, ScheduleConfig, TargetProfile
from pipeline_core.edges import DepEdge
from pipeline_core.errors import ConfigError
from pipeline_core.execution import fewest_agents
from pipeline_core.ops import Op
from pipeline_core.plan import Plan

if TYPE_CHECKING:
    from pipeline_core.compiled import CompiledSchedule, Proof
    from pipeline_core.program.program import Program
    from pipeline_core.schedule import KernelTransform, ScheduleBase
    from pipeline_core.scheduling.registry import Strategy
    from pipeline_core.sync.model import SyncModel


class LoweringHost(Protocol):
    """What a lowering asks of the plugin host (``pipeline_core.plugins.PluginHost`` is one):
    the registered ordering strategies and the override hooks' answers."""

    def get_strategy(self, name: str) -> Strategy: ...

    def explicit_blocks_with_source(self, schedule: ScheduleBase, body: tuple[Op, ...],
                                    program: Program) -> tuple[str, Sequence[Sequence[Op]]]: ...

    def bootstrap_frags(self, schedule: ScheduleBase) -> Sequence[Op]: ...

    def kernel_transforms(self, schedule: ScheduleBase, target: str,
                          config: PipelineConfig) -> list[KernelTransform]: ...


@attrs.frozen(kw_only=True)
class LoweringInput:
    """What a lowering is given: the schedule (its hooks run under the plugin guard), its body
    and edges, the configuration, the target (None: the schedule names none) and the host that
    resolves plugin overrides."""

    schedule: ScheduleBase
    body: tuple[Op, ...]
    edges: tuple[DepEdge, ...]
    config: PipelineConfig
    schedule_config: ScheduleConfig
    target: TargetProfile | None
    target_name: str
    tag_names: Mapping[int, str]
    host: LoweringHost
    #: the sync model the compile is proven under (the target's, found by name when the
    #: schedule carries no profile); None: unknown, and the proof will say so
    sync: SyncModel | None = None
    #: the proof stage (pipeline_core/proof.py with this host), for a lowering whose repair
    #: loop consults it (``LoweringRecord.finish``)
    prove: Callable[[CompiledSchedule], Proof] | None = None

    @property
    def owner(self) -> str:
        return f"schedule {self.schedule.name}"


def _name(inst: object, attribute: object, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("LoweringRecord", "name", value, "a non-empty lowering name")


@attrs.frozen
class LoweringRecord:
    """A registered lowering.

    ``lower`` runs in the compiler after the ordering stage and returns the Plan.  ``knobless``
    says why the lowering reads no ``ScheduleConfig`` knob ("" when it reads them): ``-c`` on
    its schedules is refused with it rather than silently ignored.  ``finish``, when given,
    runs on the assembled compile before its proof (the block program's wait repair loop,
    pipeline_core/sync/settle.py) and may attach the proof it computed.  ``compute_channels``:
    the lowering binds a compute op's ``channel`` (the agents lowering: the ring whose sync
    effect the compute has); where it does not, compile refuses a compute's ``channel=``
    rather than ignore it (the operands a compute reads are its ``reads``).
    """

    name: str = attrs.field(validator=_name)
    description: str
    lower: Callable[[LoweringInput], Plan] = attrs.field(validator=attrs.validators.is_callable())
    knobless: str = ""
    compute_channels: bool = attrs.field(default=False, kw_only=True)
    finish: Callable[[LoweringInput, CompiledSchedule], CompiledSchedule] | None = None
    provider: str = ""


def declared_warps_per_group(schedule: ScheduleBase, target: TargetProfile | None = None) -> int:
    """Warps per group a schedule (``warps_per_group()``) or its target declares; 1 if neither,
    and at least :func:`fewest_agents` of the target's sync model."""
    value = schedule.warps_per_group()
    if value is None and target is not None:
        value = target.warps_per_group
    if value is None:
        value = 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"schedule {schedule.name}", "warps_per_group", value, "an integer >= 1")
    return max(value, fewest_agents(target.sync if target is not None else None))


def require_sync(ctx: LoweringInput, derives: str) -> tuple[TargetProfile, "SyncModel"]:
    """The target and its sync model, refused unless it declares one: the ring and agents
    lowerings derive their sync from it."""
    target = ctx.target
    name = ctx.schedule.lowering()
    if target is None or target.sync is None:
        raise ConfigError(ctx.owner, "lowering", name,
                          f"a target with a sync model (TargetProfile.sync): the {name} "
                          f"lowering derives {derives} from it", flag="--target")
    return target, target.sync


__all__ = ["LoweringHost", "LoweringInput", "LoweringRecord", "declared_warps_per_group",
           "require_sync"]
