"""Every JSON document the command line prints carries its format version and generator, and
validates against the JSON Schema shipped in pipeline_core/schemas; every reference golden
validates against the schedule document's content contract."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")
referencing = pytest.importorskip("referencing")

from pipeline_core import __version__  # noqa: E402
from pipeline_core.json_output import (FORMAT_VERSION, SCHEMAS, load_schema,  # noqa: E402
                                       reference_schema)

GOLDENS = sorted((Path(__file__).parent / "goldens").glob("*.json"))
#: every bundled schedule, with the target it compiles on by default
BUNDLED = ("pingpong", "4wave", "default-matmul", "matmul-grid", "hello")


def _validator(schema: dict) -> "jsonschema.protocols.Validator":
    """A draft 2020-12 validator that resolves the schemas' references to one another."""
    resources = [(s["$id"], referencing.Resource.from_contents(s))
                 for s in (load_schema(kind) for kind in SCHEMAS)]
    registry = referencing.Registry().with_resources(resources)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _errors(kind_or_schema, document) -> list[str]:
    schema = load_schema(kind_or_schema) if isinstance(kind_or_schema, str) else kind_or_schema
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
            for e in _validator(schema).iter_errors(document)]


def _json(cli, *argv) -> dict:
    result = cli(*argv)
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)


def _provenance(doc: dict) -> None:
    assert doc["format_version"] == FORMAT_VERSION
    assert doc["generator"]["name"] == "pipeline-core"
    assert doc["generator"]["version"] == __version__
    assert doc["generator"]["plugins"]["pipeline-core-amd-mi355x"]


@pytest.mark.parametrize("schedule", BUNDLED)
def test_compile_check_and_analyze_documents_validate(cli, schedule):
    doc = _json(cli, "compile", schedule, "--format", "json")
    _provenance(doc)
    assert list(doc)[:2] == ["format_version", "generator"]
    assert _errors("schedule", doc) == []
    verdict = _json(cli, "check", schedule, "--format", "json")
    _provenance(verdict)
    assert verdict["schedule"] == schedule  # was "" before the document's name was used
    assert _errors("verdict", verdict) == []
    report = _json(cli, "analyze", schedule, "--format", "json", "--no-timing")
    _provenance(report)
    assert _errors("analyze", report) == []


def test_analyze_with_timing_and_an_unsafe_verdict_validate(cli):
    report = _json(cli, "analyze", "pingpong", "--format", "json")
    assert report["steady_state"] is not None and _errors("analyze", report) == []
    unsafe = cli("check", "pingpong", "-c", "auto_waits=false", "-c", "wait_vm_last=63",
                 "-c", "wait_lgkm_first=15", "--format", "json")  # the largest encodable waits
    verdict = json.loads(unsafe.stdout)
    assert unsafe.exit_code == 1 and not verdict["safe"]
    assert verdict["first_violation"] is not None and _errors("verdict", verdict) == []


@pytest.mark.parametrize("command", ["targets", "schedules", "strategies", "plugins", "knobs",
                                     "emitters"])
def test_listings_validate(cli, command):
    doc = _json(cli, command, "--format", "json")
    _provenance(doc)
    assert isinstance(doc[command], list) and doc[command]
    assert _errors("listing", doc) == []


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda p: p.stem)
def test_every_golden_validates_against_the_reference_contract(golden):
    doc = json.loads(golden.read_text())
    assert "format_version" not in doc  # captured from the reference, which has no version
    assert _errors(reference_schema(), doc) == []
    assert _errors("schedule", doc), "the full schema requires our provenance keys"


def test_the_schemas_refuse_a_broken_document(cli):
    doc = _json(cli, "compile", "pingpong", "--format", "json")
    bad = json.loads(json.dumps(doc))
    del bad["kernel"][0]["op"]["tag"]
    bad["body"][1]["resource_name"] = "CACHE"
    bad["format_version"] = 2
    errors = "\n".join(_errors("schedule", bad))
    assert "kernel/0/op: 'tag' is a required property" in errors
    assert "body/1/resource_name" in errors and "format_version" in errors
    bad = dict(doc)
    del bad["blocks"]  # a double-buffer document must carry its block program
    assert any("'blocks' is a required property" in e for e in _errors("schedule", bad))


def test_the_generator_names_development_plugins_by_module(cli):
    doc = _json(cli, "--plugin", "hello_schedule.plugin", "--disable-plugin", "hello",
                "targets", "--format", "json")
    assert doc["generator"]["plugins"]["hello_schedule.plugin"] == "(development)"
    assert "pipeline-core-hello-schedule" not in doc["generator"]["plugins"]  # disabled


def test_check_input_refuses_a_newer_format_version(cli, tmp_path):
    doc = _json(cli, "compile", "pingpong", "--format", "json")
    path = tmp_path / "next.json"
    path.write_text(json.dumps(dict(doc, format_version=FORMAT_VERSION + 1)))
    result = cli("check", "--input", str(path))
    assert result.exit_code == 2
    assert f"format_version {FORMAT_VERSION + 1}" in result.stderr and "reads 1" in result.stderr
    path.write_text(json.dumps(doc))
    assert cli("check", "--input", str(path)).exit_code == 0


@pytest.mark.parametrize("param", ["store=tma", "split_k=true"])
def test_an_analyze_report_with_an_epilogue_validates(cli, param):
    """The agents timing model's epilogue key (docs/guide/agents.md, "Timing model")."""
    pytest.importorskip("pipeline_core_nvidia_h100")
    report = _json(cli, "analyze", "warpspecialized-gemm", "-p", param, "--format", "json")
    assert report["epilogue"]["held"] and _errors("analyze", report) == []
    broken = {**report, "epilogue": {**report["epilogue"], "splits": 0}}
    assert _errors("analyze", broken)
