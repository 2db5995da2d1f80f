"""The MI355X plugin answers the hazard checker's counter-model hook for its own targets."""
from __future__ import annotations

from pipeline_core.plugins import default_host


def test_counter_model_comes_from_the_target_plugin():
    host = default_host()
    model = host.counter_model("mi355x")
    assert callable(model)
    assert host.counter_model("some-other-gpu") is None
    from pipeline_core.api import compile_named
    from pipeline_core.check import check_document
    from pipeline_core.export.json import to_document

    doc = to_document(compile_named("pingpong", params={"dtype": "bf16"}))
    resolved = model(doc)
    assert resolved.name == "amd-mi355x"
    assert check_document(doc, model=resolved).safe
