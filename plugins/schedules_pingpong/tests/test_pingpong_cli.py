"""Ping-pong through the real CLI: golden parity, tile shapes and launch defaults, validation."""
from __future__ import annotations

import pytest

from pipeline_core.errors import ConfigError

from pipeline_core_amd_mi355x import testing as mt

BF16_SHAPE = ["-p", "dtype=bf16", "-p", "BM=256", "-p", "BN=256", "-p", "BK=64",
              "-p", "MMA_M=16", "-p", "MMA_N=16", "-p", "MMA_K=32"]
FP8_SHAPE = ["-p", "dtype=fp8", "-p", "BM=256", "-p", "BN=256", "-p", "BK=128",
             "-p", "MMA_M=16", "-p", "MMA_N=16", "-p", "MMA_K=128"]


@pytest.mark.parametrize("case", ["pingpong_bf16", "pingpong_testcfg_identity_manual_waits"])
def test_golden_parity_through_the_cli(golden, cli_json, case):
    g = golden(case)
    assert mt.golden_diffs(g, cli_json(g["cli"])) == []


def test_bf16_shape_only_equals_the_explicit_form(golden, cli_json):
    """docs/guide/reference-behaviours.md, "Geometry factors": BF16 256x256x64, MMA 16x16x32 -> vm 2/2, lgkm 8/4, max_globals 1 == pingpong_bf16."""
    g = golden("pingpong_bf16")
    assert mt.golden_diffs(g, cli_json(["compile", "pingpong", "--target", "mi355x"] + BF16_SHAPE)) == []
    # dtype alone uses the production BF16 tile
    assert mt.golden_diffs(g, cli_json(["compile", "pingpong", "-p", "dtype=bf16"])) == []


def test_no_shape_keeps_the_reference_defaults(golden, cli_json):
    """The reference defaults (vm 4/4, max_globals 1, lgkm 0/0) hold unless a shape is given."""
    g = golden("pingpong_testcfg_identity_manual_waits")
    doc = cli_json(["compile", "pingpong", "-p", "fp8=false", "-c", "scheduling=IDENTITY",
                    "-c", "auto_waits=false"])
    assert mt.golden_diffs(g, doc) == []


def _fp8_expectations(doc, vm_a, vm_b, lgkm_a, lgkm_b, max_globals):
    c, s = doc["config"], doc["schedule_config"]
    assert (c["vm_per_load_a"], c["vm_per_load_b"], c["block_sizing"]["max_globals"]) == (vm_a, vm_b, max_globals)
    assert (c["lgkm_per_load_a"], c["lgkm_per_load_b"]) == (0, 0)  # docs/guide/reference-behaviours.md, "Geometry factors"
    assert (s["lgkm_per_load_a"], s["lgkm_per_load_b"]) == (lgkm_a, lgkm_b)


def test_fp8_production_shape(cli_json):
    """FP8 256x256x128, MMA 16x16x128 -> vm 2/2, lgkm 8/4, max_globals 0; epilogue 57; waits 8/6."""
    doc = cli_json(["compile", "pingpong"] + FP8_SHAPE)
    _fp8_expectations(doc, 2, 2, 8, 4, 0)
    assert doc["counts"]["kernel"] == 70 and doc["counts"]["epilogue"] == 57
    assert (doc["wait_lgkm_first"], doc["wait_vm_last"]) == (8, 6)
    globals_per_block = [b["num_globals"] for b in doc["blocks"]]
    assert globals_per_block == [1, 0, 2, 1, 1, 0, 2, 1]
    assert doc["scheduler"]["order"] == list(range(24))
    # dtype alone uses the production FP8 tile; so does fp8=true with launch_defaults=true
    assert mt.same_schedule_diffs(doc, cli_json(["compile", "pingpong", "-p", "dtype=fp8"])) == []
    assert mt.same_schedule_diffs(doc, cli_json(["compile", "pingpong", "-p", "fp8=true",
                                                 "-p", "launch_defaults=true"])) == []


def test_fp8_128x256(cli_json):
    doc = cli_json(["compile", "pingpong", "-p", "dtype=fp8", "-p", "BM=128", "-p", "BN=256",
                    "-p", "BK=128", "-p", "MMA_K=128"])
    _fp8_expectations(doc, 1, 2, 4, 4, 0)


def test_explicit_values_win_over_derived(cli_json):
    doc = cli_json(["compile", "pingpong"] + FP8_SHAPE + ["-T", "max_globals=1", "-T", "vm_per_load_b=3",
                                                          "-p", "lgkm_per_load_a=2"])
    _fp8_expectations(doc, 2, 3, 2, 4, 1)


def test_launch_defaults_false_keeps_reference_defaults(cli_json):
    doc = cli_json(["compile", "pingpong", "-p", "launch_defaults=false"] + FP8_SHAPE)
    _fp8_expectations(doc, 4, 4, 0, 0, 1)


@pytest.mark.parametrize("args,param", [
    (["-p", "dtype=int8"], "dtype"),
    (["-p", "BM=200"], "BM"),
    (["-p", "BN=192"], "BN"),
    (["-p", "BK=48"], "BK"),
    (["-p", "BM=0"], "BM"),
    (["-p", "dtype=fp8", "-p", "MMA_K=96"], "BK"),
    (["-p", "MMA_M=32", "-p", "BM=64"], "BM"),
    (["-p", "dtype=bf16", "-p", "fp8=true"], "fp8"),
    (["-p", "lgkm_per_load_a=-1"], "lgkm_per_load_a"),
    (["-c", "lgkm_per_load_a=4"], "lgkm_per_load_a"),
])
def test_invalid_parameters_are_clear_errors(cli_run, args, param):
    run = cli_run(["compile", "pingpong"] + args + ["--format", "json"])
    assert run.returncode == 2, run.stdout[:200]
    assert param in run.stderr
    assert "Traceback" not in run.stderr


def test_single_buffer_target_is_refused(compile_named):
    with pytest.raises(ConfigError) as err:
        compile_named(target="mi355x-single-buffer")
    # the ping-pong family joined the named targets (issue 39)
    assert ("made for targets mi355x, h100-pingpong and target family ping-pong, not "
            "mi355x-single-buffer") in str(err.value)


def test_a_target_of_another_shape_under_a_declared_name_is_refused_by_the_factory():
    """The factory's own shape check still guards a target the schedule names but another
    plugin provides with a different shape (here: a single-buffer profile named mi355x)."""
    from pipeline_core import hookimpl
    from pipeline_core.api import compile_named
    from pipeline_core.schedule import TargetRecord
    from pipeline_core.testing import fresh_host
    from pipeline_core_amd_mi355x import mi355x_single_buffer_target
    from pipeline_core_schedules_pingpong import plugin as pingpong

    class Impostor:
        @hookimpl
        def pipeline_core_register_targets(self):
            return [TargetRecord("mi355x", "single buffer", mi355x_single_buffer_target)]

    with pytest.raises(ConfigError) as err:
        compile_named("pingpong", target="mi355x", host=fresh_host(pingpong, Impostor()))
    assert "double-buffer" in str(err.value)


@pytest.mark.parametrize("strategy", ["IDENTITY", "GREEDY", "CSP"])
@pytest.mark.parametrize("auto_waits", ["true", "false"])
def test_every_strategy_compiles(compile_named, strategy, auto_waits):
    c = compile_named(params={"lgkm_per_load_a": 8, "lgkm_per_load_b": 4},
                      overrides={"scheduling": strategy, "auto_waits": auto_waits})
    assert len(c.kernel) == 70 and len(c.prologue) == 10
    assert sum(1 for e in c.kernel if e.op.tag < 128) == 24


@pytest.mark.parametrize("overrides", [
    {"auto_waits": "false", "wait_lgkm_first": 4, "wait_vm_last": 10},
    {"auto_waits": "false", "wait_lgkm_first": 255},
    {"drain_lgkm_mask": 0b11011101},
    {"auto_drain": "true"},
    {"lds_contention_penalty": 15, "scheduling": "GREEDY"},
    {"lds_contention_penalty": 15, "scheduling": "IDENTITY"},
    {"lgkm_after_last": "true", "sched_barrier_mask": 0xFF},
    {"global_before_frag": "true"},
    {"wrap_waits_with_sched_barrier": "true"},
])
def test_schedule_config_knobs_compile(compile_named, overrides):
    c = compile_named(params={"lgkm_per_load_a": 8, "lgkm_per_load_b": 4}, overrides=overrides)
    assert sum(1 for e in c.kernel if e.op.tag < 128) == 24


@pytest.mark.parametrize("knob", ["barrier_before_pre_ops", "minimal_barriers",
                                  "partial_prologue_drain"])
def test_racing_knobs_are_refused_naming_the_knob_unless_allowed(compile_named, knob):
    from pipeline_core.proof import UnsafeScheduleError

    params = {"lgkm_per_load_a": 8, "lgkm_per_load_b": 4}
    with pytest.raises(UnsafeScheduleError, match=f"-c {knob}=true, and this knob is known") as err:
        compile_named(params=params, overrides={knob: "true"})
    assert err.value.verdict is not None and not err.value.verdict.safe
    c = compile_named(params=params, overrides={knob: "true"}, allow_unsafe=True)
    assert c.hazards and c.hazards[0]["kind"] == err.value.verdict.first.kind.value


def test_csp_with_lds_contention_penalty_stops_at_its_budget(compile_named):
    """With a penalty the greedy seed misses the lower bound and the reference's unpruned
    search would run for hours; the search budget returns the best order found so far."""
    c = compile_named(overrides={"lds_contention_penalty": 15, "search_time_limit_ms": 300})
    assert sum(1 for e in c.kernel if e.op.tag < 128) == 24


def test_manual_waits_are_in_the_kernel(compile_named):
    c = compile_named(overrides={"scheduling": "IDENTITY", "auto_waits": "false",
                                 "wait_lgkm_first": 4, "wait_vm_last": 10})
    waits = [(e.op.tag, e.op.wait_value) for e in c.kernel if e.op.tag in (129, 130) and e.op.wait_value]
    assert (130, 4) in waits and (129, 10) in waits


def test_identity_order_violates_only_the_known_coarse_lds_anti_edges(compile_named):
    """docs/guide/reference-behaviours.md, "Coarse ANTI edges": IDENTITY violates the coarse LDS-ANTI edges 7->5 and 19->17.

    The rule matches channel and stage but not subtile, so these are not real
    hazards (the fragment reads subtile 1, the load overwrites subtile 0); the compile
    must succeed and keep the golden output.
    """
    from pipeline_core.graph import order_violations
    from pipeline_core.ops import DepKind

    c = compile_named(overrides={"scheduling": "IDENTITY", "auto_waits": "false"})
    violations = order_violations(c.edges, c.order)
    pairs = sorted((e.producer, e.consumer) for _, e in violations)
    assert pairs == [(7, 5), (19, 17)]
    for _, e in violations:
        assert e.kind == DepKind.ANTI and e.distance == 0
        p, q = c.body[e.producer], c.body[e.consumer]
        assert (p.channel, p.stage) == (q.channel, q.stage) and p.subtile != q.subtile
