"""Telling the user's Ctrl-C from a ``KeyboardInterrupt`` that code raised itself.

Python turns SIGINT into ``KeyboardInterrupt``, but any code may also ``raise
KeyboardInterrupt``.  The plugin guard (:mod:`pipeline_core.plugin_guard`) must stop the
tool for the first (exit 130) and report the second as the plugin's failure, naming it
(docs/guide/plugins.md, "A broken plugin never breaks the host").  The two are told apart by counting the
SIGINTs the process receives: while :func:`counting_sigints` is active, a handler counts
each one before raising ``KeyboardInterrupt`` as Python's own handler does, so an interrupt
that arrives while the count is unchanged was raised by code, not by the user.

The handler is installed in the main thread over Python's default handler or another
Python callable (which it calls after counting).  Where no SIGINT can become a
``KeyboardInterrupt`` (SIGINT ignored, as in a background job, or left to kill the process;
code running outside the main thread, where Python never raises it for a signal), the count
stays 0 and every ``KeyboardInterrupt`` is code's.  Only where SIGINT is handled outside
Python can the two not be told apart: then the guard lets every ``KeyboardInterrupt`` stop
the tool, as before.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from types import FrameType
from typing import Callable, Iterator


class SigintCounter:
    """The number of SIGINTs received while installed (see :func:`counting_sigints`)."""

    def __init__(self, previous: Callable[[int, FrameType | None], object]) -> None:
        self._count = 0
        self._previous = previous  #: the handler it replaced, called after counting

    def count(self) -> int:
        return self._count

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._count += 1  # first: the guard reads it while the interrupt unwinds
        self._previous(signum, frame)  # Python's default handler raises KeyboardInterrupt


def _never() -> int:
    """The count where no SIGINT can arrive as a ``KeyboardInterrupt``."""
    return 0


@contextlib.contextmanager
def counting_sigints() -> Iterator[Callable[[], int] | None]:
    """Count SIGINTs while the ``with`` body runs; yields the counter, or ``None`` where
    SIGINT is handled outside Python (a real Ctrl-C cannot be recognised there)."""
    if threading.current_thread() is not threading.main_thread():
        yield _never  # signals raise KeyboardInterrupt in the main thread only
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous in (signal.SIG_IGN, signal.SIG_DFL):  # ignored, or the process is killed
        yield _never
        return
    if not callable(previous):  # a handler set outside Python
        yield None
        return
    counter = SigintCounter(previous)
    signal.signal(signal.SIGINT, counter._handle)
    try:
        yield counter.count
    finally:
        signal.signal(signal.SIGINT, previous)
