"""matmul() without a GPU: argument checks, tile planning, the general kernel's source and SASS,
the disk cache's keys.  The GPU half is benchmarks/matmul_call.py (docs/guide/matmul.md)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core_nvidia_h100 import kernel_cache  # noqa: E402
from pipeline_core_nvidia_h100.cuda import gemm_wgmma_header_source  # noqa: E402
from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma  # noqa: E402
from pipeline_core_nvidia_h100.gemm_call import (SPLIT_MIN_K_TILES,  # noqa: E402
                                                 MatmulArgumentError, MatmulTypeError,
                                                 TensorInfo, TileShape, Tuning, plan_call,
                                                 split_count)
from pipeline_core_nvidia_h100.matmul_call import CALL_STAGES, schedule_params  # noqa: E402
from pipeline_core_nvidia_h100.toolchain import sass_command  # noqa: E402
from pipeline_core_nvidia_h100.warpspecialized import GemmVariant  # noqa: E402

NVCC = shutil.which("nvcc")


def t(shape, strides=None, dtype="bf16", ptr=4096, device="cuda:0"):
    if strides is None:  # row-major, contiguous
        strides = (shape[1], 1) if len(shape) == 2 else (1,)
    return TensorInfo(shape=tuple(shape), strides=tuple(strides), dtype=dtype, ptr=ptr,
                      device=device)


A, B = t((100, 64)), t((64, 72))

# --- argument checks: each refusal is one line naming the argument (layouts are staged, never
# refused: test_gemm_staging.py) ------------------------------------------------------------------

REFUSALS = {
    "fp32 a": (dict(a=t((100, 64), dtype="fp32")), MatmulTypeError, "a", "torch.bfloat16"),
    "fp8 a": (dict(a=t((100, 64), dtype="torch.float8_e4m3fn")), MatmulTypeError, "a",
              "scaled_mm"),
    "mixed dtypes": (dict(b=t((64, 72), dtype="fp16")), MatmulTypeError, "b",
                     "b.to(torch.bfloat16)"),
    "4-D a": (dict(a=t((2, 2, 100, 64), (12800, 6400, 64, 1))), MatmulArgumentError, "a",
              "flatten the leading batch dimensions"),
    "K mismatch": (dict(b=t((65, 72))), MatmulArgumentError, "b", "[K=64, N]"),
    "other device": (dict(b=t((64, 72), device="cuda:1")), MatmulArgumentError, "b",
                     "b.to('cuda:0')"),
    "bias length": (dict(bias=t((71,))), MatmulArgumentError, "bias", "[72]"),
    "bias int": (dict(bias=t((72,), dtype="torch.int32")), MatmulTypeError, "bias",
                 "torch.float32"),
    "bias 2-D": (dict(bias=t((1, 72))), MatmulArgumentError, "bias", "[N]"),
    "activation": (dict(activation="tanh"), MatmulArgumentError, "activation", "'gelu'"),
    "activation none string": (dict(activation="none"), MatmulArgumentError, "activation",
                               "or None"),
    "out_dtype": (dict(out_dtype="torch.float64"), MatmulTypeError, "out_dtype",
                  "torch.float32"),
    "out shape": (dict(out=t((100, 71))), MatmulArgumentError, "out", "[100, 72]"),
    "out stride 0": (dict(out=t((100, 72), (0, 1))), MatmulArgumentError, "out",
                     "torch.empty(100, 72)"),
    "out vs out_dtype": (dict(out=t((100, 72), dtype="fp32"), out_dtype="bf16"),
                         MatmulTypeError, "out", "drop out_dtype"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_bad_argument_is_one_line_naming_it(case):
    change, kind, name, fix = REFUSALS[case]
    args = {"a": A, "b": B, **change}
    with pytest.raises(kind) as info:
        plan_call(args.pop("a"), args.pop("b"), **args)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{name}: "), text
    assert fix in text, text
    assert isinstance(info.value, ValueError if kind is MatmulArgumentError else TypeError)


def test_the_same_arguments_planned_correctly_are_accepted():
    """The refusals above are not a blanket: padded, strided and degenerate operands plan."""
    plan = plan_call(t((100, 7), (8, 1)), t((7, 72), (1, 8)), bias=t((72,), dtype="fp32"),
                     activation="gelu", out=t((100, 72), (80, 1), dtype="fp32"))
    assert (plan.a.major, plan.b.major, plan.ldc) == ("k", "k", 80)
    # M 100 is one 128-row tile: A's box is clipped to M rounded up to 8 (gemm_call.a_box_rows)
    assert plan.variant == GemmVariant(a_major="k", b_major="k", out_dtype="fp32", bias="fp32",
                                       activation="gelu", tails=True, store="tma", a_rows=104)
    assert plan.a.box_outer == 104


# --- tile planning: grid, tails, which tensor map and major mode per layout ----------------------

@pytest.mark.parametrize("m, n, k, grid, pads", [
    (1, 1, 1, 1, (128, 256, 64)),
    (128, 256, 64, 1, (128, 256, 64)),
    (129, 257, 65, 4, (256, 512, 128)),
    (1000, 1000, 100, 8 * 4, (1024, 1024, 128)),
    (4000, 4096, 4000, 32 * 16, (4096, 4096, 4032)),
])
def test_tiles_round_up_and_the_true_sizes_clip(m, n, k, grid, pads):
    plan = plan_call(t((m, k), (k + (-k) % 8, 1)), t((k, n), (n + (-n) % 8, 1)))
    assert (plan.m, plan.n, plan.k) == (m, n, k)
    assert (plan.m_pad, plan.n_pad, plan.k_pad) == pads
    assert plan.grid == grid
    # the tensor maps carry the true extents (TMA zero-fills past them), never the padded ones
    assert (plan.a.inner, plan.a.outer, plan.b.inner, plan.b.outer) == (k, m, n, k)


def test_fewer_k_tiles_than_a_prologue_are_padded_to_it():
    """An agent whose prologue runs L iterations needs L K tiles: zero-filled ones are added."""
    plan = plan_call(t((8, 8)), t((8, 8)), tile=TileShape(min_k_tiles=3))
    assert plan.k_pad == 3 * 64


@pytest.mark.parametrize("a_strides, b_strides, majors, boxes", [
    # M 100 in one 128-row tile: a K-major A's box is clipped to 104 rows (gemm_call.a_box_rows)
    ((72, 1), (72, 1), ("k", "mn"), ((64, 104), (64, 64))),   # torch's default: both row-major
    ((1, 104), (1, 64), ("mn", "k"), ((64, 64), (64, 256))),  # both column-major
    ((72, 1), (1, 64), ("k", "k"), ((64, 104), (64, 256))),   # the benchmark kernel's layout
    ((1, 104), (72, 1), ("mn", "mn"), ((64, 64), (64, 64))),
])
def test_each_layout_gets_its_tensor_map_and_major_mode(a_strides, b_strides, majors, boxes):
    plan = plan_call(t((100, 64), a_strides), t((64, 72), b_strides))
    assert (plan.a.major, plan.b.major) == majors
    assert ((plan.a.box_inner, plan.a.box_outer), (plan.b.box_inner, plan.b.box_outer)) == boxes
    assert (plan.variant.a_major, plan.variant.b_major) == majors
    # the map's stride is the operand's stride along its non-contiguous dimension
    assert plan.a.stride == max(a_strides) and plan.b.stride == max(b_strides)


def test_a_size_one_dimension_needs_no_aligned_stride():
    """A [1, K] row or a [M, 1] column: the stride TMA never steps is written padded."""
    plan = plan_call(t((1, 7), (7, 1)), t((7, 1), (1, 1)))
    assert (plan.a.major, plan.a.stride) == ("k", 8)
    assert (plan.b.major, plan.b.stride) == ("k", 8)
    column = plan_call(t((100, 1), (1, 1)), t((1, 72), (72, 1)))
    assert (column.a.major, column.a.stride) == ("mn", 104)


def test_empty_operands_plan_without_a_tensor_map_check():
    """M, N or K of 0 launches no kernel (matmul_call returns the empty product or the epilogue
    of zeros), so an empty operand's strides are never judged."""
    plan = plan_call(t((5, 0), (1, 1)), t((0, 300), (300, 1)), bias=t((300,)))
    assert (plan.m, plan.n, plan.k, plan.a.inner) == (5, 300, 0, 0)
    assert plan_call(t((0, 64), (64, 1)), t((64, 300))).m == 0


# --- the persistent grid and split-K (docs/guide/matmul.md, "Speed") ------------------------------

H100_SMS = 132


@pytest.mark.parametrize("m, n, k, grid, splits, k_pad", [
    (8192, 8192, 8192, H100_SMS, 1, 8192),      # 2048 tiles: one CTA per SM, each loops
    (1000, 4096, 4096, 128, 1, 4096),           # 128 tiles fill the SMs: no split
    (128, 4096, 4096, 16, 8, 512),              # 16 tiles: 8 splits of 8 K tiles
    (1, 1, 8192, 1, 16, 512),                   # one tile: 16 splits (128 K tiles / 8)
    (128, 256, 1000, 1, 2, 512),                # 16 K tiles: 2 splits, the last one past K
    (128, 256, 960, 1, 1, 960),                 # 15 K tiles: too few to split
])
def test_the_grid_is_persistent_and_few_tiles_split_k(m, n, k, grid, splits, k_pad):
    plan = plan_call(t((m, k)), t((k, n), (1, k)), sms=H100_SMS)
    assert (plan.grid, plan.splits, plan.k_pad) == (grid, splits, k_pad)
    assert plan.variant.split_k == (splits > 1)
    # the splits cover K: every K tile belongs to one split's range, no split is empty
    k_tiles = -(-k // 64)
    assert splits * k_pad // 64 >= k_tiles > (splits - 1) * k_pad // 64


def test_each_technique_turns_off_alone():
    a, b = t((128, 4096)), t((4096, 4096), (1, 4096))
    assert plan_call(a, b, sms=H100_SMS, tuning=Tuning(split_k=False)).splits == 1
    big = plan_call(t((8192, 64)), t((64, 8192), (1, 64)), sms=H100_SMS,
                    tuning=Tuning(persistent=False))
    assert big.grid == 64 * 32  # one CTA per output tile
    # no device known (a fake tensor's plan): one CTA per tile, never a split
    plan = plan_call(a, b)
    assert (plan.grid, plan.splits, plan.variant.split_k) == (16, 1, False)


def test_split_count_keeps_the_grid_within_the_sms():
    for tiles in range(1, 140):
        for k_tiles in (1, 7, 8, 15, 16, 33, 64, 100, 128, 1000):
            s = split_count(tiles, k_tiles, H100_SMS)
            if s == 1:
                continue
            per = -(-k_tiles // s)
            assert 2 * tiles <= H100_SMS and s * tiles <= H100_SMS, (tiles, k_tiles, s)
            assert per >= SPLIT_MIN_K_TILES and (s - 1) * per < k_tiles, (tiles, k_tiles, s)
    assert split_count(0, 64, H100_SMS) == 1  # an empty product (M or N of 0)
    assert split_count(16, 64, 0) == 1


@attrs.frozen
class _FakeTensor:
    """What the call's launch cache reads of a tensor (shape, strides, dtype, device, address)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    ptr: int
    dtype: str = "bf16"
    device: str = "cuda:0"

    def stride(self):
        return self.strides

    def data_ptr(self):
        return self.ptr


def test_the_launch_cache_key_holds_everything_the_plan_checks(monkeypatch):
    """A repeated call skips planning (docs/guide/matmul.md, "Speed"), so a call the plan would
    refuse or plan otherwise must never find another call's recipe."""
    from pipeline_core_nvidia_h100 import matmul_call

    a, b = _FakeTensor((100, 64), (64, 1), 4096), _FakeTensor((64, 72), (72, 1), 8192)

    def key(a=a, b=b, bias=None, activation=None, out_dtype=None, out=None, stream=7):
        return matmul_call._matmul_key(a, b, bias, activation, out_dtype, out, stream)

    # another address with the same alignment: the same plan
    assert key(a=attrs.evolve(a, ptr=4096 + 1024)) == key()
    # an address the plan stages (not 16-byte aligned), other strides, dtype, device, epilogue,
    # output, stream: each its own plan
    others = [key(a=attrs.evolve(a, ptr=4098)), key(b=attrs.evolve(b, strides=(1, 64))),
              key(a=attrs.evolve(a, dtype="fp16")), key(b=attrs.evolve(b, device="cuda:1")),
              key(activation="relu"), key(out_dtype="fp32"), key(stream=8),
              key(bias=_FakeTensor((72,), (1,), 0)), key(out=_FakeTensor((100, 72), (72, 1), 0))]
    assert len({key(), *others}) == 1 + len(others)
    before = key()
    monkeypatch.setattr(matmul_call, "TUNING", Tuning(split_k=False))
    assert key() != before  # the ablation's setting plans anew


# --- the schedule records the variant; the emitter writes it ---------------------------------------

def _source(v: GemmVariant) -> str:
    c = compile_named("warpspecialized-gemm", target="h100", params=schedule_params(v),
                      target_args={"stages": str(CALL_STAGES)})
    assert c.launch.geometry.variant == v
    assert {k: c.params[k] for k in attrs.asdict(v)} == attrs.asdict(v)
    return emit_wgmma(c)


VARIANTS = {
    "bf16 row-row": GemmVariant(b_major="mn", tails=True),
    "fp16 col-col gelu fp32": GemmVariant(dtype="fp16", a_major="mn", out_dtype="fp32",
                                          bias="fp16", activation="gelu", tails=True),
    "bf16 mn-mn silu fp16": GemmVariant(a_major="mn", b_major="mn", out_dtype="fp16",
                                        bias="fp32", activation="silu"),
    "bf16 row-row split-K": GemmVariant(b_major="mn", tails=True, split_k=True),
    "fp16 col-col relu fp32 split-K": GemmVariant(dtype="fp16", a_major="mn", out_dtype="fp32",
                                                  bias="fp16", activation="relu", tails=True,
                                                  split_k=True),
}


def test_the_default_variant_keeps_the_benchmark_kernel():
    src = _source(GemmVariant())
    assert "unsigned short* __restrict__ C, int M, int N, int K)" in src
    assert "pcgc::" not in src and "gemm_call_h100" not in src
    assert "p, 1, 1, 0, 0;" in src and ".f32.bf16.bf16" in src


def test_the_general_kernel_carries_each_option():
    src = _source(VARIANTS["fp16 col-col gelu fp32"])
    assert ".f32.f16.f16" in src and "p, 1, 1, 1, 0;" in src  # A transposed (MN-major)
    # the epilogue: the variant's traits as pcgc::Epilogue's arguments (gemm_wgmma_h100.cuh)
    assert ("using Epi = pcgc::Epilogue<pcgc::OutF32, pcgc::BiasF16, pcgc::ActGelu, "
            "pcgc::ScaleNone>;") in src
    # the loads: each operand's pcgc::Operand (A in 64-row boxes, MN-major; B K-major)
    assert "using LoadA = pcgc::Operand<A_MN, BM, BK, CHUNK_BYTES, false, false, 1>;" in src
    assert "using LoadB = pcgc::Operand<B_MN, BN, BK, CHUNK_BYTES, false, false, 1>;" in src
    assert ("LoadB::load(stage_b(((rb + t) % STAGES)), &tmB, full_bar(((rb + t) % STAGES)), t, "
            "KT, tile_n * BN);") in src
    assert "int M, int N, int K, int m, int n,\n       long long ldc)" in src
    assert "const Epi epi(bias, nullptr, nullptr, m, n, wtid, lane);" in src
    assert ("epi.store<MBLOCKS, ACC, 64>(acc, C, ldc, tile_m * BM + consumer * CONSUMER_ROWS, "
            "tile_n * BN);") in src
    assert "constexpr bool A_MN = true, B_MN = false;" in src
    row_row = _source(VARIANTS["bf16 row-row"])
    assert "p, 1, 1, 0, 1;" in row_row and "pcgc::ActNone, pcgc::ScaleNone>;" in row_row
    assert "constexpr bool A_MN = false, B_MN = true;" in row_row
    assert "pcgc::operand_desc<B_MN, CHUNK_BYTES>(stage_b(s), 0, kk)" in row_row


def test_the_split_k_kernel_reads_its_split_and_reduces_once():
    src = _source(VARIANTS["bf16 row-row split-K"])
    assert "long long ldc,\n       float* __restrict__ ws, unsigned* __restrict__ counters)" in src
    # each CTA's K tiles start at its split's first one
    assert "using LoadA = pcgc::Operand<A_MN, BM, BK, CHUNK_BYTES, true, false, 1>;" in src
    assert "using LoadB = pcgc::Operand<B_MN, BN, BK, CHUNK_BYTES, true, false, 1>;" in src
    assert "if constexpr (SPLIT) k = (blockIdx.y * kt + t) * BK;" in gemm_wgmma_header_source()
    # partial sums out, one arrival per CTA, the last CTA reduces, resets, runs the epilogue
    finish = src[src.index("// split-K: partial sums out"):src.index("const Epi epi(")]
    assert "pcgc::slice_store<MBLOCKS, ACC, 256>(acc, part + blockIdx.y * slice);" in finish
    # around the arrive, and before the reset (every consumer's reads done; docs/guide/agents.md,
    # "Cross-CTA reductions")
    assert finish.count(r'asm volatile("bar.sync 15, 256;\n" ::: "memory");') == 3
    assert "split_last = atomicAdd(counters + tile, 1u) == gridDim.y - 1;" in finish
    assert "if (!split_last) continue;" in finish and "counters[tile] = 0u;" in finish
    assert (finish.index("continue;") < finish.index("pcgc::slice_read<MBLOCKS, ACC, 256, "
                                                     "SPLIT_CHUNK>(acc, part, slice, gridDim.y);")
            < finish.index("counters[tile] = 0u"))
    # the slices are added in split order from slice 0, whichever CTA is last (the header's)
    assert "acc[mb][i] = y == 0 ? v : acc[mb][i] + v;" in gemm_wgmma_header_source()
    # unsplit kernels carry none of it
    for label in ("bf16 row-row", "fp16 col-col gelu fp32"):
        plain = _source(VARIANTS[label])
        plain = plain[plain.index('extern "C"'):]  # the kernel, past the headers
        assert "blockIdx.y" not in plain and "counters" not in plain and "slice_" not in plain


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("label", sorted(VARIANTS))
def test_the_general_kernel_builds_without_spills(label, tmp_path):
    v = VARIANTS[label]
    out = tmp_path / "call.cu"
    out.write_text(_source(v))
    proc = subprocess.run([NVCC, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17",
                           "-Xptxas=-v", "-o", str(tmp_path / "call.cubin"), str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    assert "C7508" not in proc.stderr
    tool = sass_command()
    if tool is None:
        pytest.skip("no nvdisasm / cuobjdump for the SASS part")
    sass = subprocess.run([*tool, str(tmp_path / "call.cubin")], capture_output=True, text=True,
                          check=True).stdout
    # nvdisasm writes fp16 operands as the default (no suffix), bf16 as .BF16
    kinds = set(re.findall(r"\bHGMMA\.64x256x16\.F32(\.BF16)?\b", sass))
    assert kinds == ({".BF16"} if v.dtype == "bf16" else {""}), kinds
    assert not re.search(r"\b(LDL|STL)\b", sass)
    # one TMA copy per box: 1 per K-major operand, BM/64 or BN/64 per MN-major one
    boxes = (2 if v.a_major == "mn" else 1) + (4 if v.b_major == "mn" else 1)
    assert len(re.findall(r"\bUTMALDG\.2D\b", sass)) == boxes
    # split-K: the tile counter's atomic add, only there
    assert bool(re.search(r"\bATOMG\b|\bATOM\.", sass)) == v.split_k


# --- the disk cache --------------------------------------------------------------------------------

def test_the_cache_key_changes_with_every_input():
    base = ("src", "pc_ws_gemm", ("-std=c++17",), "sm_90a", "cuda_13.0")
    keys = {kernel_cache.kernel_key(*base)}
    for i, other in enumerate(("src2", "other", ("-O2",), "sm_100a", "cuda_13.1")):
        changed = list(base)
        changed[i] = other
        keys.add(kernel_cache.kernel_key(*changed))
    assert len(keys) == 6
    assert kernel_cache.kernel_key(*base) == kernel_cache.kernel_key(*base)


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(kernel_cache.ENV, str(tmp_path / "here"))
    assert kernel_cache.cache_dir() == tmp_path / "here"
    monkeypatch.delenv(kernel_cache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernel_cache.cache_dir() == tmp_path / "xdg" / "pipeline-core"


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
def test_a_second_build_of_the_same_kernel_comes_from_disk(monkeypatch, tmp_path):
    monkeypatch.setenv(kernel_cache.ENV, str(tmp_path))
    src = 'extern "C" __global__ void k(int* p) { p[threadIdx.x] = 1; }\n'
    said: list[str] = []
    first = kernel_cache.cubin_path(src, "k", ("-std=c++17",), "sm_90a", said.append)
    assert first is not None and first.is_file() and first.parent == tmp_path
    assert len(said) == 1 and str(first) in said[0]  # a cold build says so, once

    def no_build(cmd, *args, **kwargs):
        raise AssertionError(f"rebuilt: {cmd}")

    monkeypatch.setattr(kernel_cache.subprocess, "run", no_build)
    assert kernel_cache.cubin_path(src, "k", ("-std=c++17",), "sm_90a", said.append) == first
    assert len(said) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [first.name, kernel_cache.digest_path(first).name])


class FakeNvcc:
    """``nvcc -cubin ... -o OUT SRC`` standing in for the toolkit: writes ``cubin`` to OUT and
    counts its builds (the cache layer runs with no toolkit and no GPU)."""

    def __init__(self, monkeypatch, cubin: bytes = b"\x7fELF cubin bytes") -> None:
        self.cubin, self.builds = cubin, 0
        monkeypatch.setattr(kernel_cache, "nvcc", lambda: "/fake/nvcc")
        monkeypatch.setattr(kernel_cache, "toolkit_version", lambda: "cuda_fake")
        monkeypatch.setattr(kernel_cache.subprocess, "run", self)

    def __call__(self, cmd, *args, **kwargs):
        self.builds += 1
        out = cmd[cmd.index("-o") + 1]
        with open(out, "wb") as f:
            f.write(self.cubin)
        return subprocess.CompletedProcess(cmd, 0, "", "")


def _cubin(said=None):
    return kernel_cache.cubin_path("src", "k", ("-std=c++17",), "sm_90a",
                                   None if said is None else said.append)


@pytest.mark.parametrize("damage", ["flipped", "truncated", "digest lost", "digest junk"])
def test_a_corrupted_cubin_on_disk_is_built_again(monkeypatch, tmp_path, damage):
    """Issue 33: a cubin damaged on disk was loaded as it was, by every later process."""
    monkeypatch.setenv(kernel_cache.ENV, str(tmp_path))
    nvcc = FakeNvcc(monkeypatch)
    path = _cubin()
    assert nvcc.builds == 1 and path.read_bytes() == nvcc.cubin and kernel_cache.sound(path)
    assert _cubin() == path and nvcc.builds == 1  # sound: loaded from disk
    digest = kernel_cache.digest_path(path)
    if damage == "flipped":
        path.write_bytes(b"\x00" + nvcc.cubin[1:])
    elif damage == "truncated":
        path.write_bytes(nvcc.cubin[:4])
    elif damage == "digest lost":  # as a cubin cached before the digests
        digest.unlink()
    else:
        digest.write_bytes(b"\xff\xfe")
    said: list[str] = []
    assert _cubin(said) == path and nvcc.builds == 2
    assert path.read_bytes() == nvcc.cubin and kernel_cache.sound(path)
    assert said[0] == f"cached kernel {path} does not match its sha256; building it again"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, digest.name])


@pytest.mark.parametrize("under", [False, True])
def test_a_cache_folder_that_is_a_file_is_one_error_naming_the_variable(monkeypatch, tmp_path,
                                                                        under):
    """Issue 33: PIPELINE_CORE_CACHE_DIR naming a file raised FileExistsError into matmul."""
    afile = tmp_path / "afile"
    afile.write_text("")
    folder = afile / "sub" if under else afile
    monkeypatch.setenv(kernel_cache.ENV, str(folder))
    nvcc = FakeNvcc(monkeypatch)
    with pytest.raises(kernel_cache.CacheDirError) as err:
        _cubin()
    assert str(err.value) == (f"PIPELINE_CORE_CACHE_DIR={folder} names a file, not a folder: set "
                              "PIPELINE_CORE_CACHE_DIR to a folder you can write, e.g. export "
                              "PIPELINE_CORE_CACHE_DIR=$HOME/.cache/pipeline-core")
    assert nvcc.builds == 0


def test_the_tuning_cache_in_a_file_folder_is_the_same_error(monkeypatch, tmp_path):
    from pipeline_core_nvidia_h100 import autotune

    (tmp_path / "afile").write_text("")
    monkeypatch.setenv(kernel_cache.ENV, str(tmp_path / "afile"))
    key = autotune.tune_key("d", GemmVariant(), 1, 1, 1, "t")
    with pytest.raises(kernel_cache.CacheDirError, match="^PIPELINE_CORE_CACHE_DIR=.* names a file"):
        autotune.TUNER.store(autotune.TUNER.cache_path(), key, autotune.DEFAULT)


def test_importing_the_plugin_and_naming_the_call_load_no_gpu_package():
    code = ("import sys, pipeline_core_nvidia_h100 as p; f = p.matmul; e = p.MatmulArgumentError;"
            "print(sorted(m for m in ('torch', 'cupy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
