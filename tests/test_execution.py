"""The execution model: the one statement of who runs which entries."""
from __future__ import annotations

import attrs
import pytest

from pipeline_core.errors import ConfigError
from pipeline_core.execution import LAUNCH, STAGGER, TAIL, ExecutionModel
from pipeline_core.lowering import declared_warps_per_group
from pipeline_core.ops import Phase
from pipeline_core.schedule import ScheduleBase

from plugin_fixtures import tiny_target


def _text(slots):
    return [s.synthetic or f"{s.phase.name[0]}{s.index}" + (f"@{s.iteration}" if s.iteration >= 0 else "")
            for s in slots]


def test_stagger_inside_the_prologue_runs_two_groups():
    m = ExecutionModel.of(2, 3)
    assert (m.groups, m.stagger_index, m.staggered) == (2, 2, True)
    assert _text(m.stream(0, 3, 1, 1, 2)) == ["P0", "P1", "P2", LAUNCH, "K0@0", "K0@1", "E0", TAIL]
    assert _text(m.stream(1, 3, 1, 1, 2)) == ["P0", "P1", STAGGER, "P2", LAUNCH, "K0@0", "K0@1", "E0"]
    # the barrier counts of the two groups match, so the n-th barriers meet
    assert sum(bool(s.synthetic) for s in m.stream(0, 3, 1, 1, 2)) == \
        sum(bool(s.synthetic) for s in m.stream(1, 3, 1, 1, 2))


@pytest.mark.parametrize("index", [4, -1])
def test_stagger_outside_the_prologue_is_one_group(index):
    m = ExecutionModel.of(index, 3)
    assert (m.groups, m.staggered) == (1, False)
    assert _text(m.stream(0, 3, 1, 0, 1)) == ["P0", "P1", "P2", "K0@0"]


def test_forced_groups_without_stagger_run_the_same_stream():
    m = ExecutionModel.of(9, 2, groups=3)
    assert [_text(m.stream(g, 2, 1, 0, 1)) for g in range(3)] == [["P0", "P1", "K0@0"]] * 3


def test_a_stagger_needs_exactly_two_groups():
    with pytest.raises(ConfigError, match="exactly 2 warp groups"):
        ExecutionModel(groups=3, stagger_index=0)
    with pytest.raises(ConfigError, match="group"):
        ExecutionModel.of(0, 1).stream(2, 1, 1, 1, 1)


def test_warps_per_group_come_from_schedule_then_target():
    target = attrs.evolve(tiny_target(), warps_per_group=4)  # no sync model: no minimum

    class Plain(ScheduleBase):  # the declared protocol's default: no warps_per_group of its own
        name = "plain"

    class Own(Plain):
        def warps_per_group(self):
            return 2

    assert declared_warps_per_group(Plain()) == 1
    assert declared_warps_per_group(Plain(), target) == 4
    assert declared_warps_per_group(Own(), target) == 2

    class Bad(Plain):
        def warps_per_group(self):
            return 0

    with pytest.raises(ConfigError, match="warps_per_group"):
        declared_warps_per_group(Bad())


def test_simulate_and_checker_follow_the_same_model():
    """The timing model's streams and the checker's traces are the model's slots."""
    import golden_data
    from pipeline_core.check import decode, model_for_document
    from pipeline_core.check.trace import schedule_of
    from pipeline_core.simulate import input_from_document, streams

    doc = golden_data.load("pingpong_bf16")
    inp = input_from_document(doc)
    program = decode(doc, model_for_document(doc))
    m = ExecutionModel.of(doc["warp_stagger_index"], len(doc["prologue"]))
    for g in range(2):
        slots = m.stream(g, len(doc["prologue"]), len(doc["kernel"]), len(doc["epilogue"]), 2)
        sim = streams(inp, 2)[g]
        chk = schedule_of(program, g, 2)
        assert len(slots) == len(sim) == len(chk)
        assert [s.synthetic != "" for s in slots] == [i.entry == -1 for i in sim] == \
            [e.instr.index == -1 for e in chk]
        assert [s.phase for s in slots if not s.synthetic] == [i.phase for i in sim if i.entry >= 0]


def test_a_per_thread_channel_models_at_least_two_warps():
    """cp.async-like channels (per thread, data seen by the issuer only) need a barrier even
    between the threads of one warp: the proof never models such a target with one agent."""
    from pipeline_core.ops import OpRole
    from pipeline_core.sync import BarrierKind, Channel, Effect, SyncModel

    def sync(owner):
        return SyncModel(name="t", channels=(Channel(name="c", label="c", wait_tag=140,
                                                     wait_name="W", owner=owner),),
                         effects=(Effect(role=OpRole.GLOBAL_LOAD, counter="c"),),
                         barriers=(BarrierKind(tag=142, name="b"),))

    class Target:
        def __init__(self, owner, warps=None):
            self.sync, self.warps_per_group = sync(owner), warps

    class Plain(ScheduleBase):
        name = "plain"

    assert declared_warps_per_group(Plain(), Target("thread")) == 2
    assert declared_warps_per_group(Plain(), Target("thread", 8)) == 8
    assert declared_warps_per_group(Plain(), Target("wave")) == 1
