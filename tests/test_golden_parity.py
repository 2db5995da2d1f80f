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
from pipeline_core_amd_mi355x.testing import REFERENCE_FLAGS, golden_diffs

#: goldens whose reference output races with the kernel's real warp counts: the 4-wave
#: epilogue (docs/design/amd-waits-and-warps.md); compile repairs it unless --allow-unsafe
RACING_CASES = [c for c in golden_data.CASES if c.startswith("fourwave")]


def compiled_document(case: str, flags=REFERENCE_FLAGS) -> tuple[dict, dict]:
    golden = golden_data.load(case)
    result = run_cli(golden["cli"] + ["--format", "json", *flags])
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


@pytest.mark.parametrize("case", [c for c in golden_data.CASES if c not in RACING_CASES])
def test_goldens_that_do_not_race_match_without_allow_unsafe(case):
    golden, got = compiled_document(case, flags=())
    assert golden_diffs(golden, got) == []
    assert "hazards" not in got


@pytest.mark.parametrize("case", RACING_CASES)
def test_racing_goldens_are_repaired_by_default_and_listed_under_allow_unsafe(case):
    """A plain compile prefixes the reference's epilogue with WAIT_VM(0), BARRIER and changes
    nothing else; --allow-unsafe gives the reference's and lists its LDS_RAW hazards."""
    golden, repaired = compiled_document(case, flags=())
    assert [(e["op"]["tag_name"], e["op"]["wait_value"]) for e in repaired["epilogue"][:2]] == [
        ("WAIT_VM", 0), ("BARRIER", 0)]
    repaired["epilogue"] = [dict(e, index=i, time_slot=i)
                            for i, e in enumerate(repaired["epilogue"][2:])]
    repaired["counts"]["epilogue"] -= 2
    assert golden_diffs(golden, repaired) == []
    assert "hazards" not in repaired
    _, reference = compiled_document(case)
    assert {h["kind"] for h in reference["hazards"]} == {"LDS_RAW"}
    assert all(h["phase"] == "epilogue" for h in reference["hazards"])
