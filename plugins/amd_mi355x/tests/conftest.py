"""Fixtures for the MI355X plugin tests: compile by name, the real CLI, goldens."""
from __future__ import annotations

import pytest

from pipeline_core_amd_mi355x import testing as mt


@pytest.fixture
def compile_named():
    """``compile_named(schedule, target=None, **params)`` with string-valued params, default host."""
    from pipeline_core.api import compile_named as _compile

    def run(schedule, target=None, target_args=None, overrides=None, **params):
        return _compile(schedule, target=target, params={k: str(v) for k, v in params.items()},
                        target_args={k: str(v) for k, v in (target_args or {}).items()},
                        config_overrides={k: str(v) for k, v in (overrides or {}).items()})
    return run


@pytest.fixture
def golden():
    """``golden(case)`` loads a golden document, skipping when the goldens are not beside the repo."""
    if mt.goldens_dir() is None:
        pytest.skip("goldens not found (../shared/goldens or $PIPELINE_CORE_GOLDENS)")
    return mt.load_golden


@pytest.fixture
def cli_json():
    """``cli_json(argv)``: the real console script in a subprocess, JSON parsed."""
    return mt.compile_json


@pytest.fixture
def cli_run():
    """``cli_run(argv)``: the real console script in a subprocess (CompletedProcess)."""
    return mt.run_pipeline_core
