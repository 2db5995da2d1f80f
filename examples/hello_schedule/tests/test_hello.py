"""The example plugin's own tests, written with pipeline_core.testing as a third party would."""
from __future__ import annotations

import json

from hello_schedule import plugin
from pipeline_core.api import compile_named
from pipeline_core.ops import OpRole
from pipeline_core.testing import run_cli


# allow_unsafe: until the target-neutral wait derivation gives this target a sync model, a
# plain compile refuses "hello" as unprovable (tests/test_ci_list.py asserts the refusal)


def test_schedule_compiles_with_only_this_plugin(pipeline_host):
    host = pipeline_host(plugin)
    compiled = compile_named("hello", host=host, allow_unsafe=True)
    assert len(compiled.body) == 10
    assert compiled.config.total_blocks == 2
    roles = [e.op.role for e in compiled.kernel]
    assert roles.count(OpRole.COMPUTE) == 2
    # each partition's single block waits for its own half's lgkm before the MMA
    assert any(e.op.tag == 130 for e in compiled.kernel)
    assert [e.op.vm_cost for e in compiled.prologue if e.op.role == OpRole.GLOBAL_LOAD] == [1, 1, 1]


def test_target_parameter_reaches_the_prologue(pipeline_host):
    host = pipeline_host(plugin)
    compiled = compile_named("hello", host=host, target_args={"vm_per_load": "3"},
                             allow_unsafe=True)
    assert {e.op.vm_cost for e in compiled.prologue if e.op.role == OpRole.GLOBAL_LOAD} == {3}


def test_installed_entry_point_is_discovered_by_the_cli(pipeline_cli):
    listing = pipeline_cli(["schedules", "--json"])
    assert listing.exit_code == 0
    rows = {r["name"]: r for r in json.loads(listing.stdout)}
    assert rows["hello"]["provider"] == "pipeline-core-hello-schedule"
    result = run_cli(["compile", "hello", "--format", "json", "--allow-unsafe"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["counts"]["kernel"] > 0
