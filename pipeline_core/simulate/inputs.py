"""The timing model's inputs: the machine model and the emitted entries of a schedule,
from a compiled schedule or a schedule document (docs/document-format.md).
"""
from __future__ import annotations

from typing import Any, Mapping

import attrs

from pipeline_core.document import entries_from_doc, op_from_doc, ops_from_doc
from pipeline_core.execution import ExecutionModel
from pipeline_core.ops import MAX_KERNEL_TAG, Entry, Op, OpRole, ResourceKind
from pipeline_core.sync.model import BoundSync


#: units a single op occupies exclusively for its latency (shared by all groups)
EXCLUSIVE_UNITS = frozenset({ResourceKind.MMA_UNIT, ResourceKind.VALU})
ROLE_RESOURCE = {OpRole.GLOBAL_LOAD: ResourceKind.GLOBAL_MEM, OpRole.FRAGMENT_LOAD: ResourceKind.LDS,
                  OpRole.SHARED_STORE: ResourceKind.LDS, OpRole.COMPUTE: ResourceKind.MMA_UNIT,
                  OpRole.VALU_COMPUTE: ResourceKind.VALU}


class SimulationError(ValueError):
    """The input cannot be simulated (bad iteration count, group count, ...)."""


# --- inputs -------------------------------------------------------------------

def _cycles(inst, attribute, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SimulationError(f"MachineModel.{attribute.name} must be an integer >= 0, got {value!r}")


def _positive(inst, attribute, value) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise SimulationError(f"MachineModel.{attribute.name} must be > 0, got {value!r}")


@attrs.frozen
class MachineModel:
    """The timing knobs; defaults follow the reference's cost model (latencies only)."""

    #: cycles a group spends issuing one real instruction
    issue_cycles: int = attrs.field(default=1, validator=_cycles)
    #: cycles a global load holds the shared global-memory port (0: fully pipelined)
    global_issue_cycles: int = attrs.field(default=0, validator=_cycles)
    #: cycles an LDS op holds the shared LDS port (0: fully pipelined)
    lds_issue_cycles: int = attrs.field(default=0, validator=_cycles)
    #: LDS and global ops share one port (the reference's penalty model)
    shared_memory_port: bool = False
    #: the target's clock (TargetProfile.clock_ghz); only used to state real time next to
    #: cycles (None: not declared, cycles only)
    clock_ghz: float | None = attrs.field(default=None, validator=_positive)

    def describe(self) -> str:
        """How the model costs a step, for the trace's ``otherData``."""
        return (f"issue {self.issue_cycles} cycle(s)/instruction; global port "
                f"{self.global_issue_cycles}, LDS port {self.lds_issue_cycles} cycle(s)/op"
                f"{' (shared)' if self.shared_memory_port else ''}; one shared MMA unit")

    @classmethod
    def for_penalty(cls, penalty: int = 0, **changes) -> "MachineModel":
        """The reference's ``lds_contention_penalty``: one port shared by LDS and global ops."""
        if penalty:
            changes = {"global_issue_cycles": penalty, "lds_issue_cycles": penalty,
                       "shared_memory_port": True, **changes}
        return cls(**changes)


@attrs.frozen
class SimInput:
    """What the timing model needs from a compiled schedule (and nothing else)."""

    name: str
    prologue: tuple[Entry, ...]
    kernel: tuple[Entry, ...]
    epilogue: tuple[Entry, ...]
    warp_stagger_index: int
    sync: BoundSync  #: the target's sync model with this schedule's tick counts bound
    body: tuple[Op, ...] = ()  #: for ops without costs (4-wave bootstrap frags): same-tag body op
    tag_names: Mapping[int, str] = attrs.field(factory=dict)
    lds_contention_penalty: int = 0
    clock_ghz: float | None = None  #: the target's clock, for the default MachineModel

    @property
    def staggered(self) -> bool:
        return ExecutionModel.is_staggered(self.warp_stagger_index, len(self.prologue))


def input_from_compiled(compiled: Any, host: Any = None) -> SimInput:
    """Adapter for :class:`pipeline_core.compiler.CompiledSchedule` (sync model from its target)."""
    from pipeline_core.sync.resolve import clock_for_compiled, sync_for_compiled

    sync = sync_for_compiled(compiled, host)
    return SimInput(
        name=f"{compiled.schedule_name}" + (f" on {compiled.target_name}" if compiled.target_name else ""),
        prologue=tuple(compiled.prologue), kernel=tuple(compiled.kernel),
        epilogue=tuple(compiled.epilogue), warp_stagger_index=int(compiled.warp_stagger_index),
        sync=sync.bind(compiled.config, compiled.schedule_config),
        body=tuple(compiled.body), tag_names={**sync.tag_names(), **dict(compiled.tag_names)},
        lds_contention_penalty=int(getattr(compiled.schedule_config, "lds_contention_penalty", 0)),
        clock_ghz=clock_for_compiled(compiled, host))


def op_from_document(d: Mapping[str, Any]) -> Op:
    """One op dict of the schedule document as an :class:`Op` (the document codec's decoder)."""
    return op_from_doc(d)


def input_from_document(doc: Mapping[str, Any], host: Any = None) -> SimInput:
    """Adapter for a schedule document (``compile --format json`` output or a golden file).

    The sync model and clock are those of the target the document names.
    """
    from pipeline_core.sync.resolve import clock_for_target, document_target, sync_for_document

    sync = sync_for_document(doc, host)
    def entries(key: str) -> tuple[Entry, ...]:
        return entries_from_doc(doc.get(key, ()))

    names: dict[int, str] = sync.tag_names()
    for key in ("body", "prologue", "kernel", "epilogue"):
        for item in doc.get(key, ()):
            o = item.get("op", item)
            if o["tag"] <= MAX_KERNEL_TAG and "tag_name" in o:
                names[o["tag"]] = o["tag_name"]
    config = doc.get("config", {})
    sched = doc.get("schedule_config", {})
    name = doc.get("case") or doc.get("schedule") or "schedule"
    if doc.get("target"):
        name = f"{name} on {doc['target']}"
    return SimInput(name=str(name), prologue=entries("prologue"), kernel=entries("kernel"),
                    epilogue=entries("epilogue"), warp_stagger_index=int(doc["warp_stagger_index"]),
                    sync=sync.bind(config, sched),
                    body=tuple(ops_from_doc(doc.get("body", ()))), tag_names=names,
                    lds_contention_penalty=int(sched.get("lds_contention_penalty", 0) or 0),
                    clock_ghz=clock_for_target(document_target(doc), host))


def as_input(source: Any) -> SimInput:
    """A SimInput from a SimInput, a CompiledSchedule or a schedule document dict."""
    if isinstance(source, SimInput):
        return source
    if isinstance(source, Mapping):
        return input_from_document(source)
    if hasattr(source, "kernel") and hasattr(source, "warp_stagger_index"):
        return input_from_compiled(source)
    raise SimulationError(f"cannot simulate a {type(source).__name__}: pass a CompiledSchedule, "
                          "a schedule document or a SimInput")
