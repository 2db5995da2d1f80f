"""The worked family (docs/guide/kernel-family.md): the gemv schedule is proven at every
geometry its call compiles, a plan that releases a stage before the dot read it is not, the
emitted kernel's synchronization is the plan's, it builds with no spills, and the call's checks
and copies (on stand-in tensors: the GPU run is benchmarks/gemv_call.py)."""
from __future__ import annotations

import attrs
import pytest

from pipeline_core.agents.prove import prove_plan
from pipeline_core.api import compile_named
from pipeline_core.plan import StepKind
from pipeline_core.plugins import PluginHost

from pipeline_core_nvidia_h100.kit_api import SkeletonMismatch, check_skeleton
from pipeline_core_nvidia_h100.toolchain import compile_cubin

from pipeline_core_family_gemv.call import STAGES, GemvArgumentError, _copies, plan_gemv
from pipeline_core_family_gemv.emit import SIGNATURE, emit_gemv
from pipeline_core_family_gemv.schedule import GemvTrips

HOST = PluginHost(extra_modules=["pipeline_core_nvidia_h100.plugin",
                                 "pipeline_core_family_gemv"])


def compiled(block_m: int):
    return compile_named("gemv", target="h100", host=HOST, target_args={
        "stages": str(STAGES[block_m])}, params={"block_m": str(block_m)})


@pytest.mark.parametrize("block_m", sorted(STAGES))
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_each_call_geometry_is_proven_and_emitted_as_proven(block_m, dtype):
    c = compiled(block_m)
    assert c.proof.verdict.safe
    source = emit_gemv(c, dtype=dtype)
    check_skeleton(c, source, label=f"gemv block_m={block_m}")
    assert f"pc_gemv({SIGNATURE.render()})" in source
    assert f"constexpr bool BF16 = {str(dtype == 'bf16').lower()}" in source


def test_a_release_before_the_dot_is_a_race_the_proof_names():
    c = compiled(64)
    consumer = c.plan.programs[1]
    steps = list(consumer.kernel)
    kinds = [s.kind for s in steps]
    op, arrive = kinds.index(StepKind.OP), kinds.index(StepKind.ARRIVE)
    steps[op], steps[arrive] = steps[arrive], steps[op]  # the stage freed, then read
    early = attrs.evolve(c.plan, programs=(c.plan.programs[0],
                                           attrs.evolve(consumer, kernel=tuple(steps))))
    verdict = prove_plan(early, c.body, c.edges, c.plan.sync, names=c.tag_names)
    assert not verdict.safe
    assert any("DOT" in str(v) or "TMA" in str(v) for v in verdict.violations)


def test_a_kernel_missing_a_wait_is_not_the_plans():
    c = compiled(64)
    source = emit_gemv(c)
    line = next(x for x in source.splitlines() if "mbar_wait(full_bar" in x)
    with pytest.raises(SkeletonMismatch, match="not the plan's"):
        check_skeleton(c, source.replace(line, ""))


def test_the_trip_rule_sizes_the_grid_and_leaves_no_tile_masked():
    rule = GemvTrips(block_m=64, block_k=256)
    assert rule.trip_counts((130, 513)) == (3, 3, 3)  # 3 row tiles, the last of 2 rows
    assert rule.masked_trips((130, 513)) == rule.trip_counts((130, 513))
    assert compiled(64).plan.trip_rule == rule


@pytest.mark.needs_nvcc  # skipped or failed without nvcc: plugins/conftest.py
@pytest.mark.parametrize("block_m", sorted(STAGES))
def test_the_calls_kernels_build_without_spills(block_m, tmp_path):
    proc, _ = compile_cubin(emit_gemv(compiled(block_m)), tmp_path, f"gemv{block_m}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    # the emitted file compiles as a user's main file without a warning: the pasted headers'
    # include guards are dropped, and the frame's consumer index is marked maybe-unused for a
    # family of one consumer warp group that never reads it
    assert "warning" not in proc.stderr, proc.stderr[-2000:]


class Tensor:
    """What the call's checks read of a torch tensor."""

    def __init__(self, shape, dtype="torch.bfloat16", strides=None, ptr=1 << 20, cuda=True):
        self.shape, self.dtype, self._ptr, self.is_cuda = tuple(shape), dtype, ptr, cuda
        self.device = "cuda:0" if cuda else "cpu"
        self._strides = strides or ((shape[1], 1) if len(shape) == 2 else (1,))

    def dim(self):
        return len(self.shape)

    def stride(self, i):
        return self._strides[i]

    def element_size(self):
        return 2

    def data_ptr(self):
        return self._ptr


@pytest.mark.parametrize("a, x, needle", [
    (Tensor((4, 8)), Tensor((9,)), "x: 9 elements for a's 8 columns; pass x of shape [8]"),
    (Tensor((4, 8, 2)), Tensor((8,)), "a: shape (4, 8, 2); pass a 2-D tensor"),
    (Tensor((4, 8)), Tensor((8,), dtype="torch.float16"), "x: dtype torch.float16"),
    (Tensor((4, 8), dtype="torch.float32"), Tensor((8,)), "a: dtype torch.float32"),
    (Tensor((4, 8)), Tensor((8,), cuda=False), "x: on cpu; put a and x on one GPU"),
])
def test_bad_arguments_are_refused_in_one_line_naming_them(a, x, needle):
    with pytest.raises(GemvArgumentError) as e:
        plan_gemv(a, x)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("a, x, copy_a, copy_x", [
    (Tensor((4, 8)), Tensor((8,)), False, False),
    (Tensor((4, 7), strides=(7, 1)), Tensor((7,)), True, False),    # rows of 14 bytes
    (Tensor((4, 8), strides=(1, 4)), Tensor((8,)), True, False),    # a transposed view
    (Tensor((4, 8), ptr=(1 << 20) + 2), Tensor((8,)), True, False),  # a misaligned address
    (Tensor((4, 8)), Tensor((8,), strides=(2,)), False, True),      # a strided x
    (Tensor((4, 8)), Tensor((8,), ptr=(1 << 20) + 4), False, True),  # a misaligned x
])
def test_what_tma_cannot_read_is_copied_never_refused(a, x, copy_a, copy_x):
    c = _copies(plan_gemv(a, x), a, x)
    assert (c.copy_a, c.copy_x) == (copy_a, copy_x)


def test_the_tile_height_gives_every_sm_a_tile_where_the_rows_allow():
    rows = {m: plan_gemv(Tensor((m, 64)), Tensor((64,)), sms=132).block_m
            for m in (128 * 132, 128 * 131, 64 * 132, 100)}
    assert rows == {128 * 132: 128, 128 * 131: 64, 64 * 132: 64, 100: 32}


def test_one_row_of_a_stride_the_driver_refuses_is_copied_too():
    a, x = Tensor((1, 7), strides=(7, 1)), Tensor((7,))  # a [1, 7] row: 14-byte stride
    assert _copies(plan_gemv(a, x), a, x).copy_a
