"""Golden parity: our JSON equals the reference's on every compared key (FORMAT.md)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import golden_data
from pipeline_core.testing import run_cli

COMMON = ("counts", "warp_stagger_index", "config", "body", "edges", "prologue", "kernel",
          "epilogue", "kernel_deps")
DOUBLE = ("schedule_config", "wait_lgkm_first", "wait_vm_last", "blocks")


def diffs(expected, got, path="", out=None):
    """Every 'path: expected X, got Y' difference (types compared strictly, like the tool)."""
    out = [] if out is None else out
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            out.append(f"{path}: expected object")
            return out
        for k, v in expected.items():
            if k not in got:
                out.append(f"{path}.{k}: missing")
            else:
                diffs(v, got[k], f"{path}.{k}", out)
    elif isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            out.append(f"{path}: expected {len(expected)} items, got {len(got) if isinstance(got, list) else got!r}")
            return out
        for i, (e, g) in enumerate(zip(expected, got)):
            diffs(e, g, f"{path}[{i}]", out)
    elif type(expected) is not type(got) or expected != got:
        out.append(f"{path}: expected {expected!r}, got {got!r}")
    return out


def compiled_document(case: str) -> tuple[dict, dict]:
    golden = golden_data.load(case)
    result = run_cli(golden["cli"] + ["--format", "json"])
    assert result.exit_code == 0, result.stderr
    return golden, json.loads(result.stdout)


@pytest.mark.parametrize("case", golden_data.CASES)
def test_every_compared_key_matches_the_reference(case):
    golden, got = compiled_document(case)
    keys = COMMON + (DOUBLE if golden["config"]["depth"] >= 2 else ())
    problems = []
    for key in keys:
        problems += diffs(golden[key], got.get(key), key)
    if golden["config"]["depth"] >= 2:
        assert got["scheduler"]["order"] == golden["scheduler"]["order"]
    assert problems == [], "\n".join(problems[:20])


def test_the_shared_golden_tool_passes_through_the_console_script():
    tool = golden_data.GOLDENS.parent / "tools" / "golden_check.py"
    exe = Path(sys.executable).with_name("pipeline-core")
    if not tool.exists() or not exe.exists():
        pytest.skip("shared golden tool or installed console script not available")
    run = subprocess.run([sys.executable, str(tool), "--cmd", str(exe)], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().splitlines()[-1] == f"{len(golden_data.CASES)} passed, 0 failed"
