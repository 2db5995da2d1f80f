"""Fixtures for the MI355X plugin tests: compile by name, the real CLI, goldens."""
from __future__ import annotations

import pytest

from pipeline_core_amd_mi355x import testing as mt
from pipeline_core_amd_mi355x.fixtures import cli_json, cli_run, golden  # noqa: F401 (fixtures)


@pytest.fixture
def compile_named():
    """``compile_named(schedule, target=None, **params)`` with any-typed values, default host."""
    return mt.compiler_for()
