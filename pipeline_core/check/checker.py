"""Entry points: check a schedule document (or a decoded program) and build a Verdict."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline_core.check.anti_edges import classify_anti_edges
from pipeline_core.check.counters import CounterModel, model_for_document
from pipeline_core.check.hazards import Analysis, analyse
from pipeline_core.check.program import (CheckProgram, DocumentError, check_shape, decode,
                                          document_warps)
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


def modelled_warps(document: Mapping[str, Any], model: CounterModel, requested: int | None = None,
                   *, declared: int = 1, flag: str = "--warps-per-group") -> int:
    """The warps per group a proof of ``document`` models: ``requested`` when given, else what
    the document records (``execution.warps_per_group``), else ``declared``; never fewer than
    the document records or than the target's sync model needs (``model.fewest_agents``).

    A request below that is refused (ValueError naming ``flag``): a proof under fewer warps
    than the kernel runs would leave the barriers between them unchecked.  More is a stricter
    model, allowed; the verdict states it (pipeline_core/check/README.md, "Model").
    """
    recorded = document_warps(document)
    floor = max(recorded or 1, declared, model.fewest_agents)
    if requested is None:
        return floor
    if requested < floor:
        why = (f"the document records execution.warps_per_group {recorded}, the warps its "
               "kernel runs per group" if recorded is not None and recorded >= model.fewest_agents
               else f"the {model.name} sync model counts a channel per thread whose data only the "
                    "issuing thread sees, so even one warp's threads need a barrier")
        raise ValueError(f"{flag} {requested}: {why}, and a proof under fewer warps would not "
                         f"cover them: pass {flag} {floor} or more, or leave it out")
    return requested


def recorded_warps(document: Mapping[str, Any], runs: int | None) -> int | None:
    """The warps per group a document's proof starts from, or None where nothing says: what
    its schedule runs on its target (``runs``, :func:`pipeline_core.api.schedule_warps`),
    which a recorded ``execution`` may raise but never lower.  A document that names its
    schedule (compile's output) and records no ``execution`` needs ``runs``; the reference's
    documents name none and record none (one warp per group unless ``--warps-per-group``).
    Raises :class:`DocumentError` naming the key: an ``execution`` record deleted or shrunk
    would prove a racy document over warps the kernel does not run alone."""
    recorded = document_warps(document)
    schedule = document.get("schedule")
    if recorded is None and runs is None and isinstance(schedule, str) and schedule:
        raise DocumentError("execution", f"missing: a proof models the warps each group runs, "
                                         f"and schedule {schedule} is not installed to take "
                                         'them from; add "execution": {"groups": G, '
                                         '"warps_per_group": W} as compile writes it, or '
                                         "recompile the document")
    if recorded is not None and runs is not None and recorded < runs:
        raise DocumentError("execution.warps_per_group",
                            f"{recorded}, but schedule {schedule} runs {runs} warps per group "
                            "on its target: a proof under fewer warps leaves the barriers "
                            f"between them unchecked; set it to {runs} or recompile the "
                            "document")
    return max(recorded or 1, runs or 1) if recorded is not None or runs is not None else None


def check_document(document: Mapping[str, Any], *, model: CounterModel | None = None,
                   iterations: int = DEFAULT_ITERATIONS, warps_per_group: int | None = None,
                   tightest: bool = False, groups: int | None = None, host: Any = None,
                   target: str | None = None, runs: int | None = None) -> Verdict:
    """Check a compiled schedule in the JSON shape of docs/document-format.md.

    ``model`` defaults to the counter model of the sync model that the document's
    target (or ``target``) declares, looked up through ``host`` (the installed
    plugins by default); a target without one is a
    :class:`~pipeline_core.errors.TargetFactError`, never another GPU's model.
    ``warps_per_group`` None models what the document records (:func:`modelled_warps`);
    ``runs``: the warps per group its schedule runs (:func:`recorded_warps`).
    Raises :class:`~pipeline_core.check.program.DocumentError` on malformed input.
    """
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    if warps_per_group is not None and warps_per_group < 1:
        raise ValueError(f"warps_per_group must be >= 1, got {warps_per_group}")
    check_shape(document)
    model = model if model is not None else model_for_document(document, host, target)
    warps_per_group = modelled_warps(document, model, warps_per_group, flag="warps_per_group",
                                     declared=recorded_warps(document, runs) or 1)
    program = decode(document, model, groups=groups)
    return check_program(program, iterations=iterations, warps_per_group=warps_per_group,
                         tightest=tightest, document=document)
