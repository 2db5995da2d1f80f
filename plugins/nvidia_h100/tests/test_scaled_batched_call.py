"""scaled_mm() (fp8 e4m3) and batched matmul() without a GPU: argument checks, planning, the
e4m3 / scaled / batched kernels' proof, source and SASS.  The GPU half is
benchmarks/matmul_fp8_call.py (docs/guide/matmul.md, "scaled_mm" and "Batched matmul")."""
from __future__ import annotations

import re
import shutil

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.errors import ProgramError  # noqa: E402
from pipeline_core.testing import run_cli  # noqa: E402
from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma  # noqa: E402
from pipeline_core_nvidia_h100.gemm_call import (MatmulArgumentError,  # noqa: E402
                                                 MatmulTypeError, TensorInfo, plan_call)
from pipeline_core_nvidia_h100.gemm_scaled import plan_scaled  # noqa: E402
from pipeline_core_nvidia_h100.matmul_call import CALL_STAGES, schedule_params  # noqa: E402
from pipeline_core_nvidia_h100.toolchain import compile_cubin, sass_of  # noqa: E402
from pipeline_core_nvidia_h100.warpspecialized import GemmVariant, WgmmaTag  # noqa: E402

NVCC = shutil.which("nvcc")


def t(shape, strides=None, dtype="bf16", ptr=4096, device="cuda:0"):
    """A tensor description, row-major (contiguous) unless ``strides`` are given."""
    if strides is None:
        strides, step = [], 1
        for d in reversed(shape):
            strides.insert(0, step)
            step *= d
    return TensorInfo(shape=tuple(shape), strides=tuple(strides), dtype=dtype, ptr=ptr,
                      device=device)


def f8(shape, strides=None, **kw):
    return t(shape, strides, dtype="e4m3", **kw)


def col(k, n):
    """b [K, N] column-major (b.t() contiguous), as torch._scaled_mm takes it."""
    return f8((k, n), (1, k))


ONE = t((1,), dtype="fp32")
A8, B8 = f8((100, 64)), col(64, 72)

# --- scaled_mm's argument checks: each refusal is one line naming the argument -------------------

SCALED_REFUSALS = {
    "bf16 a": (dict(a=t((100, 64))), MatmulTypeError, "a", "torch.float8_e4m3fn"),
    "bf16 b": (dict(b=t((64, 72), (1, 64))), MatmulTypeError, "b", "matmul takes bf16"),
    "3-D a": (dict(a=f8((2, 100, 64))), MatmulArgumentError, "a", "2-D [M, K]"),
    "K mismatch": (dict(b=col(80, 72)), MatmulArgumentError, "b", "[K=64, N]"),
    "K not a multiple of 16": (dict(a=f8((100, 40)), b=col(40, 72)), MatmulArgumentError, "a",
                               "pad K with zeros to 48"),
    "a column-major": (dict(a=f8((100, 64), (1, 100))), MatmulArgumentError, "a",
                       "a.contiguous()"),
    "b row-major": (dict(b=f8((64, 72))), MatmulArgumentError, "b",
                    "b.t().contiguous().t()"),
    "K not a multiple of 16 in padded rows": (dict(a=f8((100, 40), (48, 1)), b=col(40, 72)),
                                              MatmulArgumentError, "a", "torch._scaled_mm "
                                              "refuses too"),
    "b neither dim contiguous": (dict(b=f8((64, 72), (2, 256))), MatmulArgumentError, "b",
                                 "b.t().contiguous().t()"),
    "scale fp16": (dict(scale_a=t((1,), dtype="fp16")), MatmulTypeError, "scale_a",
                   "scale_a.float()"),
    "mixed scale kinds": (dict(scale_a=t((100, 1), dtype="fp32")), MatmulArgumentError,
                          "scale_b", "[1, 72]"),
    "row scale wrong length": (dict(scale_a=t((99, 1), dtype="fp32"),
                                    scale_b=t((1, 72), dtype="fp32")), MatmulArgumentError,
                               "scale_a", "[100, 1]"),
    "row scale strided": (dict(scale_a=t((100, 1), dtype="fp32"),
                               scale_b=t((1, 72), (144, 2), dtype="fp32")),
                          MatmulArgumentError, "scale_b", "scale_b.contiguous()"),
    "scale on another device": (dict(scale_b=t((1,), dtype="fp32", device="cuda:1")),
                                MatmulArgumentError, "scale_b", "scale_b.to('cuda:0')"),
    "fp8 out": (dict(out_dtype="e4m3"), MatmulTypeError, "out_dtype", "torch.float32"),
    "bias length": (dict(bias=t((71,))), MatmulArgumentError, "bias", "[72]"),
}


@pytest.mark.parametrize("case", sorted(SCALED_REFUSALS))
def test_each_bad_scaled_argument_is_one_line_naming_it(case):
    change, kind, name, fix = SCALED_REFUSALS[case]
    args = {"a": A8, "b": B8, "scale_a": ONE, "scale_b": ONE, **change}
    kw = {k: args.pop(k) for k in ("bias", "out_dtype") if k in args}
    with pytest.raises(kind) as info:
        plan_scaled(args["a"], args["b"], args["scale_a"], args["scale_b"], **kw)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{name}: "), text
    assert fix in text, text


def test_matmul_sends_fp8_to_scaled_mm():
    with pytest.raises(MatmulTypeError, match=r"^a: .*float8_e4m3fn.* use "
                                              r"pipeline_core_nvidia_h100.scaled_mm for fp8"):
        plan_call(A8, B8)


@pytest.mark.parametrize("scale_a, scale_b, kind", [
    (ONE, ONE, "tensor"),
    (t((), (), dtype="fp32"), t((1, 1), dtype="fp32"), "tensor"),  # any numel-1 pair
    (t((100, 1), dtype="fp32"), t((1, 72), dtype="fp32"), "row"),
])
def test_scaled_plans_the_e4m3_kernel_with_its_scale_kind(scale_a, scale_b, kind):
    p = plan_scaled(A8, B8, scale_a, scale_b, sms=132)
    # bf16 out, K-major, the TMA-store epilogue; M 100 in one tile: A's box clipped to 104 rows
    assert p.variant == GemmVariant(dtype="e4m3", tails=True, scale=kind, store="tma",
                                    a_rows=104)
    assert (p.a.major, p.b.major) == ("k", "k")
    # a K tile is one 128-byte swizzled row: 128 fp8 elements, boxes of 128 bytes
    assert p.k_pad == 128 and p.a.box_inner == p.b.box_inner == 128
    assert (p.m_pad, p.n_pad, p.out_shape) == (128, 256, (100, 72))


def test_scaled_takes_its_output_type_bias_and_the_split():
    p = plan_scaled(f8((128, 4096)), col(4096, 4096), ONE, ONE, bias=t((4096,), dtype="fp32"),
                    out_dtype="fp32", sms=132)
    assert (p.variant.out_dtype, p.variant.bias, p.variant.split_k) == ("fp32", "fp32", True)
    # 16 output tiles of 128 x 256; 32 K tiles of 128, split 4 ways (at least 8 K tiles each)
    assert (p.grid, p.splits, p.k_pad) == (16, 4, 8 * 128)
    # a size-1 M needs no aligned row stride, and neither does N = 1
    assert plan_scaled(f8((1, 48)), f8((48, 1), (1, 3)), ONE, ONE).m == 1


# --- batched matmul: torch's batch rule, folded or on grid z -------------------------------------

def test_a_3d_a_over_a_2d_b_folds_into_one_gemm():
    p = plan_call(t((4, 100, 64)), t((64, 72)), sms=132)
    assert (p.m, p.batch, p.variant.batch, p.out_shape) == (400, 1, "none", (4, 100, 72))
    assert (p.a.outer, p.a.stride, p.a.batch) == (400, 64, 1)
    # the same with an out that folds too, and a 3-D out given explicitly
    out = t((4, 100, 72), dtype="bf16")
    assert plan_call(t((4, 100, 64)), t((64, 72)), out=out).m == 400


def test_both_3d_run_the_batch_on_grid_z_with_3d_maps():
    p = plan_call(t((4, 100, 64)), t((4, 64, 72)), sms=132)
    assert (p.m, p.batch, p.variant.batch, p.out_shape) == (100, 4, "ab", (4, 100, 72))
    assert (p.a.batch, p.a.batch_stride, p.b.batch, p.b.batch_stride) == (4, 6400, 4, 4608)
    assert p.c_batch == 100 * 72 and p.grid == 1  # one 128 x 256 tile per batch
    # one persistent grid per batch (batch 0's CTAs first: its operands shared in L2); no
    # split-K across a batch
    big = plan_call(t((8, 4096, 4096)), t((8, 4096, 4096)), sms=132)
    assert (big.grid, big.batch, big.splits) == (132, 8, 1)
    few = plan_call(t((2, 128, 4096)), t((2, 4096, 4096)), sms=132)
    assert few.splits == 1 and not few.variant.split_k


@pytest.mark.parametrize("a, b, kind", [
    (t((100, 64)), t((4, 64, 72)), "b"),          # a broadcast over b's batch
    (t((1, 100, 64)), t((4, 64, 72)), "b"),       # a batch of 1 broadcasts
    (t((4, 100, 64), (64, 400 * 64, 1)), t((64, 72)), "a"),  # a's batches interleaved: no fold
    (t((4, 128, 64), (8192, 1, 128)), t((4, 64, 72)), "ab"),  # A and B MN-major
])
def test_the_batched_operands_get_3d_maps(a, b, kind):
    p = plan_call(a, b, sms=132)
    assert (p.batch, p.variant.batch, p.out_shape[0]) == (4, kind, 4)
    assert (p.a.batch > 1) == ("a" in kind) and (p.b.batch > 1) == ("b" in kind)


def test_an_empty_batch_plans_an_empty_result():
    assert plan_call(t((0, 100, 64)), t((64, 72))).out_shape == (0, 100, 72)
    assert plan_call(t((3, 100, 64)), t((3, 64, 0))).out_shape == (3, 100, 0)


BATCH_REFUSALS = {
    "batch mismatch": (dict(a=t((4, 100, 64)), b=t((3, 64, 72))), "b", "[4, 64, 72]"),
    "4-D": (dict(a=t((2, 4, 100, 64)), b=t((64, 72))), "a", "flatten"),
    "2-D out": (dict(a=t((4, 100, 64)), b=t((4, 64, 72)), out=t((100, 72))), "out",
                "[4, 100, 72]"),
}


@pytest.mark.parametrize("case", sorted(BATCH_REFUSALS))
def test_each_bad_batched_argument_is_one_line_naming_it(case):
    args, name, fix = BATCH_REFUSALS[case]
    with pytest.raises(MatmulArgumentError) as info:
        plan_call(**args)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{name}: ") and fix in text, text


# --- the schedule: e4m3, scales and batch compile, proven; the emitter writes them --------------

def _compiled(v: GemmVariant):
    return compile_named("warpspecialized-gemm", target="h100", params=schedule_params(v),
                         target_args={"stages": str(CALL_STAGES)})


VARIANTS = {
    "e4m3 row-scaled bias bf16": GemmVariant(dtype="e4m3", tails=True, scale="row",
                                             bias="bf16"),
    "e4m3 tensor-scaled fp32 split-K": GemmVariant(dtype="e4m3", tails=True, scale="tensor",
                                                   out_dtype="fp32", split_k=True),
    "bf16 batched ab": GemmVariant(tails=True, b_major="mn", batch="ab"),
    "fp16 batched b": GemmVariant(dtype="fp16", tails=True, batch="b", out_dtype="fp32"),
}


@pytest.mark.parametrize("label", sorted(VARIANTS))
def test_each_new_variant_is_proven_safe_by_check(label):
    v = VARIANTS[label]
    params = [x for k, val in schedule_params(v).items() for x in ("-p", f"{k}={val}")]
    res = run_cli(["check", "warpspecialized-gemm", "--target", "h100", "-T",
                   f"stages={CALL_STAGES}", *params])
    assert res.exit_code == 0, res.stderr
    assert "warpspecialized-gemm: SAFE" in res.stdout


def test_the_e4m3_kernel_is_k32_wgmma_on_128_byte_k_tiles():
    c = _compiled(VARIANTS["e4m3 row-scaled bias bf16"])
    g = c.launch.geometry
    assert (g.bk, g.k_steps, g.a_bytes, g.b_bytes) == (128, 4, 128 * 128, 256 * 128)
    src = emit_wgmma(c)
    assert "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3" in src
    assert "p, 1, 1;" in src  # fp8 has no transpose immediates
    assert "wgmma_m64n256k32(acc[mb]," in src
    assert "constexpr u32 A_BYTES = BM * BK * 1, B_BYTES = BN * BK * 1" in src
    # the scales, before the bias, per row and per column
    assert "pcgc::ActNone, pcgc::ScaleRow>;" in src
    assert "const Epi epi(bias, scale_a, scale_b, m, n, wtid, lane);" in src
    # pcgc::Epilogue's quad: each value scaled, then the bias (gemm_wgmma_h100.cuh)
    assert "v[0] = Act::f(Scale::apply(frag[4 * j], sa0 * sb0) + b0);" in src
    assert "const float sa0 = Scale::a(scale_a, row, m), sa8 = Scale::a(scale_a, row + 8, m);" \
        in src
    assert "const float* __restrict__ scale_a, const float* __restrict__ scale_b) {" in src
    split = emit_wgmma(_compiled(VARIANTS["e4m3 tensor-scaled fp32 split-K"]))
    assert "pcgc::ScaleTensor>;" in split
    assert ("unsigned* __restrict__ counters,\n       const float* __restrict__ scale_a, "
            "const float* __restrict__ scale_b) {") in split


def test_the_batched_kernel_reads_3d_maps_and_offsets_its_output():
    src = emit_wgmma(_compiled(VARIANTS["bf16 batched ab"]))
    # both operands' loads 3D (pcgc::Operand's BATCHED, gemm_wgmma_h100.cuh)
    assert "using LoadA = pcgc::Operand<A_MN, BM, BK, CHUNK_BYTES, false, true, 1>;" in src
    assert "using LoadB = pcgc::Operand<B_MN, BN, BK, CHUNK_BYTES, false, true, 1>;" in src
    assert "long long ldc,\n       long long c_batch) {" in src
    assert "C = static_cast<char*>(C) + (size_t)blockIdx.z * c_batch;" in src
    only_b = emit_wgmma(_compiled(VARIANTS["fp16 batched b"]))
    assert "using LoadA = pcgc::Operand<A_MN, BM, BK, CHUNK_BYTES, false, false, 1>;" in only_b
    assert "using LoadB = pcgc::Operand<B_MN, BN, BK, CHUNK_BYTES, false, true, 1>;" in only_b


def test_unscaled_unbatched_kernels_carry_none_of_it():
    src = emit_wgmma(_compiled(GemmVariant(b_major="mn", tails=True)))
    kernel = src[src.index('extern "C"'):]  # past the headers, which hold every variant's traits
    assert "const Epi epi(bias, nullptr, nullptr, m, n, wtid, lane);" in kernel
    for text in ("ScaleTensor", "ScaleRow", "scale_a", "c_batch", "blockIdx.z"):
        assert text not in kernel
    assert "CHUNK_BYTES, false, false, 1>;" in kernel  # loads neither split nor batched
    assert "k32" not in src


@pytest.mark.parametrize("params, param, fix", [
    ({"dtype": "e4m3"}, "BK", "must be 128 for -p dtype=e4m3"),
    ({"dtype": "e4m3", "BK": "128", "b_major": "mn"}, "b_major", "-p a_major=k -p b_major=k"),
    ({"batch": "ab", "split_k": "true"}, "split_k", "-p split_k=false"),
])
def test_the_schedule_refuses_what_the_kernel_cannot_do(params, param, fix):
    with pytest.raises(ProgramError, match=rf"-p {param}: .*{re.escape(fix)}"):
        compile_named("warpspecialized-gemm", target="h100", params=params)


def test_fp8_wgmma_groups_cost_what_16_bit_ones_do():
    """The timing model: a 128-K e4m3 group is as many cycles as a 64-K bf16 group (fp8's
    tensor cores run twice the flop per cycle), not twice as many."""
    def groups(c):
        return [o.latency for o in c.body if o.tag == WgmmaTag.WGMMA]

    e4m3 = groups(_compiled(VARIANTS["e4m3 row-scaled bias bf16"]))
    assert e4m3 == groups(_compiled(GemmVariant(tails=True))) == [512, 512]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("label", sorted(VARIANTS))
def test_the_new_kernels_build_without_spills(label, tmp_path):
    v = VARIANTS[label]
    proc, cubin = compile_cubin(emit_wgmma(_compiled(v)), tmp_path, "call")
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    sass = sass_of(cubin)
    if sass is None:
        pytest.skip("no nvdisasm / cuobjdump for the SASS part")
    assert not re.search(r"\b(LDL|STL)\b", sass)
    hgmma = set(re.findall(r"\bHGMMA\.64x256x(\d+)\.F32(\.[A-Z0-9]+)*", sass))
    if v.dtype == "e4m3":
        # the fp8 wgmma is QGMMA in SASS
        assert re.search(r"\bQGMMA\.64x256x32\.F32\.E4M3\.E4M3\b", sass)
        assert not hgmma, hgmma
    else:
        assert {k for k, _ in hgmma} == {"16"}, hgmma
    loads_3d = len(re.findall(r"\bUTMALDG\.3D\b", sass))
    boxes = {"none": 0, "a": 1, "b": 1, "ab": 2}[v.batch]
    if v.batch != "none" and v.b_major == "mn" and "b" in v.batch:
        boxes += 3  # an MN-major B tile of 256 rows is 4 boxes of 64
    assert loads_3d == boxes, loads_3d
    assert attrs.asdict(_compiled(v).launch.geometry.variant) == attrs.asdict(v)


def test_scaled_mm_is_exported_and_loads_no_gpu_package():
    import subprocess as sp
    import sys

    code = ("import sys, pipeline_core_nvidia_h100 as p; f = p.scaled_mm;"
            "print(f.__name__, sorted(m for m in ('torch', 'cupy') if m in sys.modules))")
    out = sp.run([sys.executable, "-c", code], capture_output=True, text=True,
                 check=True).stdout
    assert out.strip() == "scaled_mm []"
