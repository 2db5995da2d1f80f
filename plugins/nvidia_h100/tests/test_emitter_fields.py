"""What runs is what was proven (issue 33): every field of the plan the cuda-wgmma emitter
reads to write its kernel, seen by watching it read (``pipeline_core.testing.fields_read``), is
one the prover checks: some edit of it is refused, and each edit the prover accepts is accepted
again over longer unrolls (``pipeline_core.testing.unproven_fields``)."""
from __future__ import annotations

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402
from pipeline_core.testing import fields_read, unproven_fields  # noqa: E402

from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma  # noqa: E402

#: the variants whose emission reads the most of the plan: the store's and the split's
#: sections, the cluster's peer arrivals and scopes, the ping-pong's named barriers
VARIANTS = {"tma store": {"store": "tma"}, "split-k": {"split_k": "true"},
            "cluster": {"cluster": "2"}, "pingpong": {"pingpong": "true", "BN": "128"}}


def _compile(params):
    return compile_named("warpspecialized-gemm", target="h100", host=default_host(),
                         params=params)


def test_the_emitter_is_seen_reading_the_sync_fields():
    from pipeline_core.plan import Ring, Step

    c = _compile(VARIANTS["tma store"])
    with fields_read(Step, Ring) as seen:
        emit_wgmma(c)
    assert {"Step.kind", "Step.value", "Step.barrier", "Step.lag", "Ring.arrivals"} <= seen
    assert not {"Step.instr", "Step.prefetch"} & seen  # lockstep fields: never read here


@pytest.mark.slow
@pytest.mark.parametrize("label", sorted(VARIANTS))
def test_every_field_the_emitter_reads_is_proven(label):
    assert unproven_fields(_compile(VARIANTS[label]), emit_wgmma, per_field=4) == []
