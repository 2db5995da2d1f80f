"""A target-neutral warp-specialized body for the agents tests: a writer agent whose copies
complete on a phase channel, reader agents issuing groups on an in-order counter channel
(docs/guide/agents.md).  No vendor plugin is needed."""
from __future__ import annotations

import attrs

from pipeline_core.agents import AgentRole, AgentSpec, OrderSpec, RingSpec, TileSplit, Turn
from pipeline_core.agents.inject import lower_agents
from pipeline_core.edges import DepEdge
from pipeline_core.ops import Op, OpRole
from pipeline_core.sync import BarrierKind, Channel, ChannelKind, Effect, NamedBarriers, SyncModel

COPY, MMA, SOFTMAX = 1, 2, 3
PHASE_WAIT, ARRIVE, EXPECT, FENCE, COMMIT, GROUP_WAIT = 200, 201, 202, 203, 204, 205
NAMES = {COPY: "COPY", MMA: "MMA", SOFTMAX: "SOFTMAX"}

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


# --- two writer rings: the shape attention needs (docs/guide/agents.md, "Several rings") ---
#: body op indices of the two-ring body: the producer's K and V copies, then per consumer c
#: S = Q.K (op 2 + 2c, reads K) and O += P.V (op 3 + 2c, reads V)
K_COPY, V_COPY = 0, 1


def two_ring_body(readers: int = 2) -> list[Op]:
    ops = [Op(tag=COPY, channel=0, role=OpRole.GLOBAL_LOAD),
           Op(tag=COPY, channel=1, role=OpRole.GLOBAL_LOAD)]
    for r in range(readers):
        ops += [Op(tag=MMA, subtile=r, role=OpRole.COMPUTE),
                Op(tag=MMA, subtile=r, channel=1, role=OpRole.COMPUTE)]
    return ops


def two_ring_edges(readers: int = 2, stages: int = 4, v_stages: int | None = None) -> list[DepEdge]:
    """Each consumer's S reads only K, its PV only V; the copies ``stages`` (K) and
    ``v_stages`` (V) tiles later overwrite them."""
    out: list[DepEdge] = []
    for r in range(readers):
        s, pv = 2 + 2 * r, 3 + 2 * r
        out += [DepEdge.flow(K_COPY, s), DepEdge.flow(V_COPY, pv),
                DepEdge.anti(s, K_COPY, stages), DepEdge.anti(pv, V_COPY, v_stages or stages)]
    return out


def two_ring_spec(readers: int = 2, release_lag: int = 1, rings=()) -> AgentSpec:
    roles = [AgentRole(name="producer", ops=(K_COPY, V_COPY), warps=4, issuers=1)]
    roles += [AgentRole(name=f"consumer{r}", ops=(2 + 2 * r, 3 + 2 * r)) for r in range(readers)]
    return AgentSpec(roles=roles, op_bytes={K_COPY: 4096, V_COPY: 4096}, release_lag=release_lag,
                     rings=rings)


def two_ring_plan(stages: int = 4, readers: int = 2, release_lag: int = 1, rings=(),
                  v_stages: int | None = None):
    return lower_agents(two_ring_body(readers), two_ring_edges(readers, stages, v_stages), SYNC,
                        stages=stages, spec=two_ring_spec(readers, release_lag, rings))


# --- a copy issued once per output tile (attention's Q; docs/guide/agents.md) ------------
#: the once body: Q's copy (op 0), then K and V as in the two-ring body (ops 1, 2); per
#: consumer c, S = Q.K_j (op 3 + 2c: reads Q and K) and O += P.V_j (op 4 + 2c: reads V)
Q_COPY = 0


def once_body(readers: int = 2) -> list[Op]:
    return [Op(tag=COPY, channel=2, role=OpRole.GLOBAL_LOAD), *two_ring_body(readers)]


def once_edges(readers: int = 2, stages: int = 4) -> list[DepEdge]:
    shifted = [DepEdge(producer=e.producer + 1, consumer=e.consumer + 1, kind=e.kind,
                       distance=e.distance) for e in two_ring_edges(readers, stages)]
    q = []
    for r in range(readers):
        s = 3 + 2 * r
        q += [DepEdge.flow(Q_COPY, s), DepEdge.anti(s, Q_COPY, 1)]
    return shifted + q


def once_spec(readers: int = 2, release_lag: int = 1, q_stages: int | None = None) -> AgentSpec:
    """``q_stages``: Q's once ring that many stages deep (a double-buffered Q), K and V on
    rings of their own; None: the derived rings (Q's one stage deep)."""
    roles = [AgentRole(name="producer", ops=(Q_COPY, 1, 2), warps=4, issuers=1)]
    roles += [AgentRole(name=f"consumer{r}", ops=(3 + 2 * r, 4 + 2 * r)) for r in range(readers)]
    rings = () if q_stages is None else (RingSpec(name="q", ops=(Q_COPY,), stages=q_stages),
                                         RingSpec(name="k", ops=(1,)),
                                         RingSpec(name="v", ops=(2,)))
    return AgentSpec(roles=roles, op_bytes={Q_COPY: 8192, 1: 4096, 2: 4096},
                     release_lag=release_lag, once=(Q_COPY,), rings=rings)


def once_plan(stages: int = 4, readers: int = 2, release_lag: int = 1,
              q_stages: int | None = None):
    return lower_agents(once_body(readers), once_edges(readers, stages), SYNC, stages=stages,
                        spec=once_spec(readers, release_lag, q_stages))


# --- attention: Q once, K and V rings, S = Q.K_j -> softmax -> O += P.V_j (chained groups) ---
def attention_body(readers: int = 2) -> list[Op]:
    ops = [Op(tag=COPY, channel=c, role=OpRole.GLOBAL_LOAD) for c in (2, 0, 1)]  # Q, K, V
    for r in range(readers):
        ops += [Op(tag=MMA, subtile=r, role=OpRole.COMPUTE),              # S = Q.K_j
                Op(tag=SOFTMAX, subtile=r, role=OpRole.VALU_COMPUTE),     # P = softmax(S)
                Op(tag=MMA, subtile=r, channel=1, role=OpRole.COMPUTE)]   # O += P.V_j
    return ops


def attention_edges(readers: int = 2, stages: int = 4) -> list[DepEdge]:
    q, k, v = 0, 1, 2
    out: list[DepEdge] = []
    for r in range(readers):
        s, sm, pv = 3 + 3 * r, 4 + 3 * r, 5 + 3 * r
        out += [DepEdge.flow(q, s), DepEdge.flow(k, s), DepEdge.flow(v, pv),
                DepEdge.flow(s, sm), DepEdge.flow(sm, pv),       # S and P in registers
                DepEdge.anti(s, k, stages), DepEdge.anti(pv, v, stages), DepEdge.anti(s, q, 1),
                DepEdge.anti(pv, sm, 1)]                         # the next P overwrites P
    return out


def attention_spec(readers: int = 2, release_lag: int = 1) -> AgentSpec:
    roles = [AgentRole(name="producer", ops=(0, 1, 2), warps=4, issuers=1)]
    roles += [AgentRole(name=f"consumer{r}", ops=(3 + 3 * r, 4 + 3 * r, 5 + 3 * r))
              for r in range(readers)]
    return AgentSpec(roles=roles, op_bytes={0: 8192, 1: 4096, 2: 4096}, release_lag=release_lag,
                     once=(0,))


def attention_plan(stages: int = 4, readers: int = 2, release_lag: int = 1):
    return lower_agents(attention_body(readers), attention_edges(readers, stages), SYNC,
                        stages=stages, spec=attention_spec(readers, release_lag))


# --- two consumer groups in ping-pong through named barriers (docs/guide/agents.md) ---------
NAMED_SYNC_TAG, NAMED_ARRIVE_TAG = 206, 207
#: the test target with named barriers: 16 ids, id 0 reserved (the CTA-wide barrier)
NAMED = NamedBarriers(ids=16, reserved=(0,), sync_tag=NAMED_SYNC_TAG, arrive_tag=NAMED_ARRIVE_TAG,
                      sync_form="nbar.wait {id}, {count}", arrive_form="nbar.arrive {id}, {count}")
SYNC_NAMED = attrs.evolve(SYNC, name="test-agents-named", named_barriers=NAMED)


def pingpong_spec(release_lag: int = 1, warps: tuple[int, int] = (4, 4)) -> AgentSpec:
    """consumer0's MMA of K tile t, then consumer1's, then consumer0's of tile t + 1."""
    roles = [AgentRole(name="producer", ops=(0, 1), warps=4, issuers=1)]
    roles += [AgentRole(name=f"consumer{r}", ops=(2 + r,), warps=warps[r]) for r in range(2)]
    order = OrderSpec(name="pingpong", turns=(Turn(agent="consumer0", ops=(2,)),
                                             Turn(agent="consumer1", ops=(3,))))
    return AgentSpec(roles=roles, op_bytes={0: 1024, 1: 2048}, release_lag=release_lag,
                     orders=(order,))


def pingpong_plan(stages: int = 4, release_lag: int = 1, sync: SyncModel = SYNC_NAMED,
                  warps: tuple[int, int] = (4, 4)):
    return lower_agents(body(2), edges(2, stages), sync, stages=stages,
                        spec=pingpong_spec(release_lag, warps))


class PingPongSchedule:
    """A test plugin's schedule: a producer and two consumer groups in ping-pong, on the test
    target with named barriers (``sync``: another target's sync model, e.g. one without)."""

    name = "t-pingpong"

    def __init__(self, sync: SyncModel = SYNC_NAMED):
        from pipeline_core.config import PipelineConfig, TargetProfile
        from pipeline_core.costs import CostModel, OpCost
        from pipeline_core.ops import ResourceKind

        costs = CostModel({COPY: OpCost(ResourceKind.GLOBAL_MEM, 300, OpRole.GLOBAL_LOAD,
                                        name="COPY"),
                           MMA: OpCost(ResourceKind.MMA_UNIT, 400, OpRole.COMPUTE, name="MMA")})
        self.target = TargetProfile(costs, PipelineConfig(depth=3, num_partitions=1, m_mmas=1,
                                                          n_mmas=1, vm_per_load_a=1,
                                                          vm_per_load_b=1), sync=sync)

    def config(self):
        return self.target.pipeline

    def lowering(self):
        return "agents"

    def build_body(self):
        return body(2)

    def derive_edges(self, ops):
        return edges(2, stages=3)

    def agents(self):
        return pingpong_spec()


# --- a buffer two turns share: consumer0 writes it (op 4), consumer1 reads it (op 5) ---------
def shared_body() -> list[Op]:
    """The ping-pong body and, per consumer, a synchronous op on a buffer they share: op 4
    (consumer0) writes it each K tile, op 5 (consumer1) reads it."""
    return body(2) + [Op(tag=SOFTMAX, subtile=r, role=OpRole.VALU_COMPUTE) for r in range(2)]


def shared_edges(stages: int = 4) -> list[DepEdge]:
    """consumer1's read of tile t sees consumer0's write of tile t; consumer0's write of tile
    t + 1 comes after that read."""
    return edges(2, stages) + [DepEdge.flow(4, 5), DepEdge.anti(5, 4, 1)]


def shared_spec(ordered: bool = True) -> AgentSpec:
    roles = [AgentRole(name="producer", ops=(0, 1), warps=4, issuers=1),
             AgentRole(name="consumer0", ops=(2, 4)), AgentRole(name="consumer1", ops=(3, 5))]
    order = OrderSpec(name="pingpong", turns=(Turn(agent="consumer0", ops=(2, 4)),
                                             Turn(agent="consumer1", ops=(3, 5))))
    return AgentSpec(roles=roles, op_bytes={0: 1024, 1: 2048}, orders=(order,) if ordered else ())


def shared_plan(stages: int = 4):
    return lower_agents(shared_body(), shared_edges(stages), SYNC_NAMED, stages=stages,
                        spec=shared_spec())


# --- consumers taking output tiles in turn (docs/guide/agents.md, "Tile splits") -------------
def split_spec(release_lag: int = 1, ordered: bool = True, readers: int = 2) -> AgentSpec:
    """The GEMM body with its consumers on alternate output tiles (CUTLASS's ping-pong): each
    runs whole output tiles, their mainloops ordered over output tiles by named barriers."""
    agents = tuple(f"consumer{r}" for r in range(readers))
    order = OrderSpec(name="mainloop", scope="output_tile",
                      turns=tuple(Turn(agent=a, ops=(2 + r,)) for r, a in enumerate(agents)))
    return attrs.evolve(spec(readers, release_lag), split=TileSplit(agents=agents),
                        orders=(order,) if ordered else ())


def split_plan(stages: int = 4, release_lag: int = 1, ordered: bool = True, readers: int = 2):
    return lower_agents(body(readers), edges(readers, stages), SYNC_NAMED, stages=stages,
                        spec=split_spec(release_lag, ordered, readers))
