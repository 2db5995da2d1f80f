"""The H100 plugin's rule for the tests that need nvcc (marker ``needs_nvcc``,
plugins/nvidia_h100/tests/conftest.py), for the gemv kernels' build tests: without nvcc on
PATH they skip saying why, and ``PIPELINE_CORE_REQUIRE_NVCC=1`` makes them fail (README, "Run
the tests").  The rule is loaded from that file, so the two folders keep one rule; a conftest's
hooks only reach the tests under its own folder, hence this one."""
from __future__ import annotations

import importlib.util
from pathlib import Path

_RULE = Path(__file__).resolve().parents[2] / "nvidia_h100" / "tests" / "conftest.py"
_spec = importlib.util.spec_from_file_location("_gemv_needs_nvcc_rule", _RULE)
assert _spec is not None and _spec.loader is not None
_rule = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_rule)

pytest_configure = _rule.pytest_configure
pytest_runtest_setup = _rule.pytest_runtest_setup
pytest_terminal_summary = _rule.pytest_terminal_summary
