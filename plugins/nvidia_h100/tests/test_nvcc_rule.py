"""The needs_nvcc rule (plugins/conftest.py): without nvcc a SASS test skips saying why and how
to make it fail, and ``PIPELINE_CORE_REQUIRE_NVCC=1`` makes it fail (issue 25: they skipped
silently)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

HERE = Path(__file__).resolve().parent
SASS_TESTS = HERE / "test_h100_cuda_sass.py"


def _run_without_nvcc(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """The SASS tests in a pytest whose PATH holds only this Python (no nvcc)."""
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    full = {k: v for k, v in os.environ.items() if k != "PIPELINE_CORE_REQUIRE_NVCC"}
    full.update(PATH=str(bare), **env)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-rs", str(SASS_TESTS)], capture_output=True,
                          text=True, env=full, cwd=tmp_path, timeout=300)


def test_without_nvcc_the_sass_tests_skip_and_say_why(tmp_path):
    proc = _run_without_nvcc(tmp_path)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert " skipped" in out and " passed" not in out and " failed" not in out, out
    assert "nvcc is not on PATH" in out and "PIPELINE_CORE_REQUIRE_NVCC=1 makes this a failure" in out
    assert "tests needing nvcc were skipped" in out  # the closing line counts them


def test_required_nvcc_turns_the_skip_into_a_failure(tmp_path):
    proc = _run_without_nvcc(tmp_path, PIPELINE_CORE_REQUIRE_NVCC="1")
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert " error" in out and " skipped" not in out and " passed" not in out, out
    assert "nvcc is not on PATH" in out and "PIPELINE_CORE_REQUIRE_NVCC=1 requires it" in out
