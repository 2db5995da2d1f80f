"""Shared fixtures: fresh plugin hosts, in-process CLI runs, golden documents."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline_core.testing import run_cli  # noqa: E402,F401
import golden_data  # noqa: E402


@pytest.fixture
def cli():
    """``cli(*argv)`` runs pipeline-core in-process and returns a CliResult."""
    return lambda *argv, env=None: run_cli(list(argv), env=env)


@pytest.fixture(params=golden_data.CASES)
def golden_case(request):
    return request.param
