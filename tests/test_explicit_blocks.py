"""Explicit blocks from plugins pass the structural verification and the hazard proof, and a
failure names the plugin (pipeline_core/program/verify.py, check_explicit_blocks)."""
from __future__ import annotations

import pytest

from pipeline_core import hookimpl
from pipeline_core.api import build_named, compile_named, compile_schedule
from pipeline_core.errors import VerificationError
from pipeline_core.ops import OpRole
from pipeline_core.plugins import PluginHost
from pipeline_core.program import _ops
from pipeline_core.program.block import emit_minimal_barrier_block
from pipeline_core.proof import UnsafeScheduleError


def _template(block):
    """The block's template as an explicit list (what a plugin starts from)."""
    return [op for op, _ in block.expand()]


class DropsAnMMA:
    @hookimpl
    def pipeline_core_explicit_blocks(self, schedule, body, program):
        if schedule.name != "pingpong":
            return None
        lists = [_template(b) for b in program.blocks]
        lists[3] = [op for op in lists[3] if op.role != OpRole.COMPUTE]
        return lists


class DropsEveryWait:
    @hookimpl
    def pipeline_core_explicit_blocks(self, schedule, body, program):
        if schedule.name != "pingpong":
            return None
        waits = {_ops.GLOBAL_WAIT_TAG, _ops.FRAGMENT_WAIT_TAG}
        return [[op for op in _template(b) if op.tag not in waits] for b in program.blocks]


class KeepsTheTemplate:
    @hookimpl
    def pipeline_core_explicit_blocks(self, schedule, body, program):
        return [_template(b) for b in program.blocks] if schedule.name == "pingpong" else None


def _host(name, plugin):
    return PluginHost(extra_plugins=[(name, plugin)])


def test_a_plugin_that_drops_an_mma_is_refused_by_structure_naming_it():
    with pytest.raises(VerificationError) as exc:
        compile_named("pingpong", host=_host("drops_mma", DropsAnMMA()))
    text = str(exc.value)
    assert exc.value.rule == "explicit-data-ops" and exc.value.block == 3
    assert "plugin 'drops_mma'" in text and "lacks " in text and "(COMPUTE)" in text


def test_a_plugin_that_drops_every_wait_is_refused_naming_it():
    with pytest.raises((UnsafeScheduleError, VerificationError)) as exc:
        compile_named("pingpong", host=_host("drops_waits", DropsEveryWait()))
    assert "plugin 'drops_waits'" in str(exc.value)


def test_explicit_lists_equal_to_the_template_compile_as_the_template_does():
    plain = compile_named("pingpong")
    same = compile_named("pingpong", host=_host("keeps", KeepsTheTemplate()))
    # explicit lists carry ops, not prefetch flags: the ops are the template's
    assert [e.op for e in same.kernel] == [e.op for e in plain.kernel] and same.proof.safe


def test_a_schedule_method_that_drops_an_mma_is_named():
    schedule = build_named("4wave")[0]

    class Own:
        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def build_explicit_blocks(self, body, program):
            lists = [emit_minimal_barrier_block(b, wrap_waits=False) for b in program.blocks]
            lists[0] = [op for op in lists[0] if op.role != OpRole.COMPUTE]
            return lists

    host = PluginHost(disabled=["schedules_4wave"])
    with pytest.raises(VerificationError, match=r"build_explicit_blocks\(\) of schedule 4wave"):
        compile_schedule(Own(schedule), host=host)
