"""What runs is what was proven (issue 33), for the cuda-attention emitter: every plan field it
reads to write its kernel is one the prover checks (``pipeline_core.testing.unproven_fields``;
the GEMM's twin is plugins/nvidia_h100/tests/test_emitter_fields.py)."""
from __future__ import annotations

import pytest

pytest.importorskip("pipeline_core_schedules_attention")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402
from pipeline_core.testing import unproven_fields  # noqa: E402

from pipeline_core_schedules_attention.emit_attention import emit_attention  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("params", [{"causal": "true"}, {"q_stages": "2"}])
def test_every_field_the_emitter_reads_is_proven(params):
    targs = {"stages": "2"} if "q_stages" in params else {}
    c = compile_named("flash-attention-fwd", target="h100", host=default_host(), params=params,
                      target_args=targs)
    assert unproven_fields(c, emit_attention, per_field=4) == []
