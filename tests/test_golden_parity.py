"""Golden parity: our JSON equals the reference's on every compared key (docs/document-format.md).

The same comparison runs through the console script in the plugin suites; this one runs
every golden in-process.  CI additionally runs the project's external golden tool when the
shared golden directory sits beside the checkout (``.ci/run``).
"""
from __future__ import annotations

import json

import pytest

import golden_data
from pipeline_core.testing import run_cli
from pipeline_core_amd_mi355x.testing import golden_diffs


def compiled_document(case: str) -> tuple[dict, dict]:
    golden = golden_data.load(case)
    result = run_cli(golden["cli"] + ["--format", "json"])
    assert result.exit_code == 0, result.stderr
    return golden, json.loads(result.stdout)


def test_every_golden_of_the_reference_is_in_the_repository():
    assert len(golden_data.CASES) == 25
    assert {c.split("_")[0] for c in golden_data.CASES} == {"default", "fourwave", "pingpong"}


@pytest.mark.parametrize("case", golden_data.CASES)
def test_every_compared_key_matches_the_reference(case):
    golden, got = compiled_document(case)
    problems = golden_diffs(golden, got)
    assert problems == [], "\n".join(problems)


def test_a_changed_field_is_reported():
    golden, got = compiled_document("pingpong_bf16")
    got["kernel"][3]["op"]["wait_value"] += 1
    assert golden_diffs(golden, got) == [
        f"kernel[3].op.wait_value: expected {golden['kernel'][3]['op']['wait_value']!r}, "
        f"got {got['kernel'][3]['op']['wait_value']!r}"]
