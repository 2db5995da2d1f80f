"""The installed console script, run in a subprocess as users run it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXE = Path(sys.executable).with_name("pipeline-core")
pytestmark = pytest.mark.skipif(not EXE.exists(), reason="console script not installed in this environment")


def run(*argv, env=None):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([str(EXE), *argv], capture_output=True, text=True, timeout=120, env=full_env)


def test_version_names_core_and_plugin_distributions():
    r = run("--version")
    assert r.returncode == 0
    assert r.stdout.startswith("pipeline-core ")
    for dist in ("pipeline-core-amd-mi355x", "pipeline-core-schedules-pingpong",
                 "pipeline-core-schedules-4wave"):
        assert dist in r.stdout


def test_version_imports_no_plugin_and_lists_each_distribution_once():
    """``--version`` reads package metadata only (issue 39: a fast answer that a broken plugin
    cannot break): no plugin module is imported for it."""
    code = ("import sys\nfrom pipeline_core.cli import main\nmain(['--version'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('pipeline_core_')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    *listing, imported = out.stdout.strip().splitlines()
    assert imported == "[]"
    dists = [line.split()[0] for line in listing[1:]]
    assert "pipeline-core-nvidia-h100" in dists and len(dists) == len(set(dists))


def test_compile_json_is_one_document_with_the_contract_keys():
    r = run("compile", "pingpong", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for key in ("counts", "config", "schedule_config", "body", "edges", "prologue", "kernel",
                "epilogue", "kernel_deps", "blocks", "scheduler", "wait_lgkm_first"):
        assert key in doc
    assert doc["counts"]["kernel"] == len(doc["kernel"]) == 70


def test_compile_text_shows_phases_sync_summary_and_blocks():
    r = run("compile", "pingpong")
    assert r.returncode == 0, r.stderr
    for needle in ("PROLOGUE (10 entries)", "KERNEL (70 entries)", "EPILOGUE (58 entries)",
                   "sync: ", "BLOCKS", "partition 1", "<- block 4"):
        assert needle in r.stdout


def test_output_file(tmp_path):
    out = tmp_path / "s.json"
    r = run("compile", "4wave", "--format", "json", "-o", str(out))
    assert r.returncode == 0 and r.stdout == ""
    assert json.loads(out.read_text())["counts"]["prologue"] == 14


@pytest.mark.parametrize("argv, needles", [
    (("compile", "pingpnog"), ["Unknown schedule 'pingpnog'", "Did you mean 'pingpong'?", "4wave"]),
    (("compile", "pingpong", "--target", "mi355"), ["Unknown target 'mi355'", "Did you mean 'mi355x'?"]),
    (("compile", "pingpong", "-p", "fp9=true"), ["parameter of schedule pingpong", "'fp9'", "Did you mean 'fp8'?"]),
    (("compile", "pingpong", "-T", "vm_per_load_c=1"), ["'vm_per_load_c'", "vm_per_load_a"]),
    (("compile", "pingpong", "-c", "scheduling=CPS"), ["Unknown scheduling strategy 'CPS'", "Did you mean 'CSP'?"]),
    (("compile", "pingpong", "-c", "auto_waits=maybe"), ["auto_waits", "'maybe'", "true or false"]),
    (("compile", "pingpong", "-c", "auto_wait=true"), ["Unknown ScheduleConfig field 'auto_wait'", "auto_waits"]),
    (("compile", "pingpong", "-p", "fp8"), ["-p expects KEY=VALUE, got 'fp8'"]),
])
def test_bad_input_is_one_clear_line_without_traceback(argv, needles):
    r = run(*argv)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("error: ")
    for needle in needles:
        assert needle in r.stderr, r.stderr


def test_listings_name_parameters_and_providers():
    r = run("schedules")
    assert r.returncode == 0
    assert "pingpong:" in r.stdout and "[pipeline-core-schedules-pingpong" in r.stdout
    assert "lgkm_per_load_a (int, default 0; an integer in [0, 1024])" in r.stdout
    t = run("targets", "--json")
    targets = {row["name"]: row for row in json.loads(t.stdout)["targets"]}
    assert targets["mi355x"]["provider"] == "pipeline-core-amd-mi355x"
    assert [p["name"] for p in targets["mi355x"]["params"]] == ["vm_per_load_a", "vm_per_load_b", "max_globals"]
    assert "mi355x-single-buffer" in targets


def test_plugins_listing_shows_status_and_hooks():
    rows = json.loads(run("plugins", "--json").stdout)["plugins"]
    by_name = {r["name"]: r for r in rows}
    assert by_name["core"]["status"] == "ok"
    assert by_name["schedules_4wave"]["schedules"] == ["4wave"]
    assert "pipeline_core_explicit_blocks" in by_name["schedules_4wave"]["hooks"]


def test_broken_plugin_warns_once_and_strict_mode_fails():
    r = run("compile", "pingpong", "--plugin", "surely_not_a_module", "--format", "json")
    assert r.returncode == 0
    warnings = [l for l in r.stderr.splitlines() if l.startswith("warning:")]
    assert len(warnings) == 1 and "surely_not_a_module" in warnings[0]
    assert "Traceback" not in r.stderr
    verbose = run("-v", "--plugin", "surely_not_a_module", "plugins")
    assert "Traceback" in verbose.stderr
    strict = run("--strict-plugins", "--plugin", "surely_not_a_module", "plugins")
    assert strict.returncode == 3
    env = run("--plugin", "surely_not_a_module", "plugins", env={"PIPELINE_CORE_STRICT_PLUGINS": "1"})
    assert env.returncode == 3


def test_disable_plugin_hides_its_schedule():
    r = run("--disable-plugin", "schedules_4wave", "compile", "4wave")
    assert r.returncode == 2
    assert "Unknown schedule '4wave'" in r.stderr
    rows = json.loads(run("--disable-plugin", "schedules_4wave", "plugins", "--json").stdout)["plugins"]
    assert {r["name"]: r["status"] for r in rows}["schedules_4wave"] == "disabled"


def test_trace_flag_logs_hook_calls():
    r = run("--trace", "compile", "pingpong", "--format", "json")
    assert r.returncode == 0
    assert "[trace] pipeline_core_register_schedules <- " in r.stderr
    assert "[trace] pipeline_core_derive_edges" in r.stderr
