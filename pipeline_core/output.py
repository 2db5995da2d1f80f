"""Writing a command's output: to stdout, or to the ``-o FILE`` the user named.

A file that cannot be written (a missing folder, a full disk such as ``/dev/full``,
no permission) is reported naming the path, never as a bare ``[Errno 28]``.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Iterator

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
