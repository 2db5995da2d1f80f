"""MI355X cost models, pipeline configs and target profiles
(docs/guide/reference-behaviours.md, "MI355X cost models and configs"; reference tests A26-A28)."""
from __future__ import annotations

import pytest

from pipeline_core.config import BlockSizing, LoopCarried, WarpStagger
from pipeline_core.costs import annotate
from pipeline_core.ops import (KOffset, OpRole, ResourceKind, barrier, logical, none_op, op,
                               sched_group_barrier, schedule_barrier, set_prio, wait_lgkm, wait_vm)

from pipeline_core_amd_mi355x import (DoubleBufferTag as T, SingleBufferTag as SB,
                                      mi355x_cost_model, mi355x_double_buffer,
                                      mi355x_single_buffer, mi355x_single_buffer_cost_model,
                                      mi355x_single_buffer_target, mi355x_target)

GM, LDS, MMA_UNIT, SCALAR = (ResourceKind.GLOBAL_MEM, ResourceKind.LDS, ResourceKind.MMA_UNIT,
                             ResourceKind.SCALAR)


def triple(o):
    return (o.resource, o.latency, o.role)


def test_double_buffer_cost_table():
    m = mi355x_cost_model()
    expected = {
        T.LOAD_A: (GM, 200, OpRole.GLOBAL_LOAD, 0), T.LOAD_B: (GM, 200, OpRole.GLOBAL_LOAD, 0),
        T.COMPUTE: (MMA_UNIT, 16, OpRole.COMPUTE, 4), T.MMA_LOAD_A: (LDS, 20, OpRole.FRAGMENT_LOAD, 8),
        T.MMA_LOAD_B: (LDS, 20, OpRole.FRAGMENT_LOAD, 8), T.MMA: (MMA_UNIT, 16, OpRole.COMPUTE, 4),
    }
    for tag, (res, lat, role, vgpr) in expected.items():
        c = m.get(tag)
        assert (c.resource, c.latency, c.role, c.vgpr_def, c.vgpr_kill) == (res, lat, role, vgpr, 0)
        assert c.name == tag.name
    assert m.tag_names() == {0: "LOAD_A", 1: "LOAD_B", 2: "COMPUTE", 3: "MMA_LOAD_A",
                             4: "MMA_LOAD_B", 5: "MMA"}


def test_single_buffer_cost_table():
    m = mi355x_single_buffer_cost_model()
    assert (m.get(SB.LOAD_DRAM).resource, m.get(SB.LOAD_DRAM).latency) == (GM, 200)
    assert triple(m.get(SB.STORE_SMEM)) == (LDS, 20, OpRole.SHARED_STORE)
    assert triple(m.get(SB.LOAD_FRAG)) == (LDS, 20, OpRole.FRAGMENT_LOAD)
    assert m.get(SB.LOAD_FRAG).vgpr_def == 4
    assert triple(m.get(SB.COMPUTE)) == (MMA_UNIT, 64, OpRole.COMPUTE)
    assert m.get(SB.COMPUTE).vgpr_def == 16
    assert m.tag_names() == {0: "LOAD_DRAM", 1: "STORE_SMEM", 2: "LOAD_FRAG", 3: "COMPUTE"}


def test_opdesc_metadata():
    """LDG test 26: the factories' resource/latency/role triples."""
    db, sb = mi355x_cost_model(), mi355x_single_buffer_cost_model()
    a = lambda tag, **kw: annotate([logical(tag, **kw)], db)[0]  # noqa: E731
    s = lambda tag, **kw: annotate([logical(tag, **kw)], sb)[0]  # noqa: E731
    assert triple(a(T.LOAD_A, channel=0, k_offset=KOffset.K0)) == (GM, 200, OpRole.GLOBAL_LOAD)
    assert triple(a(T.LOAD_B, channel=1, k_offset=KOffset.K0)) == (GM, 200, OpRole.GLOBAL_LOAD)
    assert triple(a(T.MMA_LOAD_A, channel=0)) == (LDS, 20, OpRole.FRAGMENT_LOAD)
    assert triple(a(T.MMA_LOAD_B, channel=1)) == (LDS, 20, OpRole.FRAGMENT_LOAD)
    assert triple(op(3, MMA_UNIT, 64, OpRole.COMPUTE, stage=0)) == (MMA_UNIT, 64, OpRole.COMPUTE)
    assert triple(a(T.MMA)) == (MMA_UNIT, 16, OpRole.COMPUTE)
    assert triple(s(SB.COMPUTE)) == (MMA_UNIT, 64, OpRole.COMPUTE)
    for o in (barrier(), wait_vm(0), wait_lgkm(0)):
        assert triple(o) == (SCALAR, 0, OpRole.SYNC)
    for o in (set_prio(0), schedule_barrier(), sched_group_barrier(0, 1)):
        assert triple(o) == (SCALAR, 0, OpRole.FENCE)
    assert triple(s(SB.LOAD_DRAM, channel=0)) == (GM, 200, OpRole.GLOBAL_LOAD)
    assert triple(s(SB.STORE_SMEM, channel=0)) == (LDS, 20, OpRole.SHARED_STORE)
    assert triple(s(SB.LOAD_FRAG, channel=0)) == (LDS, 20, OpRole.FRAGMENT_LOAD)
    assert none_op().role == OpRole.NONE and none_op().resource == ResourceKind.NONE


def test_cost_model_annotation():
    """LDG test 27: annotation fills costs and keeps buffer metadata."""
    lo = logical(T.LOAD_A, channel=0, stage=1, subtile=0, k_offset=KOffset.K0)
    assert triple(lo) == (ResourceKind.NONE, 0, OpRole.NONE)
    an = annotate([lo], mi355x_cost_model())[0]
    assert triple(an) == (GM, 200, OpRole.GLOBAL_LOAD)
    assert (an.tag, an.channel, an.stage, an.subtile, an.k_offset) == (T.LOAD_A, 0, 1, 0, KOffset.K0)
    got = [triple(o) for o in annotate([logical(t) for t in (T.LOAD_A, T.LOAD_B, T.MMA_LOAD_A,
                                                               T.MMA_LOAD_B, T.MMA)],
                                       mi355x_cost_model())]
    assert got == [(GM, 200, OpRole.GLOBAL_LOAD), (GM, 200, OpRole.GLOBAL_LOAD),
                   (LDS, 20, OpRole.FRAGMENT_LOAD), (LDS, 20, OpRole.FRAGMENT_LOAD),
                   (MMA_UNIT, 16, OpRole.COMPUTE)]


def test_target_profile_mi355x():
    """LDG test 28."""
    t = mi355x_target()
    c = t.pipeline
    assert (c.depth, c.num_partitions, c.m_mmas, c.n_mmas, c.mma_latency) == (2, 2, 2, 2, 16)
    standalone = mi355x_cost_model().get(T.LOAD_A)
    got = t.cost_model.get(T.LOAD_A)
    assert (got.latency, got.resource, got.role) == (standalone.latency, standalone.resource,
                                                      standalone.role)
    assert (t.cost_model.get(T.MMA).latency, t.cost_model.get(T.MMA).resource) == (16, MMA_UNIT)
    assert (c.vm_per_load_a, c.vm_per_load_b) == (4, 4)
    t2 = mi355x_target(vm_per_load_a=8, vm_per_load_b=2)
    assert (t2.pipeline.vm_per_load_a, t2.pipeline.vm_per_load_b) == (8, 2)


def test_double_buffer_config_fields():
    c = mi355x_double_buffer(2, 3, 0)
    assert (c.depth, c.prefetch, c.drain_passes, c.prologue_fill) == (2, 1, 2, 1)
    assert c.loop_carried == LoopCarried.none()
    assert c.block_sizing == BlockSizing(4, 2, 0)
    assert c.frag_order.b_before_a is True
    assert (c.mma_serial, c.vm_per_load_a, c.vm_per_load_b) == (True, 2, 3)
    assert (c.lgkm_per_load_a, c.lgkm_per_load_b, c.ch0_match_field, c.ch1_match_field) == (0, 0, 0, 1)
    assert c.warp_stagger == WarpStagger.auto() and c.cross_stage_rotation is False
    assert c.total_edges() == 54
    assert mi355x_double_buffer().block_sizing.max_globals == 1


def test_config_single_buffer_default():
    """LDG test 17 (config half) and the golden's derived block."""
    c = mi355x_single_buffer()
    assert (c.depth, c.prefetch, c.drain_passes, c.prologue_fill) == (1, 1, 2, 0)
    assert c.loop_carried == LoopCarried.fragment_zero() and c.loop_carried.selector == 0
    assert c.mma_serial is True and c.num_partitions == 1
    assert c.warp_stagger == WarpStagger.none()
    assert (c.total_edges(), c.total_ops, c.blocks_per_partition, c.total_blocks) == (38, 12, 4, 4)
    t = mi355x_single_buffer_target()
    assert t.pipeline == c and t.cost_model == mi355x_single_buffer_cost_model()


def test_golden_config_and_cost_model(golden):
    """Our configs and cost tables equal the reference's, field by field."""
    from pipeline_core.export.json import config_doc

    for case, cfg, model in (("default_matmul", mi355x_single_buffer(), mi355x_single_buffer_cost_model()),
                             ("pingpong_testcfg_identity_manual_waits", mi355x_double_buffer(),
                              mi355x_cost_model())):
        g = golden(case)
        assert config_doc(cfg) == g["config"]
        for entry in g["cost_model"]:
            c = model.get(entry["tag"])
            assert (int(c.resource), c.latency, int(c.role), c.vgpr_def, c.vgpr_kill, c.name) == (
                entry["resource"], entry["latency"], entry["role"], entry["vgpr_def"],
                entry["vgpr_kill"], entry["tag_name"])


def test_targets_listed_with_params_and_distribution(cli_run):
    run = cli_run(["targets"])
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "mi355x:" in out and "mi355x-single-buffer:" in out
    assert "pipeline-core-amd-mi355x" in out
    for p in ("vm_per_load_a", "vm_per_load_b", "max_globals"):
        assert p in out


@pytest.mark.parametrize("field,value", [("max_globals", 3), ("vm_per_load_a", -1)])
def test_bad_target_param_names_field(field, value):
    from pipeline_core.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        mi355x_target(**{field: value})
    assert field in str(err.value)
