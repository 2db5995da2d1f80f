"""pipeline-core: compile-time software pipelining of GPU kernel loops.

Public API: :func:`compile_schedule`, :func:`compile_named`, :data:`hookimpl`
and the records a schedule or plugin author needs.
"""
from __future__ import annotations

__version__ = "0.1.0"

from pipeline_core.hookspecs import hookimpl  # noqa: E402

__all__ = ["__version__", "hookimpl", "compile_schedule", "compile_named", "CompiledSchedule"]


def __getattr__(name: str):
    # Lazy so that `import pipeline_core` (and the CLI's --help) stays cheap.
    if name in ("compile_schedule", "CompiledSchedule"):
        from pipeline_core import compiler
        return getattr(compiler, name)
    if name == "compile_named":
        from pipeline_core.api import compile_named
        return compile_named
    raise AttributeError(name)
