"""pipeline-core hook implementations of the attention plugin (entry point
``schedules_attention``): its schedules (the forward, the backward), and its emitter imported
when the host asks."""
from __future__ import annotations

from pipeline_core.plugin_api import record_hooks

from pipeline_core_schedules_attention.bwd_schedule import RECORD as BWD_RECORD
from pipeline_core_schedules_attention.schedule import RECORD


def _emitters() -> tuple:
    from pipeline_core_schedules_attention.emit_attention import EMITTERS
    from pipeline_core_schedules_attention.emit_attention_bwd import EMITTERS as BWD_EMITTERS

    return EMITTERS + BWD_EMITTERS


pipeline_core_register_schedules, pipeline_core_register_emitters = record_hooks(
    lambda: [RECORD, BWD_RECORD], _emitters)
