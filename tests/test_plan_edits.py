"""Every malformed plan gets a verdict or one clear refusal, never an exception (issue 33): a
bounded, repeatable sample of single edits of the audit's eleven plans
(benchmarks/plan_edit_audit.py, pipeline_core/check/plan_edits.py) goes to the prover; the whole
sweep, with the longer-unroll oracle on what it accepts, is the benchmark's."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")
pytest.importorskip("pipeline_core_schedules_attention")

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _audit():
    spec = importlib.util.spec_from_file_location("_bench_plan_edit_audit",
                                                  BENCH / "plan_edit_audit.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


AUDIT = _audit()


def test_the_edits_cover_every_kind_of_field_and_are_repeatable():
    from pipeline_core.check.plan_edits import plan_edits

    c = AUDIT.compiled("gemm tma store")
    first = [e.description for e in plan_edits(c.plan)]
    assert first == [e.description for e in plan_edits(c.plan)]
    fields = {e.field for e in plan_edits(c.plan)}
    assert {"", "Step.value", "Step.barrier", "Step.tag", "Step.lag", "Ring.arrivals",
            "Plan.store", "AgentProgram.trip_delta"} <= fields
    edit = next(e for e in plan_edits(c.plan) if e.field == "Plan.store")
    assert edit.apply(c.plan).store is None and c.plan.store is not None  # a new plan


@pytest.mark.slow
@pytest.mark.parametrize("label", sorted(AUDIT.VARIANTS))
def test_a_sample_of_edits_gets_a_verdict_never_an_exception(label):
    r = AUDIT.audit(label, sample=24, oracle=False)
    assert r["edits"] == 24
    assert r["crashes"] == [], r["crashes"][:2]
