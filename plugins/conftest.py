"""The rule for every plugin's tests that need nvcc (marker ``needs_nvcc``: the H100 plugin's and
each Hopper kernel family's SASS and build tests; one home, so the families load no copy of
it): without nvcc on PATH they
skip with a reason that says so and how to make it a failure, and a line at the end of the run
counts them; with ``PIPELINE_CORE_REQUIRE_NVCC=1`` they fail instead, so a CI machine whose
toolchain is promised cannot pass them silently (README, "Run the tests").

nvcc comes from a CUDA toolkit on PATH: no extra of this plugin installs it (its ``test`` extra
brings only ``nvidia-cuda-nvdisasm`` for reading SASS).
"""
from __future__ import annotations

import os

import pytest

#: the environment variable that turns a missing nvcc into a failure
REQUIRE_NVCC = "PIPELINE_CORE_REQUIRE_NVCC"
NOT_ON_PATH = "nvcc is not on PATH (a CUDA toolkit's; no extra installs it)"
MISSING = f"{NOT_ON_PATH}, so no kernel was compiled: {REQUIRE_NVCC}=1 makes this a failure"
_skipped: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs_nvcc: compiles CUDA with nvcc (skipped without "
                                       f"it, failed without it under {REQUIRE_NVCC}=1)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("needs_nvcc") is None:
        return
    from pipeline_core_nvidia_h100.toolchain import nvcc

    if nvcc() is not None:
        return
    if os.environ.get(REQUIRE_NVCC, "") not in ("", "0"):
        pytest.fail(f"{NOT_ON_PATH}, and {REQUIRE_NVCC}={os.environ[REQUIRE_NVCC]} requires it",
                    pytrace=False)
    _skipped.append(item.nodeid)
    pytest.skip(MISSING)


def pytest_terminal_summary(terminalreporter) -> None:
    if _skipped:
        terminalreporter.write_line(f"{len(_skipped)} tests needing nvcc were skipped: {MISSING}",
                                    yellow=True)
