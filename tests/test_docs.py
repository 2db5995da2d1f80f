"""The user guide builds offline with warnings as errors (what ``tox -e docs`` runs)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_guide_builds_and_generates_the_hook_and_cli_references(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    run = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-W", "--keep-going", "-b",
                          "html", str(ROOT / "docs"), str(tmp_path)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    hooks = (tmp_path / "guide" / "hooks.html").read_text()
    assert "pipeline_core_register_commands" in hooks and "When:" in hooks
    cli = (tmp_path / "guide" / "cli.html").read_text()
    assert "pipeline-core analyze" in cli and "--compact" in cli
