"""Turn-ordered adds lowered: the ``turn_*`` steps around each declared add in its agent's K loop.

Several CTAs add to one accumulator in global memory (the attention backward's dQ: every KV
block's CTA adds its part of a query block's dQ); the adds of floating-point values land in
whatever order the CTAs reach them, so the sums differ in their last bits run to run.  A
schedule that declares them ordered (:class:`~pipeline_core.plan.TurnSpec`) has each add wait
for its turn on a counter of the part it adds to and release the next turn once the add is
complete (docs/guide/agents.md, "Turn-ordered adds").  Around the add, in its agent's kernel:

* ``turn_wait`` (slot ``value``: the add's place among the CTA's adds) right before the add;
* after the agent's last step (the add's group committed, its read wait, the buffer handed
  back): ``turn_drain`` (every group of the add's counter channel complete, its writes
  performed: ``value`` 0), ``turn_fence`` (the async proxy's writes ordered before the
  generic release), ``turn_release``.

The turn an add waits for is the emitter's to compute from the trip rule's ``turn_rank``
(``Turns`` says how); :func:`~pipeline_core.agents.prove_reduction.prove_turns` proves the
steps and the turns.  The sync model names each step's tag in ``agent_tags`` (its presence
is the target's statement that it can order adds).
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs

from pipeline_core.errors import ProgramError
from pipeline_core.plan import AgentProgram, AgentSpec, Step, StepKind, Turns
from pipeline_core.sync.model import SyncModel

#: the steps in the order a correct add runs them (their tags: ``SyncModel.agent_tags``)
TURN_STEPS = ("turn_wait", "turn_drain", "turn_fence", "turn_release")


def lower_turns(spec: AgentSpec, sync: SyncModel, programs: Sequence[AgentProgram], *,
                owner: str, target: str) -> tuple[list[AgentProgram], Turns | None]:
    """``programs`` with the declared adds' turn steps, and the lowered :class:`Turns`
    (unchanged and None when the schedule declares none)."""
    decl = spec.turns
    if decl is None:
        return list(programs), None
    where = f"AgentSpec.turns {decl.name}"
    missing = [k for k in TURN_STEPS if k not in sync.agent_tags]
    if missing:
        on = f"target {target}'s " if target else ""
        raise ProgramError(f"{owner}: {where}: {on}sync model {sync.name} gives no tag for "
                           f"{', '.join(missing)} (SyncModel.agent_tags): it cannot order adds; "
                           "drop the turns or compile for a target that declares them")
    if not decl.ops or len(set(decl.ops)) != len(decl.ops):
        raise ProgramError(f"{owner}: {where}: ops {list(decl.ops)}; name each add once, in "
                           "its turn order")
    tags = {k: sync.agent_tags[k] for k in TURN_STEPS}
    out = list(programs)
    agents = []
    for slot, op in enumerate(decl.ops):
        a = next((n for n, p in enumerate(out)
                  if any(s.kind == StepKind.OP and s.op == op for s in p.kernel)), None)
        if a is None or any(s.kind == StepKind.OP and s.op == op
                            for it in (*out[a].prologue, *out[a].epilogue) for s in it):
            raise ProgramError(f"{owner}: {where}: op {op} is no add issued in an agent's K "
                               "loop at lag 0; order only such adds")
        p = out[a]
        if p.name in agents:
            raise ProgramError(f"{owner}: {where}: agent {p.name} makes two of the adds; give "
                               "each ordered add an agent of its own")
        kernel = list(p.kernel)
        at = next(i for i, s in enumerate(kernel) if s.kind == StepKind.OP and s.op == op)
        commit = next((s for s in kernel[at + 1:] if s.kind == StepKind.COMMIT), None)
        if commit is None:
            raise ProgramError(f"{owner}: {where}: op {op} is committed on no counter channel; "
                               "an ordered add completes in a group its agent can wait for")
        kernel.insert(at, Step(kind=StepKind.TURN_WAIT, channel=decl.name, value=slot,
                               tag=tags["turn_wait"]))
        kernel += [Step(kind=StepKind.TURN_DRAIN, channel=commit.channel, value=0,
                        tag=tags["turn_drain"]),
                   Step(kind=StepKind.TURN_FENCE, channel=decl.name, tag=tags["turn_fence"]),
                   Step(kind=StepKind.TURN_RELEASE, channel=decl.name,
                        tag=tags["turn_release"])]
        out[a] = attrs.evolve(p, kernel=tuple(kernel))
        agents.append(p.name)
    return out, Turns(name=decl.name, agents=tuple(agents), ops=decl.ops)
