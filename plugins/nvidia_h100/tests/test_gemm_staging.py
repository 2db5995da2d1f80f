"""Layouts TMA cannot read, without a GPU: the plan stages exactly the arguments the tensor maps
or the direct store cannot take, into aligned copies it records, and never an aligned one
(docs/guide/matmul.md, "Layouts TMA cannot read").  The GPU half is benchmarks/matmul_call.py."""
from __future__ import annotations

import itertools
import random

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core_nvidia_h100.gemm_call import (MatmulArgumentError,  # noqa: E402
                                                 TensorInfo, plan_call)
from pipeline_core_nvidia_h100.gemm_scaled import plan_scaled  # noqa: E402
from pipeline_core_nvidia_h100.gemm_staging import (Staging, major,  # noqa: E402
                                                    stage_operand)


def t(shape, strides=None, dtype="bf16", ptr=4096):
    """A tensor description, contiguous unless ``strides`` are given."""
    if strides is None:
        strides, step = [], 1
        for d in reversed(shape):
            strides.insert(0, step)
            step *= d
    return TensorInfo(shape=tuple(shape), strides=tuple(strides), dtype=dtype, ptr=ptr)


def staged(plan):
    return {s.operand: (s.shape, s.strides) for s in plan.staged}


# --- each layout TMA cannot read is staged, the copy keeping the contiguous dimension, its rows
# on 128-byte lines (gemm_staging.LINE_BYTES) ------------------------------------------------------

STAGED = {
    # odd K: a's 7-element rows (14 bytes); b [7, 72] is N-major with 144-byte rows: read
    "odd K": (t((100, 7)), t((7, 72)), {"a": ((100, 7), (64, 1))}, ("k", "mn")),
    # the issue's matmul(a[1000, 3000], w[3000, 2050]): only w, its rows padded to 128 bytes
    # (a's 6000-byte rows are off the 64-byte grid, but copying them would cost more than this
    # GEMM loses reading them where they lie: gemm_staging.copy_pays)
    "odd N": (t((1000, 3000)), t((3000, 2050)), {"b": ((3000, 2050), (2112, 1))}, ("k", "mn")),
    "odd K and N": (t((100, 7)), t((7, 9)), {"a": ((100, 7), (64, 1)), "b": ((7, 9), (64, 1))},
                    ("k", "mn")),
    # a transposed view of odd rows: M contiguous, kept so (MN-major), its stride padded
    "transposed view": (t((101, 64), (1, 101)), t((64, 72)), {"a": ((101, 64), (1, 128))},
                        ("mn", "mn")),
    # neither dimension contiguous: copied row-major, as .contiguous()
    "neither contiguous": (t((100, 64), (128, 2)), t((64, 72), (1, 70 * 64)),
                           {"a": ((100, 64), (64, 1))}, ("k", "k")),
    "b neither contiguous": (t((100, 64)), t((64, 72), (144, 2)),
                             {"b": ((64, 72), (128, 1))}, ("k", "mn")),
    # a slice of wider rows: unit inner stride, a row stride of 1001 elements
    "sliced view": (t((100, 64), (1001, 1)), t((64, 72)), {"a": ((100, 64), (64, 1))},
                    ("k", "mn")),
    # rows that overlap (a stride under the row's length) are not read where they lie
    "overlapping rows": (t((100, 64), (32, 1)), t((64, 72)), {"a": ((100, 64), (64, 1))},
                         ("k", "mn")),
    "an expanded row": (t((100, 64)), t((64, 72), (0, 1)), {"b": ((64, 72), (128, 1))},
                        ("k", "mn")),
    "misaligned address": (t((100, 64), ptr=4098), t((64, 72)), {"a": ((100, 64), (64, 1))},
                           ("k", "mn")),
    "misaligned MN-major": (t((100, 64)), t((64, 72), (1, 64), ptr=4100),
                            {"b": ((64, 72), (1, 64))}, ("k", "k")),
    "a column vector at an odd address": (t((100, 1), ptr=4098), t((1, 72)),
                                          {"a": ((100, 1), (1, 128))}, ("mn", "mn")),
}


@pytest.mark.parametrize("case", sorted(STAGED))
def test_the_plan_stages_exactly_the_operands_tma_cannot_read(case):
    a, b, want, majors = STAGED[case]
    plan = plan_call(a, b, sms=132)
    assert staged(plan) == want
    assert (plan.a.major, plan.b.major) == majors
    for name, op_map in (("a", plan.a), ("b", plan.b)):
        if name in want:  # the map is the copy's: its padded stride, the true inner extent
            shape, strides = want[name]
            if min(shape) > 1:  # a vector's map never steps its stride (it encodes a legal one)
                assert op_map.stride == max(strides)
            inner = shape[strides.index(1)]
            assert op_map.inner == inner  # TMA zero-fills past it: the padding is never read
    # the result is torch.matmul's, whatever was staged (the fake's shape)
    assert plan.out_shape == (a.shape[0], b.shape[1])


def test_the_issue_shapes_plan_with_a_copy_of_the_unaligned_side_only():
    """4097x4095x4096: only B [4096, 4095] is staged; batched [4, 300, 500] @ [500, 200]: A's
    500-element rows are padded to 128 bytes, and the copy still folds into one [1200, K] GEMM."""
    plan = plan_call(t((4097, 4096)), t((4096, 4095)), sms=132)
    assert staged(plan) == {"b": ((4096, 4095), (4096, 1))}
    batched = plan_call(t((4, 300, 500)), t((500, 200)), sms=132)
    assert staged(batched) == {"a": ((4, 300, 500), (300 * 512, 512, 1))}
    assert (batched.m, batched.variant.batch, batched.out_shape) == (1200, "none", (4, 300, 200))


@pytest.mark.parametrize("a, b, want, kind", [
    # a batch stride off 16 bytes: the whole operand copied, its batch stride a whole matrix
    (t((4, 100, 64), (6404, 64, 1)), t((4, 64, 72)), {"a": ((4, 100, 64), (6400, 64, 1))}, "ab"),
    # an MN-major batched operand with odd rows: M kept contiguous
    (t((4, 101, 64), (6464, 1, 101)), t((4, 64, 72)),
     {"a": ((4, 101, 64), (64 * 128, 1, 128))}, "ab"),
    # a broadcast batch of stride 0 (expand) over a batched a: read once, as a 2-D operand
    (t((4, 100, 64)), t((4, 64, 72), (0, 72, 1)), {}, "none"),
    (t((4, 100, 64), (0, 64, 1)), t((4, 64, 72)), {}, "b"),
    # ... and an unaligned one: its one matrix copied, still broadcast
    (t((4, 100, 64)), t((4, 64, 9), (0, 9, 1)), {"b": ((64, 9), (64, 1))}, "none"),
    # a batch of 1 with odd rows: its one matrix
    (t((1, 100, 7)), t((4, 7, 72)), {"a": ((100, 7), (64, 1))}, "b"),
    # every batch of stride 0: nothing carries a batch, so one side is materialized
    (t((4, 100, 64), (0, 64, 1)), t((4, 64, 72), (0, 72, 1)),
     {"a": ((4, 100, 64), (6400, 64, 1)), "b": ((4, 64, 72), (8192, 128, 1))}, "ab"),
])
def test_batched_operands_are_staged_by_their_batch_stride_too(a, b, want, kind):
    plan = plan_call(a, b, sms=132)
    assert staged(plan) == want
    assert plan.variant.batch == kind and plan.out_shape == (4, a.shape[1], b.shape[2])


def test_bias_and_out_are_staged_where_the_epilogue_cannot_take_them():
    a, b = t((100, 64)), t((64, 72))
    plan = plan_call(a, b, bias=t((72,), (2,)), out=t((100, 72), (1, 100), dtype="fp32"))
    assert staged(plan) == {"bias": ((72,), (1,)), "out": ((100, 72), (72, 1))}
    assert (plan.ldc, plan.variant.store, plan.variant.out_dtype) == (72, "tma", "fp32")
    # rows closer than N: written through a temporary too
    assert staged(plan_call(a, b, out=t((100, 72), (64, 1)))) == {
        "out": ((100, 72), (72, 1))}
    # an out at an address TMA cannot write is written where it lies, by the direct store
    odd = plan_call(a, b, out=t((100, 72), ptr=4098))
    assert (odd.staged, odd.variant.store) == ((), "direct")
    # a 3-D out in another layout: a contiguous temporary, which folds with a
    folded = plan_call(t((4, 100, 64)), b, out=t((4, 100, 72), (72, 288, 1)))
    assert staged(folded) == {}  # rows 288 apart, unit columns: the direct store takes it
    assert folded.variant.batch == "a"  # its batches do not fold: grid z
    transposed = plan_call(t((4, 100, 64)), b, out=t((4, 100, 72), (7200, 1, 100)))
    assert staged(transposed) == {"out": ((4, 100, 72), (7200, 72, 1))}
    assert transposed.variant.batch == "none" and transposed.m == 400


ALIGNED = [
    (t((100, 64)), t((64, 72))),                               # torch's default
    (t((100, 64), (1, 104)), t((64, 72), (1, 64))),            # both column-major
    (t((100, 7), (8, 1)), t((7, 72), (1, 8))),                 # padded rows
    (t((1, 7)), t((7, 1), (1, 1))),                            # size-1 dimensions
    (t((100, 1), (1, 1)), t((1, 72))),
    (t((4, 100, 64)), t((64, 72))),                            # folded
    (t((4, 100, 64)), t((4, 64, 72))),                         # grid z
    (t((4, 128, 64), (8192, 1, 128)), t((4, 64, 72))),         # MN-major batched
    (t((100, 64)), t((4, 64, 72))),                            # 2-D a broadcast
    (t((100, 64), ptr=None), t((64, 72), ptr=None)),             # a fake's: address unknown
]


@pytest.mark.parametrize("a, b", ALIGNED)
def test_an_operand_tma_reads_is_never_staged(a, b):
    plan = plan_call(a, b, bias=t((b.shape[-1],)), out=None, sms=132)
    assert plan.staged == ()


def test_an_empty_product_stages_nothing():
    """No kernel runs (M, N or K of 0): nothing is read, nothing copied."""
    assert plan_call(t((5, 0), (1, 1)), t((0, 300), (300, 1))).staged == ()
    assert plan_call(t((0, 7)), t((7, 9))).staged == ()


def test_random_layouts_are_always_planned_and_every_copy_is_readable():
    """Any strides torch can make (slices, transposes, expands, odd sizes, odd addresses) plan
    without an error; a staged operand's copy is read in a major mode, an unstaged one as it
    lies; staging is decided by what describe() keys a recipe on (shape, strides, alignment)."""
    rng = random.Random(35)
    sizes = (1, 2, 7, 8, 9, 64, 100, 127)
    for _ in range(400):
        m, n, k = (rng.choice(sizes) for _ in range(3))

        def draw(rows, cols):
            kind = rng.choice(("row", "col", "slice", "neither", "expand"))
            pad = rng.choice((0, 1, 8))
            strides = {"row": (cols + pad, 1), "col": (1, rows + pad),
                       "slice": (cols + rng.randrange(1, 20), 1),
                       "neither": (2 * cols + pad, 2), "expand": (0, 1)}[kind]
            return t((rows, cols), strides, ptr=4096 + 2 * rng.choice((0, 0, 1, 8)))

        a, b = draw(m, k), draw(k, n)
        plan = plan_call(a, b, sms=132)
        names = {s.operand for s in plan.staged}
        for name, info, rows_dim in (("a", a, 0), ("b", b, 1)):
            s = next((x for x in plan.staged if x.operand == name), None)
            if s is None:
                assert major(info.shape, info.strides, rows_dim, 2) is not None
                assert info.ptr % 16 == 0
            else:
                assert major(s.shape, s.strides, rows_dim, 2) is not None
                assert s.shape == info.shape
        # the same description plans the same staging (another address of the same alignment)
        again = plan_call(TensorInfo(shape=a.shape, strides=a.strides, dtype="bf16",
                                     ptr=a.ptr + 1024), b, sms=132)
        assert {s.operand for s in again.staged} == names


def test_stage_operand_keeps_the_layout_it_was_read_in_when_only_the_address_is_off():
    info = t((64, 72), (1, 64), ptr=4098)
    assert stage_operand("b", info, 1, 2, False) == Staging(operand="b", shape=(64, 72),
                                                            strides=(1, 64))


# --- fp8: torch._scaled_mm's layouts taken, its refusals kept ------------------------------------

def f8(shape, strides=None, ptr=4096):
    return t(shape, strides, dtype="e4m3", ptr=ptr)


ONE = t((1,), dtype="fp32")


@pytest.mark.parametrize("a, b, want", [
    # a slice of wider rows (1000 bytes apart): a K-major copy
    (f8((100, 64), (1000, 1)), f8((64, 72), (1, 64)), {"a": ((100, 64), (128, 1))}),
    # neither dimension contiguous (torch copies it into rows too)
    (f8((100, 64), (256, 2)), f8((64, 72), (1, 64)), {"a": ((100, 64), (128, 1))}),
    # b column-major with columns 72 bytes apart: K kept contiguous, columns 128 bytes apart
    (f8((100, 64)), f8((64, 72), (1, 72)), {"b": ((64, 72), (1, 128))}),
    (f8((100, 48), (56, 1)), f8((48, 72), (1, 50)), {"a": ((100, 48), (128, 1)),
                                                      "b": ((48, 72), (1, 128))}),
    (f8((100, 64), ptr=4097), f8((64, 72), (1, 64)), {"a": ((100, 64), (128, 1))}),
    (f8((100, 64)), f8((64, 72), (1, 64)), {}),
])
def test_scaled_stages_fp8_operands_k_major(a, b, want):
    plan = plan_scaled(a, b, ONE, ONE, sms=132)
    assert staged(plan) == want
    assert (plan.a.major, plan.b.major) == ("k", "k")
    assert plan.variant.a_major == plan.variant.b_major == "k"


@pytest.mark.parametrize("a, b, name, fix", [
    (f8((100, 40), (48, 1)), f8((40, 72), (1, 48)), "a", "pad K with zeros to 48"),
    (f8((100, 64), (1, 100)), f8((64, 72), (1, 64)), "a", "a.contiguous()"),
    (f8((100, 64)), f8((64, 72)), "b", "b.t().contiguous().t()"),
])
def test_scaled_refuses_what_torch_scaled_mm_refuses(a, b, name, fix):
    with pytest.raises(MatmulArgumentError) as info:
        plan_scaled(a, b, ONE, ONE)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{name}: ") and fix in text, text


def test_every_refusal_left_is_not_about_layout():
    """matmul keeps refusing an out of stride 0 (torch refuses it: one place written twice)."""
    for strides in itertools.product((0, 1, 72), repeat=2):
        out = t((100, 72), strides, dtype="bf16")
        if 0 in strides:
            with pytest.raises(MatmulArgumentError, match="^out: .*stride of 0"):
                plan_call(t((100, 64)), t((64, 72)), out=out)
        else:
            plan_call(t((100, 64)), t((64, 72)), out=out)


# --- the call: each staged argument copied on the stream, out written through its temporary -----

class _Tensor:
    """What matmul_call._staged reads of a torch tensor, recording the copy into it."""

    def __init__(self, name, shape, strides=None):
        self.name, self.shape, self.strides = name, tuple(shape), strides
        self.dtype, self.device, self.source = "bf16", "cuda:0", None

    def dim(self):
        return len(self.shape)

    def __getitem__(self, index):
        return _Tensor(f"{self.name}[{index}]", self.shape[1:])

    def copy_(self, x):
        self.source = x
        return self


class _Torch:
    @staticmethod
    def empty_strided(shape, strides, dtype, device):
        return _Tensor("copy", shape, strides)


def test_the_call_copies_what_the_plan_stages_and_nothing_else():
    from pipeline_core_nvidia_h100.matmul_call import _staged

    a, b = _Tensor("a", (4, 100, 64)), _Tensor("b", (4, 64, 9))
    bias, out = _Tensor("bias", (9,)), _Tensor("out", (4, 100, 9))
    plan = plan_call(t((4, 100, 64)), t((4, 64, 9), (0, 9, 1)), bias=t((9,), (3,)),
                     out=t((4, 100, 9), (900, 1, 100)))
    a2, b2, bias2, out2 = _staged(_Torch, plan.staged, a, b, bias, out)
    assert a2 is a  # read where it lies
    # b's broadcast batch: its one matrix copied into padded rows
    assert (b2.shape, b2.strides, b2.source.name) == ((64, 9), (64, 1), "b[0]")
    assert (bias2.strides, bias2.source) == ((1,), bias)
    # out: a contiguous temporary the kernel writes, never filled from out
    assert (out2.shape, out2.strides, out2.source) == ((4, 100, 9), (900, 9, 1), None)
    assert _staged(_Torch, (), a, b, None, None) == (a, b, None, None)


# --- the GPU check's cases (benchmarks/matmul_call.py) plan, every layout drawn -------------------

def test_the_gpu_checks_cases_cover_every_layout_and_all_plan():
    """benchmarks/matmul_call.py's random cases (the lead's H200 run) are planned here from their
    shapes alone: none is refused, each kind of layout, out=, batched form and epilogue is
    drawn, and each argument is staged in some case."""
    import importlib.util
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[3] / "benchmarks"
    sys.path.insert(0, str(bench))
    try:
        spec = importlib.util.spec_from_file_location("matmul_call_bench",
                                                      bench / "matmul_call.py")
        mc = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mc)
    finally:
        sys.path.remove(str(bench))
    cases = mc.draw_layout_cases(320)
    assert len(cases) == 320
    drawn = {(c.a, c.b, c.out, c.batched, c.epilogue) for c in cases}
    for i, values in enumerate((mc.LAYOUTS, mc.LAYOUTS, mc.OUTS, ("", *mc.BATCHED),
                                range(len(mc.EPILOGUES)))):
        assert {d[i] for d in drawn} == set(values)
    sizes = {x for c in cases for x in (c.m, c.n, c.k)}
    assert {999, 2050, 4095, 4097} <= sizes
    staged = set()
    for c in cases:
        a, b, bias, out = mc.case_infos(c)
        out_name, _, act = mc.EPILOGUES[c.epilogue]
        plan = plan_call(a, b, bias=bias, activation=act, out=out, sms=132,
                         out_dtype=None if out is not None else out_name)
        assert plan.out_shape == mc.product_shape(c)
        staged |= {s.operand for s in plan.staged}
    assert staged == {"a", "b", "bias", "out"}


def test_rows_off_the_64_byte_grid_are_copied_only_where_the_copy_pays():
    """8000x8000x3000 read where it lies (6000-byte rows, nearly every one straddling lines):
    both operands copied into aligned rows; 4000^3 (8000-byte rows, on the 64-byte grid): read
    where they lie; 2000x5000x3000, whose GEMM is too short to repay the copy: read where they
    lie (measured on the H200: copied, 0.57x cuBLAS; in place, 0.61x)."""
    big = plan_call(t((8000, 3000)), t((3000, 8000), (1, 3000)), sms=132)
    assert {s.operand: s.strides for s in big.staged} == {"a": (3008, 1), "b": (1, 3008)}
    assert plan_call(t((2000, 3000)), t((3000, 5000), (1, 3000)), sms=132).staged == ()
    assert plan_call(t((4000, 4000)), t((4000, 4000), (1, 4000)), sms=132).staged == ()
    assert plan_call(t((300, 3000)), t((3000, 5000), (1, 3000)), sms=132).staged == ()
