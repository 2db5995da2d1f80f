"""Schedule multistage-gemm: its body, the waits the core derives for each ring depth, its refusals."""
from __future__ import annotations

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.errors import PipelineError  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402

from pipeline_core_nvidia_h100.costs import H100Tag  # noqa: E402
from pipeline_core_nvidia_h100.sync import BAR_SYNC_ALIGNED, COMMIT_CP_ASYNC, WAIT_CP_ASYNC  # noqa: E402

FIRST_LIGHT = {"BM": "128", "BN": "128", "BK": "32", "warps_m": "2", "warps_n": "2"}


def _compile(stages: int, **params: str):
    return compile_named("multistage-gemm", target="h100", params=params or None,
                         target_args={"stages": str(stages)}, host=default_host())


def _waits(entries):
    return [e.op.wait_value for e in entries if e.op.tag == WAIT_CP_ASYNC]


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_each_ring_depth_compiles_proven_with_derived_waits(stages):
    c = _compile(stages)
    assert c.proof is not None and c.proof.safe
    assert c.plan.lowering == "ring"
    # one wait + barrier per K tile: the tile's group is the oldest of S-1 pending
    assert _waits(c.kernel) == [stages - 2] * stages
    assert [e.op.tag for e in c.kernel].count(BAR_SYNC_ALIGNED) == stages
    # the epilogue drains: S-2 newer groups, then fewer, down to none
    assert _waits(c.epilogue) == list(range(stages - 2, -1, -1))
    assert [e.op.tag for e in c.prologue].count(COMMIT_CP_ASYNC) == stages - 1


def test_body_is_one_k_tile_with_one_fragment_pair_and_mma_block_per_k_step():
    c = _compile(2, **FIRST_LIGHT)
    tags = [o.tag for o in c.body]
    assert tags[:2] == [H100Tag.LOAD_A, H100Tag.LOAD_B]  # the whole tile, one op per operand
    assert tags[2:] == [H100Tag.FRAG_A, H100Tag.FRAG_B, H100Tag.MMA] * 2  # BK 32 = 2 k-steps
    # fragments of a k-step are read right before its MMA block (one k-step live at a time)
    kernel = [e.op.tag for e in c.kernel]
    first_mma = kernel.index(H100Tag.MMA)
    assert kernel[first_mma - 1] == COMMIT_CP_ASYNC  # the refill goes before the first MMA
    assert kernel[first_mma + 1:first_mma + 4] == [H100Tag.FRAG_A, H100Tag.FRAG_B, H100Tag.MMA]


@pytest.mark.parametrize("params, stages, needle", [
    ({"BM": "120"}, 3, "-p BM: 120 is not a multiple of warps_m x 16"),
    ({"BN": "200"}, 3, "-p BN: 200 is not a multiple of warps_n x 16"),
    ({"warps_m": "1", "warps_n": "1", "BM": "32", "BN": "32"}, 3, "-p warps_m: 32 threads do not copy whole"),
    ({"warps_m": "1", "warps_n": "2", "BM": "128", "BN": "128"}, 3, "fp32 accumulators"),
    ({}, 5, "-T stages: 5 stages of 49152 bytes"),
])
def test_geometry_the_kernel_cannot_tile_is_refused_naming_the_parameter(params, stages, needle):
    with pytest.raises(PipelineError, match=needle.replace("(", r"\(").replace("x", "x")):
        _compile(stages, **params)


def test_the_ring_is_checked_against_the_target_s_own_shared_memory():
    """The h100 declares its 227 KB (``TargetProfile.smem_per_cta``); a target that declares
    none is held to the H100's, and the refusal says so."""
    from pipeline_core_nvidia_h100.machine import H100_SXM
    from pipeline_core_nvidia_h100.multistage import Geometry, SmemLimit
    from pipeline_core_nvidia_h100.targets import h100_target

    assert h100_target().smem_per_cta == H100_SXM.smem_per_cta_optin
    five = Geometry(bm=128, bn=256, bk=64, warps_m=2, warps_n=4, stages=5, group_m=8)
    undeclared = SmemLimit.of(attrs.evolve(h100_target(), smem_per_cta=None), "rtx4090")
    assert undeclared.bytes == H100_SXM.smem_per_cta_optin
    with pytest.raises(PipelineError, match=r"over the 232448 a CTA may use on the h100 \(target "
                                            r"rtx4090 declares no TargetProfile.smem_per_cta\)"):
        five.validate(smem=undeclared)
    five.validate(smem=SmemLimit(bytes=five.smem_bytes, where="on target roomy"))
    with pytest.raises(PipelineError, match="over the 245759 a CTA may use on target tight; "
                                            "lower -T stages"):
        five.validate(smem=SmemLimit(bytes=five.smem_bytes - 1, where="on target tight"))


def test_cli_lists_the_schedule_and_refuses_in_one_line(pipeline_cli):
    res = pipeline_cli(["schedules"])
    assert "multistage-gemm:" in res.stdout and "default target h100" in res.stdout
    bad = pipeline_cli(["compile", "multistage-gemm", "-p", "BK=48"])
    assert bad.exit_code != 0
    assert "Traceback" not in bad.stderr
    assert "-p BK=48 is invalid for schedule multistage-gemm: one of 32, 64" in bad.stderr
