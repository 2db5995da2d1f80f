"""pipeline-core kernel family ``gemv`` (y = A @ x on the H100), the Hopper kit's worked example
(docs/guide/kernel-family.md); this module is also its plugin (entry point ``family_gemv``)."""
from __future__ import annotations

from pipeline_core.plugin_api import hookimpl

from pipeline_core_family_gemv.call import GemvArgumentError, gemv
from pipeline_core_family_gemv.emit import EMITTERS
from pipeline_core_family_gemv.schedule import RECORD

__all__ = ["GemvArgumentError", "gemv"]


@hookimpl
def pipeline_core_register_schedules():
    return [RECORD]


@hookimpl
def pipeline_core_register_emitters():
    return list(EMITTERS)
