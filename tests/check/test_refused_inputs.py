"""Inputs the checker refuses (issue 16): each would otherwise change a verdict silently."""
from __future__ import annotations

import json

import pytest

from pipeline_core.testing import run_cli


@pytest.fixture(scope="module")
def pingpong_doc():
    return json.loads(run_cli(["compile", "pingpong", "--format", "json"]).stdout)


def _first(doc, tag):
    return next(e for e in doc["kernel"] if e["op"]["tag"] == tag)


def _set_wait(tag, value):
    def change(d):
        _first(d, tag)["op"]["wait_value"] = value
    return change


CASES = [
    ("stagger-out-of-range", lambda d: d.__setitem__("warp_stagger_index", 99),
     "warp_stagger_index: must be 0..11 (the prologue has 10 entries), got 99"),
    ("stagger-negative", lambda d: d.__setitem__("warp_stagger_index", -1), "got -1"),
    ("stagger-enabled-string", lambda d: d["config"]["warp_stagger"].__setitem__("enabled", "false"),
     "config.warp_stagger.enabled: expected true or false, got 'false'"),
    ("negative-wait", _set_wait(129, -1), "kernel[29].op.wait_value: a wait on vm takes 0..63"),
    ("over-limit-vm", _set_wait(129, 64), "a wait on vm takes 0..63 (its encoding), got 64"),
    ("over-limit-lgkm", _set_wait(130, 16), "a wait on lgkm takes 0..15 (its encoding), got 16"),
    ("mistyped-ticks", lambda d: d["config"].__setitem__("vm_per_load_a", "2"),
     "config.vm_per_load_a: expected an integer >= 0, got '2'"),
    ("mistyped-match", lambda d: d["config"].__setitem__("ch0_match_field", True),
     "config.ch0_match_field: expected 0 (stage) or 1 (subtile), got True"),
    ("mistyped-warps", lambda d: d["execution"].__setitem__("warps_per_group", 0),
     "execution.warps_per_group: expected an integer in [1, 32], got 0"),
]


@pytest.mark.parametrize("name,change,needle", CASES, ids=[c[0] for c in CASES])
def test_a_bad_document_exits_2_naming_the_path(pingpong_doc, tmp_path, name, change, needle):
    doc = json.loads(json.dumps(pingpong_doc))
    change(doc)
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    result = run_cli(["check", "--input", str(path)])
    assert result.exit_code == 2, result.stdout + result.stderr
    assert needle in result.stderr
    assert "Traceback" not in result.stderr


def test_deep_json_is_refused_before_parsing(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    result = run_cli(["check", "--input", str(path)])
    assert result.exit_code == 2
    assert f"{path} nests 100000 levels deep, more than the 64" in result.stderr


def test_bytes_that_are_not_utf8_name_the_file(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"schedule": "caf\xe9"}')
    result = run_cli(["check", "--input", str(path)])
    assert result.exit_code == 2
    assert f"{path} is not UTF-8 text (byte 17 is 0xe9)" in result.stderr


def test_the_document_records_its_warps_and_check_input_uses_them(pingpong_doc, tmp_path):
    """4-wave's reference epilogue races only with its real 4 warps; the document says 4."""
    run = run_cli(["compile", "4wave", "--format", "json", "--allow-unsafe"])
    doc = json.loads(run.stdout)
    assert doc["execution"] == {"groups": 1, "warps_per_group": 4}
    path = tmp_path / "4wave.json"
    path.write_text(json.dumps(doc))
    result = run_cli(["check", "--input", str(path)])
    assert result.exit_code == 1 and "LDS_RAW at epilogue[1] (group 0 warp 0)" in result.stdout


@pytest.mark.parametrize("override,needle", [
    ("wait_vm_last=64", "kernel[29] WAIT_VM(64) cannot be encoded: vmcnt waits on target 'mi355x' take 0..63"),
    ("wait_lgkm_first=16", "WAIT_LGKM(16) cannot be encoded: lgkmcnt waits on target 'mi355x' take 0..15"),
])
def test_compile_refuses_a_manual_wait_beyond_the_encoding(override, needle):
    result = run_cli(["compile", "pingpong", "-c", "auto_waits=false", "-c", override,
                      "--allow-unsafe"])
    assert result.exit_code == 2
    assert needle in result.stderr and "lower -c wait_vm_last / wait_lgkm_first" in result.stderr


def test_fix_suggestions_stay_within_the_encoding():
    """No fix proposes a negative wait or one above the channel's limit."""
    from pipeline_core.api import compile_named

    limits = {"vm": 63, "lgkm": 15}
    for knob in ("minimal_barriers", "barrier_before_pre_ops", "partial_prologue_drain"):
        c = compile_named("pingpong", config_overrides={knob: "true"}, allow_unsafe=True)
        for h in c.hazards:
            fix = h["fix"]
            if fix and fix["value"] is not None:
                assert 0 <= fix["value"] <= limits[fix["counter"]], fix
