"""Helpers for testing pipeline-core plugins (yours or ours), with no test runner needed.

    from pipeline_core.testing import fresh_host, run_cli

    def test_my_schedule_compiles():
        host = fresh_host(my_plugin_module)              # only the core + your plugin
        compiled = compile_named("mine", host=host)

    def test_cli():
        result = run_cli(["compile", "mine", "--format", "json"])
        assert result.exit_code == 0, result.stderr

Under pytest the same helpers come as fixtures (``pipeline_host``, ``pipeline_cli``) with no
import: the core registers :mod:`pipeline_core.pytest_plugin` through the ``pytest11`` entry
point, as pytest's own plugins do.
"""
from __future__ import annotations

import contextlib
import io
from typing import Any, Sequence

import attrs

from pipeline_core.plugins import PluginHost


def fresh_host(*plugins: Any, autoload: bool = False, **kwargs: Any) -> PluginHost:
    """A new host with the core and the given plugin modules/objects (no entry points by default)."""
    extra = [(getattr(p, "__name__", f"plugin{i}"), p) for i, p in enumerate(plugins)]
    return PluginHost(autoload=autoload, extra_plugins=extra, **kwargs)


@attrs.frozen
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(argv: Sequence[str], *, env: dict[str, str] | None = None) -> CliResult:
    """Run ``pipeline-core argv`` in-process; returns exit code and captured output."""
    import os

    from pipeline_core.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse errors
                code = int(exc.code or 0)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return CliResult(code, out.getvalue(), err.getvalue())
