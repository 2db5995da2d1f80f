"""The ``agents`` lowering: one program per warp role, meeting on mbarrier rings.

The schedule assigns its body's ops to roles (``agents()``, :class:`~pipeline_core.plan.AgentSpec`);
:mod:`pipeline_core.agents.inject` derives the rings from the cross-agent edges, injects every
acquire, expect-tx, wait, arrive and counter wait, and splits each role's loop
(docs/guide/agents.md).
"""
from __future__ import annotations

import attrs

from pipeline_core.lowering import LoweringInput, require_sync
from pipeline_core.plan import Plan

AGENTS = "agents"


def lower(ctx: LoweringInput) -> Plan:
    from pipeline_core.agents.inject import lower_agents

    _, sync = require_sync(ctx, "its rings and waits")
    plan = lower_agents(ctx.body, ctx.edges, sync, stages=ctx.config.depth,
                        spec=ctx.schedule.agents(), owner=ctx.owner, target=ctx.target_name)
    return attrs.evolve(plan, lowering=AGENTS, launch=ctx.schedule.kernel_launch())
