"""The block template lowered to a target's channels and hints (sync model ``block_binding``)."""
from __future__ import annotations

import pytest

from pipeline_core.compiler import compile_schedule
from pipeline_core.config import ScheduleConfig, TargetProfile
from pipeline_core.ops import FrameworkTag, OpRole
from pipeline_core.program.binding import TEMPLATE, lowering_for
from pipeline_core.sync import BarrierKind, BlockBinding, Channel, Effect, SyncModel
from reference_bodies import mi355x_cost_model, mi355x_double_buffer, pingpong_body

COPY_WAIT, BAR, YIELD = 140, 141, 142


def _sync(fragment: str | None, priority: int | None = None) -> SyncModel:
    channels = [Channel(name="copy", label="copy groups", wait_tag=COPY_WAIT, wait_name="WAIT_COPY")]
    effects = [Effect(role=OpRole.GLOBAL_LOAD, counter="copy"), Effect(role=OpRole.COMPUTE, counter=None)]
    if fragment:
        channels.append(Channel(name=fragment, label="reads", wait_tag=143, wait_name="WAIT_READ"))
        effects.append(Effect(role=OpRole.FRAGMENT_LOAD, counter=fragment))
    else:
        effects.append(Effect(role=OpRole.FRAGMENT_LOAD, counter=None))
    return SyncModel(name="test-gpu", channels=channels, effects=effects,
                     barriers=(BarrierKind(tag=BAR, name="bar.sync"),),
                     block_binding=BlockBinding(global_channel="copy", fragment_channel=fragment,
                                                priority_tag=priority))


class _Schedule:
    name = "bound"

    def __init__(self, sync):
        self.target = TargetProfile(mi355x_cost_model(), mi355x_double_buffer(), sync=sync)

    def config(self):
        return self.target.pipeline

    def build_body(self):
        return pingpong_body()

    def schedule_config(self):
        return ScheduleConfig()

    def wait_source(self):
        # the template's wait values are compared across bindings (not settled per target)
        return "reference"


def _all(c):
    return [e.op for e in c.prologue + c.kernel + c.epilogue]


# The compiles below use allow_unsafe: the binding of waits and hints is under test, not the
# safety of these toy schedules (the proof stage is tested in tests/test_proof.py).


def test_synchronous_fragment_loads_make_the_fragment_waits_vanish():
    reference = compile_schedule(_Schedule(None), allow_unsafe=True)
    bound = compile_schedule(_Schedule(_sync(None)), allow_unsafe=True)
    ref_tags = [o.tag for o in _all(reference)]
    tags = [o.tag for o in _all(bound)]
    template_tags = {int(t) for t in (FrameworkTag.BARRIER, FrameworkTag.WAIT_VM,
                                      FrameworkTag.WAIT_LGKM, FrameworkTag.SET_PRIO,
                                      FrameworkTag.SCHEDULE_BARRIER)}
    assert not template_tags & set(tags)
    # every global wait became a copy-channel wait with the same count, every barrier bar.sync
    assert [o.wait_value for o in _all(reference) if o.tag == FrameworkTag.WAIT_VM] == \
        [o.wait_value for o in _all(bound) if o.tag == COPY_WAIT]
    assert ref_tags.count(int(FrameworkTag.BARRIER)) == tags.count(BAR)
    dropped = sum(ref_tags.count(int(t)) for t in (FrameworkTag.WAIT_LGKM, FrameworkTag.SET_PRIO,
                                                    FrameworkTag.SCHEDULE_BARRIER))
    assert dropped > 0 and len(tags) == len(ref_tags) - dropped
    # entries renumbered, kernel dependencies point at the lowered kernel
    assert [e.time_slot for e in bound.kernel] == list(range(len(bound.kernel)))
    for edge in bound.kernel_deps:
        assert bound.kernel[edge.consumer].op.role == OpRole.COMPUTE


def test_a_fragment_channel_and_a_priority_hint_are_kept_where_bound():
    bound = compile_schedule(_Schedule(_sync("reads", priority=YIELD)), allow_unsafe=True)
    reference = compile_schedule(_Schedule(None), allow_unsafe=True)
    assert [o.tag for o in _all(bound)].count(143) == \
        [o.tag for o in _all(reference)].count(int(FrameworkTag.WAIT_LGKM))
    assert [o.wait_value for o in _all(bound) if o.tag == YIELD] == \
        [o.wait_value for o in _all(reference) if o.tag == FrameworkTag.SET_PRIO]
    assert len(bound.kernel) + 0 < len(reference.kernel)  # the fence hint is not bound: dropped


def test_no_binding_keeps_the_template_tags():
    assert lowering_for(None) is TEMPLATE and TEMPLATE.is_identity


def test_a_binding_must_name_declared_channels():
    with pytest.raises(ValueError, match="block_binding.fragment_channel names channel 'lgkm'"):
        SyncModel(name="bad", channels=_sync(None).channels, effects=(),
                  barriers=(BarrierKind(tag=BAR, name="bar.sync"),),
                  block_binding=BlockBinding(global_channel="copy", fragment_channel="lgkm"))
