"""pytest fixtures for plugin authors, registered through the ``pytest11`` entry point.

Installing the core makes these fixtures available in every pytest run, the way pytest's
own plugins are, so a plugin's tests need no import:

    def test_mine_compiles(pipeline_host):
        host = pipeline_host(my_plugin_module)   # the core + this plugin, no entry points
        ...

    def test_mine_on_the_cli(pipeline_cli):
        assert pipeline_cli(["compile", "mine"]).exit_code == 0

The helpers themselves live in :mod:`pipeline_core.testing`, which imports no pytest.
"""
from __future__ import annotations

from typing import Callable

import pytest

from pipeline_core.testing import fresh_host, run_cli


@pytest.fixture
def pipeline_host() -> Callable[..., object]:
    """Factory: ``pipeline_host(plugin, ..., autoload=False)`` returns a fresh plugin host."""
    return fresh_host


@pytest.fixture
def pipeline_cli() -> Callable[..., object]:
    """``pipeline_cli(argv, env=None)`` runs the command line in-process (exit code, stdout, stderr)."""
    return run_cli
