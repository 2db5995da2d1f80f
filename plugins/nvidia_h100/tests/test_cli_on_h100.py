"""What the CLI tells a newcomer on the H100 target: ``emit -o`` says what it wrote, a text-view
flag that cannot shape an agents listing is refused (not silently ignored), and every emitted
kernel is a file a user can build as their main file (no pasted include guard)."""
from __future__ import annotations

import pytest

from pipeline_core.testing import run_cli

pytest.importorskip("pipeline_core_nvidia_h100")

#: one schedule per emitter family the bundled plugins write for h100
EMITTED = ("warpspecialized-gemm", "multistage-gemm", "flash-attention-fwd", "gemv")


@pytest.mark.parametrize("flag", ["--kernel-only", "--compact"])
def test_a_listing_flag_on_an_agents_schedule_is_refused_naming_it(flag):
    result = run_cli(["compile", "warpspecialized-gemm", "--target", "h100", flag])
    assert result.exit_code != 0
    line, = result.stderr.strip().splitlines()
    assert f"drop {flag}" in line and "one program per agent" in line


@pytest.mark.parametrize("schedule", EMITTED)
def test_emit_to_a_file_says_what_it_wrote_and_pastes_no_include_guard(schedule, tmp_path):
    out = tmp_path / f"{schedule}.cu"
    result = run_cli(["emit", schedule, "--target", "h100", "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    source = out.read_text()
    lines = source.count("\n")
    assert result.stderr.startswith(f"wrote {out}: {lines} lines from emitter ")
    assert f"schedule {schedule} on target h100" in result.stderr
    assert "#pragma once" not in source  # nvcc warns "#pragma once in main file"
    assert "#pragma unroll" in source or "__global__" in source
