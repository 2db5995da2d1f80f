"""Hazard checker: prove a compiled schedule race-free by executing its entries.

Public API::

    from pipeline_core.check import check_document
    verdict = check_document(document)          # document dict; model from its target
    print(verdict.render_text()); verdict.to_json()
"""
from __future__ import annotations

import importlib

# Names resolve lazily (PEP 562): importing the package, as the CLI does to add the
# ``check`` options, must not load the checker.
_WHERE = {
    "checker": ("check_document", "check_program", "is_safe", "run_program"),
    "counters": ("CounterModel", "CounterSpec", "OpCount", "counter_model", "model_for_document"),
    "program": ("CheckProgram", "DocumentError", "Instr", "Kind", "decode"),
    "verdict": ("AntiEdgeFinding", "Fix", "HazardKind", "Site", "Verdict", "Violation", "WaitSlack"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}


def __getattr__(name: str):
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"pipeline_core.check.{_MODULE_OF[name]}"), name)
    raise AttributeError(name)


__all__ = [
    "check_document", "check_program", "is_safe", "run_program", "decode",
    "CounterModel", "CounterSpec", "OpCount", "counter_model", "model_for_document",
    "CheckProgram", "DocumentError", "Instr", "Kind",
    "AntiEdgeFinding", "Fix", "HazardKind", "Site", "Verdict", "Violation", "WaitSlack",
]
