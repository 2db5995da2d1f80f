"""The single-buffer default matmul: goldens, LDG tests 11, 12, 19, 20, 35-37, other shapes, errors."""
from __future__ import annotations

import pytest

from pipeline_core.errors import ConfigError
from pipeline_core.ops import FrameworkTag, OpRole

from pipeline_core_amd_mi355x import SingleBufferTag as SB
from pipeline_core_amd_mi355x import testing as mt

TEST_PARAMS = dict(num_k_tiles=2, num_m_mmas=4, num_n_mmas=4, num_k_mmas=2, MMA_M=16, MMA_N=16,
                   a_loads_per_thread=2, b_loads_per_thread=2)


@pytest.mark.parametrize("case", ["default_matmul", "default_matmul_t1"])
def test_golden_parity_through_the_cli(golden, cli_json, case):
    g = golden(case)
    got = cli_json(g["cli"])
    assert mt.golden_diffs(g, got) == []


def test_defaults_equal_the_test_configuration(golden, cli_json):
    """No -p at all gives the reference's build_default_matmul_schedule[2, 4, 4, 2, 16, 16, 2, 2]."""
    g = golden("default_matmul")
    assert mt.golden_diffs(g, cli_json(["compile", "default-matmul"])) == []


def test_default_matmul_full_schedule(compile_named):
    """LDG tests 11 and 12."""
    c = compile_named("default-matmul", **TEST_PARAMS)
    assert c.prologue[0].op.tag == SB.LOAD_DRAM
    assert len(c.epilogue) == 13
    assert any(e.op.tag == FrameworkTag.SCHED_GROUP_BARRIER for e in c.kernel)
    assert c.warp_stagger_index > len(c.prologue)
    assert len(c.kernel) == 56


def test_schedule_compiler_t2(compile_named):
    """LDG test 19."""
    c = compile_named("default-matmul", **TEST_PARAMS)
    assert (len(c.body), len(c.edges), len(c.prologue), len(c.kernel), len(c.epilogue)) == (8, 8, 6, 56, 13)
    assert c.prologue[0].op.tag == SB.LOAD_DRAM
    assert tuple(c.kernel_deps) == tuple(c.edges)


def test_schedule_compiler_t1(compile_named):
    """LDG test 20 (+ kernel 38, golden)."""
    c = compile_named("default-matmul", **{**TEST_PARAMS, "num_k_tiles": 1})
    assert (len(c.body), len(c.edges), len(c.prologue), len(c.epilogue), len(c.kernel)) == (6, 6, 6, 9, 38)


def test_body_order_t2(compile_named):
    """LDG tests 13/15 through the schedule: [frag1, comp0, bar, store, load, comp1, bar, frag0]."""
    c = compile_named("default-matmul", **TEST_PARAMS)
    got = [(o.tag, o.subtile) for o in c.body]
    assert got == [(SB.LOAD_FRAG, 1), (SB.COMPUTE, 0), (FrameworkTag.BARRIER, 0), (SB.STORE_SMEM, 0),
                   (SB.LOAD_DRAM, 0), (SB.COMPUTE, 1), (FrameworkTag.BARRIER, 0), (SB.LOAD_FRAG, 0)]


def test_optimize_within_barriers_t4():
    """LDG test 35: same length, SYNC positions unchanged, every d=0 edge points forward."""
    from pipeline_core.costs import annotate
    from pipeline_core.edges import derive_edges
    from pipeline_core.transforms import optimize_within_barriers, single_buffer_reorder

    from pipeline_core_amd_mi355x import mi355x_single_buffer, mi355x_single_buffer_cost_model
    from pipeline_core_amd_mi355x.default_matmul import logical_body

    config = mi355x_single_buffer()
    reordered = list(single_buffer_reorder(annotate(logical_body(4), mi355x_single_buffer_cost_model()),
                                           config))
    optimized = list(optimize_within_barriers(reordered, config))
    assert len(optimized) == len(reordered)
    syncs = lambda ops: [i for i, o in enumerate(ops) if o.role == OpRole.SYNC]  # noqa: E731
    assert syncs(optimized) == syncs(reordered)
    for e in derive_edges(optimized, config):
        if e.distance == 0:
            assert e.producer < e.consumer


def test_phase_recipe_prologue(compile_named):
    """LDG test 36 (through the compiled prologue)."""
    c = compile_named("default-matmul", **TEST_PARAMS)
    pro = c.prologue
    assert len(pro) == 6
    assert [e.op.role for e in pro[:5]] == [OpRole.GLOBAL_LOAD, OpRole.SHARED_STORE, OpRole.SYNC,
                                            OpRole.GLOBAL_LOAD, OpRole.FRAGMENT_LOAD]
    assert pro[4].op.subtile == c.config.loop_carried.selector == 0


def test_phase_recipe_epilogue(compile_named):
    """LDG test 37."""
    c = compile_named("default-matmul", **TEST_PARAMS)
    epi, sel = c.epilogue, c.config.loop_carried.selector
    assert len(epi) == 13
    assert epi[0].op.tag >= 128
    assert epi[1].op.role == OpRole.FRAGMENT_LOAD and epi[1].op.subtile != sel
    assert epi[2].op.role == OpRole.SYNC and epi[7].op.role == OpRole.SYNC


@pytest.mark.parametrize("t", [3, 4, 8])
def test_more_k_tiles(cli_json, t):
    """T=4 (and others): body 2T+4 ... the single-buffer counts and the hint formula."""
    doc = cli_json(["compile", "default-matmul", "-p", f"num_k_tiles={t}"])
    counts = doc["counts"]
    assert counts["body"] == 2 * t + 4
    assert counts["edges"] == counts["kernel_deps"] == 2 * t + 4
    assert counts["prologue"] == 6
    assert counts["kernel"] == counts["body"] + 4 * 4 + 2 * 8 * t
    hints = [e for e in doc["kernel"] if e["op"]["tag"] == 133]
    assert all(h["op"]["role_name"] == "FENCE" and h["phase"] == 1 for h in hints)


def test_32x32_mma(cli_json):
    doc = cli_json(["compile", "default-matmul", "-p", "MMA_M=32", "-p", "MMA_N=32"])
    hints = [(e["op"]["subtile"], e["op"]["wait_value"]) for e in doc["kernel"]
             if e["op"]["tag"] == 133]
    assert len(hints) == 48
    assert hints[:2] == [(0, 1), (3, 1)]  # one MFMA per DS read
    assert hints[16:20] == [(1, 1), (3, 2), (2, 1), (3, 2)]  # 16 left over / 4 stores


@pytest.mark.parametrize("param,value", [
    ("num_k_tiles", 0), ("num_k_tiles", -2), ("num_m_mmas", 0), ("num_n_mmas", -1),
    ("num_k_mmas", 0), ("MMA_M", 0), ("MMA_N", 24), ("MMA_M", 8), ("a_loads_per_thread", -1),
])
def test_parameter_validation_names_the_parameter(compile_named, param, value):
    with pytest.raises(ConfigError) as err:
        compile_named("default-matmul", **{param: value})
    assert param in str(err.value)
    assert err.value.field == param


def test_mixed_mma_shape_is_refused(compile_named):
    with pytest.raises(ConfigError) as err:
        compile_named("default-matmul", MMA_M=16, MMA_N=32)
    assert "MMA_N" in str(err.value) and "16x32" in str(err.value)


def test_double_buffer_target_is_refused(compile_named):
    with pytest.raises(ConfigError) as err:
        compile_named("default-matmul", target="mi355x")
    assert "single-buffer" in str(err.value)


def test_cli_error_exit_and_message(cli_run):
    run = cli_run(["compile", "default-matmul", "-p", "num_k_tiles=0", "--format", "json"])
    assert run.returncode == 2
    assert "num_k_tiles" in run.stderr
    assert "Traceback" not in run.stderr
