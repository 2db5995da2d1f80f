"""The schedule protocol is declared once (pipeline_core.schedule.ScheduleBase, issue 24): the core
calls every optional method on the guarded schedule, which answers what an object lacks with the
declared default; the methods that answer an override hook go through that hook, and nowhere else
(docs/guide/schedule-plugin.md, "The schedule protocol")."""
from __future__ import annotations

import pytest

from pipeline_core.api import build_named, compile_schedule
from pipeline_core.document import to_document
from pipeline_core.errors import ConfigError
from pipeline_core.hookspecs import hookimpl
from pipeline_core.schedule import OPTIONAL_MEMBERS, KernelTransform, ScheduleBase
from pipeline_core.testing import fresh_host


class _Duck:
    """A schedule written against the protocol as it was: no base class, required members
    and the few optional methods it needs, taken from a registered schedule."""

    def __init__(self, inner):
        self._inner = inner

    @property
    def name(self):
        return self._inner.name

    @property
    def target(self):
        return self._inner.target

    def config(self):
        return self._inner.config()

    def build_body(self):
        return self._inner.build_body()

    def schedule_config(self):
        return self._inner.schedule_config()

    def wait_source(self):
        return self._inner.wait_source()


class _Based(ScheduleBase, _Duck):
    """The same schedule subclassing the declared protocol: its defaults come from the base."""

    @property
    def name(self):
        return self._inner.name

    @property
    def target(self):  # type: ignore[override]
        return self._inner.target

    config = _Duck.config
    build_body = _Duck.build_body
    schedule_config = _Duck.schedule_config
    wait_source = _Duck.wait_source


def test_the_declared_protocol_is_the_set_the_core_may_ask_for():
    assert OPTIONAL_MEMBERS == {
        "target", "schedule_config", "tag_names", "forced_knobs", "epilogue_prefix",
        "warps_per_group", "wait_source", "lowering", "agents", "derive_edges",
        "build_explicit_blocks", "bootstrap_frags", "transform_kernel", "kernel_launch"}


@pytest.mark.parametrize("name", ["pingpong", "default-matmul"])
def test_a_plain_object_and_a_subclass_of_the_protocol_compile_alike(name):
    inner = build_named(name)[0]
    duck = compile_schedule(_Duck(inner), allow_unsafe=True)
    based = compile_schedule(_Based(inner), allow_unsafe=True)
    assert to_document(duck) == to_document(based)
    # the cost model's names, the sync model's (its waits and barriers), the schedule's own
    target = inner.target
    expected = {**target.cost_model.tag_names(), **target.sync.tag_names(), **inner.tag_names()}
    assert duck.tag_names == based.tag_names == expected


def test_agents_asked_of_a_schedule_without_them_names_the_method():
    class NoAgents(_Duck):
        def lowering(self):
            return "agents"

    with pytest.raises(ConfigError, match="agents.*a schedule with an agents\\(\\) method"):
        compile_schedule(NoAgents(build_named("hello")[0]))


def test_the_schedules_transform_kernel_is_the_cores_kernel_transform_and_runs_first():
    calls = []

    class Plugin:
        @hookimpl
        def pipeline_core_kernel_transforms(self, schedule, target, config):
            def early(kernel, body, config):
                calls.append("plugin")
                return list(kernel)
            return [KernelTransform("early", early, order=-10**9)]

    class Transforms(_Duck):
        def tag_names(self):
            return self._inner.tag_names()

        def warps_per_group(self):
            return self._inner.warps_per_group()

        def transform_kernel(self, kernel, body):
            calls.append("schedule")
            return kernel[1:] + kernel[:1]  # rotate: the document shows it ran

    host = fresh_host(Plugin(), autoload=True)
    inner = build_named("default-matmul", host=host)[0]
    plain = compile_schedule(_Duck(inner), host=host, allow_unsafe=True)
    assert calls == ["plugin"]
    calls.clear()
    rotated = compile_schedule(Transforms(inner), host=host, allow_unsafe=True)
    assert calls == ["schedule", "plugin"]
    # one mechanism: the host lists the schedule's own transform as the core's answer, first
    guarded = host.guard_schedule(Transforms(inner))
    listed = host.kernel_transforms(guarded, "mi355x-single-buffer", guarded.config())
    assert [t.name for t in listed] == ["transform_kernel() of schedule default-matmul", "early"]
    assert [e.op for e in rotated.kernel[:1]] != [e.op for e in plain.kernel[:1]]
