"""The example plugin's own tests, written with pipeline_core.testing as a third party would."""
from __future__ import annotations

import json
import re

from hello_schedule import plugin
from pipeline_core.api import compile_named
from pipeline_core.ops import OpRole
from pipeline_core.testing import run_cli

#: words of one GPU family that a third-party target's output must not contain
AMD_WORDS = re.compile(r"lgkm|vmcnt|vm_cost|vm_per|wait_vm|s_barrier|s_setprio|s_waitcnt|"
                       r"set_prio|sched_barrier|mi355|cdna|gfx9", re.IGNORECASE)


# allow_unsafe: until the target-neutral wait derivation gives this target a sync model, a
# plain compile refuses "hello" as unprovable (tests/test_ci_list.py asserts the refusal)


def test_schedule_compiles_with_only_this_plugin(pipeline_host):
    host = pipeline_host(plugin)
    compiled = compile_named("hello", host=host)
    assert len(compiled.body) == 5 and compiled.plan.lowering == "ring"
    kernel = [e.op for e in compiled.kernel]
    assert [o.role for o in kernel].count(OpRole.COMPUTE) == 3  # the ring's 3 stages
    # waits are derived from the toy sync model: one copy group may stay in flight
    assert [o.wait_value for o in kernel if o.tag == plugin.WAIT_COPY] == [1, 1, 1]
    assert [e.op.wait_value for e in compiled.epilogue if e.op.tag == plugin.WAIT_COPY] == [1, 0]


def test_stage_count_reaches_the_derived_waits(pipeline_host):
    host = pipeline_host(plugin)
    compiled = compile_named("hello", host=host, target_args={"stages": "5"})
    assert {e.op.wait_value for e in compiled.kernel if e.op.tag == plugin.WAIT_COPY} == {3}
    assert sum(e.op.tag == plugin.COMMIT_COPY for e in compiled.prologue) == 4


def test_cli_compiles_checks_and_exports_in_the_targets_own_words(pipeline_cli, tmp_path):
    listing = pipeline_cli(["schedules", "--json"])
    assert listing.exit_code == 0
    rows = {r["name"]: r for r in json.loads(listing.stdout)["schedules"]}
    assert rows["hello"]["provider"] == "pipeline-core-hello-schedule"
    outputs = []
    for argv in (["compile", "hello", "--format", "json"], ["compile", "hello"],
                 ["check", "hello"], ["check", "hello", "--format", "json"],
                 ["check", "hello", "--warps-per-group", "4"], ["analyze", "hello"]):
        result = run_cli(argv)
        assert result.exit_code == 0, (argv, result.stderr)
        outputs.append(result.stdout)
    assert outputs[2].startswith("hello: SAFE") and outputs[4].startswith("hello: SAFE")
    assert "copy.wait" in outputs[1] and "sync.threads" in outputs[1]  # its ISA forms
    for fmt in ("trace", "dot", "png"):
        out = tmp_path / f"hello.{fmt}"
        result = run_cli(["export", "hello", "--format", fmt, "-o", str(out)])
        assert result.exit_code == 0, result.stderr
        outputs.append(out.read_bytes().decode("latin-1"))
    for text in outputs:
        if text.lstrip().startswith("{"):  # a JSON document: its generator lists the installed
            doc = json.loads(text)         # plugins (AMD ones too), which is not the schedule's
            doc.pop("generator", None)     # vocabulary
            text = json.dumps(doc)
        assert not AMD_WORDS.search(text), AMD_WORDS.search(text)
