"""Malformed input gives a clear DocumentError (exit code 2 on the command line)."""
from __future__ import annotations

import argparse
import io
import json

import pytest

from pipeline_core.check import DocumentError, check_document
from pipeline_core.check.cli import add_arguments, load_input, run

from .helpers import GOLDENS, TESTCFG, load


def _args(*argv):
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


@pytest.mark.parametrize("key", ["prologue", "kernel", "epilogue", "warp_stagger_index", "config"])
def test_missing_top_level_key(key):
    doc = load("pingpong_bf16")
    del doc[key]
    with pytest.raises(DocumentError, match=f"missing key '{key}'") as err:
        check_document(doc)
    assert err.value.problem == f"missing key {key!r}"


@pytest.mark.parametrize("key", ["tag", "role", "stage", "subtile", "k_offset", "channel", "wait_value"])
def test_missing_op_field_names_the_entry(key):
    doc = load("fourwave_fp8")
    del doc["kernel"][7]["op"][key]
    with pytest.raises(DocumentError) as err:
        check_document(doc)
    assert err.value.path == "kernel[7].op" and key in str(err.value)


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.__setitem__("kernel", {}), "expected a list of entries"),
    (lambda d: d["kernel"].__setitem__(0, 3), "expected an object"),
    (lambda d: d["kernel"][0].pop("op"), "missing key 'op'"),
    (lambda d: d.__setitem__("warp_stagger_index", "4"), "expected an integer"),
    (lambda d: d["config"].pop("depth"), "config: missing key 'depth'"),
    (lambda d: d["kernel"][2]["op"].__setitem__("k_offset", 255), "needs a K offset"),
    (lambda d: d["kernel"][2]["op"].__setitem__("k_offset", 7), "unknown KOffsetKind"),
    (lambda d: d["kernel"][2]["op"].__setitem__("role", 77), "cannot interpret"),
])
def test_bad_values(mutate, needle):
    doc = load("pingpong_bf16")
    mutate(doc)
    with pytest.raises(DocumentError, match=needle):
        check_document(doc)


def test_channel_that_cannot_be_recovered():
    doc = load("pingpong_bf16")
    doc["body"] = []
    for phase in ("prologue", "kernel", "epilogue"):
        for e in doc[phase]:
            if e["op"]["tag"] == 0:
                e["op"]["channel"] = -1
                e["op"]["vm_cost"] = 0
    with pytest.raises(DocumentError, match="cannot tell the channel of tag 0"):
        check_document(doc)


def test_prologue_channel_is_recovered_from_the_tag():
    doc = load("pingpong_bf16")
    assert all(e["op"]["channel"] == -1 for e in doc["prologue"])
    assert check_document(doc).safe


def test_not_an_object():
    with pytest.raises(DocumentError, match="expected a JSON object"):
        check_document([1, 2])


def test_cli_exit_codes_and_one_line_errors(tmp_path, capsys):
    assert run(_args("--input", str(GOLDENS / "pingpong_bf16.json"))) == 0
    assert "SAFE" in capsys.readouterr().out
    assert run(_args("--input", str(GOLDENS / f"{TESTCFG}.json"))) == 0
    assert "SAFE" in capsys.readouterr().out
    assert run(_args("--input", str(GOLDENS / f"{TESTCFG}.json"), "--no-lds-order")) == 1
    assert "UNSAFE: LDS_WAR" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert run(_args("--input", str(bad))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not valid JSON" in err
    assert run(_args("--input", str(tmp_path / "missing.json"))) == 2
    assert "cannot read" in capsys.readouterr().err
    bad.write_text(json.dumps({"kernel": []}))
    assert run(_args("--input", str(bad))) == 2
    assert "missing key 'prologue'" in capsys.readouterr().err
    assert run(_args()) == 2
    assert "no schedule given" in capsys.readouterr().err


def test_cli_reads_stdin(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO((GOLDENS / "fourwave_fp8.json").read_text()))
    assert run(_args("--input", "-", "--format", "json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["safe"] is True and out["first_violation"] is None


def test_cli_json_verdict_fields(capsys):
    doc = load(TESTCFG)
    assert run(_args("--format", "json", "--tightest", "--no-lds-order"), doc) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["safe"] is False and out["wait_slack"] == []
    first = out["first_violation"]
    assert {k: first[k] for k in ("kind", "phase", "index", "iteration", "group")} == \
        {"kind": "LDS_WAR", "phase": "kernel", "index": 12, "iteration": 1, "group": 0}
    assert first["fix"]["action"] == "lower_wait" and first["fix"]["value"] == 0
    assert first["other"]["group"] == 1
    assert len(out["violations"]) == 2 and out["violation_count"] >= 2
    assert out["counter_model"]["notes"]  # the 1-lgkm-per-fragment assumption is reported
    assert out["counter_model"]["lds_in_order"] is False


def test_cli_options(capsys):
    doc = load("fourwave_fp8")
    assert run(_args("--tightest", "--iterations", "4"), doc) == 0
    text = capsys.readouterr().out
    assert "4 kernel iterations" in text and "kernel[2] wait_lgkm(4): removable" in text
    assert run(_args("--tightest", "--no-lds-order"), doc) == 0
    assert "kernel[2] wait_lgkm(4): tight" in capsys.readouterr().out
    assert run(_args("--warps-per-group", "2"), doc) == 1
    assert run(_args("--explicit-register-waits"), doc) == 1
    assert "REG_RAW" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        _args("--iterations", "0")


def test_load_input_rejects_non_objects(tmp_path):
    p = tmp_path / "list.json"
    p.write_text("[1]")
    with pytest.raises(DocumentError, match="expected a JSON object"):
        load_input(str(p))


@pytest.mark.parametrize("content", ["", "  \n\t\n"])
def test_empty_input_is_named_empty_not_zero_levels_deep(tmp_path, capsys, content):
    """An empty file (or /dev/null) is said to be empty, with what to pass instead, rather
    than judged by the nesting check ("nests 0 levels deep")."""
    empty = tmp_path / "empty.json"
    empty.write_text(content)
    assert run(_args("--input", str(empty))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{empty} is empty" in err and "levels deep" not in err
    assert "pipeline-core compile SCHEDULE --format json" in err


def test_empty_stdin_is_named_empty(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(DocumentError, match="standard input is empty; --input wants"):
        load_input("-")
