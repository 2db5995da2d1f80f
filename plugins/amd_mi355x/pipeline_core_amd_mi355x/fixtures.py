"""pytest fixtures shared by the MI355X plugin test suites.

A conftest imports them by name: ``from pipeline_core_amd_mi355x.fixtures import golden``.
They are not registered through ``pytest11``: their names (``golden``, ``cli_json``) are too
generic to impose on every pytest run of an environment that has this plugin installed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from pipeline_core_amd_mi355x.testing import compile_json, goldens_dir, load_golden, run_pipeline_core


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str], dict[str, Any]]:
    """``golden(case)`` loads a golden document of the repository under test (fails if absent)."""
    directory: Path = goldens_dir(request.config.rootpath)
    return lambda case: load_golden(case, directory)


@pytest.fixture
def cli_json() -> Callable[..., dict[str, Any]]:
    """``cli_json(argv)``: the real console script in a subprocess, JSON parsed."""
    return compile_json


@pytest.fixture
def cli_run() -> Callable[..., Any]:
    """``cli_run(argv)``: the real console script in a subprocess (CompletedProcess)."""
    return run_pipeline_core
