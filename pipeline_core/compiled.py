"""The records a compile leaves: :class:`CompiledSchedule` and the proof stage's :class:`Proof`.

Why a module of their own: the compiler builds them, but the document, the proof, the timing
model, the views and the emitters all read them.  Kept here, on a low floor that imports only
records, every reader can name their real types without importing the compiler (the import
cycle that once made four of the fields ``Any``; README.md, "Architecture").
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import attrs

from pipeline_core.agents.model import AgentPlan
from pipeline_core.check.verdict import Verdict
from pipeline_core.config import PipelineConfig, ScheduleConfig, TargetProfile
from pipeline_core.edges import DepEdge
from pipeline_core.execution import ExecutionModel
from pipeline_core.launch import KernelLaunch
from pipeline_core.ops import Entry, Op, Phase
from pipeline_core.schedule import ParamValue

if TYPE_CHECKING:
    from pipeline_core.program.program import KernelProgram, Program


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
    params: Mapping[str, ParamValue] = attrs.field(factory=dict)
    #: the schedule's TargetProfile (its sync model and clock), when the schedule carries one
    target_profile: TargetProfile | None = None
    #: who runs which entries (groups, stagger, warps per group); see pipeline_core.execution
    execution: ExecutionModel | None = None
    #: which lowering built the phases: "blocks" (the reference's block program or its
    #: single-buffer recipes) or "generic" (pipeline_core.lowering.generic)
    lowering: str = "blocks"
    #: the proof stage's result (:class:`Proof`, computed by pipeline_core.proof); None when
    #: the stage did not run
    proof: Proof | None = None
    #: who wrote the program's explicit op lists (a plugin or a schedule method); "" for none
    explicit_source: str = ""
    #: the agents lowering's per-agent programs and rings (pipeline_core.agents); None otherwise
    agents: AgentPlan | None = None
    #: the kernel family and launch geometry the schedule declared once (``kernel_launch()``,
    #: pipeline_core/launch.py); None when it declares none.  Emitters read it.
    launch: KernelLaunch | None = None

    @property
    def hazards(self) -> list[dict[str, Any]]:
        """The hazards of a schedule emitted with ``allow_unsafe`` (empty when proven safe)."""
        if self.proof is None or self.proof.safe:
            return []
        return self.proof.hazards()

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
