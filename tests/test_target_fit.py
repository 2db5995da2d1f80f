"""Schedules and targets that do not belong together are refused (issue 23, bullet 5).

A schedule declares the targets it is made for (``ScheduleRecord.targets``), the target
families it fits (``ScheduleRecord.families``, ``TargetRecord.family``) or the capabilities it
needs (``ScheduleRecord.requires``, ``TargetRecord.offers``, issue 39); every command that
builds a schedule by name refuses any other target with exit 2, naming the schedule, the
target, what it lacks (for a contract) and the installed targets that fit
(docs/guide/schedule-plugin.md, "Targets a schedule is made for").
"""
from __future__ import annotations

import json

import pytest

from pipeline_core.api import compile_named
from pipeline_core.errors import ConfigError
from pipeline_core.plugins import default_host
from pipeline_core.schedule import (COPY_RING, PING_PONG, ScheduleRecord, TargetRecord,
                                    fitting_targets)

HOST = default_host()
BUNDLED = ("4wave", "default-matmul", "hello", "matmul-grid", "multistage-gemm", "pingpong",
           "warpspecialized-gemm")
TARGETS = ("a100", "a100-pingpong", "h100", "h100-pingpong", "mi355x", "mi355x-single-buffer",
           "toy-gpu")

#: what each bundled schedule is made for, written out (not read from the records), so a
#: record that loses or widens its declaration fails here
FITS = {
    "4wave": ["mi355x"],
    "default-matmul": ["mi355x-single-buffer"],
    "hello": ["a100", "h100", "toy-gpu"],  # family copy-ring
    "matmul-grid": ["mi355x"],
    "multistage-gemm": ["a100", "h100"],  # copy-ring offering cp.async, ldmatrix, mma.sync
    "pingpong": ["a100-pingpong", "h100-pingpong", "mi355x"],  # named, or family ping-pong
    "warpspecialized-gemm": ["h100"],
}


@pytest.fixture(autouse=True)
def _bundled_installed():
    missing = [n for n in BUNDLED if n not in HOST.schedules] + [
        n for n in TARGETS if n not in HOST.targets]
    if missing:
        pytest.skip(f"bundled plugins not installed: {', '.join(missing)}")


def test_each_bundled_schedule_declares_the_targets_it_is_made_for():
    assert {n: fitting_targets(HOST.schedules[n], HOST.targets) for n in BUNDLED} == FITS
    assert HOST.targets["toy-gpu"].family == HOST.targets["h100"].family == COPY_RING
    for name in BUNDLED:  # the default target is one it fits
        assert HOST.schedules[name].default_target in FITS[name]


# --- the defects the issue reports, one test each ---------------------------------------------

#: (schedule, target, what happened before): each exited 0, 1 or 2 naming an internal field
DEFECTS = [
    ("warpspecialized-gemm", "toy-gpu", "exit 0, proven under the wgmma sync model"),
    ("warpspecialized-gemm", "h100-pingpong", "exit 0"),
    ("warpspecialized-gemm", "mi355x", "exit 0"),
    ("multistage-gemm", "toy-gpu", "exit 0"),
    ("hello", "mi355x", "exit 2 naming the document field kernel[6].op"),
    ("hello", "h100-pingpong", "exit 2 naming the document field kernel[6].op"),
    ("4wave", "h100-pingpong", "exit 1, UNSAFE"),
    ("matmul-grid", "h100-pingpong", "exit 0 at 2 x 2 only, an AMD schedule on H100"),
]


@pytest.mark.parametrize("schedule, target, before", DEFECTS, ids=lambda v: str(v)[:24])
def test_a_schedule_on_a_target_it_is_not_made_for_exits_2_naming_both(cli, schedule, target,
                                                                        before):
    run = cli("compile", schedule, "--target", target, "--format", "json")
    assert run.exit_code == 2, (before, run.stderr)
    assert run.stdout == "" and "Traceback" not in run.stderr
    line = run.stderr.strip()
    assert "\n" not in line
    fits = FITS[schedule]
    choice = HOST.schedules[schedule].default_target
    # a target that lacks a schedule's contract is told what it lacks (issue 39), the others
    # which targets or families the schedule is made for
    lacks = HOST.schedules[schedule].lacks(HOST.targets[target])
    assert line.startswith(f"error: --target {target} is invalid for schedule {schedule}: it "
                           + (f"needs {', '.join(lacks)}, which target {target} does not offer"
                              if lacks else "is made for "))
    assert line.endswith(f"targets that {'offer it' if lacks else 'fit'}: {', '.join(fits)}; "
                         f"pass --target {choice}")


@pytest.mark.parametrize("command", ["check", "analyze", "export", "emit"])
def test_every_command_that_builds_a_schedule_refuses_the_pair(cli, command):
    """analyze used toy-gpu's machine for warpspecialized-gemm; check proved it under wgmma."""
    run = cli(command, "warpspecialized-gemm", "--target", "toy-gpu")
    assert run.exit_code == 2 and run.stdout == ""
    assert "--target toy-gpu is invalid for schedule warpspecialized-gemm" in run.stderr
    assert "needs sync channel mbarrier" in run.stderr  # what toy-gpu lacks (issue 39)
    assert "targets that offer it: h100" in run.stderr


@pytest.mark.parametrize("schedule", BUNDLED)
def test_every_other_target_is_refused_before_the_factory_runs(schedule):
    for target in TARGETS:
        if target in FITS[schedule]:
            continue
        with pytest.raises(ConfigError) as err:
            compile_named(schedule, target=target, host=HOST)
        assert err.value.flag == "--target" and err.value.value == target
        assert (f"not {target}" in str(err.value)
                or f"which target {target} does not offer" in str(err.value))


@pytest.mark.parametrize("schedule, target", [(s, t) for s in BUNDLED for t in FITS[s]],
                         ids=lambda v: v)
def test_every_bundled_schedule_compiles_safe_on_each_target_it_declares(schedule, target):
    compiled = compile_named(schedule, target=target, host=HOST)
    assert compiled.target_name == target
    assert compiled.proof is not None and compiled.proof.safe


# --- listings ----------------------------------------------------------------------------------

def test_schedules_listing_shows_the_targets_each_schedule_fits(cli):
    text = cli("schedules").stdout
    assert ("[pipeline-core-hello-schedule, default target toy-gpu; fits a100, h100, toy-gpu]"
            in text)
    assert "default target mi355x; fits a100-pingpong, h100-pingpong, mi355x]" in text
    rows = {r["name"]: r for r in json.loads(cli("schedules", "--format", "json").stdout)["schedules"]}
    assert {n: rows[n]["targets"] for n in BUNDLED} == FITS
    assert rows["hello"]["made_for"] == {"targets": [], "families": [COPY_RING], "requires": None}
    assert rows["pingpong"]["made_for"] == {"targets": ["mi355x", "h100-pingpong"],
                                            "families": [PING_PONG], "requires": None}
    assert rows["multistage-gemm"]["made_for"]["requires"] == {
        "channels": ["cp_async"], "instructions": ["ldmatrix", "mma.sync"], "copies": ["cp.async"]}
    targets = {r["name"]: r for r in json.loads(cli("targets", "--format", "json").stdout)["targets"]}
    assert targets["toy-gpu"]["family"] == COPY_RING and targets["mi355x"]["family"] == ""
    assert "[pipeline-core-hello-schedule, family copy-ring]" in cli("targets").stdout


# --- the declaration itself --------------------------------------------------------------------

def _target(name: str, family: str = "") -> TargetRecord:
    return TargetRecord(name, "t", lambda: None, family=family)


def test_a_schedule_declaring_nothing_takes_any_target():
    """Out-of-tree schedules written before the declaration keep working."""
    record = ScheduleRecord("mine", "d", lambda ctx: None)
    assert not record.declares_targets and record.made_for() == "any target"
    assert record.fits(_target("anything")) and record.fits(_target("other", family="x"))


def test_a_schedule_fits_its_named_targets_and_its_families_only():
    record = ScheduleRecord("mine", "d", lambda ctx: None, targets=("a",), families=("ring",))
    assert record.fits(_target("a")) and record.fits(_target("b", family="ring"))
    assert not record.fits(_target("b")) and not record.fits(_target("c", family="other"))
    assert record.made_for() == "target a and target family ring"
    assert ScheduleRecord("m", "d", lambda ctx: None, targets="a").targets == ("a",)


def test_a_default_target_outside_the_declared_targets_is_refused():
    with pytest.raises(ConfigError) as err:
        ScheduleRecord("mine", "d", lambda ctx: None, default_target="b", targets=("a",))
    assert err.value.field == "default_target" and "(a)" in str(err.value)
    with pytest.raises(ConfigError):
        ScheduleRecord("mine", "d", lambda ctx: None, targets=("Not A Name",))
    with pytest.raises(ConfigError):
        _target("t", family="Bad Family")


def test_no_installed_target_fitting_says_what_to_install():
    from pipeline_core import hookimpl
    from pipeline_core.testing import fresh_host
    from pipeline_core_schedules_4wave import plugin as four_wave

    class Toy:
        @hookimpl
        def pipeline_core_register_targets(self):
            return [_target("lonely")]

    host = fresh_host(four_wave, Toy())
    with pytest.raises(ConfigError) as err:
        compile_named("4wave", target="lonely", host=host)
    assert "no installed target fits; install a plugin providing target mi355x" in str(err.value)


# --- documents ---------------------------------------------------------------------------------

def test_check_input_refuses_a_document_naming_a_pair_that_does_not_belong(cli, tmp_path):
    doc = json.loads(cli("compile", "multistage-gemm", "--format", "json").stdout)
    doc["target"] = "toy-gpu"  # what compile wrote before the refusal existed
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    run = cli("check", "--input", str(path))
    assert run.exit_code == 2 and "Traceback" not in run.stderr
    # toy-gpu is of multistage-gemm's family but lacks its contract: named (issue 39)
    assert ("schedule document.target = 'toy-gpu' is invalid: schedule multistage-gemm needs "
            "sync channel cp_async, instruction ldmatrix, instruction mma.sync, copy kind "
            "cp.async, which target toy-gpu does not offer; targets that offer it: a100, h100; "
            "compile it again with --target h100") in run.stderr


def test_check_input_with_target_rechecks_under_that_target_on_purpose(cli, tmp_path):
    doc = json.loads(cli("compile", "hello", "--format", "json").stdout)
    path = tmp_path / "doc.json"
    path.write_text(json.dumps({**doc, "target": "mi355x"}))
    assert cli("check", "--input", str(path)).exit_code == 2
    run = cli("check", "--input", str(path), "--target", "toy-gpu")
    assert run.exit_code == 0 and " SAFE " in run.stdout, run.stderr


# --- the new-plugin template -------------------------------------------------------------------

def test_new_plugin_declares_its_target(cli, tmp_path, monkeypatch):
    assert cli("new-plugin", "fit-gpu", "--dir", str(tmp_path)).exit_code == 0
    monkeypatch.syspath_prepend(str(tmp_path / "fit-gpu"))
    load = ("--plugin", "pipeline_core_fit_gpu.plugin")
    assert cli(*load, "compile", "fit-gpu", "--format", "json").exit_code == 0
    run = cli(*load, "compile", "fit-gpu", "--target", "toy-gpu")
    assert run.exit_code == 2
    assert "it is made for target fit-gpu-gpu, not toy-gpu" in run.stderr
    assert "targets that fit: fit-gpu-gpu" in run.stderr


def test_a_body_the_target_cannot_cost_is_still_refused_for_undeclared_schedules():
    """The cost-model rule (compiler.check_body_fits_target) stays the guard where nothing is
    declared: an API caller's own schedule object on a foreign target."""
    from hello_schedule.plugin import HelloSchedule
    from pipeline_core.compiler import compile_schedule
    from pipeline_core.config import ScheduleConfig
    from pipeline_core_amd_mi355x import mi355x_single_buffer_target

    schedule = HelloSchedule(mi355x_single_buffer_target(), ScheduleConfig())
    with pytest.raises(ConfigError) as err:
        compile_schedule(schedule, host=HOST, target_name="mi355x-single-buffer")
    assert "--target mi355x-single-buffer is invalid for schedule hello" in str(err.value)
    assert "lacks kernel tag 4 (MMA)" in str(err.value)


class _NoBlockTicks:
    """A registered schedule on its own target with the block template's counter ticks per
    load set to 0 (``config.BLOCK_PIPELINE_FIELDS``), as a target written without them has."""

    def __init__(self, name):
        import attrs
        from pipeline_core.api import build_named

        self._inner = build_named(name, host=HOST)[0]
        self.name = self._inner.name
        target = self._inner.target
        self.target = attrs.evolve(target, pipeline=self.config())

    def config(self):
        return self._inner.config().evolve(vm_per_load_a=0, vm_per_load_b=0)

    def build_body(self):
        return self._inner.build_body()

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_the_ring_never_reads_the_block_templates_ticks_per_load():
    """Issue 24: a ring schedule was refused over ``vm_per_load_a = 0``, a field only the
    blocks lowering reads; its waits come from the target's sync model."""
    from pipeline_core.compiler import compile_schedule

    ring = compile_schedule(_NoBlockTicks("hello"), host=HOST)
    plain = compile_named("hello", host=HOST)
    assert ring.plan.lowering == "ring" and ring.proof.safe
    for phase in ("prologue", "kernel", "epilogue"):
        assert ([(e.op.tag, e.op.wait_value) for e in getattr(ring, phase)]
                == [(e.op.tag, e.op.wait_value) for e in getattr(plain, phase)])


def test_the_block_program_still_refuses_a_global_load_that_never_counts():
    from pipeline_core.compiler import compile_schedule

    with pytest.raises(ConfigError, match="vm_per_load_a = 0 is invalid.*would never add ticks"):
        compile_schedule(_NoBlockTicks("pingpong"), host=HOST)
