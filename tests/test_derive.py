"""The target-neutral wait derivation (pipeline_core.sync.derive) on small hand-made programs."""
from __future__ import annotations

from pipeline_core.execution import ExecutionModel
from pipeline_core.ops import Entry, Op, OpRole, Phase, ResourceKind
from pipeline_core.sync import BarrierKind, Channel, Effect, SyncModel
from pipeline_core.sync.derive import derive_waits

WAIT, COMMIT, BAR = 140, 141, 142


def _sync(group: bool, in_order: bool = True) -> SyncModel:
    return SyncModel(
        name="t", channels=(Channel(name="c", label="c", wait_tag=WAIT, wait_name="WAIT_C",
                                    in_order=in_order, commit_tag=COMMIT if group else None),),
        effects=(Effect(role=OpRole.GLOBAL_LOAD, counter="c"),
                 Effect(role=OpRole.FRAGMENT_LOAD, counter=None)),
        barriers=(BarrierKind(tag=BAR, name="bar"),))


def load(stage):
    return Op(tag=0, stage=stage, channel=0, role=OpRole.GLOBAL_LOAD, resource=ResourceKind.GLOBAL_MEM)


def frag(stage):
    return Op(tag=1, stage=stage, channel=0, role=OpRole.FRAGMENT_LOAD, resource=ResourceKind.LDS)


def sync(tag, value=0):
    return Op(tag=tag, wait_value=value, role=OpRole.SYNC, resource=ResourceKind.SCALAR)


def phase(ops, p):
    return tuple(Entry(o, i, p) for i, o in enumerate(ops))


def test_count_is_ticks_issued_after_the_producer():
    pro = phase([load(0), load(1), load(2), sync(WAIT, 9), frag(0)], Phase.PROLOGUE)
    d = derive_waits(pro, (), (), _sync(False).bind())
    assert d.site(Phase.PROLOGUE, 3).safe == 2 and d.unmet == ()


def test_group_channels_count_commits_and_uncommitted_ops_are_unmet():
    pro = phase([load(0), sync(COMMIT), load(1), load(1), sync(COMMIT), sync(WAIT), frag(0)],
                Phase.PROLOGUE)
    assert derive_waits(pro, (), (), _sync(True).bind()).site(Phase.PROLOGUE, 5).safe == 1
    open_group = phase([load(0), sync(WAIT), frag(0)], Phase.PROLOGUE)
    d = derive_waits(open_group, (), (), _sync(True).bind())
    assert d.unmet and "not committed" in d.unmet[0].reason


def test_out_of_order_channels_only_trust_zero():
    pro = phase([load(0), load(1), sync(WAIT), frag(0)], Phase.PROLOGUE)
    assert derive_waits(pro, (), (), _sync(False, in_order=False).bind()).site(
        Phase.PROLOGUE, 2).safe == 0


def test_other_agents_need_the_wait_before_the_publishing_barrier():
    late_wait = phase([load(0), sync(BAR), sync(WAIT, 0), frag(0)], Phase.PROLOGUE)
    d = derive_waits(late_wait, (), (), _sync(False).bind(), ExecutionModel(warps_per_group=2))
    assert d.unmet and d.unmet[0].cross_agent
    early = phase([load(0), sync(WAIT, 0), sync(BAR), frag(0)], Phase.PROLOGUE)
    d = derive_waits(early, (), (), _sync(False).bind(), ExecutionModel(warps_per_group=2))
    assert d.unmet == () and d.site(Phase.PROLOGUE, 1).safe == 0
