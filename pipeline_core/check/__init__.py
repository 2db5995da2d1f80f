"""Hazard checker: prove a compiled schedule race-free by executing its entries.

Public API::

    from pipeline_core.check import check_document, default_counter_model
    verdict = check_document(document)          # FORMAT.md dict
    print(verdict.render_text()); verdict.to_json()
"""
from __future__ import annotations

from pipeline_core.check.checker import check_document, check_program, is_safe, run_program
from pipeline_core.check.counters import (CounterModel, CounterSpec, OpCount, default_counter_model,
                                          resolve_counter_model)
from pipeline_core.check.program import CheckProgram, DocumentError, Instr, Kind, decode
from pipeline_core.check.verdict import (AntiEdgeFinding, Fix, HazardKind, Site, Verdict,
                                         Violation, WaitSlack)

__all__ = [
    "check_document", "check_program", "is_safe", "run_program", "decode",
    "CounterModel", "CounterSpec", "OpCount", "default_counter_model", "resolve_counter_model",
    "CheckProgram", "DocumentError", "Instr", "Kind",
    "AntiEdgeFinding", "Fix", "HazardKind", "Site", "Verdict", "Violation", "WaitSlack",
]
