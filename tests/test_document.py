"""The document codec: what ``compile --format json`` encodes decodes back to the same records."""
from __future__ import annotations

import json

import pytest

from pipeline_core import document
from pipeline_core.api import compile_named


@pytest.mark.parametrize("schedule", ["pingpong", "4wave", "default-matmul"])
def test_round_trip(schedule):
    c = compile_named(schedule)
    doc = json.loads(document.dumps(c))
    assert document.ops_from_doc(doc["body"]) == list(c.body)
    assert document.edges_from_doc(doc["edges"]) == list(c.edges)
    for phase in ("prologue", "kernel", "epilogue"):
        assert document.entries_from_doc(doc[phase]) == tuple(getattr(c, phase))
    assert document.config_from_doc(doc["config"]) == c.config
    assert document.schedule_config_from_doc(doc["schedule_config"]) == c.schedule_config
    assert document.slot_from_doc(None) is None


def test_export_json_is_the_codec():
    from pipeline_core.export import json as export_json
    assert export_json.to_document is document.to_document and export_json.dumps is document.dumps
