"""The records a compile leaves: :class:`CompiledSchedule` and the proof stage's :class:`Proof`.

Why a module of their own: the compiler builds them, but the document, the proof, the timing
model, the views and the emitters all read them.  Kept here, on a low floor that imports only
records, every reader can name their real types without importing the compiler (the import
cycle that once made four of the fields ``Any``; docs/guide/architecture.md, "Architecture").
"""
from __future__ import annotations

from typing import Any, Mapping

import attrs

from pipeline_core.check.verdict import Verdict
from pipeline_core.config import PipelineConfig, ScheduleConfig, TargetProfile
from pipeline_core.edges import DepEdge
from pipeline_core.execution import ExecutionModel
from pipeline_core.launch import KernelLaunch
from pipeline_core.ops import Entry, Op, Phase
from pipeline_core.plan import Plan
from pipeline_core.schedule import ParamValue


@attrs.frozen(kw_only=True)
class Proof:
    """What the proof stage found: the verdict, or why there is none."""

    verdict: Verdict | None
    unprovable: str = ""  #: why no verdict could be computed (no sync model)

    @property
    def safe(self) -> bool:
        return self.verdict is not None and self.verdict.safe

    def hazards(self) -> list[dict[str, Any]]:
        """The document's ``hazards`` list: one record per distinct violation."""
        if self.verdict is None:
            return [{"kind": "UNPROVEN", "message": self.unprovable}]
        return [v.to_dict() for v in self.verdict.distinct()]


@attrs.frozen(kw_only=True)
class CompiledSchedule:
    """A compile's result: the schedule's facts, the :class:`~pipeline_core.plan.Plan` its
    lowering produced, and the proof of that plan.

    The facts are what the schedule declared (its body, edges, configuration, target and
    parameters); everything the lowering decided is in ``plan``, which every reader takes
    whatever lowering ran (docs/guide/concepts.md, "The Plan").  ``prologue``, ``kernel``,
    ``epilogue``, ``kernel_deps``, ``warp_stagger_index``, ``execution`` and ``launch`` read
    the plan.
    """

    schedule_name: str
    target_name: str
    config: PipelineConfig
    schedule_config: ScheduleConfig
    body: tuple[Op, ...]
    edges: tuple[DepEdge, ...]
    tag_names: Mapping[int, str] = attrs.field(factory=dict)
    params: Mapping[str, ParamValue] = attrs.field(factory=dict)
    #: the schedule's TargetProfile (its sync model and clock), when the schedule carries one
    target_profile: TargetProfile | None = None
    #: who wrote the program's explicit op lists (a plugin or a schedule method); "" for none
    explicit_source: str = ""
    plan: Plan
    #: the proof stage's result (:class:`Proof`, computed by pipeline_core.proof); None when
    #: the stage did not run
    proof: Proof | None = None

    @property
    def hazards(self) -> list[dict[str, Any]]:
        """The hazards of a schedule emitted with ``allow_unsafe`` (empty when proven safe)."""
        if self.proof is None or self.proof.safe:
            return []
        return self.proof.hazards()

    @property
    def prologue(self) -> tuple[Entry, ...]:
        return self.plan.entries(Phase.PROLOGUE)

    @property
    def kernel(self) -> tuple[Entry, ...]:
        return self.plan.entries(Phase.KERNEL)

    @property
    def epilogue(self) -> tuple[Entry, ...]:
        return self.plan.entries(Phase.EPILOGUE)

    @property
    def kernel_deps(self) -> tuple[DepEdge, ...]:
        return self.plan.kernel_deps

    @property
    def warp_stagger_index(self) -> int:
        return self.plan.stagger_index

    @property
    def execution(self) -> ExecutionModel | None:
        return self.plan.execution

    @property
    def launch(self) -> KernelLaunch | None:
        return self.plan.launch

    @property
    def order(self) -> tuple[int, ...]:
        """The body order the lowering placed the ops in."""
        return self.plan.order if self.plan.order is not None else tuple(range(len(self.body)))

    def phases(self) -> dict[Phase, tuple[Entry, ...]]:
        return {Phase.PROLOGUE: self.prologue, Phase.KERNEL: self.kernel, Phase.EPILOGUE: self.epilogue}

    def with_entries(self, **lists: "tuple[Entry, ...] | int") -> "CompiledSchedule":
        """This compile with some phase lists (or ``stagger_index``) replaced and its proof
        dropped: what a repair or a mutation of a lockstep plan makes."""
        return attrs.evolve(self, plan=self.plan.with_entries(**lists), proof=None)
