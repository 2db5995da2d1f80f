"""Named mutations of an agents plan: what a hand-written warp-specialized kernel gets wrong.

Each mutation breaks one derived sync step, so tests and the H100 benchmark can show the agents
checker refusing it and, emitted anyway, the GPU misbehaving (docs/guide/agents.md, "Proof").
"""
from __future__ import annotations

from collections.abc import Callable

import attrs

from pipeline_core.agents.model import AgentPlan, AgentProgram, Step, StepKind
from pipeline_core.errors import ConfigError


def _edit_kernel(plan: AgentPlan, pick: Callable[[AgentProgram], bool],
                 edit: Callable[[Step], Step | None], what: str) -> AgentPlan:
    """``edit`` each kernel step of the programs ``pick`` chooses (None drops the step)."""
    programs = []
    hits = 0
    for p in plan.programs:
        if not pick(p):
            programs.append(p)
            continue
        kernel = []
        for s in p.kernel:
            new = edit(s)
            hits += new is not s
            if new is not None:
                kernel.append(new)
        programs.append(attrs.evolve(p, kernel=kernel))
    if not hits:
        raise ConfigError("mutation", what, "", "a plan with the step it changes")
    return attrs.evolve(plan, programs=programs)


def _is_consumer(p: AgentProgram) -> bool:
    return p.role.issuers > 1


def drop_release(plan: AgentPlan) -> AgentPlan:
    """The consumers' kernel loses its release step (the producer waits forever).  Every consumer
    runs the one consumer program an emitter writes, so the step goes from all of them."""
    return _edit_kernel(plan, _is_consumer,
                        lambda s: None if s.kind == StepKind.ARRIVE else s, "drop-release")


def loosen_wgmma_wait(plan: AgentPlan) -> AgentPlan:
    """Every consumer's kernel counter wait leaves one more group in flight before releasing."""
    return _edit_kernel(plan, _is_consumer,
                        lambda s: attrs.evolve(s, value=s.value + 1)
                        if s.kind == StepKind.COUNTER_WAIT else s, "loosen-wgmma-wait")


def drop_acquire(plan: AgentPlan) -> AgentPlan:
    """The producer overwrites a stage without waiting for its release."""
    return _edit_kernel(plan, lambda p: not _is_consumer(p),
                        lambda s: None if s.kind == StepKind.PHASE_WAIT else s, "drop-acquire")


def wrong_parity(plan: AgentPlan) -> AgentPlan:
    """Every consumer waits on the next phase of its full barrier (the wrong parity)."""
    return _edit_kernel(plan, _is_consumer,
                        lambda s: attrs.evolve(s, phase_offset=s.phase_offset + 1)
                        if s.kind == StepKind.PHASE_WAIT else s, "wrong-parity")


MUTATIONS: dict[str, Callable[[AgentPlan], AgentPlan]] = {
    "drop-release": drop_release,
    "loosen-wgmma-wait": loosen_wgmma_wait,
    "drop-acquire": drop_acquire,
    "wrong-parity": wrong_parity,
}


def mutate_plan(plan: AgentPlan, name: str) -> AgentPlan:
    fn = MUTATIONS.get(name)
    if fn is None:
        raise ConfigError("mutation", "name", name, ", ".join(sorted(MUTATIONS)))
    return fn(plan)
