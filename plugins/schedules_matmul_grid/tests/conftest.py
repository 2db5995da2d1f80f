"""Fixtures for the matmul-grid tests: compile helpers, the real CLI."""
from __future__ import annotations

import json

import pytest


@pytest.fixture
def compile_grid():
    """compile_grid(m, n, *, target_args=..., **config overrides) -> CompiledSchedule."""
    from pipeline_core.api import compile_named

    def run(m: int = 2, n: int = 2, *, target_args=None, params=None, allow_unsafe=False,
            **overrides):
        p = {"m": str(m), "n": str(n), **(params or {})}
        return compile_named("matmul-grid", params=p, target_args=target_args or {},
                             config_overrides={k: str(v) for k, v in overrides.items()},
                             allow_unsafe=allow_unsafe)
    return run


@pytest.fixture
def cli_json():
    from pipeline_core.testing import run_cli

    def run(argv):
        result = run_cli(list(argv))
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)
    return run
