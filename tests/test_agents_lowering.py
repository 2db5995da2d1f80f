"""The agents lowering: rings from the cross-agent edges, injected steps, derived counter waits,
and one clear line for each bad agent assignment (docs/guide/agents.md, "Barrier injection")."""
from __future__ import annotations

import pytest

import agents_fixtures as fx
from pipeline_core.agents import AgentRole, AgentSpec, StepKind
from pipeline_core.agents.inject import lower_agents
from pipeline_core.edges import DepEdge
from pipeline_core.errors import ProgramError


def waits(steps):
    return [s.value for s in steps if s.kind == StepKind.COUNTER_WAIT]


def test_the_rings_come_from_the_edges():
    plan = fx.plan(stages=3, readers=2)
    full, empty = plan.ring("full"), plan.ring("empty")
    assert (full.arrivals, full.tx_bytes, full.waiters) == (1, 3072, ("consumer0", "consumer1"))
    assert (empty.arrivals, empty.signallers, empty.waiters) == (8, ("consumer0", "consumer1"),
                                                                 ("producer",))
    assert plan.op_bytes == {0: 1024, 1: 2048}
    kinds = [s.kind for s in plan.program("producer").kernel]
    assert kinds == [StepKind.PHASE_WAIT, StepKind.EXPECT_TX, StepKind.OP, StepKind.OP]
    assert plan.program("producer").kernel[0].phase_offset == -1


def test_release_lag_one_waits_one_in_the_loop_and_zero_after():
    prog = fx.plan(stages=4, release_lag=1).program("consumer0")
    assert waits(prog.kernel) == [1]
    # the last release's wait(0) drains the groups; no second after-the-loop wait(0)
    assert [waits(i) for i in prog.epilogue] == [[0]]
    assert [waits(i) for i in prog.prologue] == [[]]


@pytest.mark.parametrize("lag", [0, 2, 3])
def test_larger_lags_count_down_in_the_epilogue(lag):
    prog = fx.plan(stages=4, release_lag=lag).program("consumer1")
    assert waits(prog.kernel) == [lag]
    epilogue = [waits(i) for i in prog.epilogue]
    if lag == 0:
        assert epilogue == [[0]]  # only the after-the-loop wait
    else:
        assert epilogue == [[lag - 1 - j] for j in range(lag)]
    assert len(prog.prologue) == lag


def _lower(spec, edges=None, stages=4, readers=2):
    return lower_agents(fx.body(readers), edges or fx.edges(readers, stages), fx.SYNC,
                        stages=stages, spec=spec, owner="schedule t")


def _one_line(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_an_op_on_two_agents_is_refused():
    roles = [AgentRole(name="producer", ops=(0, 1)), AgentRole(name="consumer0", ops=(1, 2)),
             AgentRole(name="consumer1", ops=(3,))]
    with pytest.raises(ProgramError) as exc:
        _lower(AgentSpec(roles=roles, op_bytes={0: 1, 1: 1}))
    assert _one_line(exc) == ("schedule t: op 1 is assigned to agents producer and consumer0; "
                              "an op runs on one agent")


def test_an_op_on_no_agent_is_refused():
    roles = [AgentRole(name="producer", ops=(0, 1)), AgentRole(name="consumer0", ops=(2,))]
    with pytest.raises(ProgramError) as exc:
        _lower(AgentSpec(roles=roles, op_bytes={0: 1, 1: 1}))
    assert _one_line(exc) == "schedule t: ops [3] are assigned to no agent"


def test_an_anti_edge_at_the_wrong_distance_is_refused():
    edges = fx.edges(2, 4)
    edges[-1] = DepEdge.anti(edges[-1].producer, edges[-1].consumer, 2)
    with pytest.raises(ProgramError) as exc:
        _lower(fx.spec(), edges=edges)
    assert "ANTI edge 3->1 crosses agents at distance 2" in _one_line(exc)


@pytest.mark.parametrize("lag", [4, 5, -1])
def test_a_release_lag_outside_the_ring_is_refused(lag):
    with pytest.raises(ProgramError) as exc:
        _lower(fx.spec(release_lag=lag))
    assert _one_line(exc) == f"schedule t: release_lag {lag} must be 0 .. stages - 1 (3)"


def test_repeated_agent_names_are_refused():
    roles = [AgentRole(name="a", ops=(0, 1)), AgentRole(name="a", ops=(2, 3))]
    with pytest.raises(ProgramError) as exc:
        _lower(AgentSpec(roles=roles, op_bytes={0: 1}))
    assert "agent names repeat: a, a" in _one_line(exc)


class _AgentsSchedule:
    """The fixture's body as a schedule asking for the agents lowering."""

    name = "t-agents"

    def __init__(self, sync=fx.SYNC, with_spec=True):
        from pipeline_core.config import PipelineConfig, TargetProfile
        from pipeline_core.costs import CostModel, OpCost
        from pipeline_core.ops import OpRole, ResourceKind

        costs = CostModel({fx.COPY: OpCost(ResourceKind.GLOBAL_MEM, 300, OpRole.GLOBAL_LOAD,
                                           name="COPY"),
                           fx.MMA: OpCost(ResourceKind.MMA_UNIT, 400, OpRole.COMPUTE, name="MMA")})
        self.target = TargetProfile(costs, PipelineConfig(depth=4, num_partitions=1, m_mmas=1,
                                                          n_mmas=1, vm_per_load_a=1,
                                                          vm_per_load_b=1), sync=sync)
        if with_spec:
            self.agents = fx.spec

    def config(self):
        return self.target.pipeline

    def lowering(self):
        return "agents"

    def build_body(self):
        return fx.body()

    def derive_edges(self, body):
        return fx.edges()


def test_compile_runs_the_agents_lowering_and_proves_it():
    from pipeline_core.compiler import compile_schedule

    c = compile_schedule(_AgentsSchedule())
    assert c.plan.lowering == "agents" and c.proof.safe
    assert [p.name for p in c.plan.programs] == ["producer", "consumer0", "consumer1"]


@pytest.mark.parametrize("schedule, message", [
    (_AgentsSchedule(sync=None), "a target with a sync model (TargetProfile.sync): the agents "
                                 "lowering derives its rings and waits from it"),
    (_AgentsSchedule(with_spec=False), "a schedule with an agents() method"),
])
def test_the_agents_lowering_refuses_what_it_cannot_derive_from(schedule, message):
    from pipeline_core.compiler import compile_schedule
    from pipeline_core.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        compile_schedule(schedule)
    assert message in _one_line(info)
