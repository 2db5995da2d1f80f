"""``pipeline-core knobs``: every ScheduleConfig knob with its type, default, range and meaning,
and what each schedule's ``forced_knobs()`` says, which must be what its compile does."""
from __future__ import annotations

import json

import attrs
import pytest

from pipeline_core import hookimpl, limits
from pipeline_core.api import compile_named
from pipeline_core.config import ScheduleConfig
from pipeline_core.knobs import knob_rows, render_text
from pipeline_core.schedule import REFUSED, ScheduleRecord
from pipeline_core.testing import fresh_host


def _rows(cli) -> dict[str, dict]:
    doc = json.loads(cli("knobs", "--format", "json").stdout)
    assert doc["format_version"] == 1
    return {row["name"]: row for row in doc["knobs"]}


def test_every_knob_is_listed_with_type_default_range_and_meaning(cli):
    rows = _rows(cli)
    assert list(rows) == [f.name for f in attrs.fields(ScheduleConfig)]
    for name, row in rows.items():
        assert row["help"], name
        assert row["default"] == getattr(ScheduleConfig(), name)
    assert rows["wait_vm_last"]["allowed"] == limits.WAIT_VALUE.allowed()
    assert rows["search_time_limit_ms"]["allowed"] == limits.SEARCH_TIME_MS.allowed()
    assert rows["auto_waits"] == {**rows["auto_waits"], "type": "bool", "allowed": "true or false"}
    assert "GREEDY" in rows["scheduling"]["allowed"] and "EXACT" in rows["scheduling"]["allowed"]


def test_the_text_view_says_who_forces_or_refuses_a_knob(cli):
    text = cli("knobs").stdout
    assert ("minimal_barriers (bool, default false; true or false)\n"
            "    drop per-block barriers and set_prio pairs (4-wave style)\n"
            "    forced by 4wave (true)\n") in text
    assert "lgkm_per_load_a (int, default 0; an integer in [0, 1024])" in text
    assert "    refused by matmul-grid, pingpong (the schedule sets it itself" in text
    assert "max_vgpr (int, default 999999; an integer in [0, 999999])" in text


def test_forced_knobs_are_what_the_schedules_compile_with(cli):
    rows = _rows(cli)
    forced = {name: row["forced_by"]["4wave"] for name, row in rows.items() if "4wave" in row["forced_by"]}
    assert set(forced) == {"scheduling", "minimal_barriers", "omit_mma_set_prio",
                           "inter_block_lgkm_drain", "partial_prologue_drain"}
    compiled = compile_named("4wave")
    for name, value in forced.items():
        assert getattr(compiled.schedule_config, name) == value, name
        contradicting = "GREEDY" if name == "scheduling" else str(not value).lower()
        result = cli("compile", "4wave", "-c", f"{name}={contradicting}")
        assert result.exit_code == 2 and name in result.stderr
    for schedule in ("pingpong", "matmul-grid"):
        assert schedule in rows["lgkm_per_load_b"]["refused_by"]
        result = cli("compile", schedule, "-c", "lgkm_per_load_b=2")
        assert result.exit_code == 2 and "lgkm_per_load_b" in result.stderr
    assert rows["wait_vm_last"]["forced_by"] == {} and rows["wait_vm_last"]["refused_by"] == []


class _Plugin:
    """Registers the toy target and one schedule built on it (an in-process plugin)."""

    def __init__(self, record: ScheduleRecord) -> None:
        self.record = record
        self.__name__ = f"{record.name}_plugin"

    @hookimpl
    def pipeline_core_register_targets(self):
        from hello_schedule import plugin as hello
        return hello.pipeline_core_register_targets()

    @hookimpl
    def pipeline_core_register_schedules(self):
        return [self.record]


def _plugin(name: str, schedule_cls=None, factory=None) -> _Plugin:
    from hello_schedule import plugin as hello

    def build(ctx):
        base = hello._build(ctx)
        return schedule_cls(base.target, base.schedule_config())

    return _Plugin(ScheduleRecord(name, "test schedule", factory or build, default_target="toy-gpu"))


def test_a_schedule_that_answers_badly_or_cannot_be_built_is_a_note_not_a_crash():
    from hello_schedule.plugin import HelloSchedule

    class Liar(HelloSchedule):
        def forced_knobs(self):
            return ["minimal_barriers"]

    class Unknown(HelloSchedule):
        def forced_knobs(self):
            return {"no_such_knob": 1, "auto_drain": True, "wait_vm_last": REFUSED}

    def broken(ctx):
        raise ValueError("needs -p size")

    host = fresh_host(_plugin("liar", Liar))
    rows, notes = knob_rows(host)
    assert any("forced_knobs() of schedule 'liar'" in n and "expected a dict" in n for n in notes)
    host = fresh_host(_plugin("odd", Unknown))
    rows, notes = knob_rows(host)
    by_name = {r["name"]: r for r in rows}
    assert by_name["auto_drain"]["forced_by"] == {"odd": True}
    assert by_name["wait_vm_last"]["refused_by"] == ["odd"]
    assert notes == ["schedule 'odd' forces unknown knob(s) no_such_knob (not ScheduleConfig "
                     "fields; ignored)",
                     "schedule 'odd' refuses every knob: the ring lowering reads none; the "
                     "ring's waits and barriers are derived from the target's sync model "
                     "(pipeline_core/lowering/ring.py)"]
    host = fresh_host(_plugin("needy", factory=broken))
    rows, notes = knob_rows(host)
    assert len(notes) == 1 and "schedule 'needy' could not be built" in notes[0]
    assert "needs -p size" in notes[0]
    assert "note: schedule 'needy'" in render_text(rows, notes)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_knobs_writes_to_o_file(cli, tmp_path, fmt):
    out = tmp_path / "knobs.out"
    result = cli("knobs", "--format", fmt, "-o", str(out))
    assert result.exit_code == 0 and result.stdout == ""
    assert "minimal_barriers" in out.read_text()


@pytest.mark.parametrize("name, lowering", [("hello", "ring"), ("warpspecialized-gemm", "agents")])
def test_a_ring_or_agents_schedule_setting_a_block_template_knob_is_refused(name, lowering):
    """The block template's knobs are the blocks lowering's own (config.BLOCK_SCHEDULE_KNOBS):
    a ring or agents schedule whose schedule_config() sets one would have it ignored."""
    from pipeline_core.api import build_named
    from pipeline_core.compiler import compile_schedule
    from pipeline_core.config import BLOCK_SCHEDULE_KNOBS
    from pipeline_core.errors import ConfigError

    inner = build_named(name)[0]

    class SetsAKnob:
        def __getattr__(self, attr):
            return getattr(inner, attr)

        def schedule_config(self):
            return inner.schedule_config().evolve(wait_vm_last=3)

    assert "wait_vm_last" in BLOCK_SCHEDULE_KNOBS
    compile_schedule(inner)  # as registered: no block knob set
    with pytest.raises(ConfigError, match=rf"schedule {name}\.schedule_config\(\)\.wait_vm_last = 3 "
                                          rf"is invalid: its default 6: the {lowering} lowering "
                                          "reads no block-template knob"):
        compile_schedule(SetsAKnob())
