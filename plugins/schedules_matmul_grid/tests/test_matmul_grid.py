"""matmul-grid: ping-pong's body generalised to m x n, its sizes, compilation with EXACT_BLOCKS."""
from __future__ import annotations

import pytest

from pipeline_core.errors import ConfigError
from pipeline_core.ops import KOffset
from pipeline_core.testing import run_cli

from pipeline_core_schedules_matmul_grid import logical_body, logical_partition, ops_per_partition

SIZES = {(2, 2): 24, (2, 5): 48, (4, 4): 64, (4, 7): 100, (5, 8): 132}


def _counts(ops):
    """(globals, frags, MMAs) of logical ops (tags: loads 0/1, frags 3/4, MMA 5)."""
    return [sum(o.tag in tags for o in ops) for tags in ((0, 1), (3, 4), (5,))]


@pytest.mark.parametrize("grid,size", SIZES.items())
def test_body_sizes(grid, size, compile_grid):
    m, n = grid
    assert len(logical_body(m, n)) == 2 * ops_per_partition(m, n) == size
    assert _counts(logical_partition(0, m, n)) == [m + n, m + n, m * n]
    compiled = compile_grid(m, n)
    assert len(compiled.body) == size
    assert compiled.config.m_mmas == m and compiled.config.n_mmas == n
    assert len(compiled.plan.details.program.blocks) == 2 * m * n


def test_two_by_two_is_the_pingpong_body():
    from pipeline_core_schedules_pingpong import logical_body as pingpong_body

    assert logical_body(2, 2) == pingpong_body()


@pytest.mark.parametrize("max_globals", ["1", "0"])
def test_two_by_two_with_csp_or_exact_compiles_like_pingpong(compile_grid, max_globals):
    """Same body, edges and (for CSP and EXACT alike) the same order and entries as pingpong."""
    from pipeline_core.api import compile_named

    ref = compile_named("pingpong", target_args={"max_globals": max_globals})
    for strategy in ("CSP", "EXACT"):
        grid = compile_grid(2, 2, target_args={"max_globals": max_globals}, scheduling=strategy)
        assert grid.body == ref.body and grid.edges == ref.edges
        assert grid.order == ref.order
        assert (grid.prologue, grid.kernel, grid.epilogue) == (ref.prologue, ref.kernel, ref.epilogue)


def test_completion_loads_follow_pingpong():
    p0, p1 = logical_partition(0, 4, 3), logical_partition(1, 4, 3)
    assert (p0[0].stage, p0[0].subtile, p0[0].k_offset) == (1, 3, KOffset.K_PREV)
    assert (p1[0].stage, p1[0].subtile, p1[0].k_offset) == (0, 3, KOffset.K0)
    assert all(o.k_offset == KOffset.K1 for o in p1[1:7])


@pytest.mark.parametrize("m,n", [(2, 5), (3, 3), (4, 4), (4, 7), (5, 8)])
@pytest.mark.parametrize("penalty", [0, 16])
@pytest.mark.parametrize("max_globals", ["0", "1"])
def test_larger_grids_compile_with_the_default_exact_blocks(compile_grid, m, n, penalty, max_globals):
    # allow_unsafe: this is about the order; the grids' waits come from the reference's
    # ping-pong derivation, which races on some of them (test_ci_list.py)
    compiled = compile_grid(m, n, target_args={"max_globals": max_globals},
                            lds_contention_penalty=penalty, search_time_limit_ms=3000,
                            allow_unsafe=True)
    assert compiled.schedule_config.scheduling == "EXACT_BLOCKS"
    assert sorted(compiled.order) == list(range(len(compiled.body)))
    assert len(compiled.kernel) > 0 and len(compiled.prologue) > 0


@pytest.mark.parametrize("m,n", [(3, 3), (4, 4)])
def test_csp_orders_do_not_fit_larger_grids(compile_grid, m, n):
    """Why EXACT_BLOCKS is the default: producers-first orders bunch a stage's global loads."""
    from pipeline_core.errors import ProgramError

    with pytest.raises(ProgramError, match="slots"):
        compile_grid(m, n, target_args={"max_globals": "0"}, scheduling="CSP")


@pytest.mark.parametrize("params,field", [({"m": "1"}, "m"), ({"n": "0"}, "n"),
                                          ({"partitions": "3"}, "partitions"),
                                          ({"m": "17"}, "m")])
def test_bad_parameters(params, field):
    from pipeline_core.api import compile_named

    with pytest.raises(ConfigError) as info:
        compile_named("matmul-grid", params=params)
    assert info.value.field == field


def test_lgkm_params_are_written_into_the_schedule_config(compile_grid):
    compiled = compile_grid(4, 4, params={"lgkm_per_load_a": "8", "lgkm_per_load_b": "4"})
    assert (compiled.schedule_config.lgkm_per_load_a, compiled.schedule_config.lgkm_per_load_b) == (8, 4)
    from pipeline_core.api import compile_named

    with pytest.raises(ConfigError):
        compile_named("matmul-grid", config_overrides={"lgkm_per_load_a": "8"})


def test_cli_lists_compiles_and_analyzes(cli_json):
    listing = run_cli(["schedules"])
    assert listing.exit_code == 0 and "matmul-grid" in listing.stdout
    doc = cli_json(["compile", "matmul-grid", "-p", "m=4", "-p", "n=4", "--format", "json"])
    assert len(doc["body"]) == 64
    metrics = cli_json(["analyze", "matmul-grid", "-p", "m=4", "-p", "n=4",
                        "-c", "lds_contention_penalty=8", "--json"])
    assert metrics["ops"] == 64 and metrics["strategy"] == "EXACT_BLOCKS"
    assert metrics["makespan"] == metrics["lower_bounds"]["best"]
    assert metrics["mii"] == metrics["res_mii"] == 512
