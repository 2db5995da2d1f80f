"""grouped_mm() / scaled_grouped_mm() without a GPU: torch._grouped_mm's argument checks, the
plan (shapes, maps, variant, grid), the grouped kernels' proof, source and SASS, and the device
tile scheduler run on the host over random groups; groups along K (2-D x 2-D): the plan, the
proof with its descriptor acquire (its removal refused), the kernel and its pre-pass.  The GPU half is
benchmarks/grouped_mm_call.py (docs/guide/matmul.md, "Grouped GEMM")."""
from __future__ import annotations

import math
import random
import re
import shutil
import subprocess

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.agents.prove import prove_plan  # noqa: E402
from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.check.mutate import agent_mutations, mutate_compiled  # noqa: E402
from pipeline_core.check.verdict import HazardKind  # noqa: E402
from pipeline_core.errors import ProgramError  # noqa: E402
from pipeline_core.plan import StepKind  # noqa: E402
from pipeline_core.testing import run_cli  # noqa: E402
from pipeline_core_nvidia_h100.cuda import (gemm_grouped_header_source,  # noqa: E402
                                            group_maps_source, header_source)
from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma  # noqa: E402
from pipeline_core_nvidia_h100.gemm_call import (MatmulArgumentError,  # noqa: E402
                                                 MatmulTypeError, TensorInfo, Tuning)
from pipeline_core_nvidia_h100.gemm_grouped import plan_grouped  # noqa: E402
from pipeline_core_nvidia_h100.gemm_tiles import GroupKTrips  # noqa: E402
from pipeline_core_nvidia_h100.group_maps import SIGNATURE, k_field  # noqa: E402
from pipeline_core_nvidia_h100.kit.tiles import jagged_tile_loop  # noqa: E402
from pipeline_core_nvidia_h100.autotune import Candidate  # noqa: E402
from pipeline_core_nvidia_h100.matmul_call import (CALL_STAGES, plan_grouped_infos,  # noqa: E402
                                                   schedule_params)
from pipeline_core.proof import UnsafeScheduleError  # noqa: E402
from pipeline_core_nvidia_h100.sync_skeleton import SkeletonMismatch, check_skeleton  # noqa: E402
from pipeline_core_nvidia_h100.toolchain import compile_cubin, sass_of  # noqa: E402
from pipeline_core_nvidia_h100.warpspecialized import MAX_GROUPS, GemmVariant  # noqa: E402

NVCC = shutil.which("nvcc")
GXX = shutil.which("g++")


def t(shape, strides=None, dtype="bf16", device="cuda:0"):
    """A tensor description at an aligned address, contiguous unless ``strides`` are given."""
    dense = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
    return TensorInfo(shape=tuple(shape), strides=tuple(strides or dense), dtype=dtype,
                      ptr=4096, device=device)


def offs(g, device="cuda:0"):
    return t((g,), dtype="int32", device=device)


def experts(g, k, n, dtype="bf16"):
    """b [G, K, N] as a model holds it: weights [G, N, K] transposed (K contiguous)."""
    return t((g, k, n), (n * k, 1, k), dtype=dtype)


# --- the plan ------------------------------------------------------------------------------------

def test_2d_by_3d_is_one_grouped_launch_over_the_tokens():
    p = plan_grouped(t((16384, 4096)), experts(8, 4096, 14336), offs(8), sms=132)
    # bf16, both K-major, stored by TMA where a tile lies inside its group (matmul_call keeps it
    # only where the tile's shared memory takes the staging: plan_grouped_infos)
    assert p.variant == GemmVariant(tails=True, batch="grouped", store="tma")
    assert p.c is not None and (p.c.inner, p.c.outer, p.c.batch) == (14336, 16384, 1)
    assert (p.m, p.n, p.k, p.groups, p.out_shape, p.ldc) == (16384, 14336, 4096, 8,
                                                             (16384, 14336), 14336)
    assert (p.a.outer, p.a.batch) == (16384, 1)  # one 2-D map of the tokens
    assert (p.b.major, p.b.outer, p.b.batch, p.b.batch_stride) == ("k", 14336, 8, 14336 * 4096)
    assert (p.grid, p.splits, p.batch) == (132, 1, 1)
    # a row-major b [G, K, N] reads N-contiguous (wgmma's transpose mode), fp32 out
    q = plan_grouped(t((100, 64)), t((3, 64, 72)), offs(3), out_dtype="fp32")
    assert (q.variant.b_major, q.variant.out_dtype, q.b.batch_stride) == ("mn", "fp32", 64 * 72)
    # no SM count (a fake tensor's plan): a CTA per possible tile, each group's tail on top
    assert q.grid == 1 * (100 // 128 + 3)


def test_3d_by_2d_groups_the_columns():
    p = plan_grouped(t((4, 300, 64)), t((64, 1000), (1, 64)), offs(4), sms=132)
    assert p.variant == GemmVariant(tails=True, batch="grouped_n", store="tma")
    assert (p.m, p.n, p.out_shape, p.ldc, p.groups) == (300, 1000, (300, 1000), 1000, 4)
    assert (p.a.batch, p.a.batch_stride, p.b.batch) == (4, 300 * 64, 1)


def test_the_output_rows_are_padded_as_torch_pads_them():
    # N = 7 bf16: rows of 8 elements (16 bytes), as torch's create_grouped_gemm_output_tensor
    p = plan_grouped(t((50, 64)), experts(2, 64, 7), offs(2))
    assert (p.out_shape, p.ldc) == ((50, 7), 8)
    assert plan_grouped(t((50, 64)), experts(2, 64, 7), offs(2), out_dtype="fp32").ldc == 8


def test_one_group_is_still_read_through_a_3d_map():
    p = plan_grouped(t((10, 64)), t((1, 64, 256), (5, 256, 1)), offs(1))
    assert (p.b.batch, p.b.batch_stride) == (1, 64 * 256)  # the size-1 stride is never stepped


def test_3d_by_3d_without_offs_is_the_batched_matmul():
    p = plan_grouped(t((4, 100, 64)), t((4, 64, 72)), None, sms=132)
    assert (p.variant.batch, p.batch, p.out_shape, p.groups) == ("ab", 4, (4, 100, 72), 0)


def test_an_empty_product_plans_no_read():
    p = plan_grouped(t((0, 64)), experts(4, 64, 72), offs(4))
    assert p.out_shape == (0, 72)
    assert plan_grouped(t((10, 0)), t((4, 0, 72)), offs(4)).k == 0


def test_scaled_grouped_takes_row_wise_scales_per_group():
    a8, b8 = t((500, 256), dtype="e4m3"), experts(4, 256, 512, "e4m3")
    sa, sb = t((500,), dtype="fp32"), t((4, 512), (520, 1), dtype="fp32")
    p = plan_grouped(a8, b8, offs(4), scales=(sa, sb), sms=132)
    assert p.variant == GemmVariant(dtype="e4m3", tails=True, scale="row", batch="grouped",
                                    store="tma")
    assert (p.scale_group, p.k_pad, p.a.box_inner) == (520, 256, 128)
    # along N: scale_a is the grouped one
    q = plan_grouped(t((4, 300, 128), dtype="e4m3"), t((128, 900), (1, 128), dtype="e4m3"),
                     offs(4), scales=(t((4, 300), dtype="fp32"), t((900,), dtype="fp32")))
    assert (q.variant.batch, q.scale_group, q.variant.out_dtype) == ("grouped_n", 300, "bf16")


A, B, O = t((100, 64)), experts(4, 64, 72), offs(4)
F8 = (t((100, 64), dtype="e4m3"), experts(4, 64, 72, "e4m3"))
SCALES = (t((100,), dtype="fp32"), t((4, 72), dtype="fp32"))

REFUSALS = {
    "fp32 a": (dict(a=t((100, 64), dtype="fp32")), MatmulTypeError, "a", "a.to(torch.bfloat16)"),
    "mixed types": (dict(b=experts(4, 64, 72, "fp16")), MatmulTypeError, "b",
                    "b.to(torch.bfloat16)"),
    "4-D b": (dict(b=t((2, 4, 64, 72))), MatmulArgumentError, "b", "flatten"),
    "K mismatch": (dict(b=experts(4, 80, 72)), MatmulArgumentError, "b", "a's K=64"),
    "bias": (dict(bias=t((72,))), MatmulArgumentError, "bias", "add it to the result"),
    "no offs": (dict(offs=None), MatmulArgumentError, "offs", "pass offs"),
    "offs with 3-D x 3-D": (dict(a=t((4, 100, 64))), MatmulArgumentError, "offs",
                            "pass offs=None"),
    "offs int64": (dict(offs=t((4,), dtype="int64")), MatmulTypeError, "offs",
                   "offs.to(torch.int32)"),
    "offs 2-D": (dict(offs=t((4, 1), dtype="int32")), MatmulArgumentError, "offs", "1-D [G]"),
    "offs length": (dict(offs=offs(5)), MatmulArgumentError, "offs", "must be [4]"),
    "offs strided": (dict(offs=t((4,), (2,), dtype="int32")), MatmulArgumentError, "offs",
                     "offs.contiguous()"),
    "offs elsewhere": (dict(offs=offs(4, device="cuda:1")), MatmulArgumentError, "offs",
                       "offs.to('cuda:0')"),
    "too many groups": (dict(b=experts(MAX_GROUPS + 1, 64, 72), offs=offs(MAX_GROUPS + 1)),
                        MatmulArgumentError, "offs", "split the groups"),
    "b unaligned rows": (dict(b=t((4, 64, 72), (64 * 73, 73, 1))), MatmulArgumentError, "b",
                         "16-byte aligned, as torch._grouped_mm"),
    "b batch stride unaligned": (dict(b=t((4, 64, 72), (64 * 72 + 1, 1, 64))),
                                 MatmulArgumentError, "b", "b.contiguous()"),
    "3-D batches differ": (dict(a=t((3, 100, 64)), offs=None), MatmulArgumentError, "b",
                           "pass b of shape [3, 64, 72]"),
    "2-D x 2-D K mismatch": (dict(b=t((80, 72))), MatmulArgumentError, "b",
                             "b.shape[0] must be a's K=64"),
    "fp8 out": (dict(out_dtype="e4m3"), MatmulTypeError, "out_dtype", "torch.float32"),
    # 2-D x 2-D (groups along K)'s own
    "along K offs int64": (dict(b=t((64, 72)), offs=t((4,), dtype="int64")), MatmulTypeError,
                           "offs", "offs.to(torch.int32)"),
    "along K offs 2-D": (dict(b=t((64, 72)), offs=t((4, 1), dtype="int32")),
                         MatmulArgumentError, "offs", "1-D [G]"),
    "along K no offs": (dict(b=t((64, 72)), offs=None), MatmulArgumentError, "offs",
                        "pass offs"),
    "along K b unaligned rows": (dict(b=t((64, 72), (73, 1))), MatmulArgumentError, "b",
                                 "16-byte aligned, as torch._grouped_mm"),
    "along K scaled": (dict(a=t((100, 64), dtype="e4m3"), b=t((64, 72), (1, 64), dtype="e4m3"),
                            scales=(t((100,), dtype="fp32"), t((72,), dtype="fp32"))),
                       MatmulArgumentError, "b", "torch._scaled_grouped_mm"),
    # scaled_grouped_mm's own
    "scaled bf16": (dict(scales=SCALES), MatmulTypeError, "a", "torch.float8_e4m3fn"),
    "scale_b 1-D": (dict(a=F8[0], b=F8[1], scales=(SCALES[0], t((72,), dtype="fp32"))),
                    MatmulArgumentError, "scale_b", "[4, 72]"),
    "scale_a fp16": (dict(a=F8[0], b=F8[1], scales=(t((100,), dtype="fp16"), SCALES[1])),
                     MatmulTypeError, "scale_a", "scale_a.float()"),
    "fp8 b row-major": (dict(a=F8[0], b=t((4, 64, 72), dtype="e4m3"), scales=SCALES),
                        MatmulArgumentError, "b", "b.t().contiguous().t()"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_bad_argument_is_one_line_naming_it(case):
    change, kind, name, fix = REFUSALS[case]
    args = {"a": A, "b": B, "offs": O, **change}
    with pytest.raises(kind) as info:
        plan_grouped(args.pop("a"), args.pop("b"), args.pop("offs"), **args)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{name}: "), text
    assert fix in text, text


# --- the schedule: proven, the kernel as the plan says, built without spills --------------------

VARIANTS = {
    "bf16 grouped": GemmVariant(tails=True, batch="grouped"),
    "fp16 grouped b mn fp32 out": GemmVariant(dtype="fp16", b_major="mn", out_dtype="fp32",
                                              tails=True, batch="grouped"),
    "bf16 grouped_n a mn": GemmVariant(a_major="mn", tails=True, batch="grouped_n"),
    "e4m3 grouped row-scaled": GemmVariant(dtype="e4m3", tails=True, scale="row",
                                           batch="grouped"),
}


K_VARIANTS = {"k k": GemmVariant(tails=True, batch="grouped_k"),
            "mn mn": GemmVariant(tails=True, batch="grouped_k", a_major="mn", b_major="mn"),
            "fp16 k mn fp32 out": GemmVariant(dtype="fp16", tails=True, batch="grouped_k",
                                              b_major="mn", out_dtype="fp32")}


def _compiled(v: GemmVariant):
    return compile_named("warpspecialized-gemm", target="h100", params=schedule_params(v),
                         target_args={"stages": str(CALL_STAGES)})


@pytest.mark.parametrize("label", sorted({**VARIANTS, **K_VARIANTS}))
def test_each_grouped_variant_is_proven_safe_by_check(label):
    v = {**VARIANTS, **K_VARIANTS}[label]
    params = [x for k, val in schedule_params(v).items() for x in ("-p", f"{k}={val}")]
    res = run_cli(["check", "warpspecialized-gemm", "--target", "h100", "-T",
                   f"stages={CALL_STAGES}", *params])
    assert res.exit_code == 0, res.stderr
    assert "warpspecialized-gemm: SAFE" in res.stdout


@pytest.mark.parametrize("params, param, fix", [
    ({"batch": "grouped", "split_k": "true"}, "split_k", "-p split_k=false"),
    ({"batch": "a", "store": "tma"}, "store", "-p store=direct"),
    ({"batch": "grouped", "cluster": "2"}, "cluster", "-p cluster=1"),
])
def test_the_schedule_refuses_what_a_grouped_kernel_cannot_do(params, param, fix):
    with pytest.raises(ProgramError, match=rf"-p {param}: .*{re.escape(fix)}"):
        compile_named("warpspecialized-gemm", target="h100", params=params)


def test_the_grouped_kernel_schedules_its_tiles_from_offs_on_the_device():
    src = emit_wgmma(_compiled(VARIANTS["bf16 grouped"]))
    kernel = src[src.index('extern "C"'):]
    assert "const int* __restrict__ offs, int groups) {" in kernel
    # the table before the start barrier, read after it; the same mapping in every role
    table = kernel.index("pcgc::group_table<BM>(group_first, group_ends, offs, groups, m, N / BN)")
    assert table < kernel.index("__syncthreads();") < kernel.index("group_first[groups]")
    assert kernel.count("pcgc::group_tile<false, BM, BN>(tile, group_first, group_ends, N / BN, "
                        "GROUP_M, m, n, group, row0, col0, m_end, n_end);") == 2
    # A at the tile's first row (2-D), B at its group (3-D); stores clipped to the group
    assert "using LoadA = pcgc::GroupOperand<A_MN, BM, BK, CHUNK_BYTES, false>;" in kernel
    assert "using LoadB = pcgc::GroupOperand<B_MN, BN, BK, CHUNK_BYTES, true>;" in kernel
    assert "&tmA, full_bar(((rb + t) % STAGES)), t, row0, group);" in kernel
    assert "const Epi epi(bias, nullptr, nullptr, m_end, n_end, wtid, lane);" in kernel
    assert "epi.store<MBLOCKS, ACC, 64>(acc, C, ldc, row0 + consumer * CONSUMER_ROWS, col0);" \
        in kernel
    for text in ("blockIdx.z", "c_batch", "tile_m * BM", "tma_store"):
        assert text not in kernel, text
    scaled = emit_wgmma(_compiled(VARIANTS["e4m3 grouped row-scaled"]))
    assert "const Epi epi(bias, scale_a, scale_b + (size_t)group * scale_group, m_end, n_end" \
        in scaled
    along_n = emit_wgmma(_compiled(VARIANTS["bf16 grouped_n a mn"]))
    assert "pcgc::group_table<BN>(group_first, group_ends, offs, groups, n, M / BM)" in along_n
    assert "using LoadA = pcgc::GroupOperand<A_MN, BM, BK, CHUNK_BYTES, true>;" in along_n


def test_the_jagged_loop_is_the_same_in_every_role():
    loop = jagged_tile_loop(MAX_GROUPS)
    assert loop.producer.head == loop.consumers.head and loop.producer.tile == loop.consumers.tile
    assert loop.producer.nested and not loop.consumers.nested
    assert f"group_first[{MAX_GROUPS} + 1]" in loop.counts[0]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("label", sorted(VARIANTS))
def test_the_grouped_kernels_build_without_spills(label, tmp_path):
    v = VARIANTS[label]
    proc, cubin = compile_cubin(emit_wgmma(_compiled(v)), tmp_path, "grouped")
    report = proc.stderr if proc.returncode == 0 else pytest.fail(proc.stderr)
    # no spill, no wgmma serialized (C7520), no local memory in the machine code
    assert "0 bytes spill stores, 0 bytes spill loads" in report and "C7520" not in report
    sass = sass_of(cubin) or pytest.skip("no nvdisasm / cuobjdump for the SASS part")
    assert not re.search(r"\b(LDL|STL)\b", sass)
    mma = r"\bQGMMA\.64x256x32\.F32\.E4M3\.E4M3\b" if v.dtype == "e4m3" else \
        r"\bHGMMA\.64x256x16\.F32\b"
    assert re.search(mma, sass)
    # the grouped operand's boxes are 3-D (an MN-major tile: one per 64 rows), the other's 2-D
    mn = (v.b_major if v.batch == "grouped" else v.a_major) == "mn"
    rows = 256 if v.batch == "grouped" else 128
    assert len(re.findall(r"\bUTMALDG\.3D\b", sass)) == (rows // 64 if mn else 1)
    assert len(re.findall(r"\bUTMALDG\.2D\b", sass)) >= 1


# --- the device tile scheduler, run on the host: every tile of every group exactly once ---------

_SHIM = r"""
#include <algorithm>
#include <barrier>
#include <cstdio>
#include <thread>
#include <vector>
using std::max; using std::min;
#define __device__
#define __forceinline__ inline
using u32 = unsigned;
struct Dim { int x; };
thread_local Dim threadIdx;
static std::barrier<>* warp;
static int slots[32];
int __shfl_up_sync(unsigned, int v, int d) {  // a warp's shuffle: 32 threads meet twice
    slots[threadIdx.x] = v;
    warp->arrive_and_wait();
    const int got = threadIdx.x >= d ? slots[threadIdx.x - d] : v;
    warp->arrive_and_wait();
    return got;
}
namespace pch100 {
"""


def _device_function(text: str, start: str) -> str:
    """The device function of ``text`` that begins with ``start``, up to its closing brace."""
    at = text.index(start)
    return text[at:text.index("\n}\n", at) + 3]


@pytest.mark.skipif(GXX is None, reason="g++ is not on PATH")
def test_the_groups_table_and_mapping_visit_every_tile_once(tmp_path):
    grouped = gemm_grouped_header_source()
    scheduler = grouped[grouped.index("template <int BLOCK>"):grouped.index("// An operand's")]
    raster = _device_function(header_source(), "__device__ __forceinline__ void grouped_tile(")
    main = r"""
int main() {
    int groups, extent, across, along_n, m, n;
    while (scanf("%d %d %d %d %d %d", &groups, &extent, &across, &along_n, &m, &n) == 6) {
        std::vector<int> offs(groups), first(groups + 1), ends(groups + 1);
        for (int& o : offs) scanf("%d", &o);
        std::barrier<> b(32);
        warp = &b;
        std::vector<std::thread> lanes;
        for (int i = 0; i < 32; ++i) lanes.emplace_back([&, i] {
            threadIdx.x = i;
            if (along_n) pcgc::group_table<64>(first.data(), ends.data(), offs.data(), groups, extent, across);
            else pcgc::group_table<128>(first.data(), ends.data(), offs.data(), groups, extent, across);
        });
        for (auto& l : lanes) l.join();
        printf("%d\n", first[groups]);
        int group = 0, row, col, m_end, n_end;
        for (int tile = 0; tile < first[groups]; ++tile) {
            if (along_n) pcgc::group_tile<true, 128, 64>(tile, first.data(), ends.data(), across, 3, m, n, group, row, col, m_end, n_end);
            else pcgc::group_tile<false, 128, 64>(tile, first.data(), ends.data(), across, 3, m, n, group, row, col, m_end, n_end);
            printf("%d %d %d %d %d\n", group, row, col, m_end, n_end);
        }
    }
}
"""
    src = tmp_path / "sched.cpp"
    src.write_text(_SHIM + raster + "}\nnamespace pcgc {\n" + scheduler + "}\n" + main)
    exe = tmp_path / "sched"
    subprocess.run([GXX, "-std=c++20", "-O1", "-pthread", "-o", str(exe), str(src)], check=True)
    rng = random.Random(35)
    cases, expected = [], []
    for case in range(40):
        along_n = case % 2
        groups = rng.choice([0, 1, 2, 5, 31, 32, 33, 64, 100, 257])
        m, n = rng.randint(1, 700), rng.randint(1, 700)
        extent, block = (n, 64) if along_n else (m, 128)
        sizes = [rng.choice([0, 0, 1, 3, 64, 127, 128, 129, 300]) for _ in range(groups)]
        ends, total = [], 0
        for s in sizes:
            total += s
            ends.append(total)
        if groups and rng.random() < 0.3:
            ends[-1] += 50  # past the tensor: clamped to it
        across = -(-(m if along_n else n) // (128 if along_n else 64))
        cases.append(f"{groups} {extent} {across} {along_n} {m} {n}\n" + " ".join(map(str, ends)))
        want, begin = set(), 0
        for g, e in enumerate(ends):
            end = min(e, extent)
            for j in range(begin, end, block):
                for i in range(across):
                    want.add((g, i * 128, j, m, end) if along_n else (g, j, i * 64, end, n))
            begin = max(begin, end)
        expected.append(want)
    out = subprocess.run([str(exe)], input="\n".join(cases) + "\n", capture_output=True,
                         text=True, check=True).stdout.split("\n")
    at = 0
    for case, want in enumerate(expected):
        count = int(out[at])
        got = [tuple(map(int, line.split())) for line in out[at + 1:at + 1 + count]]
        at += 1 + count
        assert len(got) == len(set(got)) == len(want) and set(got) == want, (case, cases[case])
        assert [g for g, *_ in got] == sorted(g for g, *_ in got)  # the cursor only moves on


# --- the GPU benchmark's cases, drawn and planned here ---------------------------------------------

def _bench(monkeypatch):
    """benchmarks/grouped_mm_call.py as a module (its neighbours on the path, as run)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "grouped_mm_call.py"
    monkeypatch.syspath_prepend(str(path.parent))
    spec = importlib.util.spec_from_file_location("grouped_mm_call", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_benchmark_draws_its_cases_and_plans_every_one(monkeypatch):
    bench = _bench(monkeypatch)
    cases, fp8 = bench.draw_cases(120), bench.draw_fp8(24)
    assert cases == bench.draw_cases(120)  # a fixed seed: the same cases every run
    sizes = [s for c in cases for s in c[2]]
    assert {c[1] for c in cases} >= {1, 128} and 0 in sizes and any(0 < s < 128 for s in sizes)
    kernels = bench.dry_run(cases, fp8)  # every case passes the call's checks
    assert {v.batch for v, _ in kernels} >= {"grouped", "grouped_n", "ab"}
    assert any(v.scale == "row" for v, _ in kernels)
    # short groups run 64-row tiles (decompose.grouped), the rest 128x256
    assert {c.bm for _, c in kernels} == {64, 128}


# --- groups along K (2-D x 2-D, the weight gradient; docs/guide/matmul.md, "Groups along K"):
# the plan ------------------------------------------------------------------------------------

def test_the_weight_gradient_is_one_launch_of_every_groups_tiles():
    # dW = X^T dY over 8 experts of 16k tokens: a = X^T (M contiguous), b = dY (N contiguous)
    x, dy = (16384, 4096), (16384, 14336)
    p = plan_grouped(t((4096, 16384), (1, 4096)), t(dy), offs(8), sms=132)
    assert p.variant == GemmVariant(tails=True, batch="grouped_k", a_major="mn", b_major="mn",
                                    store="tma")
    assert (p.m, p.n, p.k, p.groups, p.out_shape) == (4096, 14336, 16384, 8, (8, 4096, 14336))
    assert (p.ldc, p.c_batch, p.grid) == (14336, 4096 * 14336, 132)
    # the maps are the templates of the whole operands: the pre-pass moves them per group
    assert (p.a.major, p.a.inner, p.a.outer, p.a.stride) == ("mn", 4096, 16384, x[1])
    assert k_field(p.a, "bf16") == (1, 4096 * 2) and k_field(p.b, "bf16") == (1, 14336 * 2)
    # K-major operands: the K step is one element, K the map's inner dimension
    q = plan_grouped(t((300, 1000)), t((1000, 200), (1, 1000)), offs(3))
    assert (q.variant.a_major, q.variant.b_major) == ("k", "k")
    assert k_field(q.a, "bf16") == (0, 2) and q.grid == 3 * 3 * 1  # no sms: a CTA per tile


def test_the_output_is_g_by_m_by_n_with_rows_padded_as_torch_pads_them():
    p = plan_grouped(t((100, 64)), t((64, 70), (72, 1)), offs(5), out_dtype="fp32")
    assert (p.out_shape, p.ldc, p.c_batch, p.variant.out_dtype) == ((5, 100, 70), 72, 7200,
                                                                     "fp32")


def test_groups_along_k_keep_no_table_so_their_count_is_not_capped():
    p = plan_grouped(t((64, 256)), t((256, 64)), offs(MAX_GROUPS + 1))
    assert p.groups == MAX_GROUPS + 1


def test_along_k_an_empty_product_plans_no_read():
    p = plan_grouped(t((0, 64)), t((64, 70), (72, 1)), offs(4))
    assert p.out_shape == (4, 0, 70) and p.grid == 0


def test_the_trip_rule_counts_each_groups_own_k_tiles():
    rule = GroupKTrips(block_m=128, block_n=256, block_k=64)
    assert not rule.uniform
    # 2 x 1 output tiles per group; groups of 130, 0, 8 and 64 K: 3, 0, 1, 1 K tiles each
    assert rule.trip_counts((200, 256, (130, 0, 8, 64))) == (3, 3, 0, 0, 1, 1, 1, 1)
    sample = rule.sample(8)
    assert sample is not None and sample.trips == (8, 4, 0, 1) and sample.full == 8


# --- the schedule: proven, the acquire where the proof wants it ---------------------------------

def _k_compiled(label):
    return _compiled(K_VARIANTS[label])


def test_the_producer_acquires_the_groups_maps_once_per_tile_before_its_copies():
    c = _k_compiled("mn mn")
    assert isinstance(c.plan.trip_rule, GroupKTrips)  # uneven and empty tiles are proven too
    producer = c.plan.programs[0]
    first = [s.kind for s in producer.prologue[0]]
    assert first[0] == StepKind.DESCRIPTOR_ACQUIRE and producer.prologue[0][0].once
    assert StepKind.DESCRIPTOR_ACQUIRE not in [s.kind for s in producer.kernel]
    for consumer in c.plan.programs[1:]:
        assert StepKind.DESCRIPTOR_ACQUIRE not in [s.kind for p in consumer.prologue for s in p]


def _without_acquire(plan):
    def drop(steps):
        return tuple(s for s in steps if s.kind != StepKind.DESCRIPTOR_ACQUIRE)
    programs = [attrs.evolve(p, prologue=tuple(drop(i) for i in p.prologue), kernel=drop(p.kernel))
                for p in plan.programs]
    return attrs.evolve(plan, programs=programs)


def test_a_copy_through_the_groups_maps_without_the_acquire_is_refused():
    c = _k_compiled("k k")
    verdict = prove_plan(_without_acquire(c.plan), c.body, c.edges, c.plan.sync,
                         names=c.tag_names)
    assert not verdict.safe
    found = [v for v in verdict.violations if "stale map" in v.message]
    assert found and all(v.kind == HazardKind.SMEM_RAW for v in found)
    assert "descriptor acquire of producer's" in found[0].message


def test_an_acquire_after_the_copies_is_refused():
    c = _k_compiled("k k")
    producer = c.plan.programs[0]
    first = producer.prologue[0]
    late = (*first[1:], first[0])  # the acquire after the tile's first copies
    moved = attrs.evolve(producer, prologue=(late, *producer.prologue[1:]))
    plan = attrs.evolve(c.plan, programs=(moved, *c.plan.programs[1:]))
    verdict = prove_plan(plan, c.body, c.edges, c.plan.sync, names=c.tag_names)
    assert any("stale map" in v.message for v in verdict.violations)


def test_the_kernel_reads_each_group_through_its_own_maps_and_synchronizes_as_the_plan():
    c = _k_compiled("mn mn")
    src = emit_wgmma(c)
    kernel = src[src.index('extern "C"'):]
    assert ("const int* __restrict__ offs, int groups, const pcwg::TensorMap* __restrict__ maps, "
            "int k, long long c_batch) {") in kernel
    assert kernel.count("pcgk::tile_of(tile, offs, k, M / BM, N / BN, GROUP_M, BK, group, tile_m, "
                        "tile_n, KT);") == 2  # producer and consumers alike
    assert kernel.count("rb += KT) {") == 2 and kernel.count("if (KT == 0) {") == 2
    assert "LoadA::load(stage_a(((rb + t) % STAGES)), maps + 2 * group, " in kernel
    assert "LoadB::load(stage_b(((rb + t) % STAGES)), maps + 2 * group + 1, " in kernel
    assert kernel.count("pcgk::acquire_maps(maps + 2 * group);") == 1
    assert "static_cast<char*>(C) + (size_t)group * c_batch" in kernel
    for text in ("&tmA, full_bar", "blockIdx.z", "group_table"):
        assert text not in kernel, text
    check_skeleton(c, src)  # the read-back: every sync statement is the plan's
    with pytest.raises(SkeletonMismatch):
        check_skeleton(c, src.replace("pcgk::acquire_maps(maps + 2 * group);", ""))


def test_the_prepass_signature_matches_its_kernel():
    text = group_maps_source()
    params = text[text.index("pc_ws_group_maps("):text.index(") {", text.index("pc_ws_group_maps("))]
    names = [p.strip().split()[-1] for p in params[len("pc_ws_group_maps("):].split(",")]
    assert names == [p.name for p in SIGNATURE.params]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("label", sorted(K_VARIANTS))
def test_the_along_k_kernels_build_without_spills(label, tmp_path):
    proc, _ = compile_cubin(emit_wgmma(_k_compiled(label)), tmp_path, "group_k")
    report = proc.stderr if proc.returncode == 0 else pytest.fail(proc.stderr)
    assert "0 bytes spill stores, 0 bytes spill loads" in report and "C7520" not in report


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
def test_the_prepass_builds(tmp_path):
    proc, _ = compile_cubin(group_maps_source(), tmp_path, "group_maps")
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores" in proc.stderr


def test_the_benchmark_draws_its_along_k_cases_and_plans_every_one(monkeypatch):
    bench = _bench(monkeypatch)
    cases = bench.draw_k_cases(24)
    assert cases == bench.draw_k_cases(24)  # a fixed seed
    sizes = [s for c in cases for s in c[1]]
    # empty groups, groups under a K tile, every offset a multiple of 8 elements (torch's rule)
    assert 0 in sizes and any(0 < s < 64 for s in sizes) and all(s % 8 == 0 for s in sizes)
    assert any(all(s == 0 for s in c[1]) for c in cases)
    plans = [bench.k_plan_without_torch(c) for c in cases]  # every case passes the checks
    assert all(p.variant.batch == "grouped_k" and p.out_shape == (c[0], c[2], c[3])
               for p, c in zip(plans, cases))
    counts = bench.k_timing_counts()
    assert sum(counts) == 16384 and len(counts) == 8 and all(c % 8 == 0 for c in counts)
    timed = bench.k_timing_plan()
    assert (timed.variant.a_major, timed.variant.b_major, timed.out_shape) == (
        "mn", "mn", (8, 4096, 14336))
    kernels = bench.dry_run([], [], cases)
    assert {v.batch for v, _ in kernels} >= {"grouped_k"}


# --- the TMA-store epilogue of the grouped kernels (-p store=tma; docs/guide/matmul.md, "Grouped
# GEMM"): along K every tile by TMA through a 3-D map of C; along M / N a consumer's rows of a
# tile inside its group by TMA, those crossing its end directly, chosen per tile ---------------

ONE = Candidate(bm=64, bn=256, consumers=1)
#: label -> variant, candidate: two buffers (64-row tiles; 3 stages), one buffer (128x256 at 4
#: stages, beside the groups' table), along K (no table: two buffers at 4 stages)
STORE_VARIANTS = {
    "bf16 grouped 64x256": (GemmVariant(tails=True, batch="grouped", store="tma"), ONE),
    "bf16 grouped one buffer": (GemmVariant(tails=True, batch="grouped", store="tma"),
                                Candidate()),
    "e4m3 grouped_n row-scaled s3": (GemmVariant(dtype="e4m3", tails=True, scale="row",
                                                 batch="grouped_n", store="tma"),
                                     Candidate(stages=3)),
    "fp16 grouped b mn fp32 out 64x256": (GemmVariant(dtype="fp16", b_major="mn",
                                                      out_dtype="fp32", tails=True,
                                                      batch="grouped", store="tma"), ONE),
    "along k": (GemmVariant(tails=True, batch="grouped_k", store="tma"), Candidate()),
    "along k mn fp32 out": (GemmVariant(tails=True, batch="grouped_k", a_major="mn",
                                        b_major="mn", out_dtype="fp32", store="tma"),
                            Candidate()),
}


def _store_compiled(label: str):
    v, c = STORE_VARIANTS[label]
    params = schedule_params(v) if c == Candidate() else schedule_params(v, c)
    return compile_named("warpspecialized-gemm", target="h100", params=params,
                         target_args={"stages": str(c.stages)})


@pytest.mark.parametrize("label", sorted(STORE_VARIANTS))
def test_each_grouped_store_variant_is_proven_and_emitted_as_its_plan(label):
    c = _store_compiled(label)
    v, cand = STORE_VARIANTS[label]
    assert c.proof.verdict.safe, c.proof.verdict.violations
    st = c.plan.store
    # along M / N a tile may skip its staged store (stored directly): the proof covers it
    assert st is not None and st.optional == (v.batch != "grouped_k")
    assert st.buffers == cand.geometry(v).store_buffers
    assert any(("may skip its" in a) == st.optional for a in c.proof.verdict.model["assumptions"])
    check_skeleton(c, emit_wgmma(c), label=label)


def test_128x256_at_4_stages_stages_through_one_buffer_beside_the_groups_table():
    v = STORE_VARIANTS["bf16 grouped one buffer"][0]
    assert Candidate().geometry(v).store_buffers == 1
    assert Candidate(stages=3).geometry(v).store_buffers == 2
    assert ONE.geometry(v).store_buffers == 2
    # along K there is no table: the non-grouped kernel's two buffers at 4 stages
    assert Candidate().geometry(STORE_VARIANTS["along k"][0]).store_buffers == 2


@pytest.mark.parametrize("label", ["bf16 grouped 64x256", "bf16 grouped one buffer", "along k"])
def test_a_staging_buffer_reused_before_the_stores_read_wait_is_refused(label):
    c = _store_compiled(label)
    cats = ("drop_store_wait", "loosen_store_wait")
    picked = {m.category: m for m in agent_mutations(c.plan, cats) if m.agent == "consumer0"}
    assert set(picked) == set(cats)
    for m in picked.values():
        with pytest.raises(UnsafeScheduleError, match=HazardKind.SMEM_WAR.value):
            mutate_compiled(c, m)


def test_the_optional_stores_proof_sees_a_skipped_tile_between_two_staged_ones():
    """The plan's store as lowered, one sub-tile per tile: safe staged every tile, but a tile
    stored directly between two staged ones puts both in one buffer with one group's wait
    between them: the optional store's proof refuses it, the all-staged one cannot see it."""
    c = _store_compiled("bf16 grouped 64x256")
    one = attrs.evolve(c.plan, store=attrs.evolve(c.plan.store, subtiles=1))

    def prove(plan):
        return prove_plan(plan, c.body, c.edges, c.plan.sync, names=c.tag_names)
    assert prove(attrs.evolve(one, store=attrs.evolve(one.store, optional=False))).safe
    assert HazardKind.SMEM_WAR in {x.kind for x in prove(one).violations}


def test_the_grouped_tma_store_chooses_per_tile_between_tma_and_the_clipped_direct_store():
    c = _store_compiled("bf16 grouped 64x256")
    src = emit_wgmma(c)
    kernel = src[src.index('extern "C"'):]
    guard = "if (row0 + consumer * CONSUMER_ROWS + CONSUMER_ROWS <= m_end || m_end == m) {"
    # the staged store (its steps and the TMA store at the tile's corner) inside the guard, the
    # direct store clipped to the group in its else branch, the drain after the tile loop
    at = kernel.index(guard)
    assert at < kernel.index("// pc:section store") < kernel.index(
        "pcgc::tma_store_2d(&tmC, buf, col0 + s * SCOLS, row0 + consumer * CONSUMER_ROWS + "
        "mb * 64);") < kernel.index("} else {", at) < kernel.index(
        "epi.store<MBLOCKS, ACC, 64>(acc, C, ldc, row0 + consumer * CONSUMER_ROWS, col0);") \
        < kernel.index("// pc:section drain")
    assert "SBUF = 2;" in kernel and "pcgc::bulk_wait_read<1>();" in kernel
    assert ", STORE_PARAMS" not in kernel and "const __grid_constant__" in kernel.split("tmC")[0]
    along_n = emit_wgmma(_store_compiled("e4m3 grouped_n row-scaled s3"))
    assert "if (col0 + BN <= n_end || n_end == n) {" in along_n
    one = emit_wgmma(_store_compiled("bf16 grouped one buffer"))
    assert "SBUF = 1;" in one and "pcgc::bulk_wait_read<0>();" in one


def test_along_k_every_tile_is_stored_through_a_3d_map_at_its_group():
    src = emit_wgmma(_store_compiled("along k"))
    kernel = src[src.index('extern "C"'):]
    assert ("pcgk::tma_store_3d(&tmC, buf, tile_n * BN + s * SCOLS, tile_m * BM + consumer * "
            "CONSUMER_ROWS + mb * 64, group);") in kernel
    assert "m_end" not in kernel and "epi.store<" not in kernel  # no choice: every tile by TMA


def test_the_emitter_refuses_a_per_tile_choice_the_plan_did_not_prove():
    c = _store_compiled("bf16 grouped 64x256")
    staged = attrs.evolve(c, plan=attrs.evolve(c.plan, store=attrs.evolve(c.plan.store,
                                                                             optional=False)))
    with pytest.raises(ProgramError, match=r"StoreSpec\(optional=True\)"):
        emit_wgmma(staged)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("label", ["bf16 grouped one buffer", "e4m3 grouped_n row-scaled s3",
                                   "along k"])
def test_the_grouped_store_kernels_build_without_spills_and_store_by_tma(label, tmp_path):
    proc, cubin = compile_cubin(emit_wgmma(_store_compiled(label)), tmp_path, "gstore")
    report = proc.stderr if proc.returncode == 0 else pytest.fail(proc.stderr)
    assert "0 bytes spill stores, 0 bytes spill loads" in report and "C7520" not in report
    sass = sass_of(cubin) or pytest.skip("no nvdisasm / cuobjdump for the SASS part")
    assert not re.search(r"\b(LDL|STL)\b", sass)
    rank = "3D" if STORE_VARIANTS[label][0].batch == "grouped_k" else "2D"
    assert re.search(rf"\bUTMASTG\.{rank}\b", sass)


# --- the call's store ---------------------------------------------------------------------------

def _cand(a, b):
    from pipeline_core_nvidia_h100 import decompose
    along_m = len(a.shape) == 2 and len(b.shape) == 3
    return decompose.grouped(a.shape[0], b.shape[0] if along_m else 0, a.dtype, not along_m)


def test_the_call_stores_by_tma_with_one_buffer_where_two_do_not_fit_and_can_opt_out():
    short = (t((4096, 1024)), experts(64, 1024, 512), offs(64))  # 64 rows a group: 64x256
    long = (t((16384, 4096)), experts(8, 4096, 1024), offs(8))  # 128x256 at 4 stages
    p = plan_grouped_infos(*short, None, None, 132, None, _cand(*short[:2]))
    assert p.variant.store == "tma" and p.c is not None and p.c.batch == 1
    assert (p.c.inner, p.c.outer, p.c.stride, p.c.box_inner, p.c.box_outer) == (
        512, 4096, 512, 64, 64)
    # one buffer only: the call's default since the H200 measured it (ONE_BUFFER_STORE)
    assert plan_grouped_infos(*long, None, None, 132, None, _cand(*long[:2])).variant.store \
        == "tma"
    two = plan_grouped_infos(*long, None, None, 132, None, _cand(*long[:2]), one_buffer=False)
    assert two.variant.store == "direct"
    off = plan_grouped_infos(*short, None, None, 132, None, _cand(*short[:2]),
                             Tuning(tma_store=False))
    assert off.variant.store == "direct" and off.c is None


def test_along_k_the_call_stores_every_group_through_one_3d_map():
    a, b = t((4096, 16384), (1, 4096)), t((16384, 14336))
    p = plan_grouped_infos(a, b, offs(8), None, None, 132, None, Candidate())
    assert p.variant.store == "tma" and p.c is not None
    # C [G, M, N]: each group's [M, N] its rows padded, one group's output apart
    assert (p.c.inner, p.c.outer, p.c.stride, p.c.batch, p.c.batch_stride) == (
        14336, 4096, 14336, 8, 4096 * 14336)
    assert p.c.batch_stride == p.c_batch


def test_the_benchmark_plans_every_case_with_each_store_and_times_each(monkeypatch):
    bench = _bench(monkeypatch)
    cases, fp8, k_cases = bench.draw_cases(120), bench.draw_fp8(24), bench.draw_k_cases(24)

    def grouped(store):
        monkeypatch.setattr(bench, "STORE", store)
        return {(v.batch, v.store, c.stages, c.geometry(v).store_buffers)
                for v, c in bench.dry_run(cases, fp8, k_cases) if v.grouped}
    tma, s3, direct = grouped("tma"), grouped("tma-s3"), grouped("direct")
    # --store tma: 128x256 along M / N at 4 stages through one buffer; tma-s3: 3 stages, two
    assert ("grouped", "tma", 4, 1) in tma and ("grouped_n", "tma", 4, 1) in tma
    assert ("grouped", "tma", 3, 2) in s3 and not any(b == 1 for *_, b in s3)
    assert ("grouped_k", "tma", 4, 2) in tma & s3
    assert {("grouped", "direct", 4, 2), ("grouped_k", "direct", 4, 2)} <= direct
    timed = {(v.dtype, v.batch, v.store, c.stages) for v, c in bench.store_timing_keys()}
    assert timed >= {("bf16", "grouped", "tma", 4), ("bf16", "grouped", "tma", 3),
                     ("bf16", "grouped", "direct", 4), ("e4m3", "grouped", "tma", 3),
                     ("bf16", "grouped_k", "tma", 4), ("bf16", "grouped_k", "direct", 4)}


def test_the_document_says_the_grouped_store_is_optional_and_validates(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    import json

    from pipeline_core.json_output import load_schema

    out = tmp_path / "gst.json"
    res = run_cli(["compile", "warpspecialized-gemm", "-p", "batch=grouped", "-p", "store=tma",
                   "-p", "BM=64", "-p", "consumers=1", "--format", "json", "-o", str(out)])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema("schedule"))
    assert doc["agents"]["store"]["optional"] is True
    text = run_cli(["compile", "warpspecialized-gemm", "-p", "batch=grouped", "-p", "store=tma",
                    "-p", "BM=64", "-p", "consumers=1"])
    assert "an output tile may skip its 4 staged sub-tiles" in text.stdout
