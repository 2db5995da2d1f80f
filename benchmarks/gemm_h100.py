#!/usr/bin/env python3
"""GEMM on the H100: ours (hand-assembled multistage), cuBLAS and Triton, in one process (issue 18).

C[M,N] = A[M,K] . B[N,K]^T, bf16 in, fp32 accumulate, bf16 out (both operands K-contiguous).

* ``cublas``: ``torch.matmul(A, B.T)``.
* ``triton``: a plain Triton matmul written here, autotuned over block shapes and its own
  software-pipelining depth (``num_stages``).
* ``compiled-multistage`` / ``compiled-pingpong``: kernels the ``cuda`` / ``cuda-pingpong``
  emitters write from compiled schedules (``multistage-gemm`` on h100, ``pingpong`` on
  h100-pingpong: 2 staggered warp groups, non-aligned barrier.sync).
* ``hand-multistage``: a CUDA kernel assembled by hand from the h100 plugin's building blocks
  (``pipeline_core_nvidia_h100/cuda/pipeline_h100.cuh``) with the structure of docs NVIDIA plan
  section 2.3: CTA tile, S-stage cp.async ring, a prologue that fills S-1 stages, and per k-tile
  ``wait_group S-2`` + barrier, refill of the stage freed, ldmatrix + mma.sync over kk.  It is NOT
  a compiled schedule: the ``cuda`` emitter will produce this structure from compiled entries later.

Each shape is checked before it is timed: fresh random inputs, the output poisoned with NaN,
``||out - ref|| / ||ref||`` against an fp32 reference must be <= 1e-2 and <= 2x cuBLAS's own.
Timing: CUDA events around each launch, warm-up first, the median of >= 20, three rotating input
sets.  One JSON line per (implementation, config, shape) goes to stdout and to ``--jsonl``.

Modes (no GPU needed for the first):
  python3 benchmarks/gemm_h100.py --sass [--nvdisasm PATH]   # nvcc each config, count SASS, spills
  python3 benchmarks/gemm_h100.py --compile-only             # emit + nvcc every kernel the run builds
  python3 benchmarks/gemm_h100.py [--jsonl FILE]             # on the H100: check, time, report
  python3 benchmarks/gemm_h100.py --racecheck-size 256       # ours only, no torch (for compute-sanitizer)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "plugins" / "nvidia_h100"
if str(PLUGIN) not in sys.path:  # run from a checkout without installing the plugin
    sys.path.insert(0, str(PLUGIN))

from pipeline_core_nvidia_h100.cuda import header_source  # noqa: E402

DEFAULT_JSONL = ROOT / "benchmarks" / "results" / "gemm_h100.jsonl"
SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 8192, 2048))
TOL_ABS = 1e-2
TOL_VS_CUBLAS = 2.0

KERNEL_NAME = "gemm_tn_multistage"

# The kernel body: every memory and sync operation goes through the header's helpers.
KERNEL_TEMPLATE = r"""
// hand-multistage: C[M,N] = A[M,K] * B[N,K]^T, bf16 in (raw u16), fp32 accumulate, bf16 out.
// Tile multiples only: M % BM == N % BN == K % BK == 0 (the host checks).
template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, int GROUP_M, int SPREAD,
          int PIPE_FRAGS>
__global__ void __launch_bounds__(WARPS_M * WARPS_N * 32, (WARPS_M * WARPS_N <= 4) ? 2 : 1)
gemm_tn_multistage(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B,
                   unsigned short* __restrict__ C, int M, int N, int K) {
    using namespace pch100;
    constexpr int THREADS = WARPS_M * WARPS_N * 32;
    constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;      // warp tile
    constexpr int MI = WTM / 16, NI = WTN / 8;                  // mma tiles per warp
    constexpr int KK = BK / 16;                                 // mma k-steps per k-tile
    constexpr int RC = BK * 2 / 16;                             // 16-byte chunks per tile row
    constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
    constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    constexpr int ROWS_PER_PASS = THREADS / RC;                 // rows one pass of all threads copies
    constexpr int A_PASSES = BM / ROWS_PER_PASS, B_PASSES = BN / ROWS_PER_PASS;
    static_assert(STAGES >= 2, "a ring needs 2 stages");
    static_assert(RC == 4 || RC == 8, "BK must be 32 or 64");
    static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tile: multiples of 16");
    static_assert(THREADS % RC == 0 && ROWS_PER_PASS % 8 == 0, "a pass covers whole swizzle periods");
    static_assert(BM % ROWS_PER_PASS == 0 && BN % ROWS_PER_PASS == 0, "tile rows: whole passes");

    extern __shared__ __align__(128) unsigned char smem[];
    const u32 smem_base = smem_addr(smem);

    // Grouped raster: GROUP_M tile rows share their B tiles in L2.
    int tile_m, tile_n;
    grouped_tile(blockIdx.x, M / BM, N / BN, GROUP_M, tile_m, tile_n);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;

    // LOAD: this thread copies chunk ld_chunk of rows ld_row + p * ROWS_PER_PASS.  A pass moves by
    // whole swizzle periods, so one swizzled offset serves every pass.
    const int ld_row = tid / RC, ld_chunk = tid % RC;
    const u32 ld_off = swizzled_offset<RC>(ld_row, ld_chunk);
    const unsigned short* a_g = A + (size_t)(tile_m * BM + ld_row) * K + ld_chunk * 8;
    const unsigned short* b_g = B + (size_t)(tile_n * BN + ld_row) * K + ld_chunk * 8;

    // FRAG: ldmatrix.x4 row addresses.  A: lanes 0-15 rows 0-15 of k-half 0, lanes 16-31 k-half 1.
    // B (n-major rows): lanes 0-7 n 0-7 k-half 0, 8-15 n 0-7 k-half 1, 16-23 n 8-15 k-half 0, ...
    const int a_row = warp_m * WTM + (lane & 15);
    const int a_half = lane >> 4;
    const int b_row = warp_n * WTN + (lane & 7) + ((lane >> 4) << 3);
    const int b_half = (lane >> 3) & 1;
    // Rows 16 apart share a swizzle, so one per lane.
    const int a_swz = swizzle_chunk<RC>(a_row, 0);
    const int b_swz = swizzle_chunk<RC>(b_row, 0);
    const u32 a_rowoff = a_row * RC * 16, b_rowoff = b_row * RC * 16;

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

    const int KT = K / BK;

    // LOAD pass p (A passes first, then B) of k-tile `kt` into ring stage `stage`: one 16-byte
    // cp.async per thread.  p is a compile-time constant wherever this is used.
    constexpr int PASSES = A_PASSES + B_PASSES;
#define PCH_LOAD_PASS(stage, kt, p)                                                           \
    do {                                                                                      \
        const u32 s_ = smem_base + (stage) * STAGE_BYTES + ld_off;                            \
        if ((p) < A_PASSES)                                                                   \
            cp_async_16(s_ + (p) * ROWS_PER_PASS * RC * 16,                                   \
                        a_g + (size_t)(kt) * BK + (size_t)(p) * ROWS_PER_PASS * K);            \
        else                                                                                  \
            cp_async_16(s_ + A_BYTES + ((p) - A_PASSES) * ROWS_PER_PASS * RC * 16,            \
                        b_g + (size_t)(kt) * BK + (size_t)((p) - A_PASSES) * ROWS_PER_PASS * K); \
    } while (0)
#define PCH_LOAD_STAGE(stage, kt)                                                             \
    do {                                                                                      \
        _Pragma("unroll") for (int p_ = 0; p_ < PASSES; ++p_) PCH_LOAD_PASS(stage, kt, p_);   \
    } while (0)

    // Prologue: fill S-1 stages, one commit group each (a group even when K is short).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) PCH_LOAD_STAGE(s, s);
        cp_async_commit();
    }

    // FRAG + MMA of one kk step from fragment buffers.
#define PCH_FRAGS(af_, bf_, sa_, kk_)                                                          \
    do {                                                                                      \
        const u32 a_col_ = (((kk_) * 2 + a_half) ^ a_swz) * 16;                               \
        const u32 b_col_ = (((kk_) * 2 + b_half) ^ b_swz) * 16;                               \
        _Pragma("unroll") for (int i = 0; i < MI; ++i)                                        \
            ldmatrix_x4(af_[i], (sa_) + a_rowoff + i * 16 * RC * 16 + a_col_);                \
        _Pragma("unroll") for (int j = 0; j < NI / 2; ++j)                                    \
            ldmatrix_x4(bf_[j], (sa_) + A_BYTES + b_rowoff + j * 16 * RC * 16 + b_col_);      \
    } while (0)
#define PCH_MMAS(af_, bf_)                                                                    \
    do {                                                                                      \
        _Pragma("unroll") for (int i = 0; i < MI; ++i)                                        \
            _Pragma("unroll") for (int j = 0; j < NI; ++j)                                    \
                mma_bf16_16816(acc[i][j], af_[i], bf_[j / 2][(j & 1) * 2], bf_[j / 2][(j & 1) * 2 + 1]); \
    } while (0)

    if (!PIPE_FRAGS) {
    for (int kt = 0; kt < KT; ++kt) {
        // Tile kt's group is the oldest of S-1 pending: wait until S-2 remain, then publish it.
        cp_async_wait_group<STAGES - 2>();
        bar_sync_aligned<0>();
        // Refill the stage freed: it held tile kt-1, whose ldmatrix reads all precede the barrier.
        // SPREAD = 0 issues the whole refill here; SPREAD = 1 spreads its passes over the kk steps
        // (after each step's ldmatrix), so the copies issue between mma.sync instead of before them.
        const int nk = kt + STAGES - 1;
        const int refill_stage = nk % STAGES;
        if (!SPREAD) {
            if (nk < KT) PCH_LOAD_STAGE(refill_stage, nk);
        }
        const u32 sa = smem_base + (kt % STAGES) * STAGE_BYTES;
#pragma unroll
        for (int kk = 0; kk < KK; ++kk) {
            u32 af[MI][4];
            u32 bf[NI / 2][4];
            PCH_FRAGS(af, bf, sa, kk);
            if (SPREAD && nk < KT) {
#pragma unroll
                for (int p = kk * PASSES / KK; p < (kk + 1) * PASSES / KK; ++p)
                    PCH_LOAD_PASS(refill_stage, nk, p);
            }
            PCH_MMAS(af, bf);
        }
        cp_async_commit();  // one group per k-tile, empty past the last tile
    }
    } else {
    // PIPE_FRAGS: fragments are double-buffered in registers and run one kk step ahead, across
    // the k-tile boundary too: the wait + barrier for tile kt+1 sit before the last kk step of
    // tile kt, so kk 0 of tile kt+1 loads while tile kt's last mma.sync block runs (the fragment
    // load is loop-carried).  All ldmatrix reads of tile kt-1 precede that barrier of iteration
    // kt-1, so iteration kt's refill (at kk 0) may overwrite its stage.
    cp_async_wait_group<STAGES - 2>();
    bar_sync_aligned<0>();
    u32 af[2][MI][4];
    u32 bf[2][NI / 2][4];
    PCH_FRAGS(af[0], bf[0], smem_base, 0);
    for (int kt = 0; kt < KT; ++kt) {
        const u32 sa = smem_base + (kt % STAGES) * STAGE_BYTES;
        const u32 sa_next = smem_base + ((kt + 1) % STAGES) * STAGE_BYTES;
        const int nk = kt + STAGES - 1;
#pragma unroll
        for (int kk = 0; kk < KK; ++kk) {
            if (kk == KK - 1) {  // tile kt+1 landed (its group is the oldest of S-1) and published
                cp_async_wait_group<STAGES - 2>();
                bar_sync_aligned<0>();
            }
            if (kk < KK - 1) {
                PCH_FRAGS(af[(kk + 1) & 1], bf[(kk + 1) & 1], sa, kk + 1);
            } else if (kt + 1 < KT) {
                PCH_FRAGS(af[(kk + 1) & 1], bf[(kk + 1) & 1], sa_next, 0);
            }
            if (kk == 0) {
                if (nk < KT) PCH_LOAD_STAGE(nk % STAGES, nk);
                cp_async_commit();
            }
            PCH_MMAS(af[kk & 1], bf[kk & 1]);
        }
    }
    }
#undef PCH_FRAGS
#undef PCH_MMAS
#undef PCH_LOAD_STAGE
#undef PCH_LOAD_PASS
    cp_async_wait_group<0>();  // only empty groups remain; leave none behind at exit

    // Epilogue: every accumulator goes out, bf16x2 per pair of columns.
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < MI; ++i) {
        const int row = tile_m * BM + warp_m * WTM + i * 16 + g;
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int col = tile_n * BN + warp_n * WTN + j * 8 + 2 * t;
            *reinterpret_cast<u32*>(C + (size_t)row * N + col) = pack_bf16x2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<u32*>(C + (size_t)(row + 8) * N + col) =
                pack_bf16x2(acc[i][j][2], acc[i][j][3]);
        }
    }
}
"""


@dataclass(frozen=True)
class Config:
    """One instantiation of the hand kernel."""

    label: str
    bm: int
    bn: int
    bk: int
    warps_m: int
    warps_n: int
    stages: int
    spread: int = 0  #: 1: the refill's copies are spread over the kk steps
    pipe_frags: int = 0  #: 1: fragments double-buffered one kk step ahead, across k-tiles too
    group_m: int = 8

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * 32

    @property
    def smem_bytes(self) -> int:
        return self.stages * (self.bm + self.bn) * self.bk * 2

    @property
    def name_expression(self) -> str:
        return (f"{KERNEL_NAME}<{self.bm}, {self.bn}, {self.bk}, {self.warps_m}, {self.warps_n}, "
                f"{self.stages}, {self.group_m}, {self.spread}, {self.pipe_frags}>")

    @property
    def mma_per_ktile_per_warp(self) -> int:
        return (self.bm // self.warps_m // 16) * (self.bn // self.warps_n // 8) * (self.bk // 16)

    @property
    def ldsm_per_ktile_per_warp(self) -> int:
        return (self.bm // self.warps_m // 16 + self.bn // self.warps_n // 16) * (self.bk // 16)

    @property
    def ldgsts_per_ktile_per_thread(self) -> int:
        return (self.bm + self.bn) * self.bk * 2 // 16 // self.threads

    def as_dict(self) -> dict:
        return {"BM": self.bm, "BN": self.bn, "BK": self.bk, "warps": f"{self.warps_m}x{self.warps_n}",
                "stages": self.stages, "group_m": self.group_m, "spread": self.spread,
                "pipe_frags": self.pipe_frags, "smem_bytes": self.smem_bytes}


CONFIGS = (
    Config("first-light", 128, 128, 32, 2, 2, 2),
    Config("perf-s3", 128, 256, 64, 2, 4, 3),
    Config("perf-s4", 128, 256, 64, 2, 4, 4),
    Config("perf-s4-spread", 128, 256, 64, 2, 4, 4, spread=1),
    Config("perf-s3-fp", 128, 256, 64, 2, 4, 3, pipe_frags=1),
    Config("perf-s4-fp", 128, 256, 64, 2, 4, 4, pipe_frags=1),
    Config("sq-s3-fp", 128, 128, 64, 2, 2, 3, pipe_frags=1),
    Config("sq-s3", 128, 128, 64, 2, 2, 3),
)


def kernel_source() -> str:
    return header_source() + KERNEL_TEMPLATE


# ------------------------------------------------------------------ SASS check (no GPU) -------

def find_nvdisasm(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    for cand in (shutil.which("nvdisasm"), shutil.which("cuobjdump")):
        if cand:
            return cand
    try:  # the nvidia-cuda-nvdisasm wheel
        import nvidia  # type: ignore
        for base in nvidia.__path__:
            for p in Path(base).glob("*/bin/nvdisasm"):
                return str(p)
    except ImportError:
        pass
    return None


def sass_report(nvdisasm: str | None) -> list[dict]:
    """Compile every config with nvcc for sm_90a; count the instructions of its main loop."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise SystemExit("gemm_h100.py --sass: nvcc is not on PATH")
    reports = []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "gemm.cu"
        inst = "".join(
            f"template __global__ void {c.name_expression}(const unsigned short*, const unsigned short*,"
            f" unsigned short*, int, int, int);\n" for c in CONFIGS)
        src.write_text(kernel_source() + inst)
        cubin = Path(tmp) / "gemm.cubin"
        proc = subprocess.run([nvcc, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3",
                               "-std=c++17", "-Xptxas=-v", "-o", str(cubin), str(src)],
                              capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"nvcc failed:\n{proc.stderr}")
        ptxas = _ptxas_resources(proc.stderr)
        sass = ""
        if nvdisasm:
            if nvdisasm.endswith("cuobjdump"):
                sass = subprocess.run([nvdisasm, "-sass", str(cubin)], capture_output=True,
                                      text=True, check=True).stdout
            else:
                sass = subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True,
                                      text=True, check=True).stdout
        per_kernel = _split_sass(sass)
        for c in CONFIGS:
            key = _mangled_match(per_kernel, c)
            body = per_kernel.get(key, "")
            counts = {op: len(re.findall(rf"\b{op}\b", body))
                      for op in ("LDGSTS", "LDGDEPBAR", "LDSM", "HMMA", "BAR", "LDL", "STL")}
            waits = sorted(set(re.findall(r"DEPBAR\.LE SB0, (0x[0-9a-f]+)", body)))
            res = ptxas.get(key, {})
            reports.append({"config": c.label, **c.as_dict(), "sass": counts,
                            "depbar_waits": [int(w, 16) for w in waits], "ptxas": res,
                            "expected_per_ktile": {"HMMA_per_warp": c.mma_per_ktile_per_warp,
                                                   "LDSM_per_warp": c.ldsm_per_ktile_per_warp,
                                                   "LDGSTS_per_thread": c.ldgsts_per_ktile_per_thread,
                                                   "wait_group": c.stages - 2}})
    return reports


def _ptxas_resources(stderr: str) -> dict:
    out: dict = {}
    current = None
    for line in stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = m.group(1)
            out[current] = {}
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)),
                                spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out[current]["registers"] = int(m.group(1))
    return out


def _split_sass(sass: str) -> dict[str, str]:
    parts: dict[str, str] = {}
    current = None
    for line in sass.splitlines():
        m = re.match(r"\s*\.text\.(\S+):", line) or re.match(r"\s*Function : (\S+)", line)
        if m:
            current = m.group(1)
            parts[current] = ""
            continue
        if current:
            parts[current] += line + "\n"
    return parts


def _mangled_match(names, c: Config) -> str:
    # Itanium mangling of the template arguments: Li128ELi256E...
    want = "".join(f"Li{v}E" for v in (c.bm, c.bn, c.bk, c.warps_m, c.warps_n, c.stages, c.group_m, c.spread, c.pipe_frags))
    for n in names:
        if KERNEL_NAME in n and want in n:
            return n
    return ""


# ------------------------------------------------------------------ on the GPU ----------------

def rel_err(out, ref) -> float:
    import torch
    if not bool(torch.isfinite(out).all()):
        return float("nan")
    return float(torch.linalg.vector_norm(out.float() - ref) / torch.linalg.vector_norm(ref))


def time_ms(fn, inputs, warmup: int, reps: int) -> list[float]:
    """Per-launch CUDA-event times; inputs rotate so repeated runs don't just read the cache."""
    import torch
    for i in range(warmup):
        fn(*inputs[i % len(inputs)])
    torch.cuda.synchronize()
    # All launches are queued before the first wait, so each kernel's events are recorded while
    # the GPU is still busy with the previous one: the host's launch cost (CuPy's argument
    # packing, a driver call) overlaps the GPU instead of being timed as GPU time.
    events = []
    for i in range(reps):
        a, b = inputs[i % len(inputs)]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(a, b)
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def sm_clock_mhz() -> int | None:
    """The GPU's current SM clock (MHz) as NVML reports it; None where NVML is unavailable."""
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 - a figure we can do without
        return None


def make_triton():
    import triton
    import triton.language as tl

    configs = [triton.Config({"BM": 128, "BN": 256, "BK": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
               triton.Config({"BM": 128, "BN": 256, "BK": 64, "GROUP_M": 8}, num_warps=8, num_stages=4),
               triton.Config({"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
               triton.Config({"BM": 256, "BN": 128, "BK": 64, "GROUP_M": 8}, num_warps=8, num_stages=3)]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def matmul_tn(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr, GROUP_M: tl.constexpr):
        pid = tl.program_id(0)
        tiles_m = M // BM
        tiles_n = N // BN
        width = GROUP_M * tiles_n
        first_m = (pid // width) * GROUP_M
        gsize = tl.minimum(tiles_m - first_m, GROUP_M)
        pid_m = first_m + (pid % width) % gsize
        pid_n = (pid % width) // gsize
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
        b_ptrs = b_ptr + rn[None, :] * K + rk[:, None]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in tl.range(0, K, BK):  # pipelined by Triton to the config's num_stages
            acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
            a_ptrs += BK
            b_ptrs += BK
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))

    def run(a, b, c):
        M, K = a.shape
        N = b.shape[0]
        grid = lambda meta: ((M // meta["BM"]) * (N // meta["BN"]),)  # noqa: E731
        matmul_tn[grid](a, b, c, M, N, K)

    return run, matmul_tn


def hand_runner(builder, cfg: Config):
    kernel = builder.compile(kernel_source(), cfg.name_expression)
    builder.set_max_dynamic_shared(kernel, cfg.smem_bytes)

    def run(a, b, c):
        M, K = a.shape
        N = b.shape[0]
        if M % cfg.bm or N % cfg.bn or K % cfg.bk:
            raise ValueError(f"hand-multistage {cfg.label}: shape {M}x{N}x{K} is not a multiple of "
                             f"the tile {cfg.bm}x{cfg.bn}x{cfg.bk}")
        grid = ((M // cfg.bm) * (N // cfg.bn),)
        builder.launch(kernel, grid, (cfg.threads,), (a, b, c, M, N, K), shared_mem=cfg.smem_bytes)
    return run


# ------------------------------------------------ compiled-multistage: pipeline-core emit -------

#: (label, -p params, -T stages) of the compiled schedule multistage-gemm
COMPILED = (
    ("first-light", {"BM": "128", "BN": "128", "BK": "32", "warps_m": "2", "warps_n": "2"}, 2),
    ("perf-s3", {}, 3),
    ("perf-s4", {}, 4),
    ("sq-s3", {"BM": "128", "BN": "128", "BK": "64", "warps_m": "2", "warps_n": "2"}, 3),
)


def compiled_source(params: dict, stages: int, loosen: int | None = None):
    """Compile multistage-gemm, emit it with the cuda emitter; optionally loosen kernel wait #loosen.

    The loosened schedule is judged by our checker on the same document mutation
    (``pipeline_core.check.mutate``) before it is emitted; returns (source, geometry, verdict).
    """
    import attrs
    from pipeline_core.api import compile_named
    from pipeline_core.check.checker import check_document
    from pipeline_core.check.mutate import Mutation
    from pipeline_core.export.json import to_document
    from pipeline_core_nvidia_h100.emit_cuda import emit_cuda
    from ws_gemm import h100_host
    from pipeline_core_nvidia_h100.sync import WAIT_CP_ASYNC

    host = h100_host()
    c = compile_named("multistage-gemm", target="h100", params=params,
                      target_args={"stages": str(stages)}, host=host)
    verdict = None
    if loosen is not None:
        idx = [i for i, e in enumerate(c.kernel) if e.op.tag == WAIT_CP_ASYNC][loosen]
        doc = Mutation("loosen_wait", "kernel", idx, "loosen").apply(to_document(c))
        verdict = check_document(doc, host=host)
        e = c.kernel[idx]
        kernel = list(c.kernel)
        kernel[idx] = attrs.evolve(e, op=e.op.evolve(wait_value=e.op.wait_value + 1))
        c = c.with_entries(kernel=tuple(kernel))
    return emit_cuda(c), c.launch.geometry, verdict  # the geometry the schedule declared


def compiled_runner(builder, params: dict, stages: int, loosen: int | None = None):
    from pipeline_core_nvidia_h100.emit_cuda import KERNEL_NAME

    src, g, _ = compiled_source(params, stages, loosen)
    return tile_runner(builder, builder.compile(src, KERNEL_NAME), g), g


def tile_runner(builder, kernel, g):
    """``run(a, b, c)`` of an emitted (A, B, C, M, N, K) kernel with one CTA per g.bm x g.bn tile."""
    builder.set_max_dynamic_shared(kernel, g.smem_bytes)

    def run(a, b, c):
        M, K = a.shape
        N = b.shape[0]
        g.check_shape(M, N, K)
        builder.launch(kernel, ((M // g.bm) * (N // g.bn),), (g.threads,), (a, b, c, M, N, K),
                       shared_mem=g.smem_bytes)
    return run


# ------------------------------------------------ compiled-pingpong: pipeline-core emit -------

#: (label, -O options of the cuda-pingpong emitter, typed as the core passes them) of the
#: schedule pingpong on h100-pingpong
PINGPONG = (
    ("pp-128x128x64", {}),
    ("pp-128x128x32", {"BK": 32}),
)


def pingpong_source(options: dict):
    """Compile pingpong on h100-pingpong (proven by the compile) and emit it; (source, geometry)."""
    from pipeline_core.api import compile_named
    from pipeline_core_nvidia_h100.emit_pingpong import emit_pingpong, geometry_from_options
    from ws_gemm import h100_host

    c = compile_named("pingpong", target="h100-pingpong", host=h100_host())
    return emit_pingpong(c, **options), geometry_from_options(options)


def pingpong_runner(builder, options: dict):
    from pipeline_core_nvidia_h100.emit_pingpong import KERNEL_NAME

    src, g = pingpong_source(options)
    return tile_runner(builder, builder.compile(src, KERNEL_NAME), g), g


def compile_only_main(allow_unsafe: bool = False) -> int:
    """nvcc every kernel source the GPU run would build (sm_90a, no GPU): hand, compiled, pingpong,
    warp-specialized.

    One JSON line per source with ptxas's registers and spills; exit 1 if any fails or spills.
    """
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise SystemExit("gemm_h100.py --compile-only: nvcc is not on PATH")
    sources = [("hand-multistage", "all-configs", kernel_source() + "".join(
        f"template __global__ void {c.name_expression}(const unsigned short*, const unsigned short*,"
        f" unsigned short*, int, int, int);\n" for c in CONFIGS))]
    sources += [("compiled-multistage", label, compiled_source(params, stages)[0])
                for label, params, stages in COMPILED]
    sources += [("compiled-pingpong", label, pingpong_source(options)[0])
                for label, options in PINGPONG]
    from ws_gemm import WS_COMPILED, ws_source
    sources += [("compiled-ws", label, ws_source(params, stages, allow_unsafe=allow_unsafe)[0])
                for label, params, stages in WS_COMPILED]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (impl, label, src) in enumerate(sources):
            cu = Path(tmp) / f"k{i}.cu"
            cu.write_text(src)
            proc = subprocess.run([nvcc, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3",
                                   "-std=c++17", "-Xptxas=-v", "-o", str(cu.with_suffix(".cubin")),
                                   str(cu)], capture_output=True, text=True)
            spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", proc.stderr)
            regs = [int(r) for r in re.findall(r"Used (\d+) registers", proc.stderr)]
            spill_free = bool(spills) and all(a == "0" and b == "0" for a, b in spills)
            ok = proc.returncode == 0 and spill_free
            failed += not ok
            print(json.dumps({"impl": impl, "config": label, "compiled": proc.returncode == 0,
                              "max_registers": max(regs, default=None), "spill_free": spill_free,
                              **({} if ok else {"nvcc": proc.stderr[-2000:]})}, sort_keys=True),
                  flush=True)
    return 1 if failed else 0


def gpu_main(args) -> int:
    import torch
    from pipeline_core_nvidia_h100.runtime import KernelBuilder

    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is true fp32
    dev = torch.cuda.get_device_name()
    props = torch.cuda.get_device_properties(0)
    print(f"# device {dev}, {props.multi_processor_count} SMs, torch {torch.__version__}", flush=True)
    builder = KernelBuilder()
    impls: list[tuple[str, str, dict, object]] = [("cublas", "torch.matmul(A, B.T)", {},
                                                  lambda a, b, c: torch.matmul(a, b.T, out=c))]
    for cfg in CONFIGS:
        if args.configs is not None and cfg.label not in args.configs:
            continue
        impls.append(("hand-multistage", cfg.label, cfg.as_dict(), hand_runner(builder, cfg)))
    for label, params, stages in COMPILED:
        run_c, g = compiled_runner(builder, params, stages)
        impls.append(("compiled-multistage", label, {**g.as_params(), "smem_bytes": g.smem_bytes},
                      run_c))
    for label, options in PINGPONG:
        run_p, gp = pingpong_runner(builder, options)
        impls.append(("compiled-pingpong", label, {**gp.as_params(), "smem_bytes": gp.smem_bytes},
                      run_p))
    from ws_gemm import WS_COMPILED, WS_PERSISTENT, ws_runner
    for label, params, stages in WS_COMPILED:
        if args.ws is not None and label not in args.ws:
            continue
        try:
            run_w, g = ws_runner(builder, params, stages, allow_unsafe=args.allow_unsafe)
        except Exception as exc:  # noqa: BLE001 - report and keep going
            print(f"# compiled-ws/{label}: {type(exc).__name__}: {exc}", flush=True)
            continue
        impls.append(("compiled-ws", label, {**g.as_params(), "stages": stages,
                                             "smem_bytes": g.smem_bytes}, run_w))
        if label in WS_PERSISTENT:
            run_p, _ = ws_runner(builder, params, stages, allow_unsafe=args.allow_unsafe,
                                 persistent=True)
            impls.append(("compiled-ws", f"{label}-persistent",
                          {**g.as_params(), "stages": stages, "smem_bytes": g.smem_bytes,
                           "persistent": True}, run_p))
    triton_kernel = None
    if not args.no_triton:
        run_tr, triton_kernel = make_triton()
        impls.append(("triton", "autotuned", {}, run_tr))

    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    lines = []
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes] if args.shapes else SHAPES

    # Small shapes first: a wrong kernel shows up in seconds.
    for (M, N, K) in [(256, 256, 256), (512, 768, 384)]:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=gen)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=gen)
        ref = a.float() @ b.float().T
        for impl, label, _, fn in impls:
            if impl == "triton":
                continue
            c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            try:
                fn(a, b, c)
                torch.cuda.synchronize()
                err = rel_err(c, ref)
                bad = (~torch.isfinite(c)).sum().item()
                print(f"# small {M}x{N}x{K} {impl}/{label}: rel_err {err:.3e}, non-finite {bad}",
                      flush=True)
            except Exception as exc:  # noqa: BLE001 - report and keep going
                print(f"# small {M}x{N}x{K} {impl}/{label}: {type(exc).__name__}: {exc}", flush=True)

    for (M, N, K) in shapes:
        flop = 2.0 * M * N * K
        # Correctness: fresh inputs, poisoned outputs, one fp32 reference for all.
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=gen)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=gen)
        ref = a.float() @ b.float().T
        errs: dict[tuple[str, str], float] = {}
        for impl, label, _, fn in impls:
            c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            try:
                fn(a, b, c)
                torch.cuda.synchronize()
                errs[(impl, label)] = rel_err(c, ref)
            except Exception as exc:  # noqa: BLE001
                print(f"# {M}x{N}x{K} {impl}/{label} failed: {type(exc).__name__}: {exc}", flush=True)
                errs[(impl, label)] = float("nan")
        del ref
        cublas_err = errs[("cublas", "torch.matmul(A, B.T)")]
        # Timing: three fresh input sets, rotated.
        sets = [(torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=gen),
                 torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=gen)) for _ in range(3)]
        c = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
        results = {}
        for impl, label, cfgd, fn in impls:
            err = errs[(impl, label)]
            ok = err == err and err <= TOL_ABS and err <= TOL_VS_CUBLAS * cublas_err
            rec = {"impl": impl, "config": label, **({"params": cfgd} if cfgd else {}),
                   "M": M, "N": N, "K": K, "rel_err": err, "cublas_rel_err": cublas_err,
                   "correct": bool(ok)}
            if ok:
                times = time_ms(lambda x, y: fn(x, y, c), sets, args.warmup, args.reps)
                med = statistics.median(times)
                rec.update(median_ms=round(med, 5), min_ms=round(min(times), 5),
                           max_ms=round(max(times), 5), reps=len(times),
                           tflops=round(flop / med / 1e9, 1))
                # the SM clock right after the timed launches (NVML), for cycles per iteration
                rec["sm_clock_mhz"] = sm_clock_mhz()
                if impl == "triton" and triton_kernel is not None:
                    best = getattr(triton_kernel, "best_config", None)
                    rec["triton_best_config"] = str(best)
            results[(impl, label)] = rec
        cub = results[("cublas", "torch.matmul(A, B.T)")].get("tflops")
        for rec in results.values():
            if cub and rec.get("tflops"):
                rec["pct_of_cublas"] = round(100.0 * rec["tflops"] / cub, 1)
            rec["device"] = dev
            line = json.dumps(rec, sort_keys=True)
            print(line, flush=True)
            lines.append(line)
        del sets, a, b, c
        torch.cuda.empty_cache()

    if args.jsonl:
        Path(args.jsonl).parent.mkdir(parents=True, exist_ok=True)
        with open(args.jsonl, "a", encoding="utf-8") as fh:  # appended: earlier runs stay
            fh.write("\n".join(lines) + "\n")
    print("\n# impl            config       shape              TFLOPS   %cuBLAS  rel_err")
    for line in lines:
        r = json.loads(line)
        print(f"# {r['impl']:<16} {r['config'][:12]:<12} {r['M']}x{r['N']}x{r['K']:<8} "
              f"{r.get('tflops', 'n/a'):>7} {r.get('pct_of_cublas', ''):>8} {r['rel_err']:.2e}")
    return 0


def compiled_check_main(size: int, label: str, loosen: int | None) -> int:
    """One compiled kernel at SIZE^3 (CuPy + NumPy only, for compute-sanitizer); with ``loosen``,
    the schedule with that kernel wait loosened by one, after our checker's verdict on it."""
    import cupy as cp
    import numpy as np
    from pipeline_core_nvidia_h100.runtime import KernelBuilder

    params, stages = next((p, s) for lab, p, s in COMPILED if lab == label)
    src, g, verdict = compiled_source(params, stages, loosen)
    if verdict is not None:
        print(f"checker on the loosened schedule: {'SAFE' if verdict.safe else 'UNSAFE'}"
              + ("" if verdict.safe else f": {verdict.violations[0].kind.name} "
                 f"{verdict.violations[0].message}"))
    rng = np.random.default_rng(1)
    a16 = (rng.standard_normal((size, size), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    b16 = (rng.standard_normal((size, size), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    builder = KernelBuilder()
    from pipeline_core_nvidia_h100.emit_cuda import KERNEL_NAME
    kernel = builder.compile(src, KERNEL_NAME)
    builder.set_max_dynamic_shared(kernel, g.smem_bytes)
    da, db = cp.asarray(a16), cp.asarray(b16)
    af = (a16.astype(np.uint32) << 16).view(np.float32)
    bf = (b16.astype(np.uint32) << 16).view(np.float32)
    ref = af @ bf.T
    errs = []
    for _ in range(3):
        dc = cp.full((size, size), 0x7FC0, dtype=cp.uint16)  # bf16 NaN
        builder.launch(kernel, ((size // g.bm) * (size // g.bn),), (g.threads,),
                       (da, db, dc, size, size, size), shared_mem=g.smem_bytes)
        cp.cuda.Device().synchronize()
        out = (cp.asnumpy(dc).astype(np.uint32) << 16).view(np.float32)
        errs.append(float(np.linalg.norm(np.nan_to_num(out, nan=1e6) - ref) / np.linalg.norm(ref)))
    print(f"compiled {label} loosen={loosen} {size}^3: rel_err {[f'{e:.3e}' for e in errs]}")
    return 0 if max(errs) <= TOL_ABS else 1


def racecheck_main(size: int, label: str) -> int:
    """Ours alone, CuPy and NumPy only (small and quick under compute-sanitizer)."""
    import cupy as cp
    import numpy as np
    from pipeline_core_nvidia_h100.runtime import KernelBuilder

    cfg = next(c for c in CONFIGS if c.label == label)
    rng = np.random.default_rng(1)
    a32 = rng.standard_normal((size, size), dtype=np.float32)
    b32 = rng.standard_normal((size, size), dtype=np.float32)

    def to_bf16_bits(x):
        u = x.view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

    a16, b16 = to_bf16_bits(a32), to_bf16_bits(b32)
    builder = KernelBuilder()
    kernel = builder.compile(kernel_source(), cfg.name_expression)
    builder.set_max_dynamic_shared(kernel, cfg.smem_bytes)
    da, db = cp.asarray(a16), cp.asarray(b16)
    dc = cp.full((size, size), 0x7FC0, dtype=cp.uint16)  # bf16 NaN
    builder.launch(kernel, ((size // cfg.bm) * (size // cfg.bn),), (cfg.threads,),
                   (da, db, dc, size, size, size), shared_mem=cfg.smem_bytes)
    cp.cuda.Device().synchronize()
    out = (cp.asnumpy(dc).astype(np.uint32) << 16).view(np.float32)
    af = (a16.astype(np.uint32) << 16).view(np.float32)
    bf = (b16.astype(np.uint32) << 16).view(np.float32)
    ref = af @ bf.T
    err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
    print(f"racecheck run {cfg.label} {size}^3: rel_err {err:.3e}, finite {bool(np.isfinite(out).all())}")
    return 0 if err <= TOL_ABS else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sass", action="store_true", help="compile with nvcc and report SASS counts (no GPU)")
    ap.add_argument("--nvdisasm", help="nvdisasm or cuobjdump to use for --sass")
    ap.add_argument("--compile-only", action="store_true",
                    help="emit and nvcc-compile every kernel source the GPU run builds, report "
                         "registers and spills, and exit (no GPU)")
    ap.add_argument("--jsonl", default=str(DEFAULT_JSONL), help="where the JSON lines go ('' : nowhere)")
    ap.add_argument("--shapes", nargs="*", help="MxNxK shapes (default: 4096^3, 8192^3, 4096x8192x2048)")
    ap.add_argument("--configs", nargs="*", help="hand-kernel configs to run (default: all; none: --configs)")
    ap.add_argument("--compiled-size", type=int, default=0,
                    help="run one compiled kernel at SIZE^3 (CuPy only; for compute-sanitizer)")
    ap.add_argument("--compiled-config", default="first-light")
    ap.add_argument("--loosen", type=int, default=None, help="with --compiled-size: loosen kernel wait #N")
    ap.add_argument("--no-triton", action="store_true")
    ap.add_argument("--ws", nargs="*", help="warp-specialized configs (benchmarks/ws_gemm.py; default all)")
    ap.add_argument("--allow-unsafe", action="store_true",
                    help="run compiled schedules the checker does not prove safe")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--racecheck-size", type=int, default=0, help="run ours once at SIZE^3 (CuPy only)")
    ap.add_argument("--racecheck-config", default="perf-s3")
    args = ap.parse_args(argv)
    if args.reps < 20:
        ap.error("--reps: at least 20 (the median of >= 20 launches)")
    if args.sass:
        for rep in sass_report(find_nvdisasm(args.nvdisasm)):
            print(json.dumps(rep, sort_keys=True))
        return 0
    if args.compile_only:
        return compile_only_main(args.allow_unsafe)
    if args.compiled_size:
        return compiled_check_main(args.compiled_size, args.compiled_config, args.loosen)
    if args.racecheck_size:
        return racecheck_main(args.racecheck_size, args.racecheck_config)
    return gpu_main(args)


if __name__ == "__main__":
    sys.exit(main())
