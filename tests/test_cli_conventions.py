"""One convention across the commands: --format, --iterations, -o, examples in every --help,
the plugin-host options listed once, and listings that print what a user types."""
from __future__ import annotations

import json

import pytest

from pipeline_core import limits
from pipeline_core.cli import EXAMPLES, build_parser

COMMANDS = sorted(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
HOST_FLAGS = ("--strict-plugins", "--disable-plugin", "--no-autoload", "--plugin", "--trace")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_help_shows_an_example_and_names_the_host_options_once(cli, command):
    result = cli(command, "--help")
    assert result.exit_code == 0
    examples = result.stdout.split("examples:\n", 1)[1]
    assert f"  pipeline-core {command}" in examples or f"| pipeline-core {command}" in examples
    for flag in HOST_FLAGS:  # not listed as options of the command ...
        assert f"\n  {flag}" not in result.stdout, flag
    assert "plugin host options (--strict-plugins" in result.stdout  # ... but named once


def test_the_host_options_are_one_group_in_the_main_help(cli):
    text = cli("--help").stdout
    group = text.split("plugin host options (before or after the command):", 1)[1]
    for flag in HOST_FLAGS + ("--verbose",):
        assert flag in group
    assert text.count("\n  --strict-plugins") == 1
    assert "examples:" in text


def test_every_builtin_command_has_examples_that_parse():
    parser = build_parser()
    assert set(EXAMPLES) <= set(COMMANDS)
    for command, lines in EXAMPLES.items():
        assert command in lines[0].split(), lines[0]  # the first example runs the command
        for line in lines:
            argv = line.split("#")[0].split("|")[-1].split()[1:]
            parser.parse_args(argv)  # SystemExit (a test failure) if an example is stale


@pytest.mark.parametrize("argv", [("compile", "hello"), ("check", "pingpong"),
                                  ("analyze", "pingpong", "--no-timing"), ("schedules",),
                                  ("targets",), ("strategies",), ("plugins",)])
def test_format_json_everywhere_and_o_file(cli, tmp_path, argv):
    doc = json.loads(cli(*argv, "--format", "json").stdout)
    assert doc["format_version"] == 1
    out = tmp_path / "out.json"
    result = cli(*argv, "--format", "json", "-o", str(out))
    assert result.exit_code == 0 and result.stdout == ""
    assert json.loads(out.read_text()) == doc
    text = tmp_path / "out.txt"
    assert cli(*argv, "-o", str(text)).stdout == ""
    assert text.read_text() == cli(*argv).stdout


def test_json_is_a_hidden_deprecated_alias(cli):
    result = cli("schedules", "--json")
    assert json.loads(result.stdout)["schedules"]
    assert "--json is deprecated; use --format json" in result.stderr
    assert "--json" not in cli("schedules", "--help").stdout
    assert json.loads(cli("analyze", "pingpong", "--no-timing", "--json").stdout)["makespan"]


def test_one_default_for_iterations(cli, tmp_path):
    assert "12 kernel iterations" in cli("check", "pingpong").stdout
    analyzed = json.loads(cli("analyze", "pingpong", "--format", "json").stdout)
    assert analyzed["steady_state"]["iterations"] == limits.DEFAULT_ITERATIONS
    exported = cli("export", "pingpong", "-o", str(tmp_path / "t.json"))
    assert f"{limits.DEFAULT_ITERATIONS} kernel iterations" in exported.stdout
    for command in ("check", "export", "analyze"):
        assert f"(default {limits.DEFAULT_ITERATIONS}," in cli(command, "--help").stdout


def test_a_large_kernel_gets_the_iterations_that_fit():
    bound = limits.CHECK_ITERATIONS
    assert limits.default_iterations(24, bound) == limits.DEFAULT_ITERATIONS
    assert limits.default_iterations(10_000, bound) == 5  # 50,000 modelled entries
    assert limits.default_iterations(10**6, bound) == 1
    assert limits.default_iterations(10**6, limits.ANALYZE_ITERATIONS) == 3


def test_export_dot_writes_the_graph_and_its_size_and_models_nothing(cli, tmp_path, monkeypatch):
    """Issue 25: a DOT file is the dependency graph; export used to run and print the timing
    simulation beside it.  The run is never started (the model is made to fail if it is)."""
    import pipeline_core.simulate as simulate

    def no_run(*args, **kwargs):
        raise AssertionError("export --format dot ran the timing model")

    monkeypatch.setattr(simulate, "model_run", no_run)
    result = cli("export", "pingpong", "-o", str(tmp_path / "g.dot"))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [f"wrote {tmp_path / 'g.dot'}",
                                          "dependency graph: 24 ops, 54 edges (18 loop-carried)"]
    own = cli("export", "hello", "-o", str(tmp_path / "h.dot"))  # the example's own target
    assert own.exit_code == 0 and own.stdout.splitlines()[1].startswith("dependency graph: ")
    assert len(own.stdout.splitlines()) == 2
    assert cli("export", "pingpong", "--format", "dot").stdout.startswith("digraph")


def test_analyze_optimal_before_the_schedule_says_so(cli):
    result = cli("analyze", "--optimal", "pingpong")
    assert result.exit_code == 2
    assert "invalid float value" not in result.stderr
    assert "argument --optimal: expected an optional time budget in seconds" in result.stderr
    assert "pipeline-core analyze pingpong --optimal" in result.stderr


def test_listings_print_what_a_user_types(cli):
    plugins = cli("--plugin", "hello_schedule.plugin", "--disable-plugin", "hello", "plugins").stdout
    assert "((development) )" not in plugins and "()" not in plugins
    assert "hello_schedule.plugin  (module hello_schedule.plugin, loaded with --plugin)  ok" in plugins
    schedules = cli("schedules").stdout
    assert "default None" not in schedules and "default True" not in schedules
    assert "    dtype (str; one of bf16, fp8): input type of the tile shape" in schedules
    assert "    launch_defaults (bool, default true; true or false)" in schedules


@pytest.fixture(scope="module")
def fourwave_document(tmp_path_factory):
    from pipeline_core.testing import run_cli

    path = tmp_path_factory.mktemp("doc") / "4wave.json"
    assert run_cli(["compile", "4wave", "--format", "json", "-o", str(path)]).exit_code == 0
    return str(path)


@pytest.mark.parametrize("argv, line", [
    (("check", "4wave", "--input", "{doc}"),
     "check takes a SCHEDULE or --input FILE, not both (got 4wave and --input {doc}): drop one"),
    (("check", "--input", "{doc}", "-p", "BM=64", "-c", "auto_waits=false"),
     "-p BM=64: check --input judges the document as compiled, which fixed its -p values; drop "
     "-p, or check the schedule itself: pipeline-core check SCHEDULE -p BM=64"),
    (("check", "--input", "{doc}", "-c", "auto_waits=false"),
     "-c auto_waits=false: check --input judges the document as compiled, which fixed its -c "
     "values; drop -c, or check the schedule itself: pipeline-core check SCHEDULE -c "
     "auto_waits=false"),
    (("check", "--input", "{doc}", "-T", "vm_per_load_a=2"),
     "-T vm_per_load_a=2: check --input judges the document as compiled, which fixed its -T "
     "values; drop -T, or check the schedule itself: pipeline-core check SCHEDULE -T "
     "vm_per_load_a=2"),
    (("compile", "pingpong", "--format", "json", "--kernel-only"),
     "--kernel-only shapes the text view, but --format json writes the whole document: drop "
     "--kernel-only or --format json"),
    (("compile", "pingpong", "--format", "json", "--compact"),
     "--compact shapes the text view, but --format json writes the whole document: drop "
     "--compact or --format json"),
    (("compile", "pingpong", "-p", "BM=128", "-p", "BM=256"),
     "-p BM is given twice (-p BM=128 and -p BM=256): give it once"),
    (("check", "pingpong", "-T", "vm_per_load_a=2", "-T", "vm_per_load_a=2"),
     "-T vm_per_load_a is given twice (-T vm_per_load_a=2 and -T vm_per_load_a=2): give it once"),
    (("analyze", "pingpong", "-c", "wait_vm_last=1", "-c", " wait_vm_last =2"),
     "-c wait_vm_last is given twice (-c wait_vm_last=1 and -c wait_vm_last=2): give it once"),
    (("compile", "warpspecialized-gemm", "--target", "h100", "-c", "auto_waits=true"),
     "-c auto_waits=true is invalid for schedule warpspecialized-gemm: the agents lowering reads "
     "no ScheduleConfig knob: the agents' programs, rings and waits are derived from their roles "
     "(docs/guide/agents.md); drop -c auto_waits"),
    (("check", "multistage-gemm", "-c", "scheduling=GREEDY"),
     "-c scheduling=GREEDY is invalid for schedule multistage-gemm: the ring lowering reads no "
     "ScheduleConfig knob: the ring's waits and barriers are derived from the target's sync "
     "model (pipeline_core/lowering/ring.py); drop -c scheduling"),
    (("export", "pingpong", "--format", "trace", "--width", "900"),
     "--width sizes a picture (png, svg); --format trace draws none: drop --width"),
    (("export", "pingpong", "--format", "dot", "--width", "900"),
     "--width sizes a picture (png, svg); --format dot draws none: drop --width"),
    (("export", "pingpong", "--format", "dot", "--iterations", "3"),
     "--iterations sets the modelled run (trace, png, svg); --format dot writes the dependency "
     "graph, which models none: drop --iterations"),
    (("analyze", "pingpong", "--no-timing", "--iterations", "5"),
     "--iterations 5 sets the timing model's run, which --no-timing skips: drop one"),
])
def test_a_conflicting_or_ignored_flag_is_refused_in_one_line(cli, fourwave_document, argv, line):
    """Issue 23: each of these was accepted and the flag silently ignored (or the later value
    silently won); the document, the text view or the lowering had already decided."""
    result = cli(*[a.replace("{doc}", fourwave_document) for a in argv])
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr == f"error: {line.replace('{doc}', fourwave_document)}\n"


def test_check_input_keeps_target_which_picks_the_sync_model(cli, fourwave_document):
    result = cli("check", "--input", fourwave_document, "--target", "mi355x")
    assert result.exit_code == 0, result.stderr
    assert "4wave: SAFE" in result.stdout


@pytest.mark.parametrize("argv, line", [
    (("emit", "multistage-gemm", "--target", "h100", "--emitter", ""),
     "pipeline-core emit: error: argument --emitter: an empty emitter name: give one that "
     "`pipeline-core emitters` lists, e.g. --emitter cuda, or leave --emitter out to take the "
     "one emitter that serves the target (`pipeline-core emit --help` lists the options)"),
    (("--plugin", "", "schedules"),
     "pipeline-core: error: argument --plugin: '' is not a module name: give the plugin's "
     "importable module, dotted Python identifiers, e.g. --plugin my_plugin or --plugin "
     "my_package.plugin (`pipeline-core --help` lists the options)"),
    (("schedules", "--plugin", "my plugin"),
     "pipeline-core schedules: error: argument --plugin: 'my plugin' is not a module name: give "
     "the plugin's importable module, dotted Python identifiers, e.g. --plugin my_plugin or "
     "--plugin my_package.plugin (`pipeline-core schedules --help` lists the options)"),
])
def test_an_empty_name_is_refused_naming_its_flag(cli, argv, line):
    """Issue 33: ``--emitter ''`` silently took the default emitter, and ``--plugin ''`` was
    a warning quoting Python's "Empty module name"."""
    result = cli(*argv)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", line + "\n")
