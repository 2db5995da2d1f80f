"""The plugin host: isolation of broken plugins, registries, override precedence, tracing."""
from __future__ import annotations

import json
import sys

import pytest

import plugin_fixtures as fx
from pipeline_core.api import compile_named
from pipeline_core.errors import PluginError, UnknownNameError
from pipeline_core.plugins import PluginHost
from pipeline_core.scaffold import files_for
from pipeline_core.testing import fresh_host


def status(host: PluginHost, name: str) -> str:
    return next(p.status for p in host.plugins if p.name == name)


def test_registered_records_carry_their_provider():
    host = fresh_host(fx.Provider())
    assert sorted(host.schedules) == ["tiny", "tiny-own-edges"]
    assert host.get_target("tiny-gpu").provider == "(in-process)"
    info = next(p for p in host.plugins if p.schedules)
    assert info.schedules == ["tiny", "tiny-own-edges"] and info.targets == ["tiny-gpu"]
    assert "pipeline_core_register_schedules" in info.hooks


def test_core_strategies_are_registered_through_the_hooks():
    host = fresh_host()
    assert {"IDENTITY", "GREEDY", "CSP"} <= set(host.strategies)
    assert status(host, "core") == "ok"


def test_misspelled_hook_fails_that_plugin_only():
    host = fresh_host(fx.Misspelled(), fx.Provider())
    st = next(p.status for p in host.plugins if "Misspelled" in p.module or p.name.endswith("0"))
    assert st.startswith("failed: implements unknown hook 'pipeline_core_register_schedule'")
    assert "did you mean 'pipeline_core_register_schedules'" in st
    assert "tiny" in host.schedules  # the other plugin still works
    assert any("implements unknown hook" in w for w in host.warnings)


def test_invalid_record_fails_the_plugin_with_a_message():
    host = fresh_host(fx.BadRecord(), fx.Provider())
    failed = [p for p in host.plugins if p.status.startswith("failed")]
    assert len(failed) == 1
    assert "item 0 is str, expected a list of TargetRecord" in failed[0].error
    assert "tiny-gpu" in host.targets


def test_import_failure_is_reported_with_its_distribution():
    host = PluginHost(autoload=False, extra_modules=["no_such_module_xyz"])
    info = next(p for p in host.plugins if p.name == "no_such_module_xyz")
    assert info.status.startswith("failed: import failed: ModuleNotFoundError")
    assert info.distribution == "(development)"
    assert "Traceback" in info.traceback
    assert any("no_such_module_xyz" in w for w in host.warnings)


def test_duplicate_schedule_names_name_both_providers():
    host = fresh_host(fx.Provider(), fx.SameNames())
    with pytest.raises(PluginError, match=r"schedule 'tiny' is provided by more than one plugin"):
        host.get_schedule("tiny")
    assert any(p.status == "conflict" for p in host.plugins)


def test_unknown_schedule_suggests_the_closest_name():
    host = fresh_host(fx.Provider())
    with pytest.raises(UnknownNameError) as err:
        host.get_schedule("tinny")
    assert "Did you mean 'tiny'?" in str(err.value)
    assert "tiny-own-edges" in str(err.value)


def test_schedule_in_a_failed_plugin_shows_that_plugins_error():
    host = PluginHost(autoload=False, extra_modules=["tiny_plugin_that_is_missing"])
    with pytest.raises(UnknownNameError) as err:
        host.get_schedule("tiny")
    assert "failed to load" in str(err.value)
    assert "ModuleNotFoundError" in str(err.value)


def test_override_precedence_core_then_schedule_then_plugin():
    host = fresh_host(fx.Provider())
    # core default: the single-buffer rule table (both ops are "loop-carried" with
    # selector 0, so rule 6 links them across iterations: distance 1)
    core = compile_named("tiny", host=host, allow_unsafe=True).edges
    assert [(e.producer, e.consumer, e.distance) for e in core] == [(0, 1, 1)]
    # the schedule's own method beats the core default
    own = compile_named("tiny-own-edges", host=host, allow_unsafe=True).edges
    assert [(e.producer, e.consumer, e.distance) for e in own] == [(0, 1, 0)]
    # a plugin answer beats both
    host = fresh_host(fx.Provider(), fx.EdgeOverride(distance=3))
    got = compile_named("tiny", host=host, allow_unsafe=True).edges
    assert [(e.producer, e.consumer, e.distance) for e in got] == [(0, 1, 3)]


def test_two_plugins_answering_the_same_override_conflict():
    host = fresh_host(fx.Provider(), fx.EdgeOverride(1), fx.EdgeOverride(2))
    with pytest.raises(PluginError, match="both answer for this schedule"):
        compile_named("tiny", host=host, allow_unsafe=True)


def test_disable_by_name_and_environment(monkeypatch):
    host = PluginHost(disabled=["schedules_4wave"])
    assert status(host, "schedules_4wave") == "disabled"
    assert "4wave" not in host.schedules and "pingpong" in host.schedules
    monkeypatch.setenv("PIPELINE_CORE_DISABLE_PLUGINS", "schedules_pingpong, pipeline-core-schedules-4wave")
    host = PluginHost()
    assert status(host, "schedules_pingpong") == "disabled"  # by entry-point name
    assert status(host, "schedules_4wave") == "disabled"  # by distribution name
    assert "pingpong" not in host.schedules and "4wave" not in host.schedules
    assert "mi355x" in host.targets


def test_no_autoload_environment(monkeypatch):
    monkeypatch.setenv("PIPELINE_CORE_NO_AUTOLOAD", "1")
    host = PluginHost()
    assert [p.name for p in host.plugins] == ["core"]


def test_trace_logs_each_hook_call_with_plugins_and_time():
    lines: list[str] = []
    host = fresh_host(fx.Provider(), trace=lines.append)
    compile_named("tiny", host=host, allow_unsafe=True)
    assert any(l.startswith("[trace] pipeline_core_register_schedules <- ") for l in lines)
    assert any("pipeline_core_derive_edges <- core" in l for l in lines)
    assert any(l.endswith(" ms") and "done in" in l for l in lines)


def test_output_ignores_registration_order():
    a = compile_named("tiny", host=fresh_host(fx.Provider(), fx.EdgeOverride(2)), allow_unsafe=True)
    b = compile_named("tiny", host=fresh_host(fx.EdgeOverride(2), fx.Provider()), allow_unsafe=True)
    assert a == b


def test_two_hosts_share_no_registered_strategy():
    """A strategy one host registered is unknown to a host built after it without that plugin."""
    from pipeline_core import hookimpl
    from pipeline_core.schedule import StrategyRecord

    class Reversed:
        @hookimpl
        def pipeline_core_register_strategies(self):
            return [StrategyRecord("REVERSED", "last op first", lambda req: list(range(len(req.body)))[::-1])]

    first = fresh_host(Reversed())
    assert first.get_strategy("reversed") is first.strategies["REVERSED"].function
    second = fresh_host(autoload=True)  # every installed plugin, but not Reversed
    assert "REVERSED" not in second.strategies
    with pytest.raises(UnknownNameError, match="Unknown scheduling strategy 'REVERSED'"):
        second.get_strategy("REVERSED")
    # and compiling through the second host with that strategy named is refused the same way
    with pytest.raises(UnknownNameError, match="scheduling strategy 'REVERSED'"):
        compile_named("pingpong", host=second, config_overrides={"scheduling": "REVERSED"})


def test_plugin_api_is_complete_and_target_neutral():
    import pipeline_core.plugin_api as api

    assert all(hasattr(api, name) for name in api.__all__)
    assert len(set(api.__all__)) == len(api.__all__)
    # the curated surface teaches no GPU family's vocabulary
    for word in ("vm", "lgkm", "mi355x", "kernelgeometry", "safe_max"):
        assert not [n for n in api.__all__ if word in n.lower()], word


# --- names the user gives the host, and new-plugin's names (issue 23) -----------------------

def test_disabling_a_plugin_that_is_not_installed_is_refused_naming_the_flag(cli):
    typo = cli("--disable-plugin", "schedules-4wave", "compile", "4wave")
    assert typo.exit_code == 2 and typo.stdout == ""
    assert typo.stderr.count("\n") == 1, typo.stderr
    assert typo.stderr.startswith("error: Unknown plugin 'schedules-4wave' (--disable-plugin). "
                                  "Did you mean 'schedules_4wave'?")
    assert "schedules_4wave (pipeline-core-schedules-4wave)" in typo.stderr  # what is installed
    core = cli("--disable-plugin", "core", "plugins")
    assert core.exit_code == 2 and "The core's own plugin cannot be disabled." in core.stderr
    module = cli("--plugin", "hello_schedule.plugin", "--disable-plugin", "hello_schedule.plugin",
                 "plugins")
    assert module.exit_code == 2
    assert "'hello_schedule.plugin' is loaded with --plugin: leave that out instead." in module.stderr
    # with --no-autoload nothing is loaded, but the name is still checked
    assert cli("--no-autoload", "--disable-plugin", "nope", "plugins").exit_code == 2
    with pytest.raises(UnknownNameError, match=r"Unknown plugin 'nope' \(--disable-plugin\)"):
        PluginHost(disabled=["nope"])


def test_a_stale_name_in_the_disable_variable_is_reported(cli):
    env = {"PIPELINE_CORE_DISABLE_PLUGINS": "nope, schedules_4wave"}
    result = cli("schedules", env=env)
    assert result.exit_code == 0, result.stderr
    assert result.stderr.startswith("warning: PIPELINE_CORE_DISABLE_PLUGINS names 'nope', which "
                                    "is no installed plugin's entry-point or distribution name; "
                                    "installed: amd_mi355x (pipeline-core-amd-mi355x), ")
    assert "\n4wave: " not in result.stdout and "\npingpong: " in result.stdout  # the rest applies
    assert cli("schedules", "--strict-plugins", env=env).exit_code == 3


def test_a_module_without_hooks_is_reported_as_no_plugin(cli):
    result = cli("--plugin", "os", "plugins", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ("warning: plugin 'os' (module os, loaded with --plugin): implements "
                             "no pipeline-core hook (no function named pipeline_core_* marked "
                             "@pipeline_core.hookimpl), so it adds nothing: check the module name\n")
    row = next(p for p in json.loads(result.stdout)["plugins"] if p["name"] == "os")
    assert row["status"].startswith("failed: implements no pipeline-core hook")
    assert cli("--plugin", "os", "plugins", "--strict-plugins").exit_code == 3


@pytest.mark.parametrize("name, taken", [
    ("pingpong", "schedule 'pingpong' (pipeline-core-schedules-pingpong)"),
    ("toy", "target 'toy-gpu' (pipeline-core-hello-schedule)"),
    ("hello", "plugin name 'hello' (pipeline-core-hello-schedule)"),
    ("amd-mi355x", "distribution 'pipeline-core-amd-mi355x'"),
    ("lonely", "package 'pipeline_core_lonely'"),
])
def test_new_plugin_refuses_a_name_an_installed_plugin_uses(cli, tmp_path, monkeypatch, name, taken):
    (tmp_path / "site" / "pipeline_core_lonely").mkdir(parents=True)  # a module, no plugin
    (tmp_path / "site" / "pipeline_core_lonely" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    result = cli("new-plugin", name, "--dir", str(tmp_path))
    assert result.exit_code == 2, result.stderr
    assert result.stderr.count("\n") == 1 and taken in result.stderr, result.stderr
    assert result.stderr.startswith(f"error: new-plugin {name!r}: installed plugins already use "
                                     "the project's ")
    assert result.stderr.endswith(f"choose another NAME, e.g. pipeline-core new-plugin my-{name}\n")
    assert not (tmp_path / name).exists()


def test_the_refused_name_would_break_its_namesake_and_the_suggested_one_does_not(
        cli, tmp_path, monkeypatch):
    """Why new-plugin refuses: installed, the project for `pingpong` makes `compile
    pingpong` fail (two plugins provide the schedule); the suggested name coexists."""
    assert cli("new-plugin", "my-pingpong", "--dir", str(tmp_path / "made")).exit_code == 0
    loaded = []
    try:
        for name, status in (("pingpong", 3), ("my-pingpong", 0)):
            root = tmp_path / "projects" / name
            for relative, text in files_for(name).items():
                (root / relative).parent.mkdir(parents=True, exist_ok=True)
                (root / relative).write_text(text)
            monkeypatch.syspath_prepend(str(root))
            package = "pipeline_core_" + name.replace("-", "_")
            loaded.append(package)
            result = cli("--plugin", f"{package}.plugin", "compile", "pingpong", "--format", "json")
            assert result.exit_code == status, result.stderr
        assert "schedule 'pingpong' is provided by more than one plugin" in cli(
            "--plugin", "pipeline_core_pingpong.plugin", "compile", "pingpong").stderr
    finally:
        for module in [m for m in sys.modules if m.split(".")[0] in loaded]:
            del sys.modules[module]
