"""4-wave through the real CLI: golden parity, shape-only runs, launch defaults, refusals."""
from __future__ import annotations

import pytest

from pipeline_core_amd_mi355x import testing as mt


@pytest.mark.parametrize("case", ["fourwave_fp8", "fourwave_fp8_bm64"])
def test_golden_parity_through_the_cli(golden, cli_json, case):
    g = golden(case)
    got = cli_json(g["cli"] + list(mt.REFERENCE_FLAGS))
    assert mt.golden_diffs(g, got) == []
    # not compared (docs/document-format.md), but the reference's intermediate values must match too
    assert mt.diff(g["explicit_blocks"], got["explicit_blocks"], "explicit_blocks") == []
    assert mt.diff(g["bootstrap_frags"], got["bootstrap_frags"], "bootstrap_frags") == []


@pytest.mark.parametrize("case,argv", [
    ("fourwave_fp8", ["compile", "4wave"]),
    ("fourwave_fp8", ["compile", "4wave", "--target", "mi355x", "-p", "dtype=fp8", "-p", "BM=128",
                      "-p", "BN=128", "-p", "BK=128", "-p", "MMA_M=16", "-p", "MMA_N=16",
                      "-p", "MMA_K=128"]),
    ("fourwave_fp8_bm64", ["compile", "4wave", "-p", "BM=64", "-p", "BN=64"]),
])
def test_shape_only_equals_the_explicit_form(golden, cli_json, case, argv):
    assert mt.golden_diffs(golden(case), cli_json(argv + list(mt.REFERENCE_FLAGS))) == []


def test_builder_defaults(cli_json):
    """docs/guide/reference-behaviours.md, "The 4-wave configs": vm 4/4 and max_globals 1 from the target, lgkm from the geometry:
    main wait 16, bootstrap waits 28/24, a 48-entry kernel, mask 0b01010101, wrap off."""
    doc = cli_json(["compile", "4wave", "-p", "launch_defaults=false"])
    c, s = doc["config"], doc["schedule_config"]
    assert (c["vm_per_load_a"], c["vm_per_load_b"], c["block_sizing"]["max_globals"]) == (4, 4, 1)
    assert (c["lgkm_per_load_a"], c["lgkm_per_load_b"]) == (4, 4)
    assert (s["sched_barrier_mask"], s["wrap_waits_with_sched_barrier"]) == (0b01010101, False)
    assert doc["counts"]["kernel"] == 48
    waits = [e["op"]["wait_value"] for e in doc["prologue"] if e["op"]["tag"] == 129]
    assert waits == [28, 24]
    assert doc["blocks"][0]["entry_wait"]["wait_value"] == 16


def test_non_square_bootstrap_waits_are_per_channel(cli_json):
    """docs/guide/reference-behaviours.md, "Bootstrap waits": 128x256 gives vm 2/4 and bootstrap waits 22/18."""
    doc = cli_json(["compile", "4wave", "-p", "BN=256"])
    assert (doc["config"]["vm_per_load_a"], doc["config"]["vm_per_load_b"]) == (2, 4)
    assert [e["op"]["wait_value"] for e in doc["prologue"] if e["op"]["tag"] == 129] == [22, 18]
    assert doc["blocks"][0]["entry_wait"]["wait_value"] == 12


def test_explicit_target_values_win(cli_json):
    doc = cli_json(["compile", "4wave", "-T", "vm_per_load_a=3", "-c", "sched_barrier_mask=0"])
    assert (doc["config"]["vm_per_load_a"], doc["config"]["vm_per_load_b"]) == (3, 2)
    assert doc["schedule_config"]["sched_barrier_mask"] == 0
    assert doc["schedule_config"]["wrap_waits_with_sched_barrier"] is True


@pytest.mark.parametrize("strategy", ["GREEDY", "CSP"])
def test_greedy_and_csp_are_refused_with_the_reason(cli_run, strategy):
    run = cli_run(["compile", "4wave", "-c", f"scheduling={strategy}", "--format", "json"])
    assert run.returncode == 2
    assert "scheduling" in run.stderr and "IDENTITY" in run.stderr
    assert "20 of 24" in run.stderr
    assert "Traceback" not in run.stderr


def test_identity_and_agreeing_forced_knobs_are_accepted(golden, cli_json):
    doc = cli_json(["compile", "4wave", "-c", "scheduling=IDENTITY", "-c", "minimal_barriers=true",
                    *mt.REFERENCE_FLAGS])
    assert mt.golden_diffs(golden("fourwave_fp8"), doc) == []


@pytest.mark.parametrize("knob", ["minimal_barriers", "omit_mma_set_prio", "inter_block_lgkm_drain",
                                  "partial_prologue_drain"])
def test_contradicting_a_forced_knob_is_refused(cli_run, knob):
    run = cli_run(["compile", "4wave", "-c", f"{knob}=false", "--format", "json"])
    assert run.returncode == 2
    assert knob in run.stderr


@pytest.mark.parametrize("args,param", [
    (["-p", "dtype=int8"], "dtype"),
    (["-p", "BM=96"], "BM"),
    (["-p", "BM=32"], "BM"),
    (["-p", "BN=32"], "BN"),
    (["-p", "BN=0"], "BN"),
    (["-p", "BK=64"], "BK"),
    (["-p", "MMA_M=32", "-p", "BM=64"], "BM"),
    (["-p", "MMA_K=0"], "MMA_K"),
    (["-p", "dtype=bf16", "-p", "BK=32", "-p", "MMA_K=32", "-p", "BM=64"], "BM"),
])
def test_invalid_geometry_names_the_parameter(cli_run, args, param):
    run = cli_run(["compile", "4wave"] + args + ["--format", "json"])
    assert run.returncode == 2, run.stdout[:200]
    assert param in run.stderr
    assert "Traceback" not in run.stderr


def test_bf16_geometry_compiles(cli_json):
    doc = cli_json(["compile", "4wave", "-p", "dtype=bf16", "-p", "BK=64", "-p", "MMA_K=32"])
    # BF16: simd 8, 8 loads per row, 32 rows per iteration -> vm 2/2; frag_w 8 -> 1 ds_read,
    # quadrant 2 x num_k_mmas 2 -> lgkm 4/4; 2*2*2 = 8 MMAs per block -> max_globals 1
    c = doc["config"]
    assert (c["vm_per_load_a"], c["vm_per_load_b"], c["lgkm_per_load_a"], c["lgkm_per_load_b"]) == (2, 2, 4, 4)
    assert c["block_sizing"]["max_globals"] == 1
    assert doc["counts"]["edges"] == 64
