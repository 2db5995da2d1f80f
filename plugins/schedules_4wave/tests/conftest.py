"""Fixtures for the 4-wave tests: compile by name, the real CLI, goldens."""
from __future__ import annotations

import pytest

from pipeline_core_amd_mi355x import testing as mt
from pipeline_core_amd_mi355x.fixtures import cli_json, cli_run, golden  # noqa: F401 (fixtures)


@pytest.fixture
def compile_4wave():
    """``compile_4wave(params=..., target_args=..., overrides=...)`` through the default host."""
    return mt.compiler_for("4wave")
