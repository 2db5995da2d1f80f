"""benchmarks/gemm_h100.py without a GPU: --help, and --compile-only emits and nvcc-compiles every
kernel the GPU run builds (the compiled pingpong among them) without spills (needs nvcc)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

HARNESS = Path(__file__).resolve().parents[3] / "benchmarks" / "gemm_h100.py"
pytestmark = pytest.mark.skipif(not HARNESS.is_file(), reason="not a repository checkout")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HARNESS), *args], capture_output=True, text=True)


def test_help_names_the_compile_only_mode():
    proc = _run("--help")
    assert proc.returncode == 0, proc.stderr
    assert "--compile-only" in proc.stdout and "compiled-pingpong" in proc.stdout


@pytest.mark.needs_nvcc  # skipped or failed without nvcc: conftest.py
def test_compile_only_builds_every_kernel_including_the_pingpong_ones():
    proc = _run("--compile-only")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    pingpong = [r for r in rows if r["impl"] == "compiled-pingpong"]
    assert {r["config"] for r in pingpong} == {"pp-128x128x64", "pp-128x128x32"}
    assert {r["impl"] for r in rows} >= {"hand-multistage", "compiled-multistage"}
    for r in rows:
        assert r["compiled"] and r["spill_free"] and r["max_registers"] <= 255, r
