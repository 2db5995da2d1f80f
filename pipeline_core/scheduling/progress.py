"""Progress lines for long searches: on an interactive terminal only (stderr must be a TTY).

A search calls the returned function with keyword facts (phase, nodes, best,
depth) every half second or so; the line is redrawn in place and cleared when
the search ends (``done``). Pipes, files and CI logs get nothing.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, TextIO


class TerminalProgress:
    """Redraws one status line on ``stream``; ``close()`` erases it."""

    def __init__(self, label: str, stream: TextIO) -> None:
        self.label = label
        self.stream = stream
        self.t0 = time.perf_counter()
        self.shown = False

    def __call__(self, *, phase: str, nodes: int, best=None, depth: int = 0, **_ignored) -> None:
        elapsed = time.perf_counter() - self.t0
        rate = nodes / elapsed if elapsed > 0 else 0.0
        best_text = "" if best is None else f"  best makespan {best}"
        line = (f"{self.label}: {phase}: {nodes} nodes ({rate:,.0f}/s), depth {depth}"
                f"{best_text}, {elapsed:.1f}s")
        self.stream.write("\r\x1b[2K" + line)
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self.shown = False


def terminal_progress(label: str, stream: TextIO | None = None) -> TerminalProgress | None:
    """A progress callback when ``stream`` (default stderr) is a terminal, else None."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if not callable(isatty) or not isatty():
        return None
    return TerminalProgress(label, stream)


ProgressFn = Callable[..., None]
