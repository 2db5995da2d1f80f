"""Warp-specialized programs: one graph, one prologue/kernel/epilogue per agent (role).

A schedule that assigns its body's ops to agents (a producer warp feeding consumer warp
groups) asks for the ``agents`` lowering.  The core derives the phase channels (full/empty
mbarrier rings) from the cross-agent edges, injects every acquire, expect-tx, wait, arrive and
counter wait, and proves the agents' programs safe over all timings (docs/guide/agents.md).

Data flow: :mod:`pipeline_core.plan` (the records) <- :mod:`.inject` (the lowering,
registered as ``agents`` by :mod:`pipeline_core.lowering.agents`, builds a plan) ->
:mod:`.prove` (the checker proves it), :mod:`.timing` (the timing model runs it),
:mod:`.views` (the document section and the text view show it).  Mutations of a plan live with
the checker's other mutations (``pipeline_core.check.mutate``).
"""
from pipeline_core.plan import (AgentProgram, AgentRole, AgentSpec, Ordering, OrderSpec, Plan,
                                Ring, RingSpec, Step, StepKind, TileSplit, Turn)

__all__ = ["AgentProgram", "AgentRole", "AgentSpec", "OrderSpec", "Ordering", "Plan", "Ring",
           "RingSpec", "Step", "StepKind", "TileSplit", "Turn"]
