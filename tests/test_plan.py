"""The Plan every lowering produces, and lowerings registered by name (docs/guide/concepts.md,
"Lowerings" and "The Plan").

* a lockstep plan gives back the phase lists it was built from, and the reference's warp
  stagger is group 1 running the same steps one barrier late;
* its steps name their kind and channel in the target's words;
* a plugin registers a lowering the way it registers a target, and a schedule that names it
  compiles, is proven and is documented; an unknown name, a lowering that returns no Plan and
  a name two plugins give are each refused in one line.
"""
from __future__ import annotations

import json

import attrs
import pytest

from pipeline_core import hookimpl
from pipeline_core.api import compile_named
from pipeline_core.document import to_document
from pipeline_core.errors import ConfigError, PipelineError
from pipeline_core.execution import LAUNCH, STAGGER, TAIL
from pipeline_core.lowering import LoweringInput, LoweringRecord
from pipeline_core.lowering.ring import lower as lower_ring
from pipeline_core.ops import Phase
from pipeline_core.plan import StepKind
from pipeline_core.testing import fresh_host, run_cli


def _sections(program):
    return ([s for it in program.prologue for s in it], list(program.kernel),
            [s for it in program.epilogue for s in it])


def test_the_stagger_is_group_1_running_the_same_steps_one_barrier_late():
    c = compile_named("pingpong")
    plan = c.plan
    assert plan.lockstep and plan.execution.staggered and len(plan.programs) == 2
    g0, g1 = (_sections(p) for p in plan.programs)
    synthetic = [[s.synthetic for s in sec if s.synthetic] for sec in (*g0, *g1)]
    assert synthetic == [[LAUNCH], [], [TAIL], [STAGGER, LAUNCH], [], []]
    # the same steps otherwise, in the same order
    for a, b in zip(g0, g1):
        assert [s for s in a if not s.synthetic] == [s for s in b if not s.synthetic]
    # group 1's extra barrier sits where the stagger index says
    assert [s.synthetic for s in g1[0]].index(STAGGER) == c.warp_stagger_index
    assert all(s.kind == StepKind.BARRIER for sec in (*g0, *g1) for s in sec if s.synthetic)


@pytest.mark.parametrize("name", ["pingpong", "4wave", "default-matmul", "matmul-grid"])
def test_a_lockstep_plan_gives_back_its_phase_lists(name):
    c = compile_named(name, allow_unsafe=True)
    for phase in Phase:
        rebuilt = c.plan.with_entries().entries(phase)
        assert rebuilt == c.plan.entries(phase) and rebuilt  # every phase is non-empty here


def test_lockstep_steps_name_their_kind_and_channel_in_the_targets_words():
    c = compile_named("multistage-gemm", target="h100")
    sync = c.target_profile.sync
    kernel = c.plan.programs[0].kernel
    waits = [s for s in kernel if s.kind == StepKind.COUNTER_WAIT]
    assert waits and {s.channel for s in waits} <= {ch.name for ch in sync.channels}
    assert all(s.tag == sync.channel(s.channel).wait_tag for s in waits)
    assert [s.kind for s in kernel].count(StepKind.BARRIER) == \
        sum(1 for e in c.kernel if e.op.tag == sync.barrier.tag)
    assert all(s.instr is not None for s in kernel)


def test_a_plan_of_one_program_per_role_has_no_phase_lists():
    c = compile_named("warpspecialized-gemm", target="h100")
    assert not c.plan.lockstep and c.plan.execution is None
    assert c.kernel == () and [p.name for p in c.plan.programs][0] == "producer"


# --- a lowering registered by a plugin ---------------------------------------------------

def _ring_twice(ctx: LoweringInput):
    """The ring lowering under another name (what a third-party lowering returns: a Plan)."""
    return attrs.evolve(lower_ring(ctx), lowering="ring-again")


class _Mine:
    def __init__(self, lower=_ring_twice, name="ring-again"):
        self.lower, self.name = lower, name

    @hookimpl
    def pipeline_core_register_lowerings(self):
        return [LoweringRecord(self.name, "the ring, registered by a plugin", lower=self.lower,
                               knobless="a test lowering reads no knob")]


class _AsksForIt:
    """hello's schedule, asking for the plugin's lowering."""

    @hookimpl
    def pipeline_core_register_schedules(self):
        from hello_schedule.plugin import HelloSchedule
        from pipeline_core.config import ScheduleConfig
        from pipeline_core.schedule import COPY_RING, ScheduleRecord

        class Asks(HelloSchedule):
            name = "asks"

            def lowering(self):
                return "ring-again"

        return [ScheduleRecord("asks", "hello on the plugin's lowering",
                               lambda ctx: Asks(ctx.make_target(),
                                                ctx.schedule_config(ScheduleConfig())),
                               default_target="toy-gpu",
                               families=(COPY_RING,))]


def test_a_plugin_lowering_compiles_is_proven_and_is_documented():
    host = fresh_host(_Mine(), _AsksForIt(), autoload=True)
    c = compile_named("asks", host=host)
    assert c.proof.safe and c.plan.lowering == "ring-again"
    doc = to_document(c)
    assert doc["lowering"] == "ring-again"
    plain = to_document(compile_named("hello", host=host))
    assert doc["kernel"] == plain["kernel"]  # the same steps as the ring it wraps
    with pytest.raises(ConfigError, match="a test lowering reads no knob; drop -c auto_waits"):
        compile_named("asks", host=host, config_overrides={"auto_waits": "false"})


def test_an_unknown_lowering_is_refused_naming_the_registered_ones():
    host = fresh_host(_AsksForIt(), autoload=True)
    with pytest.raises(ConfigError) as err:
        compile_named("asks", host=host)
    assert str(err.value).count("\n") == 0
    assert "lowering = 'ring-again' is invalid" in str(err.value)
    assert '"agents", "blocks", "ring"' in str(err.value)


def test_a_lowering_that_returns_no_plan_is_the_plugins_failure():
    host = fresh_host(_Mine(lower=lambda ctx: "not a plan"), _AsksForIt(), autoload=True)
    with pytest.raises(PipelineError) as err:
        compile_named("asks", host=host)
    assert "lowering 'ring-again'" in str(err.value) and "Plan" in str(err.value)


def test_a_lowering_name_the_core_has_is_a_conflict():
    host = fresh_host(_Mine(name="ring"), autoload=True)
    assert any("lowering 'ring' is provided by both" in w for w in host.problems())


def test_plugins_lists_the_lowerings_each_plugin_gives():
    result = run_cli(["plugins", "--json"])
    assert result.exit_code == 0, result.stderr
    core = next(p for p in json.loads(result.stdout)["plugins"] if p["name"] == "core")
    assert core["lowerings"] == ["agents", "blocks", "ring"]
    text = run_cli(["plugins"])
    assert "    lowerings: agents, blocks, ring" in text.stdout


def test_no_reader_outside_the_lowerings_branches_on_which_lowering_ran():
    """Issue 24: readers take the Plan whichever lowering built it.  Outside
    ``pipeline_core/lowering/`` no line compares a lowering's name, and the fields the three
    lowerings once left on the compile (``agents``, ``kernel_program``) are gone; the
    document decoder reads the ``lowering`` key of a document, which is data, through
    ``check.program.counted_by_sync``."""
    import re
    from pathlib import Path

    import pipeline_core

    root = Path(pipeline_core.__file__).parent
    pattern = re.compile(r"\blowering\s*(==|!=)|\blowering\s+(not\s+)?in\s*[(\[{]|"
                         r"\.agents is (not )?None|kernel_program\b")
    allowed = {root / "check" / "program.py"}  # the document's key: BLOCK_PROGRAM / AGENTS
    found = [f"{path.relative_to(root)}:{n}: {line.strip()}"
             for path in sorted(root.rglob("*.py")) if root / "lowering" not in path.parents
             and path not in allowed and "program" not in path.relative_to(root).parts[:1]
             for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
