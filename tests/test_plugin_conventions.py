"""Conventions users know from pytest, datasette and llm: plugins add subcommands, a command
line can require plugins, `plugins` says where each is installed, and `new-plugin` writes a
project that installs, tests and compiles."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

import pipeline_core_amd_mi355x.plugin as amd_plugin
from pipeline_core.scaffold import CORE_REQUIREMENT, files_for

ROOT = Path(__file__).resolve().parents[1]

COMMAND_PLUGIN = """
from pipeline_core.commands import CommandRecord
from pipeline_core.plugin_api import hookimpl

def add(parser):
    parser.add_argument("--times", type=int, default=1)

def run(args, host):
    print("hi " * args.times + f"({len(host.schedules)} schedules)")
    return 0 if args.times < 5 else 4

def explode(args, host):
    raise RuntimeError("boom")

def bad_add(parser):
    parser.add_argument("--times")
    parser.add_argument("--times")

@hookimpl
def pipeline_core_register_commands():
    return [CommandRecord(name="greet", help="say hi", add_arguments=add, run=run,
                          examples=("pipeline-core greet --times 2",)),
            CommandRecord(name="explode", help="fails", add_arguments=lambda p: None, run=explode),
            CommandRecord(name="clumsy", help="bad options", add_arguments=bad_add, run=run),
            CommandRecord(name="compile", help="steals a name", add_arguments=lambda p: None,
                          run=run)]
"""


@pytest.fixture
def command_plugin(tmp_path, monkeypatch) -> str:
    (tmp_path / "greeter_plugin.py").write_text(textwrap.dedent(COMMAND_PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "greeter_plugin"


def test_a_plugin_adds_a_command(cli, command_plugin):
    result = cli("--plugin", command_plugin, "greet", "--times", "2")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("hi hi (") and "schedules)" in result.stdout
    assert cli("--plugin", command_plugin, "greet", "--times", "5").exit_code == 4
    assert "greet" in cli("--plugin", command_plugin, "--help").stdout
    helped = cli("--plugin", command_plugin, "greet", "--help").stdout
    assert "examples:\n  pipeline-core greet --times 2" in helped and "--times" in helped
    listing = json.loads(cli("--plugin", command_plugin, "plugins", "--format", "json").stdout)
    row = next(p for p in listing["plugins"] if p["name"] == command_plugin)
    assert row["commands"] == ["greet", "explode", "clumsy", "compile"]


def test_a_failing_plugin_command_names_the_plugin(cli, command_plugin):
    result = cli("--plugin", command_plugin, "explode")
    assert result.exit_code == 3
    assert (f"error: plugin {command_plugin!r} (module {command_plugin}, loaded with --plugin) "
            "failed in command 'explode': RuntimeError: boom") in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_options_and_a_built_in_name_are_warnings_naming_the_plugin(cli, command_plugin):
    result = cli("--plugin", command_plugin, "compile", "hello", "--format", "json")
    assert result.exit_code == 0, result.stderr  # the built-in compile, untouched
    assert json.loads(result.stdout)["schedule"] == "hello"
    assert (f"plugin {command_plugin!r} (module {command_plugin}, loaded with --plugin): "
            "command 'compile' is a built-in pipeline-core command") in result.stderr
    assert "failed in add_arguments of command 'clumsy'" in result.stderr
    strict = cli("--strict-plugins", "--plugin", command_plugin, "schedules")
    assert strict.exit_code == 3


def test_require_plugin(cli, monkeypatch):
    ok = cli("--require-plugin", "amd_mi355x", "--require-plugin", "pipeline-core-schedules-4wave",
             "schedules")
    assert ok.exit_code == 0, ok.stderr
    missing = cli("--require-plugin", "amd_mi355", "schedules")
    assert missing.exit_code == 3 and missing.stdout == ""
    assert ("error: required plugin 'amd_mi355' is not installed. Did you mean 'amd_mi355x'?"
            in missing.stderr)
    after = cli("schedules", "--require-plugin", "nope")  # after the command name too
    assert after.exit_code == 3 and "required plugin 'nope' is not installed" in after.stderr
    disabled = cli("--disable-plugin", "hello", "--require-plugin", "hello", "schedules")
    assert disabled.exit_code == 3 and "required plugin 'hello' (pipeline-core-hello-schedule) is disabled" in disabled.stderr
    env = cli("schedules", env={"PIPELINE_CORE_REQUIRE_PLUGINS": "hello,nope2"})
    assert env.exit_code == 3 and "'nope2'" in env.stderr and "'hello'" not in env.stderr


def test_plugins_shows_install_locations(cli):
    doc = json.loads(cli("--plugin", "surely_not_a_module", "plugins", "--format", "json").stdout)
    rows = {r["name"]: r for r in doc["plugins"]}
    assert rows["amd_mi355x"]["location"] == os.path.dirname(os.path.abspath(amd_plugin.__file__))
    assert rows["core"]["location"].endswith("pipeline_core")
    assert rows["surely_not_a_module"]["location"] == ""  # nothing to find
    text = cli("plugins").stdout
    assert f"    location: {rows['amd_mi355x']['location']}\n" in text
    disabled = json.loads(cli("--disable-plugin", "hello", "plugins", "--format", "json").stdout)
    hello = next(r for r in disabled["plugins"] if r["name"] == "hello")
    assert hello["status"] == "disabled" and hello["location"].endswith("hello_schedule")


def test_new_plugin_writes_a_project_that_compiles(cli, tmp_path, monkeypatch):
    result = cli("new-plugin", "tile-gpu", "--dir", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    root = tmp_path / "tile-gpu"
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == sorted(
        files_for("tile-gpu"))
    pyproject = (root / "pyproject.toml").read_text()
    assert f'dependencies = ["{CORE_REQUIREMENT}"]' in pyproject
    assert '[project.entry-points."pipeline_core"]\ntile_gpu = "pipeline_core_tile_gpu.plugin"' in pyproject
    monkeypatch.syspath_prepend(str(root))
    compiled = cli("--plugin", "pipeline_core_tile_gpu.plugin", "compile", "tile-gpu", "--format", "json")
    assert compiled.exit_code == 0, compiled.stderr
    assert json.loads(compiled.stdout)["target"] == "tile-gpu-gpu"
    again = cli("new-plugin", "tile-gpu", "--dir", str(tmp_path))
    assert again.exit_code == 2 and "already exists and is not empty" in again.stderr
    bad = cli("new-plugin", "Tile GPU", "--dir", str(tmp_path))
    assert bad.exit_code == 2 and "new-plugin 'Tile GPU': expected lower-case" in bad.stderr


@pytest.mark.slow
def test_a_generated_plugin_installs_tests_and_compiles(tmp_path):
    """The template end to end: generate, pip-install with the core (one pip call, the core
    from this checkout), run its own tests, compile its schedule."""
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    made = subprocess.run([sys.executable, "-m", "pipeline_core.cli", "new-plugin", "wide-gpu",
                           "--dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "wide-gpu"
    subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", str(ROOT), f"{project}[test]"],
                   check=True, capture_output=True, text=True, timeout=900)
    tests = subprocess.run([str(bin_dir / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           cwd=project, capture_output=True, text=True, timeout=300)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "3 passed" in tests.stdout  # compiles, is proven race-free, is listed
    compiled = subprocess.run([str(bin_dir / "pipeline-core"), "--require-plugin", "wide_gpu",
                               "compile", "wide-gpu", "--format", "json"],
                              capture_output=True, text=True, timeout=300)
    assert compiled.returncode == 0, compiled.stderr
    doc = json.loads(compiled.stdout)
    assert doc["generator"]["plugins"] == {"pipeline-core-wide-gpu": "0.1.0"}
    assert doc["counts"]["kernel"] > 0 and doc["lowering"] == "ring"
    checked = subprocess.run([str(bin_dir / "pipeline-core"), "check", "wide-gpu"],
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0 and "SAFE" in checked.stdout, checked.stdout + checked.stderr
