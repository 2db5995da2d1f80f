"""pipeline-core kernel family ``gemv`` (y = A @ x on the H100), the Hopper kit's worked example
(docs/guide/kernel-family.md); this module is also its plugin (entry point ``family_gemv``)."""
from __future__ import annotations

from pipeline_core.plugin_api import record_hooks

from pipeline_core_family_gemv.call import GemvArgumentError, gemv
from pipeline_core_family_gemv.emit import EMITTERS
from pipeline_core_family_gemv.schedule import RECORD

__all__ = ["GemvArgumentError", "gemv"]


pipeline_core_register_schedules, pipeline_core_register_emitters = record_hooks(
    lambda: [RECORD], lambda: EMITTERS)
