"""Compile proves what it emits (pipeline_core/proof.py, docs/guide/checker.md, "Compile proves what it emits")."""
from __future__ import annotations

import json

import pytest

from pipeline_core.api import compile_named
from pipeline_core.check.verdict import HazardKind
from pipeline_core.proof import UnprovableScheduleError, UnsafeScheduleError, prove
from pipeline_core.testing import run_cli

RACING = ("compile", "pingpong", "-c", "minimal_barriers=true")


@pytest.mark.parametrize("command", ["compile", "analyze", "export"])
def test_every_compiling_command_refuses_an_unsafe_schedule_with_exit_1(command, tmp_path):
    argv = [command, *RACING[1:]]
    if command == "export":
        argv += ["--format", "dot", "-o", str(tmp_path / "g.dot")]
    result = run_cli(argv)
    assert result.exit_code == 1, result.stderr
    assert result.stdout == ""
    err = result.stderr.strip()
    assert err.startswith("error: compile refused schedule pingpong: the configuration sets -c "
                          "minimal_barriers=true"), err
    assert "; UNSAFE under 2 warp groups x 4 warps" in err
    assert "fix: " in err and "-c minimal_barriers=true" in err and "--allow-unsafe" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_allow_unsafe_emits_the_schedule_with_its_hazards_listed():
    result = run_cli([*RACING, "--format", "json", "--allow-unsafe"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    kinds = {h["kind"] for h in doc["hazards"]}
    assert "LDS_WAR" in kinds and kinds <= {k.value for k in HazardKind}
    assert all(h["message"] and h["phase"] in ("prologue", "kernel", "epilogue")
               for h in doc["hazards"])
    assert doc["execution"] == {"groups": 2, "warps_per_group": 4}


def test_a_proven_schedule_carries_no_hazards_key_and_its_proof():
    compiled = compile_named("pingpong")
    assert compiled.proof.safe and compiled.hazards == []
    doc = json.loads(run_cli(["compile", "pingpong", "--format", "json"]).stdout)
    assert "hazards" not in doc


def test_the_api_raises_with_the_verdict_and_the_knob():
    with pytest.raises(UnsafeScheduleError) as err:
        compile_named("pingpong", config_overrides={"minimal_barriers": "true"})
    assert err.value.knobs == ("-c minimal_barriers=true",)
    assert err.value.verdict is not None and err.value.verdict.warps_per_group == 4


def test_a_target_without_a_sync_model_is_refused_naming_it():
    from plugin_fixtures import Provider

    from pipeline_core.testing import fresh_host

    host = fresh_host(Provider())  # tiny-gpu declares no sync model
    with pytest.raises(UnprovableScheduleError, match="target 'tiny-gpu' declares no sync model") as err:
        compile_named("tiny", host=host)
    assert err.value.target == "tiny-gpu"
    compiled = compile_named("tiny", host=host, allow_unsafe=True)
    assert compiled.hazards == [{"kind": "UNPROVEN", "message": compiled.proof.unprovable}]


def test_check_judges_what_a_plain_compile_emits():
    """`check` never refuses and never asks for the reference: 4-wave is checked repaired."""
    run = run_cli(["check", "4wave"])
    assert run.exit_code == 0, run.stdout
    assert run.stdout.startswith("4wave: SAFE (1 warp group x 4 warps, 12 kernel iterations, counter "
                                 "model amd-mi355x, assuming in-order LDS, assuming the compiler "
                                 "interlocks fragment registers)")
    run = run_cli(["check", "4wave", "-p", "epilogue_guard=off"])
    assert run.exit_code == 1
    assert run.stdout.startswith("4wave: UNSAFE: LDS_RAW at epilogue[1] (group 0 warp 0)")
    assert "  assumptions: 1 warp group x 4 warps" in run.stdout


@pytest.mark.parametrize("argv,guard", [
    ([], True), (["--allow-unsafe"], False), (["-p", "epilogue_guard=on", "--allow-unsafe"], True),
    (["-p", "epilogue_guard=off", "--allow-unsafe"], False)])
def test_the_4wave_epilogue_guard_rule(argv, guard):
    doc = json.loads(run_cli(["compile", "4wave", "--format", "json", *argv]).stdout)
    first = [(e["op"]["tag_name"], e["op"]["wait_value"]) for e in doc["epilogue"][:2]]
    assert (first == [("WAIT_VM", 0), ("BARRIER", 0)]) is guard
    assert ("hazards" in doc) is (not guard)
    assert doc["counts"]["epilogue"] == (34 if guard else 32)


def test_the_guard_off_is_refused_without_allow_unsafe():
    run = run_cli(["compile", "4wave", "-p", "epilogue_guard=off"])
    assert run.exit_code == 1
    assert "LDS_RAW at epilogue[1]" in run.stderr


def test_declared_warp_counts():
    for name, groups, warps in (("pingpong", 2, 4), ("matmul-grid", 2, 4), ("4wave", 1, 4),
                                ("default-matmul", 1, 4)):
        compiled = compile_named(name)
        assert (compiled.execution.groups, compiled.execution.warps_per_group) == (groups, warps)
        assert prove(compiled).verdict.warps_per_group == warps


def test_a_racing_knobs_refusal_says_the_way_out_before_the_hazards(cli):
    """Issue 39: the refusal ran to 1,000 characters with its way out last; the knob to drop
    (or --allow-unsafe) now comes before the hazard it caused."""
    result = cli("compile", "pingpong", "-c", "minimal_barriers=true")
    assert result.exit_code == 1
    line, = result.stderr.strip().splitlines()
    way_out = line.index("drop -c minimal_barriers=true, or pass --allow-unsafe")
    assert way_out < line.index("UNSAFE under") and way_out < 200
