"""Writing a command's output: to stdout, or to the ``-o FILE`` the user named.

A file that cannot be written (a missing folder, a full disk such as ``/dev/full``,
no permission) is reported naming the path, never as a bare ``[Errno 28]``.  Standard
output is the same: :func:`guarded_stdout` (around every command, pipeline_core/cli.py)
turns a failed write to it, the descriptor closed (``>&-``) included, into an
:class:`OutputError` for path ``-``, whoever wrote (the core, ``print``, a plugin command).
"""
from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import Any, Iterator

from pipeline_core.errors import OutputError


def to_stdout(path: str | None) -> bool:
    return not path or path == "-"


@contextlib.contextmanager
def reporting_path(path: str) -> Iterator[None]:
    """Turn an OSError raised while writing ``path`` into an OutputError naming it."""
    try:
        yield
    except OSError as exc:
        raise OutputError(path, exc.strerror or str(exc)) from exc


def write_text(text: str, path: str | None) -> None:
    """``text`` to ``path`` (stdout when ``path`` is None or '-')."""
    if path is None or to_stdout(path):  # (None spelled out: the type checker narrows on it)
        sys.stdout.write(text)
        return
    with reporting_path(path):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)


class _ClosedStdout:
    """What standard output is when the process started with descriptor 1 closed
    (``>&-``): Python leaves ``sys.stdout`` None, where ``print`` would drop the output
    unseen and ``sys.stdout.write`` raise AttributeError; here a write fails as a closed
    descriptor does, and a command that writes nothing to it (``-o FILE``) still works."""

    encoding = "utf-8"
    errors = "strict"

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, f"{os.strerror(errno.EBADF)} (it is closed)")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


class _GuardedStdout:
    """``sys.stdout`` while a command runs: each write and flush that fails raises an
    :class:`OutputError` for ``-`` (a documented error, which the plugin guard passes on
    unchanged from a plugin's command).  After a failure the descriptor is pointed at the
    null device, so that the interpreter's last flush of what is still buffered does not
    print a second, raw error (and set exit status 120); later writes are dropped, the
    failure being already on its way to the user."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._failed = False

    def write(self, text: str) -> int:
        if self._failed:
            return len(text)
        try:
            written: int = self._stream.write(text)
        except OSError as exc:
            raise self._failure(exc) from exc
        return written

    def flush(self) -> None:
        if self._failed:
            return
        try:
            self._stream.flush()
        except OSError as exc:
            raise self._failure(exc) from exc

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno, buffer ...
        return getattr(self._stream, name)

    def _failure(self, exc: OSError) -> OutputError:
        self._failed = True
        with contextlib.suppress(AttributeError, ValueError, OSError):  # a stream with no fd
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self._stream.fileno())
            finally:
                os.close(null)
        return OutputError("-", exc.strerror or str(exc),
                           broken_pipe=isinstance(exc, BrokenPipeError))


@contextlib.contextmanager
def guarded_stdout() -> Iterator[None]:
    """Run the ``with`` body with standard output guarded (see :class:`_GuardedStdout`);
    the body flushes it before it ends, while a failure can still be reported as one line."""
    saved = sys.stdout
    guard = _GuardedStdout(saved if saved is not None else _ClosedStdout())
    sys.stdout = guard
    try:
        yield
    finally:
        sys.stdout = saved
