"""Entry points: check a schedule document (or a decoded program) and build a Verdict."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline_core.check.anti_edges import classify_anti_edges
from pipeline_core.check.counters import CounterModel, model_for_document
from pipeline_core.check.hazards import Analysis, analyse
from pipeline_core.check.program import CheckProgram, check_shape, decode
from pipeline_core.check.slack import wait_slack
from pipeline_core.check.trace import expand
from pipeline_core.check.verdict import Verdict

DEFAULT_ITERATIONS = 3


def run_program(program: CheckProgram, iterations: int = DEFAULT_ITERATIONS,
                warps_per_group: int = 1) -> Analysis:
    """Execute ``program`` symbolically and return every hazard found."""
    return analyse(program, expand(program, iterations, warps_per_group))


def is_safe(program: CheckProgram, iterations: int = DEFAULT_ITERATIONS,
            warps_per_group: int = 1) -> bool:
    return not run_program(program, iterations, warps_per_group).violations


def check_program(program: CheckProgram, *, iterations: int = DEFAULT_ITERATIONS,
                  warps_per_group: int = 1, tightest: bool = False,
                  document: Mapping[str, Any] | None = None) -> Verdict:
    """The verdict for a decoded program (``document`` enables the ANTI-edge report)."""
    analysis = run_program(program, iterations, warps_per_group)
    safe = not analysis.violations
    slack = None
    if tightest:
        slack = wait_slack(program, iterations, warps_per_group) if safe else ()
    anti = classify_anti_edges(document, program, iterations) if document is not None else ()
    return Verdict(safe=safe, name=program.name, groups=program.groups,
                   warps_per_group=warps_per_group, iterations=iterations,
                   model=program.model.summary(), violations=analysis.violations,
                   wait_slack=slack, anti_edges=anti)


def check_document(document: Mapping[str, Any], *, model: CounterModel | None = None,
                   iterations: int = DEFAULT_ITERATIONS, warps_per_group: int = 1,
                   tightest: bool = False, groups: int | None = None, host: Any = None,
                   target: str | None = None) -> Verdict:
    """Check a compiled schedule in the JSON shape of docs/document-format.md.

    ``model`` defaults to the counter model of the sync model that the document's
    target (or ``target``) declares, looked up through ``host`` (the installed
    plugins by default); a target without one is a
    :class:`~pipeline_core.errors.TargetFactError`, never another GPU's model.
    Raises :class:`~pipeline_core.check.program.DocumentError` on malformed input.
    """
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    if warps_per_group < 1:
        raise ValueError(f"warps_per_group must be >= 1, got {warps_per_group}")
    check_shape(document)
    model = model if model is not None else model_for_document(document, host, target)
    program = decode(document, model, groups=groups)
    return check_program(program, iterations=iterations, warps_per_group=warps_per_group,
                         tightest=tightest, document=document)
