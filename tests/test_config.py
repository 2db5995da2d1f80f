"""Configuration records: reference defaults, validation messages that name the field."""
from __future__ import annotations

import attrs
import pytest

from pipeline_core.config import (BlockSizing, LoopCarried, PipelineConfig, ScheduleConfig,
                                  WarpStagger, apply_overrides, field_help)
from pipeline_core.costs import CostModel, OpCost
from pipeline_core.errors import ConfigError, UnknownNameError
from pipeline_core.ops import Op, OpRole, ResourceKind


def test_schedule_config_defaults_are_the_references():
    s = ScheduleConfig()
    assert (s.scheduling, s.sched_barrier_mask, s.auto_waits, s.wait_lgkm_first, s.wait_vm_last,
            s.max_vgpr) == ("IDENTITY", 0b01010101, True, 8, 6, 999999)
    assert not any((s.auto_drain, s.lgkm_after_last, s.minimal_barriers, s.omit_mma_set_prio,
                    s.global_before_frag, s.barrier_before_pre_ops, s.inter_block_lgkm_drain,
                    s.partial_prologue_drain, s.wrap_waits_with_sched_barrier))


def test_derived_helpers_are_formula_only():
    c = PipelineConfig()
    assert c.total_edges() == 54 and c.total_blocks == 8 and c.ops_per_partition == 12
    single = PipelineConfig(depth=1, num_partitions=1, loop_carried=LoopCarried.fragment_zero())
    assert single.total_edges() == 38 and single.total_blocks == 4


def test_the_ping_pong_double_buffer_is_the_references_loop_with_the_targets_figures():
    """One home of the ping-pong family's shape: the defaults (the reference's MI355X double
    buffer) but for what a target's machine sets."""
    ref = PipelineConfig()
    assert PipelineConfig.ping_pong_double_buffer(
        mma_latency=16, vm_per_load_a=4, vm_per_load_b=4, max_globals=0) == ref
    cp_async = PipelineConfig.ping_pong_double_buffer(mma_latency=32)
    assert cp_async == ref.evolve(mma_latency=32, vm_per_load_a=1, vm_per_load_b=1,
                                  max_globals=1)
    assert (cp_async.depth, cp_async.num_partitions, cp_async.m_mmas, cp_async.n_mmas,
            cp_async.total_blocks) == (2, 2, 2, 2, 8)
    with pytest.raises(TypeError):  # the figures are named: no positional latency
        PipelineConfig.ping_pong_double_buffer(32)  # type: ignore[misc]


def test_channel_mapping_uses_b_for_every_other_channel():
    c = PipelineConfig(vm_per_load_a=8, vm_per_load_b=2)
    assert [c.vm_per_channel(ch) for ch in (0, 1, -1, 2)] == [8, 2, 2, 2]
    mma = Op(tag=5, stage=1, subtile=0)
    assert c.compute_match_key(mma, 0) == 1 and c.compute_match_key(mma, 1) == 0


@pytest.mark.parametrize("build, needles", [
    (lambda: PipelineConfig(m_mmas=0), ["PipelineConfig.m_mmas", "= 0", "[1, 64]"]),
    (lambda: PipelineConfig(depth=0), ["PipelineConfig.depth", "= 0"]),
    (lambda: PipelineConfig(ch0_match_field=2), ["ch0_match_field", "0 (MMA stage"]),
    (lambda: PipelineConfig(vm_per_load_a=-1), ["vm_per_load_a", "-1"]),
    (lambda: PipelineConfig(cross_stage_rotation="yes"), ["cross_stage_rotation", "true or false"]),
    (lambda: PipelineConfig(block_sizing=(4, 2, 0)), ["block_sizing", "BlockSizing record"]),
    (lambda: BlockSizing(4, 2, 3), ["BlockSizing.max_globals", "= 3", "[0, 2]"]),
    (lambda: WarpStagger(fixed_amount=-2), ["WarpStagger.fixed_amount", "-2"]),
    (lambda: ScheduleConfig(wait_vm_last=-1), ["ScheduleConfig.wait_vm_last", "-1"]),
    (lambda: ScheduleConfig(scheduling=7), ["ScheduleConfig.scheduling", "= 7", "IDENTITY"]),
    (lambda: ScheduleConfig(scheduling=""), ["ScheduleConfig.scheduling", "non-empty"]),
    (lambda: Op(tag=300), ["Op.tag", "300", "[0, 255]"]),
    (lambda: Op(tag=1, role=42), ["OpRole", "42", "GLOBAL_LOAD=0"]),
    (lambda: Op(tag=1, channel=-2), ["Op.channel", "-2"]),
    (lambda: OpCost(ResourceKind.LDS, -5, OpRole.FRAGMENT_LOAD), ["OpCost.latency", "-5"]),
    (lambda: CostModel({200: OpCost(ResourceKind.LDS, 1, OpRole.FRAGMENT_LOAD)}),
     ["CostModel.costs", "200", "framework tags"]),
])
def test_invalid_values_name_the_field_the_value_and_what_is_allowed(build, needles):
    with pytest.raises(ConfigError) as err:
        build()
    for needle in needles:
        assert needle in str(err.value)


def test_string_overrides_parse_and_report_bad_keys_and_values():
    s = apply_overrides(ScheduleConfig(), {"scheduling": "csp", "sched_barrier_mask": "0xFF",
                                           "auto_waits": "false"})
    assert (s.scheduling, s.sched_barrier_mask, s.auto_waits) == ("CSP", 255, False)
    with pytest.raises(UnknownNameError, match=r"Unknown ScheduleConfig field 'auto_wait'\. Did you mean 'auto_waits'\?"):
        apply_overrides(ScheduleConfig(), {"auto_wait": "true"})
    with pytest.raises(ConfigError, match=r"ScheduleConfig\.max_vgpr = 'lots' is invalid"):
        apply_overrides(ScheduleConfig(), {"max_vgpr": "lots"})


def test_every_knob_has_a_one_line_help():
    import attrs

    for cls in (ScheduleConfig, PipelineConfig, BlockSizing, WarpStagger, LoopCarried):
        for f in attrs.fields(cls):
            text = field_help(cls, f.name)
            assert text and "\n" not in text, f"{cls.__name__}.{f.name}"


def test_schedule_knob_groups_cover_every_field_once():
    from pipeline_core.config import SCHEDULE_KNOB_GROUPS
    grouped = [name for names in SCHEDULE_KNOB_GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(attrs.fields_dict(ScheduleConfig))
    assert len(grouped) == len(set(grouped))
    view = ScheduleConfig(wait_vm_last=3).groups()
    assert view["waits"]["wait_vm_last"] == 3 and view["ordering"]["scheduling"] == "IDENTITY"
