"""The MI355X targets carry their own sync model; the checker reads it from the target."""
from __future__ import annotations

from pipeline_core.plugins import default_host
from pipeline_core.sync.resolve import sync_for_target

from pipeline_core_amd_mi355x.sync import MI355X_SINGLE_BUFFER_SYNC, MI355X_SYNC


def test_sync_model_comes_from_the_target_profile():
    host = default_host()
    assert sync_for_target("mi355x", host) is MI355X_SYNC
    assert sync_for_target("mi355x-single-buffer", host) is MI355X_SINGLE_BUFFER_SYNC
    assert [c.label for c in MI355X_SYNC.channels] == ["vmcnt", "lgkmcnt"]
    assert MI355X_SYNC.barrier.name == "s_barrier" and not MI355X_SYNC.barrier.drains
    assert MI355X_SINGLE_BUFFER_SYNC.barrier.drains
    from pipeline_core.api import compile_named
    from pipeline_core.check import check_document, model_for_document
    from pipeline_core.export.json import to_document

    doc = to_document(compile_named("pingpong", params={"dtype": "bf16"}))
    model = model_for_document(doc, host)
    assert model.name == "amd-mi355x" and model.lds_in_order and model.register_interlock
    assert check_document(doc, model=model).safe
