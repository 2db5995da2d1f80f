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


WAIT_F = 143


def _async_frags(interlock: bool) -> SyncModel:
    return SyncModel(
        name="t", channels=(Channel(name="c", label="c", wait_tag=WAIT, wait_name="WAIT_C"),
                            Channel(name="f", label="f", wait_tag=WAIT_F, wait_name="WAIT_F")),
        effects=(Effect(role=OpRole.GLOBAL_LOAD, counter="c"),
                 Effect(role=OpRole.FRAGMENT_LOAD, counter="f")),
        barriers=(BarrierKind(tag=BAR, name="bar"),), register_interlock=interlock)


def mma(row, col):
    return Op(tag=2, stage=row, subtile=col, role=OpRole.COMPUTE, resource=ResourceKind.MMA_UNIT)


def test_without_interlock_a_compute_needs_its_operand_fragments_retired():
    a0, a1 = frag(0).evolve(subtile=0), frag(0).evolve(subtile=1)
    b0 = frag(0).evolve(channel=1, subtile=0)
    # MMA[m0,n0] reads A#0 and B#0, which A#1 follows; MMA[m1,n0] reads the newest, A#1
    ops = [load(0), sync(WAIT), sync(BAR), a0, b0, a1, sync(WAIT_F, 9), mma(0, 0),
           sync(WAIT_F, 9), mma(1, 0)]
    d = derive_waits(phase(ops, Phase.PROLOGUE), (), (), _async_frags(False).bind())
    assert d.site(Phase.PROLOGUE, 6).safe == 1  # A#1 may still be in flight
    assert d.site(Phase.PROLOGUE, 8).safe == 0
    interlocked = derive_waits(phase(ops, Phase.PROLOGUE), (), (), _async_frags(True).bind())
    assert interlocked.site(Phase.PROLOGUE, 6).safe is None  # the hardware stalls the use


def test_a_compute_with_no_fragment_wait_before_it_is_an_unmet_register_need():
    ops = [load(0), sync(WAIT), sync(BAR), frag(0), frag(0).evolve(channel=1), mma(0, 0)]
    d = derive_waits(phase(ops, Phase.PROLOGUE), (), (), _async_frags(False).bind())
    assert [u.reason for u in d.unmet] == ["register read after write: no wait on f between them"] * 2


def test_whole_stage_regions_tie_every_subtile_read_to_the_stage_load():
    ops = [load(0), sync(WAIT, 9), frag(0).evolve(subtile=1)]
    split = derive_waits(phase(ops, Phase.PROLOGUE), (), (), _sync(False).bind())
    whole = derive_waits(phase(ops, Phase.PROLOGUE), (), (), _sync(False).bind(), whole_stage=True)
    assert split.site(Phase.PROLOGUE, 1).safe is None and whole.site(Phase.PROLOGUE, 1).safe == 0


def test_under_an_interlock_a_compute_reading_the_fragment_retires_it_for_a_later_write():
    # the refill of stage 0 follows the read of it: a wait is needed unless an MMA reading
    # the fragment's register (stalled by the interlock until the read is done) comes first
    read_then_use = [load(0), sync(WAIT), sync(BAR), frag(0), sync(WAIT_F, 9), mma(0, 0),
                     load(0)]
    d = derive_waits(phase(read_then_use, Phase.PROLOGUE), (), (), _async_frags(True).bind())
    assert d.site(Phase.PROLOGUE, 4).safe is None and d.unmet == ()
    unused = [load(0), sync(WAIT), sync(BAR), frag(0), sync(WAIT_F, 9), mma(1, 1), load(0)]
    d = derive_waits(phase(unused, Phase.PROLOGUE), (), (), _async_frags(True).bind())
    assert d.site(Phase.PROLOGUE, 4).safe == 0  # MMA[m1,n1] reads another register
