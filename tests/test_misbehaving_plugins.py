"""Misbehaving plugins never take the tool down, hide who is at fault, or corrupt stdout.

Every case of ``misbehaving_plugins.CASES`` is a plugin module written to a temporary
folder and loaded with ``--plugin`` through the real CLI (in-process), once plainly and
once with ``--strict-plugins``.  A few run again as real distributions (a hand-written
``.dist-info`` with an entry point, found by the normal discovery) and through the
console script in a subprocess.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import misbehaving_plugins as mp
from pipeline_core.errors import PluginError
from pipeline_core.interrupts import counting_sigints
from pipeline_core.plugin_guard import Culprit, InterruptedInPlugin, PluginGuard
from pipeline_core.plugins import PluginHost
from pipeline_core.testing import run_cli

CASES = {case.id: case for case in mp.CASES}
EXE = Path(sys.executable).with_name("pipeline-core")


def write_plugin(folder: Path, case: mp.Case) -> None:
    (folder / f"{mp.BASE_MODULE}.py").write_text(mp.BASE)
    (folder / f"{case.module}.py").write_text(case.text())


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """A folder on sys.path for plugin modules; their imports are forgotten between runs."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def forget():
        for name in [n for n in sys.modules if n == mp.BASE_MODULE or n.startswith("mis_")]:
            monkeypatch.delitem(sys.modules, name)

    forget()
    yield tmp_path, forget
    forget()


def run_case(case: mp.Case, plugin_dir, *, strict: bool):
    folder, forget = plugin_dir
    write_plugin(folder, case)
    forget()  # a cached module would not run its import-time misbehaviour again
    argv = case.command() + ["--plugin", case.module]
    argv += [] if case.autoload else ["--no-autoload"]
    argv += ["--strict-plugins"] if strict else []
    return run_cli(argv, env=dict(case.env))


def assert_reported(case: mp.Case, result, *, culprit: str) -> None:
    """What every misbehaving-plugin run must show, whatever its exit status."""
    err = result.stderr
    assert "internal error" not in err, err
    assert "Traceback" not in err, err
    assert result.exit_code != 0 or result.stdout.strip(), "silent exit 0 with empty output"
    if case.wants_json and result.stdout.strip():
        json.loads(result.stdout)  # plugin prints never reach stdout
    assert culprit in err, err
    for needle in case.needles:
        assert needle.replace("NAME", case.schedule) in err, err


@pytest.mark.parametrize("case", mp.CASES, ids=[c.id for c in mp.CASES])
def test_misbehaving_plugin_is_named_and_the_tool_survives(case, plugin_dir):
    result = run_case(case, plugin_dir, strict=False)
    assert result.exit_code == case.expected_exit, result.stderr
    assert_reported(case, result, culprit=f"plugin {case.module!r} (module {case.module}, "
                                          "loaded with --plugin)")
    if case.expected_exit == 0 and case.wants_json:
        json.loads(result.stdout)


@pytest.mark.parametrize("case", mp.CASES, ids=[c.id for c in mp.CASES])
def test_strict_plugins_exits_3_for_every_misbehaviour(case, plugin_dir):
    result = run_case(case, plugin_dir, strict=True)
    assert result.exit_code == 3, result.stderr
    assert_reported(case, result, culprit=case.module)


def test_a_conflicting_plugin_leaves_everything_else_working(plugin_dir):
    case = CASES["duplicate-target"]
    listing = run_case(attrs_evolve(case, argv=("plugins", "--json")), plugin_dir, strict=False)
    assert listing.exit_code == 0, listing.stderr
    rows = {row["name"]: row for row in json.loads(listing.stdout)["plugins"]}
    assert {"amd_mi355x", "schedules_pingpong", "schedules_4wave", case.module} <= set(rows)
    assert rows[case.module]["status"] == "conflict"
    assert rows[case.module]["schedules"] == [case.schedule]  # its other records still count
    own = run_case(attrs_evolve(case, argv=mp.COMPILE), plugin_dir, strict=False)
    assert own.exit_code == 0, own.stderr
    assert json.loads(own.stdout)["schedule"] == case.schedule
    other = run_case(attrs_evolve(case, argv=("compile", "default-matmul", "--format", "json")),
                     plugin_dir, strict=False)
    assert other.exit_code == 0, other.stderr
    assert json.loads(other.stdout)["schedule"] == "default-matmul"


def attrs_evolve(case: mp.Case, **changes) -> mp.Case:
    import attrs

    return attrs.evolve(case, **changes)


# --- as real distributions (entry points from a .dist-info) ----------------------------

DIST_CASES = ("exit-at-import", "print-at-import", "build-body-raises", "strategy-raises",
              "duplicate-target", "target-bad-name", "interrupt-in-hook")


def write_distribution(folder: Path, case: mp.Case) -> str:
    """A minimal installed distribution providing ``case``'s module as an entry point.

    No Requires-Dist: the test environment already has the core, whatever its
    distribution is called.
    """
    write_plugin(folder, case)
    dist = f"misbehaving-{case.id}"
    info = folder / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[pipeline_core]\n{case.module} = {case.module}\n")
    return dist


@pytest.mark.parametrize("case_id", DIST_CASES)
def test_installed_distribution_is_named_by_its_distribution(case_id, plugin_dir):
    case = CASES[case_id]
    folder, forget = plugin_dir
    dist = write_distribution(folder, case)
    forget()
    result = run_cli(case.command())
    assert result.exit_code == case.expected_exit, result.stderr
    assert_reported(case, result, culprit=f"plugin {case.module!r} from distribution {dist}")
    forget()
    strict = run_cli(case.command() + ["--strict-plugins"])
    assert strict.exit_code == 3, strict.stderr
    assert_reported(case, strict, culprit=dist)


# --- the console script, as users run it ----------------------------------------------------

SUBPROCESS_CASES = ("exit-at-import", "argparse-at-import", "print-at-import", "print-in-hook",
                    "build-body-recursion", "exit-in-hook", "interrupt-at-import",
                    "interrupt-in-hook", "schedule-bad-name")


@pytest.mark.skipif(not EXE.exists(), reason="console script not installed in this environment")
@pytest.mark.parametrize("case_id", SUBPROCESS_CASES)
def test_console_script_survives_and_keeps_stdout_clean(case_id, tmp_path):
    case = CASES[case_id]
    write_plugin(tmp_path, case)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), **dict(case.env)}
    for strict, expected in ((False, case.expected_exit), (True, 3)):
        argv = [str(EXE), *case.command(), "--plugin", case.module, "--no-autoload"]
        argv += ["--strict-plugins"] if strict else []
        run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        assert run.returncode == expected, run.stderr
        result = type("R", (), {"exit_code": run.returncode, "stdout": run.stdout,
                                "stderr": run.stderr})()
        assert_reported(case, result, culprit=case.module)


# --- the user's Ctrl-C while a plugin runs still stops the tool ------------------------------

#: A hook during which the user presses Ctrl-C (the process receives a real SIGINT).
CTRL_C = mp.Case(id="ctrl-c-in-hook", source=mp.standard() + mp.d("""
    import signal

    @hookimpl
    def pipeline_core_derive_edges(schedule, body, config):
        signal.raise_signal(signal.SIGINT)
        return None  # never reached: Python's handler raises KeyboardInterrupt first
    """), argv=mp.COMPILE, stage="run", needles=(), exit_code=130)
#: a hung plugin is found this way: the line names the code the user's Ctrl-C stopped
CTRL_C_LINE = (f"interrupted while plugin {CTRL_C.module!r} (module {CTRL_C.module}, loaded with "
               "--plugin) was running hook pipeline_core_derive_edges\n")


@pytest.fixture
def ctrl_c_raises():
    """SIGINT handled by Python, as in a terminal (a background job of a script ignores it)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("only the main thread can set a signal handler")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _sigint_as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the child's Python installs its handler


@pytest.mark.parametrize("strict", (False, True))
def test_ctrl_c_during_a_hook_stops_the_tool_naming_the_code_it_stopped(strict, plugin_dir,
                                                                       ctrl_c_raises):
    result = run_case(CTRL_C, plugin_dir, strict=strict)
    assert (result.exit_code, result.stderr) == (130, CTRL_C_LINE)


@pytest.mark.skipif(not EXE.exists(), reason="console script not installed in this environment")
def test_console_script_stops_on_ctrl_c_during_a_hook(tmp_path):
    write_plugin(tmp_path, CTRL_C)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    argv = [str(EXE), *CTRL_C.command(), "--plugin", CTRL_C.module, "--no-autoload"]
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120,
                         preexec_fn=_sigint_as_in_a_terminal)
    assert (run.returncode, run.stderr) == (130, CTRL_C_LINE)
    assert run.stdout == ""


# --- the host and the guard directly ------------------------------------------------------


def test_plugin_host_survives_sys_exit_at_import(plugin_dir):
    folder, forget = plugin_dir
    write_plugin(folder, CASES["exit-at-import"])
    host = PluginHost(autoload=False, extra_modules=["mis_exit_at_import"])  # must not end pytest
    info = next(p for p in host.plugins if p.name == "mis_exit_at_import")
    assert info.status.startswith("failed: import failed: it called sys.exit(3)")
    assert "SystemExit" in info.traceback


def test_slow_import_is_reported_once_by_the_injected_clock(plugin_dir):
    folder, forget = plugin_dir
    write_plugin(folder, CASES["slow-import"])
    ticks = iter([0.0, 5.0, 5.0, 5.0])  # the import "takes" 5 s
    host = PluginHost(autoload=False, extra_modules=["mis_slow_import"], slow_import_s=1.0,
                      clock=lambda: next(ticks))
    slow = [w for w in host.warnings if "to import" in w]
    assert slow == [f"plugin 'mis_slow_import' (module mis_slow_import, loaded with --plugin) took "
                    "5.0 s to import (threshold 1 s, set by PIPELINE_CORE_SLOW_IMPORT_S); every "
                    "command pays this: disable it with --disable-plugin if you do not need it"]
    forget()
    fast = PluginHost(autoload=False, extra_modules=["mis_slow_import"], slow_import_s=1.0,
                      clock=lambda: 0.0)
    assert not [w for w in fast.warnings if "to import" in w]


def test_a_plugins_import_is_timed_net_of_the_cores(tmp_path):
    """The core's door is imported before any plugin's import is timed, so a slow-import warning
    blames a plugin for its own time, not for the core every plugin imports (issue 39).  A fresh
    interpreter: in this one the door is long imported."""
    import subprocess

    (tmp_path / "net_probe.py").write_text(
        "import sys\n"
        "CORE_FIRST = 'pipeline_core.plugin_api' in sys.modules\n")
    code = ("from pipeline_core.plugins import PluginHost\n"
            "PluginHost(autoload=False, extra_modules=['net_probe'])\n"
            "import net_probe\n"
            "print(net_probe.CORE_FIRST)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_keyboard_interrupt_still_stops_the_tool():
    guard = PluginGuard(lambda line: None)
    culprit = Culprit(plugin="p", distribution="d")

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(InterruptedInPlugin, match="plugin 'p' from distribution d was running "
                                                  "hook x"):  # cannot tell: stop, naming it
        guard.call(culprit, "hook x", interrupted)
    with pytest.raises(PluginError, match=r"plugin 'p' from distribution d failed in hook x: "
                                          r"it called sys.exit\(2\)"):
        guard.call(culprit, "hook x", sys.exit, 2)


def test_the_guard_tells_a_raised_interrupt_from_the_users_ctrl_c(ctrl_c_raises):
    guard_lines: list[str] = []
    culprit = Culprit(plugin="p", distribution="d")

    def raised():
        raise KeyboardInterrupt

    def pressed():
        signal.raise_signal(signal.SIGINT)

    with counting_sigints() as sigints:
        assert sigints is not None and sigints() == 0
        guard = PluginGuard(guard_lines.append, sigints)
        with pytest.raises(PluginError, match=r"plugin 'p' from distribution d failed in hook x: it "
                                              r"raised KeyboardInterrupt, but no Ctrl-C was pressed"):
            guard.call(culprit, "hook x", raised)
        with pytest.raises(KeyboardInterrupt) as stopped:
            guard.call(culprit, "hook x", pressed)
        assert isinstance(stopped.value, InterruptedInPlugin)
        assert stopped.value.where == "plugin 'p' from distribution d was running hook x"
        assert sigints() == 1
        with pytest.raises(PluginError):  # an earlier Ctrl-C does not excuse a later raise
            guard.call(culprit, "hook x", raised)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_where_no_ctrl_c_can_become_an_interrupt_every_interrupt_is_the_plugins(ctrl_c_raises):
    culprit = Culprit(plugin="p", distribution="d")

    def raised():
        raise KeyboardInterrupt

    def blamed() -> list:
        with counting_sigints() as sigints:
            assert sigints is not None and sigints() == 0
            try:
                PluginGuard(lambda line: None, sigints).call(culprit, "hook x", raised)
            except PluginError as exc:
                return [exc.hook]
        return []

    seen: list = []
    worker = threading.Thread(target=lambda: seen.extend(blamed()))
    worker.start()
    worker.join()
    assert seen == ["hook x"]  # Python raises KeyboardInterrupt for SIGINT in the main thread only
    for disposition in (signal.SIG_IGN, signal.SIG_DFL):  # a background job; a killed process
        previous = signal.signal(signal.SIGINT, disposition)
        try:
            assert blamed() == ["hook x"]
            assert signal.getsignal(signal.SIGINT) is disposition  # left as it was
        finally:
            signal.signal(signal.SIGINT, previous)


def test_guarded_schedule_keeps_isinstance_for_plugin_hooks():
    class Mine:
        name = "mine"

    guard = PluginGuard(lambda line: None)
    wrapped = guard.schedule(Mine(), Culprit(plugin="p", distribution="d"), "schedule 'mine'")
    assert isinstance(wrapped, Mine)
    assert wrapped.name == "mine"
    # a protocol member the object lacks is ScheduleBase's default; any other stays absent
    assert wrapped.derive_edges(()) is None and wrapped.lowering() == "blocks"
    assert getattr(wrapped, "not_a_protocol_member", None) is None


def test_an_optional_member_that_is_not_a_method_is_the_schedules_failure():
    class Mine:
        name = "mine"
        lowering = "agents"  # an attribute where the protocol declares a method

    guard = PluginGuard(lambda line: None)
    wrapped = guard.schedule(Mine(), Culprit(plugin="p", distribution="d"), "schedule 'mine'")
    with pytest.raises(PluginError, match=r"attribute lowering: has lowering = str, expected a "
                                          r"method lowering\(\)"):
        wrapped.lowering()
