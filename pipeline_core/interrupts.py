"""Telling the user's Ctrl-C from a ``KeyboardInterrupt`` that code raised itself.

Python turns SIGINT into ``KeyboardInterrupt``, but any code may also ``raise
KeyboardInterrupt``.  The plugin guard (:mod:`pipeline_core.plugin_guard`) must stop the
tool for the first (exit 130) and report the second as the plugin's failure, naming it
(README, "A broken plugin never breaks the host").  The two are told apart by counting the
SIGINTs the process receives: while :func:`counting_sigints` is active, a handler counts
each one before raising ``KeyboardInterrupt`` as Python's own handler does, so an interrupt
that arrives while the count is unchanged was raised by code, not by the user.

The handler is installed only where that is sound: in the main thread (the only one that
receives signals), over Python's default handler or another Python callable (which it calls
after counting).  Where SIGINT is ignored or handled outside Python, nothing is installed
and the guard cannot tell the two apart: it then lets every ``KeyboardInterrupt`` stop the
tool, as before.
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


@contextlib.contextmanager
def counting_sigints() -> Iterator[Callable[[], int] | None]:
    """Count SIGINTs while the ``with`` body runs; yields the counter, or ``None`` where
    no handler could be installed (not the main thread, SIGINT ignored or handled in C)."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):  # SIG_IGN, SIG_DFL or a handler set outside Python
        yield None
        return
    counter = SigintCounter(previous)
    signal.signal(signal.SIGINT, counter._handle)
    try:
        yield counter.count
    finally:
        signal.signal(signal.SIGINT, previous)
