"""Standard output that cannot be written: closed (``>&-``), full, or its reader gone.

Every command writes through the one guard that ``main`` puts around it
(pipeline_core/output.py, ``guarded_stdout``): a closed or full stdout is one line naming
standard output (exit 2), never an internal error; a broken pipe ends quietly with 141.
"""
from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from pipeline_core.cli import COMMANDS, main

#: one command line per built-in command that writes to standard output by default
WRITERS = {
    "compile": ["compile", "pingpong"], "targets": ["targets"], "schedules": ["schedules"],
    "plugins": ["plugins"], "strategies": ["strategies"], "emitters": ["emitters"],
    "emit": ["emit", "multistage-gemm", "--target", "h100"], "check": ["check", "pingpong"],
    "analyze": ["analyze", "pingpong"], "export": ["export", "pingpong", "--format", "dot"],
    "knobs": ["knobs"], "completion": ["completion", "bash"],
}
CLOSED_LINE = ("error: cannot write standard output: Bad file descriptor (it is closed); "
               "give -o FILE to write to a file instead\n")


class _Failing:
    """A standard output whose writes fail with ``err``, or, ``buffered``, whose writes are
    kept and whose flush fails (a full disk under a buffer)."""

    def __init__(self, err: int, buffered: bool = False) -> None:
        self.err, self.buffered, self.text = err, buffered, ""

    def write(self, text: str) -> int:
        if not self.buffered:
            self._fail()
        self.text += text
        return len(text)

    def flush(self) -> None:
        if self.buffered:
            self._fail()

    def _fail(self) -> None:
        raise (BrokenPipeError if self.err == errno.EPIPE else OSError)(
            self.err, os.strerror(self.err))


def _run(monkeypatch, capsys, stdout, argv):
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    assert sys.stdout is stdout  # the guard is put back
    return code, capsys.readouterr().err


def test_every_built_in_command_is_covered():
    assert set(WRITERS) | {"new-plugin"} == set(COMMANDS)  # new-plugin writes files only


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_closed_stdout_is_one_line_for_every_command(monkeypatch, capsys, name):
    if name == "completion":
        pytest.importorskip("shtab")
    code, err = _run(monkeypatch, capsys, None, WRITERS[name])
    assert (code, err) == (2, CLOSED_LINE)


@pytest.mark.parametrize("argv", [["--version"], ["--help"], []])
def test_a_closed_stdout_is_one_line_for_version_and_help(monkeypatch, capsys, argv):
    assert _run(monkeypatch, capsys, None, argv) == (2, CLOSED_LINE)


def test_a_closed_stdout_does_not_stop_a_command_writing_a_file(monkeypatch, capsys, tmp_path):
    out = tmp_path / "k.txt"
    assert _run(monkeypatch, capsys, None, ["compile", "pingpong", "-o", str(out)]) == (0, "")
    assert "pingpong" in out.read_text()


def test_a_full_stdout_is_one_line_when_the_command_flushes(monkeypatch, capsys):
    stdout = _Failing(errno.ENOSPC, buffered=True)
    code, err = _run(monkeypatch, capsys, stdout, ["schedules"])
    assert code == 2 and "pingpong" in stdout.text  # written, then the flush failed
    assert err == ("error: cannot write standard output: No space left on device; give -o "
                   "FILE to write to a file instead\n")


def test_a_broken_pipe_ends_quietly_with_141(monkeypatch, capsys):
    assert _run(monkeypatch, capsys, _Failing(errno.EPIPE), ["targets"]) == (141, "")


def test_a_plugin_commands_closed_stdout_is_the_same_line(monkeypatch, capsys, tmp_path):
    """A plugin command's print goes through the same guard: not a failure of the plugin."""
    (tmp_path / "printing_plugin.py").write_text(
        "from pipeline_core.commands import CommandRecord\n"
        "from pipeline_core.plugin_api import hookimpl\n"
        "@hookimpl\n"
        "def pipeline_core_register_commands():\n"
        "    return [CommandRecord(name='say', help='prints', add_arguments=lambda p: None,\n"
        "                          run=lambda args, host: print('said') or 0)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _run(monkeypatch, capsys, None, ["--plugin", "printing_plugin", "say"]) == \
        (2, CLOSED_LINE)


def _real(argv, **kwargs):
    return subprocess.run([sys.executable, "-c", "import sys; from pipeline_core.cli import "
                           "main; sys.exit(main())", *argv], stderr=subprocess.PIPE, text=True,
                          **kwargs)


@pytest.mark.skipif(sys.platform == "win32", reason="closes descriptor 1 with os.close")
def test_a_closed_descriptor_in_a_real_process(tmp_path):
    """``pipeline-core schedules >&-``: Python starts with sys.stdout None."""
    done = _real(["schedules"], preexec_fn=lambda: os.close(1))
    assert (done.returncode, done.stderr) == (2, CLOSED_LINE)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_device_in_a_real_process():
    """The output is buffered: the failure shows at the flush the command makes, and the
    interpreter's own last flush adds no second error (nor exit status 120)."""
    with open("/dev/full", "w") as full:
        done = _real(["knobs"], stdout=full)
    assert done.returncode == 2
    assert done.stderr == ("error: cannot write standard output: No space left on device; give "
                           "-o FILE to write to a file instead\n")
