"""A target-neutral warp-specialized body for the agents tests: a writer agent whose copies
complete on a phase channel, reader agents issuing groups on an in-order counter channel
(docs/guide/agents.md).  No vendor plugin is needed."""
from __future__ import annotations

from pipeline_core.agents import AgentRole, AgentSpec
from pipeline_core.agents.inject import lower_agents
from pipeline_core.edges import DepEdge
from pipeline_core.ops import Op, OpRole
from pipeline_core.sync import BarrierKind, Channel, ChannelKind, Effect, SyncModel

COPY, MMA = 1, 2
PHASE_WAIT, ARRIVE, EXPECT, FENCE, COMMIT, GROUP_WAIT = 200, 201, 202, 203, 204, 205
NAMES = {COPY: "COPY", MMA: "MMA"}

SYNC = SyncModel(
    name="test-agents",
    channels=(Channel(name="bar", label="phase barrier", wait_tag=PHASE_WAIT,
                      wait_name="BAR_WAIT", kind=ChannelKind.PHASE, unit="bytes", owner="cta",
                      results_visible_to="waiters"),
              Channel(name="groups", label="async groups", wait_tag=GROUP_WAIT,
                      wait_name="WAIT_GROUPS", unit="group", owner="warpgroup", max_wait=7,
                      commit_tag=COMMIT)),
    effects=(Effect(role=OpRole.GLOBAL_LOAD, counter="bar"),
             Effect(role=OpRole.COMPUTE, counter="groups", resolves="both")),
    barriers=(BarrierKind(tag=250, name="bar.sync", aligned=True),),
    isa_forms={GROUP_WAIT: "wait_groups {wait_value}"},
    agent_tags={"arrive": ARRIVE, "expect_tx": EXPECT, "fence": FENCE})


def body(readers: int = 2) -> list[Op]:
    ops = [Op(tag=COPY, channel=0, role=OpRole.GLOBAL_LOAD),
           Op(tag=COPY, channel=1, role=OpRole.GLOBAL_LOAD)]
    return ops + [Op(tag=MMA, subtile=r, role=OpRole.COMPUTE) for r in range(readers)]


def edges(readers: int = 2, stages: int = 4) -> list[DepEdge]:
    loads, mmas = (0, 1), [2 + r for r in range(readers)]
    return ([DepEdge.flow(p, c) for c in mmas for p in loads]
            + [DepEdge.anti(c, p, stages) for c in mmas for p in loads])


def spec(readers: int = 2, release_lag: int = 1) -> AgentSpec:
    roles = [AgentRole(name="producer", ops=(0, 1), warps=4, issuers=1)]
    roles += [AgentRole(name=f"consumer{r}", ops=(2 + r,)) for r in range(readers)]
    return AgentSpec(roles=roles, op_bytes={0: 1024, 1: 2048}, release_lag=release_lag)


def plan(stages: int = 4, readers: int = 2, release_lag: int = 1):
    return lower_agents(body(readers), edges(readers, stages), SYNC, stages=stages,
                        spec=spec(readers, release_lag))
