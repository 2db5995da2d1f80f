"""Every fix a compile refusal names is one the user can type (issue 25).

The checker names an entry and a value ("lower wait_copy at kernel[21] from 12 to 0"); the
refusal adds the ``-c`` flags that set that wait (pipeline_core/lowering/knob_fixes.py), or the schedule
method that decides it.  Each test applies what the message says and compiles again: the
compile succeeds or moves on to another finding.
"""
from __future__ import annotations

import re

import pytest

from pipeline_core import hookimpl
from pipeline_core.api import compile_named
from pipeline_core.compiler import compile_schedule
from pipeline_core.config import TargetProfile
from pipeline_core.plugins import PluginHost, default_host
from pipeline_core.proof import UnsafeScheduleError
from pipeline_core.schedule import ScheduleRecord, TargetRecord
from reference_bodies import mi355x_cost_model, mi355x_double_buffer

pingpong = pytest.importorskip("pipeline_core_schedules_pingpong.schedule")
foreign = pytest.importorskip("export.test_text_foreign_target")

FLAGS = re.compile(r"apply it with ((?:-c \S+=\S+ ?)+)")


class _ForeignProvider:
    """A target of another GPU (out-of-order copy channel, no hints: the foreign target of
    tests/export/test_text_foreign_target.py) and the ping-pong schedule declared for any target."""

    @hookimpl
    def pipeline_core_register_targets(self):
        return [TargetRecord("foreign-gpu", "an imaginary GPU", lambda: TargetProfile(
            mi355x_cost_model(), mi355x_double_buffer(), sync=foreign.FOREIGN))]

    @hookimpl
    def pipeline_core_register_schedules(self):
        return [ScheduleRecord("pingpong-anywhere", "ping-pong on any target",
                               pingpong.make_pingpong, params=pingpong.PARAMS,
                               default_target="foreign-gpu")]


@pytest.fixture(scope="module")
def host():
    return PluginHost(extra_plugins=[("foreign", _ForeignProvider())])


def _refusal(name: str, overrides: dict[str, str], host, **kw) -> str:
    with pytest.raises(UnsafeScheduleError) as info:
        compile_named(name, config_overrides=overrides, host=host, **kw)
    return str(info.value)


def _flags(message: str) -> dict[str, str]:
    match = FLAGS.search(message)
    assert match, message
    return dict(kv.strip().split("=", 1) for kv in match.group(1).split("-c ")[1:])


def test_a_derived_wait_too_loose_for_the_target_names_the_flags_that_set_it(host):
    """The issue's case: auto_waits derives wait_vm_last=12 on a channel that completes out of
    order; -c wait_vm_last=0 alone would be overridden, so the flags turn auto_waits off and
    keep the first-block wait the kernel emitted."""
    message = _refusal("pingpong-anywhere", {}, host)
    assert "fix: lower wait_copy at kernel[21] from 12 to 0" in message
    flags = _flags(message)
    assert flags == {"auto_waits": "false", "wait_vm_last": "0", "wait_lgkm_first": "0"}
    compiled = compile_named("pingpong-anywhere", config_overrides=flags, host=host)
    assert compiled.proof is not None and compiled.proof.safe


def test_a_manual_wait_names_its_own_knob_alone(host):
    """Under auto_waits=false the knob's value is the wait: the flag is that knob, and applying
    each named flag in turn ends in a proven compile."""
    given = {"auto_waits": "false", "wait_vm_last": "0"}
    message = _refusal("pingpong-anywhere", given, host)
    assert "fix: lower wait_reads at kernel[3] from 8 to 1" in message
    assert _flags(message) == {"wait_lgkm_first": "1"}
    for _ in range(4):
        given.update(_flags(message))
        try:
            compiled = compile_named("pingpong-anywhere", config_overrides=given, host=host)
        except UnsafeScheduleError as exc:
            message = str(exc)
            continue
        assert compiled.proof is not None and compiled.proof.safe
        break
    else:
        pytest.fail(f"the named flags never gave a proven compile: {message}")


def test_a_wait_no_knob_sets_names_the_schedule_method_and_that_method_works():
    """partial_prologue_drain drops a prologue drain no -c knob restores: the refusal names the
    schedule's wait_source(); a schedule that returns "derived" from it is proven."""
    message = _refusal("pingpong", {"partial_prologue_drain": "true"}, default_host())
    assert "apply it with" not in message
    assert 'wait_source() keeps the block template\'s waits; returning "derived"' in message
    from pipeline_core.api import build_named

    inner = build_named("pingpong", config_overrides={"partial_prologue_drain": "true"})[0]

    class Derived:
        def __getattr__(self, attr):
            return getattr(inner, attr)

        def wait_source(self):
            return "derived"

    compiled = compile_schedule(Derived())
    assert compiled.proof is not None and compiled.proof.safe


def test_a_schedule_whose_waits_are_derived_is_not_told_to_derive_them(host):
    """The settle stage already derived the waits of a "derived" schedule: a refusal left
    after it never suggests wait_source()."""
    import attrs

    from pipeline_core.check.verdict import Fix

    compiled = compile_named("pingpong-anywhere", host=host, allow_unsafe=True)
    fix = Fix("insert_wait", "kernel", 0, "insert wait_copy(0) before kernel[0]", "copy", 0)
    plan = compiled.plan
    for derived, expected in ((True, ""), (False, "wait_source()")):
        details = attrs.evolve(plan.details, derived=derived)
        answer = details.how_to_apply(plan, foreign.FOREIGN, fix)
        assert (answer == "") if derived else (expected in answer)


def test_the_knob_waits_sit_where_the_kernel_emits_them(host):
    """One first and one last wait per partition, each at an emitted wait on its channel whose
    value is the knob's under auto_waits=false."""
    from pipeline_core.lowering.knob_fixes import knob_waits

    compiled = compile_named("pingpong-anywhere", host=host, allow_unsafe=True,
                             config_overrides={"auto_waits": "false", "wait_vm_last": "5",
                                               "wait_lgkm_first": "3"})
    sites = knob_waits(compiled.plan.details.result, compiled.config, compiled.kernel,
                       foreign.FOREIGN)
    assert [(s.knob, s.block) for s in sites] == [("wait_lgkm_first", 0), ("wait_vm_last", 3),
                                                  ("wait_lgkm_first", 4), ("wait_vm_last", 7)]
    tags = {"reads": foreign.READ_WAIT, "copy": foreign.COPY_WAIT}
    for site in sites:
        assert site.index is not None
        entry = compiled.kernel[site.index].op
        assert entry.tag == tags[site.channel]
        assert entry.wait_value == (3 if site.knob == "wait_lgkm_first" else 5)


def test_on_the_bundled_target_the_named_flags_are_typed_on_the_command_line(cli):
    """The README's example: barrier_before_pre_ops leaves wait_vm_last's derived 12 too loose;
    the flags the refusal names make `compile` exit 0."""
    refused = cli("compile", "pingpong", "-c", "barrier_before_pre_ops=true")
    assert refused.exit_code == 1
    flags = _flags(refused.stderr)
    assert flags == {"auto_waits": "false", "wait_vm_last": "8", "wait_lgkm_first": "0"}
    argv = [a for k, v in flags.items() for a in ("-c", f"{k}={v}")]
    assert cli("compile", "pingpong", "-c", "barrier_before_pre_ops=true", *argv).exit_code == 0


@pytest.mark.parametrize("argv, needle, fix, drop", [
    # a producers-first order bunches 3 global loads in one block
    (("-p", "m=3", "-c", "scheduling=CSP"), "(-c scheduling=EXACT_BLOCKS)",
     ("-c", "scheduling=EXACT_BLOCKS"), ("-c", "scheduling=CSP")),
    # uncapped global loads put a prefetch right before a block reading its stage
    (("-p", "m=3", "-T", "max_globals=0", "-c", "scheduling=IDENTITY"),
     "(-T max_globals=1 where the target has it", ("-T", "max_globals=1"),
     ("-T", "max_globals=0")),
])
def test_a_block_program_refusal_names_a_flag_that_gets_past_it(cli, argv, needle, fix, drop):
    refused = cli("compile", "matmul-grid", *argv)
    assert refused.exit_code == 2 and needle in refused.stderr, refused.stderr
    kept = [a for pair in zip(argv[::2], argv[1::2]) if pair != drop for a in pair]
    fixed = cli("compile", "matmul-grid", *kept, *fix)
    assert fixed.exit_code in (0, 1), fixed.stderr  # compiled, or the proof's next finding
    assert needle not in fixed.stderr


def test_check_lists_each_fix_with_its_flags_and_they_make_it_safe(cli):
    """`pipeline-core check SCHEDULE` (where the refusal sends the user) names the same flags,
    in the text and in the JSON verdict."""
    listed = cli("check", "pingpong", "-c", "barrier_before_pre_ops=true")
    assert listed.exit_code == 1
    flags = _flags(listed.stdout)
    assert flags == {"auto_waits": "false", "wait_vm_last": "8", "wait_lgkm_first": "0"}
    import json

    verdict = json.loads(cli("check", "pingpong", "-c", "barrier_before_pre_ops=true",
                             "--format", "json").stdout)
    assert "apply it with -c auto_waits=false" in verdict["first_violation"]["fix"]["text"]
    argv = [a for k, v in flags.items() for a in ("-c", f"{k}={v}")]
    assert cli("check", "pingpong", "-c", "barrier_before_pre_ops=true", *argv).exit_code == 0
