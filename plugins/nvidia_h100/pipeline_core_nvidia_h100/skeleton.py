"""The kernel skeleton the CUDA emitters of this plugin share.

Emitters are keyed by (target, kernel family), not by schedule name (issue 24): a kernel is the
family's device code (load / compute / finish: the tile math, in each emitter's template) around
the compiled program, and this module writes the program part.  It walks the program's stretches
(each agent's prologue iterations, its loop over the K tiles, its epilogue iterations; for a
single-stream program its prologue, kernel period and epilogue) and asks the family's code for
one line per step.  What a family decides is only how a stretch opens and closes (the loop
header, which K tile an iteration binds) and the line of each step, as ThunderKittens'
``lcf.cuh`` template takes ``load`` / ``compute`` / ``finish`` from a kernel family and CUTLASS
keeps the ring's acquire / commit / wait / release apart from the collective mainloop.

The geometry an emitter sizes the kernel by is the one the schedule declared once
(``CompiledSchedule.launch``, pipeline_core/launch.py): :func:`declared_geometry` reads it.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

import attrs

from pipeline_core.agents import AgentProgram, Step
from pipeline_core.compiler import CompiledSchedule
from pipeline_core.errors import ProgramError
from pipeline_core.ops import Entry

S = TypeVar("S")
G = TypeVar("G")


@attrs.frozen(kw_only=True)
class Stretch(Generic[S]):
    """One stretch of a program as CUDA: ``head`` lines, one line per step (``code`` writes it,
    ``indent`` puts it under the head), then ``tail`` lines."""

    steps: tuple[S, ...]
    code: Callable[[S], str]
    head: tuple[str, ...] = ()
    tail: tuple[str, ...] = ()
    indent: str = ""


def render(stretches: Iterable[Stretch[S]]) -> list[str]:
    """The lines of a program's stretches, in order."""
    lines: list[str] = []
    for s in stretches:
        lines += s.head
        lines += [s.indent + s.code(step) for step in s.steps]
        lines += s.tail
    return lines


def entry_code(dispatch: Mapping[int, Callable[[Entry], str]], names: Mapping[int, str],
               emitter: str) -> Callable[[Entry], str]:
    """A family's code for the entries of a single-stream program: the line ``dispatch`` has for
    the entry's tag and a comment naming the entry (``// kernel[3] MMA``); an entry whose tag
    the family has no CUDA for is refused naming the emitter, the entry and its tag."""
    def code(e: Entry) -> str:
        fn = dispatch.get(e.op.tag)
        name = names.get(e.op.tag, str(e.op.tag))
        if fn is None:
            raise ProgramError(f"emitter {emitter}: {e.phase.name.lower()}[{e.time_slot}] "
                               f"{name}: no CUDA for this entry's tag")
        return f"{fn(e)}  // {e.phase.name.lower()}[{e.time_slot}] {name}"
    return code


def agent_stretches(program: AgentProgram, code: Callable[[Step], str],
                    label: str, indent: str = "    ") -> list[Stretch[Step]]:
    """An agent's program as stretches (docs/guide/agents.md): each prologue iteration a block
    binding its K tile ``t``, the kernel a loop over the K tiles the prologue left, each epilogue
    iteration a block binding ``t = KT + j``; a step with lag L serves tile ``t - L``."""
    def block(steps: Sequence[Step], t: str, what: str) -> Stretch[Step]:
        return Stretch(steps=tuple(steps), code=code, indent=indent,
                       head=(f"{{  // {label} {what}", f"{indent}const int t = {t};"), tail=("}",))

    first = len(program.prologue)
    return [*(block(steps, str(i), f"prologue iteration {i}")
              for i, steps in enumerate(program.prologue)),
            Stretch(steps=tuple(program.kernel), code=code, indent=indent, tail=("}",),
                    head=(f"for (int t = {first}; t < KT; ++t) {{  // {label} kernel",)),
            *(block(steps, f"KT + {j}", f"epilogue iteration {j}")
              for j, steps in enumerate(program.epilogue))]


def declared_geometry(compiled: CompiledSchedule, family: str, kind: type[G],
                      emitter: str) -> G:
    """The launch geometry a compiled schedule declared for kernel family ``family``
    (``kernel_launch()``, pipeline_core/launch.py), refused naming the emitter when the schedule
    declared another family or no geometry of the family's type."""
    launch = compiled.launch
    if launch is None or launch.kernel_family != family:
        got = f"kernel family {launch.kernel_family}" if launch else "no kernel family"
        raise ProgramError(f"emitter {emitter}: writes kernel family {family}, but schedule "
                           f"{compiled.schedule_name} declares {got}")
    if not isinstance(launch.geometry, kind):
        raise ProgramError(f"emitter {emitter}: schedule {compiled.schedule_name} declares no "
                           f"{kind.__name__} for kernel family {family} (kernel_launch() gave "
                           f"{type(launch.geometry).__name__})")
    return launch.geometry
