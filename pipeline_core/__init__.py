"""pipeline-core: compile-time software pipelining of GPU kernel loops.

Public API: :func:`compile_schedule`, :func:`compile_named`, :data:`hookimpl`
and the records a schedule or plugin author needs.
"""
from __future__ import annotations

from pipeline_core.markers import hookimpl

#: The distribution that installs this package.  The version is written once, in
#: pyproject.toml, and read back from the installed metadata (``__version__``).
DISTRIBUTION = "gpu-pipeline-core"
#: How a user installs the picture exports' extra (matplotlib): every hint names the
#: distribution, since "pipeline-core" on the package index is an unrelated project.
PLOT_INSTALL = f"pip install '{DISTRIBUTION}[plot]'"

__all__ = ["DISTRIBUTION", "__version__", "hookimpl", "installed_version", "compile_schedule", "compile_named", "CompiledSchedule"]


def installed_version(distribution: str) -> str:
    """The installed version of ``distribution``; ``0+unknown`` for an uninstalled source tree."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str):
    # Lazy so that `import pipeline_core` (and the CLI's --help) stays cheap.
    if name == "__version__":
        return installed_version(DISTRIBUTION)
    if name in ("compile_schedule", "CompiledSchedule"):
        from pipeline_core import compiler
        return getattr(compiler, name)
    if name == "compile_named":
        from pipeline_core.api import compile_named
        return compile_named
    raise AttributeError(name)
