"""A user's -c or -T that a schedule or another knob overrides is refused with exit 2 and the
fix, never silently dropped (issue 25; pipeline_core/overrides.py).  Each test applies the fix
the message names and compiles again."""
from __future__ import annotations

import attrs
import pytest

from pipeline_core import hookimpl
from pipeline_core.api import compile_named
from pipeline_core.config import BlockSizing, PipelineConfig, ScheduleConfig
from pipeline_core.errors import ConfigError, UnknownNameError
from pipeline_core.lowering.knob_fixes import knob_waits
from pipeline_core.plugins import PluginHost
from pipeline_core.schedule import ScheduleRecord

pingpong = pytest.importorskip("pipeline_core_schedules_pingpong.schedule")


def test_a_manual_wait_under_auto_waits_is_refused_naming_the_knob_that_replaces_it(cli):
    """The issue's case: -c wait_vm_last=0 alone was accepted and the derived 6 emitted."""
    refused = cli("compile", "pingpong", "-c", "wait_vm_last=0")
    assert refused.exit_code == 2
    assert refused.stderr == ("error: -c wait_vm_last=0 is invalid for schedule pingpong: "
                              "auto_waits=true replaces it by the derived last-block wait: add "
                              "-c auto_waits=false to set it by hand\n")
    assert cli("compile", "pingpong", "-c", "auto_waits=false", "-c", "wait_vm_last=0").exit_code == 0
    compiled = compile_named("pingpong", config_overrides={"auto_waits": "false",
                                                           "wait_vm_last": "0"})
    lasts = [s for s in knob_waits(compiled.plan.details.result, compiled.config,
                                   compiled.kernel, None) if s.knob == "wait_vm_last"]
    assert lasts and all(compiled.kernel[s.index].op.wait_value == 0 for s in lasts
                         if s.index is not None)


def test_the_first_block_wait_under_auto_waits_is_refused_too(cli):
    refused = cli("compile", "pingpong", "-c", "wait_lgkm_first=2")
    assert refused.exit_code == 2 and "add -c auto_waits=false" in refused.stderr
    assert "derived first-block wait" in refused.stderr


def test_a_drain_mask_under_auto_drain_is_refused_and_the_named_fix_applies_it(cli):
    refused = cli("compile", "pingpong", "-c", "auto_drain=true", "-c", "drain_lgkm_mask=3")
    assert refused.exit_code == 2
    assert "auto_drain=true replaces it by the derived drain mask: add -c auto_drain=false" \
        in refused.stderr
    given = {"auto_drain": "false", "drain_lgkm_mask": "3"}
    compiled = compile_named("pingpong", config_overrides=given, allow_unsafe=True)
    blocks = compiled.plan.details.program.blocks
    assert [b.drain_lgkm_before_loads for b in blocks[:2]] == [
        b.has_frag and b.has_global for b in blocks[:2]]
    # without auto_waits, auto_drain does nothing: the mask is the user's
    compile_named("pingpong", config_overrides={"auto_waits": "false", "auto_drain": "true",
                                                "drain_lgkm_mask": "3"}, allow_unsafe=True)


class _Overriding:
    """Ping-pong variants whose config() / schedule_config() override the user."""

    @hookimpl
    def pipeline_core_register_schedules(self):
        def no_cap(ctx):
            s = pingpong.make_pingpong(ctx)
            return attrs.evolve(s, target=attrs.evolve(
                s.target, pipeline=s.target.pipeline.evolve(max_globals=0)))

        def own_knobs(ctx):
            s = pingpong.make_pingpong(ctx)
            return attrs.evolve(s, sched=pingpong.default_schedule_config())  # drops the -c

        return [ScheduleRecord("pingpong-no-cap", "ping-pong without a globals cap", no_cap,
                               params=pingpong.PARAMS, default_target="mi355x"),
                ScheduleRecord("pingpong-own-knobs", "ping-pong ignoring -c", own_knobs,
                               params=pingpong.PARAMS, default_target="mi355x")]


@pytest.fixture(scope="module")
def host():
    return PluginHost(extra_plugins=[("overriding", _Overriding())])


def test_a_target_arg_the_schedules_config_overrides_is_refused(host):
    """The issue's case: a schedule's config() setting max_globals dropped -T max_globals=1."""
    with pytest.raises(ConfigError) as info:
        compile_named("pingpong-no-cap", target_args={"max_globals": "1"}, host=host)
    assert str(info.value) == (
        "-T max_globals=1 is invalid for schedule pingpong-no-cap: the schedule's config() sets "
        "block_sizing.max_globals=0 over the target's value: drop -T max_globals, or have "
        "config() keep the target's block_sizing.max_globals (docs/guide/concepts.md, \"Block "
        "sizing\")")
    assert compile_named("pingpong-no-cap", host=host).config.block_sizing.max_globals == 0
    # the value the schedule uses anyway is no conflict, and -T the schedule keeps is obeyed
    compile_named("pingpong-no-cap", target_args={"max_globals": "0"}, host=host)
    kept = compile_named("pingpong", target_args={"vm_per_load_a": "8"}, host=host)
    assert kept.config.vm_per_load_a == 8


def test_a_knob_the_schedule_config_overrides_is_refused(host):
    with pytest.raises(ConfigError, match=r"^-c scheduling=IDENTITY is invalid for schedule "
                                          r"pingpong-own-knobs: the schedule's schedule_config\(\) "
                                          r"sets scheduling=CSP over it .*: drop -c scheduling$"):
        compile_named("pingpong-own-knobs", config_overrides={"scheduling": "IDENTITY"},
                      host=host)
    compile_named("pingpong-own-knobs", host=host)  # the fix: drop it
    compile_named("pingpong-own-knobs", config_overrides={"scheduling": "csp"}, host=host)


def test_pipeline_config_evolve_sets_a_nested_records_field_by_its_name():
    base = PipelineConfig()
    assert base.evolve(max_globals=1).block_sizing == BlockSizing(4, 2, 1)
    assert base.evolve(max_globals=1, heavy=5, depth=3) == attrs.evolve(
        base, depth=3, block_sizing=BlockSizing(5, 2, 1))
    with pytest.raises(UnknownNameError, match="Did you mean 'max_globals'"):
        base.evolve(maxglobals=1)
    with pytest.raises(ConfigError, match=r"either block_sizing= or its fields \(max_globals\)"):
        base.evolve(block_sizing=BlockSizing(), max_globals=1)
    with pytest.raises(ConfigError, match=r"max_globals = 3 is invalid"):
        base.evolve(max_globals=3)
    assert ScheduleConfig().evolve(wait_vm_last=0).wait_vm_last == 0


@pytest.mark.parametrize("knob", ["scheduling=GREEDY", "wait_vm_last=0", "minimal_barriers=true",
                                  "sched_barrier_mask=0"])
def test_a_block_knob_on_a_single_buffer_schedule_is_refused(cli, knob):
    """default-matmul (depth 1) emitted the same entries whatever these knobs said."""
    pytest.importorskip("pipeline_core_amd_mi355x")
    refused = cli("compile", "default-matmul", "-c", knob)
    assert refused.exit_code == 2
    key = knob.split("=")[0]
    assert refused.stderr == (f"error: -c {knob} is invalid for schedule default-matmul: a "
                              "single-buffer schedule (pipeline depth 1) keeps the body's order "
                              "and has no block template, so this knob changes nothing: drop "
                              f"-c {key}\n")
    # a knob it reads stays accepted: analyze's LDS-port bound takes the penalty
    assert cli("compile", "default-matmul", "-c", "lds_contention_penalty=8").exit_code == 0


def test_a_fallback_knob_the_pipeline_config_overrides_is_refused(cli):
    """4wave's config() carries lgkm_per_load_a=4; ScheduleConfig's is read only where that is 0."""
    pytest.importorskip("pipeline_core_schedules_4wave")
    refused = cli("compile", "4wave", "-c", "lgkm_per_load_a=3")
    assert refused.exit_code == 2
    assert ("the schedule's config() sets lgkm_per_load_a=4, and this knob is read only where "
            "that is 0: drop -c lgkm_per_load_a") in refused.stderr
    assert cli("compile", "4wave").exit_code == 0
