"""Joins (docs/guide/agents.md, "Joins"): consumers that exchange what they wrote each K tile
meet on one named barrier, no turn waiting for another's.  The lowering's placement and count,
the writer's proxy fence, the refusals, and the proof: the exchange is safe with the join and
a buffer per K tile in flight, and each edit that breaks it is found, on the target-neutral
fixture."""
from __future__ import annotations

import attrs
import pytest

import agents_fixtures as fx
from pipeline_core.agents import AgentRole, AgentSpec, OrderSpec, StepKind, Turn
from pipeline_core.agents.inject import lower_agents
from pipeline_core.agents.prove import prove_plan
from pipeline_core.agents.timing import AgentMachine, run
from pipeline_core.check.mutate import agent_mutations
from pipeline_core.check.verdict import HazardKind as H
from pipeline_core.edges import DepEdge
from pipeline_core.errors import ProgramError
from pipeline_core.ops import Op, OpRole
from pipeline_core.sync import Effect

#: per consumer c: W_c (op 4 + c) writes its half of an exchange buffer by the generic proxy,
#: R_c (op 6 + c) reads both halves by the async proxy (as a wgmma reads dS another consumer
#: stored); both synchronous for their issuer
W, R = 4, 6
WRITE, READ = 5, 6  # their operand channels
PROXY_FENCE_TAG = 208
SYNC = attrs.evolve(
    fx.SYNC_NAMED, name="test-agents-join",
    effects=(*fx.SYNC_NAMED.effects,
             Effect(role=OpRole.VALU_COMPUTE, counter=None, channel=WRITE, proxy="generic"),
             Effect(role=OpRole.VALU_COMPUTE, counter=None, channel=READ, proxy="async")),
    agent_tags={**fx.SYNC_NAMED.agent_tags, "proxy_fence": PROXY_FENCE_TAG})


def body() -> list[Op]:
    return fx.body(2) + [Op(tag=fx.SOFTMAX, subtile=c, channel=WRITE, role=OpRole.VALU_COMPUTE)
                         for c in range(2)] \
        + [Op(tag=fx.SOFTMAX, subtile=c, channel=READ, role=OpRole.VALU_COMPUTE)
           for c in range(2)]


def edges(buffers: int = 2, stages: int = 4) -> list[DepEdge]:
    """Each R reads both W's of its K tile; a W overwrites its half ``buffers`` tiles later."""
    out = fx.edges(2, stages)
    for c in range(2):
        for o in range(2):
            out += [DepEdge.flow(W + o, R + c), DepEdge.anti(R + c, W + o, buffers)]
    return out


def spec(joined: bool = True, after: tuple[int, ...] = (0,)) -> AgentSpec:
    """``after``: the consumer's ops (0: W, 1: R) the join follows."""
    roles = [AgentRole(name="producer", ops=(0, 1), warps=4, issuers=1)]
    roles += [AgentRole(name=f"consumer{c}", ops=(2 + c, W + c, R + c)) for c in range(2)]
    join = OrderSpec(name="x", scope="join", turns=tuple(
        Turn(agent=f"consumer{c}", ops=tuple((W, R)[i] + c for i in after)) for c in range(2)))
    return AgentSpec(roles=roles, op_bytes={0: 1024, 1: 2048}, orders=(join,) if joined else ())


def plan(buffers: int = 2, **kw):
    return lower_agents(body(), edges(buffers), SYNC, stages=4, spec=spec(**kw))


def verdict(p, buffers: int = 2):
    return prove_plan(p, body(), edges(buffers), SYNC, name="join", names=fx.NAMES)


def kinds_around(prog, op):
    k = [s for s in prog.kernel]
    at = next(n for n, s in enumerate(k) if s.kind == StepKind.OP and s.op == op)
    return [(s.kind, s.barrier, s.value) for s in k[at + 1:at + 3]]


def test_each_consumer_fences_and_meets_the_other_right_after_its_write():
    p = plan()
    (join,) = p.orders
    assert join.scope == "join" and join.barriers == (1,) and join.counts == (256,)
    for c in range(2):
        prog = p.program(f"consumer{c}")
        assert kinds_around(prog, W + c) == [(StepKind.PROXY_FENCE, -1, 0),
                                             (StepKind.NAMED_SYNC, 1, 256)]
        # one meeting per K tile, in the kernel only (no lag: the prologue and epilogue hold none)
        assert sum(s.kind == StepKind.NAMED_SYNC for s in prog.kernel) == 1


def test_a_join_and_the_exchange_it_keeps_prove_safe():
    v = verdict(plan())
    assert v.safe, v.violations[:2]


def test_one_buffer_lets_a_write_overwrite_what_the_other_still_reads():
    """With one buffer, consumer0's write of tile t + 1 follows only its own meeting of tile t,
    not consumer1's read of tile t after that meeting."""
    v = verdict(plan(buffers=1), buffers=1)
    assert H.SMEM_WAR in {x.kind for x in v.violations}, v.violations[:2]


def test_a_join_after_the_reads_publishes_the_writes_too_late():
    """Meeting after R instead of W: each consumer reads the other's half of tile t before
    either has met for tile t, so nothing orders the other's write before the read."""
    v = verdict(plan(after=(1,)))
    assert H.SMEM_RAW in {x.kind for x in v.violations}


def test_every_edit_of_the_join_is_found():
    p = plan()
    muts = list(agent_mutations(p, ("drop_named_sync",)))
    assert muts
    for m in muts:
        kinds = {x.kind for x in verdict(m.apply(p)).violations}
        assert H.DEADLOCK in kinds, m.description
    # the writer's fence dropped: the read by another proxy is not fenced
    c0 = p.program("consumer0")
    bare = attrs.evolve(c0, kernel=tuple(s for s in c0.kernel if s.kind != StepKind.PROXY_FENCE))
    cut = attrs.evolve(p, programs=[bare if q is c0 else q for q in p.programs])
    v = verdict(cut)
    assert any(x.kind == H.SMEM_RAW and "proxy" in x.message for x in v.violations), \
        v.violations[:2]
    # both meetings dropped: nothing publishes one consumer's write to the other
    drop = [attrs.evolve(q, kernel=tuple(s for s in q.kernel if s.kind != StepKind.NAMED_SYNC))
            for q in p.programs]
    v = verdict(attrs.evolve(p, programs=drop))
    assert {H.SMEM_RAW, H.ORDER} <= {x.kind for x in v.violations}


def test_an_exchange_without_a_join_is_refused_in_one_line():
    with pytest.raises(ProgramError, match="crosses agents from an op with no phase channel") \
            as err:
        plan(joined=False)
    assert "\n" not in str(err.value)


def test_an_agent_takes_one_part_in_a_join():
    roles = spec().roles
    twice = OrderSpec(name="x", scope="join", turns=(Turn(agent="consumer0", ops=(W,)),
                                                     Turn(agent="consumer1", ops=(W + 1,)),
                                                     Turn(agent="consumer0", ops=(W,))))
    with pytest.raises(ProgramError, match="agent consumer0 has a turn in ordering x and "
                                           "again in x"):
        lower_agents(body(), edges(), SYNC, stages=4,
                     spec=AgentSpec(roles=roles, op_bytes={0: 1024, 1: 2048}, orders=(twice,)))


def test_a_join_beside_an_ordering_of_turns_takes_its_own_barrier():
    order = OrderSpec(name="pp", turns=(Turn(agent="consumer0", ops=(2,)),
                                        Turn(agent="consumer1", ops=(3,))))
    s = attrs.evolve(spec(), orders=(order, *spec().orders))
    p = lower_agents(body(), edges(), SYNC, stages=4, spec=s)
    assert [o.barriers for o in p.orders] == [(1, 2), (3,)]
    v = verdict(p)
    assert v.safe, v.violations[:2]


def test_the_timing_model_waits_at_a_join_for_every_part():
    p = plan()
    machine = AgentMachine(copy_latency=100, copy_bytes_per_cycle=320, mma_efficiency=1.0)
    timing, taken = run(p, body(), machine, 4)
    assert timing.cycles > 0
    syncs = [x for x in taken if x.placed.step.kind == StepKind.NAMED_SYNC]
    assert {x.agent for x in syncs} == {1, 2}
    # each K tile's meeting: neither consumer starts past it before the other reached it
    for u in range(4):
        met = [x for x in syncs if x.placed.tile == u]
        assert len(met) == 2 and met[0].start == met[1].start
