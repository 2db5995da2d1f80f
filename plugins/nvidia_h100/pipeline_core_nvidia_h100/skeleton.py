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
A warp-specialized kernel's frame around the programs (rings, roles, ``setmaxnreg``, the tile
loop) is the kit's (``kit/frame.py``), a step's ring stage and parity too (``kit/rings.py``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

import attrs

from pipeline_core.plugin_api import (AgentProgram, CompiledSchedule, Entry, ProgramError, Step,
                                      StepKind)

S = TypeVar("S")
G = TypeVar("G")

#: The comment that opens a role's region of a warp-specialized kernel (``// pc:role producer``,
#: ``relay``, ``consumers``; ``end``: no role's program from here on) and the one that opens a
#: section of a role's program (``// pc:section kernel``, ``prologue 0``, ``epilogue 1``,
#: ``once``, ``after``, ``finish``, ``store``, ``drain``; ``end`` closes it): comments only, so
#: the machine code is the same with them; ``sync_skeleton`` reads the kernel's synchronization
#: by them and checks it against the plan's steps (issue 33).
ROLE_MARK = "// pc:role"
SECTION_MARK = "// pc:section"


def role_mark(role: str) -> str:
    """The comment line opening ``role``'s region (:data:`ROLE_MARK`)."""
    return f"{ROLE_MARK} {role}"


def section_mark(section: str) -> str:
    """The comment line opening (``end``: closing) a section of a program (:data:`SECTION_MARK`)."""
    return f"{SECTION_MARK} {section}"


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
        section = section_mark(what.replace(" iteration", ""))
        return Stretch(steps=tuple(steps), code=code, indent=indent,
                       head=(section, f"{{  // {label} {what}", f"{indent}const int t = {t};"),
                       tail=("}", section_mark("end")))

    first = len(program.prologue)
    return [*(block(steps, str(i), f"prologue iteration {i}")
              for i, steps in enumerate(program.prologue)),
            Stretch(steps=tuple(program.kernel), code=code, indent=indent,
                    tail=("}", section_mark("end")),
                    head=(section_mark("kernel"),
                          f"for (int t = {first}; t < KT; ++t) {{  // {label} kernel")),
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


# --- a warp-specialized kernel's synchronization lines (the frame: kit/frame.py) ---------------

def ring_step_line(s: Step, stage: str, parity: str, single_issuer: bool,
                   watchdog: int = 0) -> str | None:
    """The mbarrier code of a ring step (wait on a phase, expect the bytes, arrive), None for a
    step of another kind (the family writes those).  ``single_issuer``: one thread runs the
    program; else one arrival per warp (``AgentRole.release_arrivals``), each after the warp's
    own counter wait; ``watchdog`` N > 0: a wait traps after N polls."""
    bar = f"{s.channel}_bar({stage})"
    if s.kind == StepKind.PHASE_WAIT:
        if watchdog:
            return f"mbar_wait_bounded({bar}, {parity}, {watchdog}ull);"
        return f"mbar_wait({bar}, {parity});"
    if s.kind == StepKind.EXPECT_TX:
        return f"mbar_expect_tx({bar}, {s.value}u);"
    if s.kind == StepKind.ARRIVE:
        return f"mbar_arrive({bar});" if single_issuer else f"if (lane == 0) mbar_arrive({bar});"
    if s.kind == StepKind.ASYNC_ARRIVE:  # every issuing thread's, once its copies landed
        return f"pcgc::cp_async_arrive({bar});"
    return None


def named_step_line(s: Step, aligned: bool = True) -> str | None:
    """The PTX of a named-barrier step (``bar.sync id, count`` / ``bar.arrive id, count``, the
    plugin's README.md, "Sync model, wgmma family"), None for a step of another kind.
    ``aligned`` False: a sync that threads reach from different instructions (a join whose
    parts run different code: ``barrier.sync``, which PTX allows there, where ``bar.sync`` is
    ``barrier.sync.aligned``, one instruction for every thread that reaches it)."""
    if s.kind == StepKind.NAMED_SYNC:
        op = "bar.sync" if aligned else "barrier.sync"
        return f'asm volatile("{op} {s.barrier}, {s.value};\\n" ::: "memory");'
    if s.kind == StepKind.NAMED_ARRIVE:
        return f'asm volatile("bar.arrive {s.barrier}, {s.value};\\n" ::: "memory");'
    return None


def wgmma_group_line(s: Step) -> str | None:
    """The wgmma async group's own steps (``wgmma.fence``, ``commit_group``, ``wait_group N``:
    the plugin's README.md, "Sync model, wgmma family") as the device helpers' calls, None for
    a step of another kind; every family whose consumers issue wgmma emits them this way."""
    if s.kind == StepKind.FENCE:
        return "wgmma_fence();"
    if s.kind == StepKind.COMMIT:
        return "wgmma_commit();"
    if s.kind == StepKind.COUNTER_WAIT:
        return f"wgmma_wait<{s.value}>();"
    if s.kind == StepKind.PROXY_FENCE:  # generic-proxy copies (cp.async) before wgmma reads
        return "pcgc::fence_proxy_async_shared();"
    return None


def consumer_sync_line(s: Step, aligned: bool = True) -> str | None:
    """A consumer's synchronisation step that is no ring's: a named barrier
    (:func:`named_step_line`, ``aligned`` as there) or the wgmma async group's
    (:func:`wgmma_group_line`); None for any other step (a ring's, the family's ops)."""
    named = named_step_line(s, aligned)
    return named if named is not None else wgmma_group_line(s)


def consumer_branches(texts: Sequence[str], indent: str = "    ") -> list[str]:
    """The consumers' programs as the one consumer branch runs them: one program when they are
    the same (the consumer index picks the rows), else one block per consumer index (consumers
    that differ only in their named-barrier steps, docs/guide/agents.md, "Named barriers")."""
    if len(set(texts)) == 1:
        return texts[0].split("\n")
    out: list[str] = []
    for i, text in enumerate(texts):
        out.append(("if" if i == 0 else "} else if") + f" (consumer == {i}) {{")
        out += [indent + line for line in text.split("\n")]
    return out + ["}"]


def merged_consumer_lines(texts: Sequence[Sequence[str]], emitter: str) -> list[str]:
    """The consumers' programs as one program the consumer branch runs, for consumers that
    differ only in their named-barrier lines (a tile split's turns: each syncs on its own
    barrier and arrives on the next one's, docs/guide/agents.md, "Tile splits"): each line that
    differs becomes a branch on the consumer index around that barrier alone.  Their wgmma
    groups then sit outside any branch on the consumer index: ptxas serializes every wgmma of a
    group it finds on such a (possibly divergent) path (C7520), which halves the tensor cores'
    rate (benchmarks/results/matmul_pingpong_h100.jsonl)."""
    if len({len(t) for t in texts}) != 1:
        raise ProgramError(f"emitter {emitter}: the consumers' programs differ in length "
                           f"({', '.join(str(len(t)) for t in texts)} lines); a tile split's "
                           "consumers must run the same steps")
    out: list[str] = []
    for lines in zip(*texts):
        if len(set(lines)) == 1:
            out.append(lines[0])
            continue
        if not all("bar.sync" in x or "bar.arrive" in x for x in lines):
            raise ProgramError(f"emitter {emitter}: the consumers' programs differ in "
                               f"{lines[0].strip()!r} / {lines[1].strip()!r}; a tile split's "
                               "consumers may differ only in their named barriers")
        indent = lines[0][:len(lines[0]) - len(lines[0].lstrip())]
        out.append(indent + " else ".join(f"if (consumer == {i}) {{ {x.strip()} }}"
                                          for i, x in enumerate(lines)))
    return out


# --- the single-stream kernel: every warp runs the one program ----------------------------------

@attrs.frozen(kw_only=True)
class StreamFamily:
    """A single-stream kernel family's device code, each a block of CUDA lines (the same cut as
    the warp-specialized frame's, ``kit.frame.AgentsFamily``): ``setup`` (constants, shared
    memory, this CTA's tile and the thread's coordinates), ``load`` (the helpers a load entry calls), ``compute`` (fragments and MMA
    helpers, accumulators), ``finish`` (the accumulators out)."""

    setup: str
    load: str
    compute: str
    finish: str


def stream_kernel_body(family: StreamFamily, program: Sequence[str], note: str) -> str:
    """The body of a single-stream kernel: the family's setup, load and compute code, the
    compiled program (``note`` says how it is laid out), the family's finish."""
    return "\n\n".join([family.setup, family.load, family.compute,
                        "\n".join([f"    // ---- {note} ----", *program]), family.finish])
