"""Fixtures for the 4-wave tests: compile by name, the real CLI, goldens."""
from __future__ import annotations

import pytest

from pipeline_core_amd_mi355x import testing as mt


@pytest.fixture
def compile_4wave():
    """``compile_4wave(params=..., target_args=..., overrides=...)`` through the default host."""
    from pipeline_core.api import compile_named

    def run(params=None, target_args=None, overrides=None, target="mi355x"):
        s = lambda d: {k: str(v) for k, v in (d or {}).items()}  # noqa: E731
        return compile_named("4wave", target=target, params=s(params), target_args=s(target_args),
                             config_overrides=s(overrides))
    return run


@pytest.fixture
def golden():
    if mt.goldens_dir() is None:
        pytest.skip("goldens not found (../shared/goldens or $PIPELINE_CORE_GOLDENS)")
    return mt.load_golden


@pytest.fixture
def cli_json():
    return mt.compile_json


@pytest.fixture
def cli_run():
    return mt.run_pipeline_core
