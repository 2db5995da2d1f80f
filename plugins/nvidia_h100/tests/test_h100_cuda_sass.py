"""The CUDA building blocks compile for sm_90a and become the SASS they promise (needs nvcc).

Skipped without ``nvcc`` on PATH; the SASS checks also need ``nvdisasm`` (PATH, ``$NVDISASM`` or
the ``nvidia-cuda-nvdisasm`` wheel) or ``cuobjdump``.  ptxas may reorder independent
instructions, so these assert on counts and wait values, never on order.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core_nvidia_h100.cuda import MAX_WAIT_GROUP, header_path, header_source  # noqa: E402
from pipeline_core_nvidia_h100.toolchain import nvcc, sass_command  # noqa: E402

NVCC = nvcc() or "nvcc"  # the needs_nvcc rule (conftest.py) skips or fails without it
pytestmark = pytest.mark.needs_nvcc
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"

# One warp: three 512-byte stages through cp.async (one commit group each), wait until the
# newest two remain, publish, ldmatrix.x4 from stage 0, one mma.sync, and store every accumulator
# (an unused mma is deleted, asm volatile or not).
PROBE = r"""
#include "pipeline_h100.cuh"
using namespace pch100;
extern "C" __global__ void probe(const unsigned short* __restrict__ a, float* __restrict__ out) {
    __shared__ __align__(128) unsigned char smem[3 * 512];
    const int lane = threadIdx.x & 31;
    const u32 base = smem_addr(smem);
#pragma unroll
    for (int s = 0; s < 3; ++s) {
        cp_async_16(base + s * 512 + swizzled_offset<8>(lane / 8, lane % 8), a + s * 256 + lane * 8);
        cp_async_commit();
    }
    cp_async_wait_group<2>();
    bar_sync_aligned<0>();
    u32 r[4];
    ldmatrix_x4(r, base + lane * 16);
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    mma_bf16_16816(d, r, r[0], r[1]);
    cp_async_wait_group<0>();
    barrier_sync<1>();
    barrier_sync_count<2, 32>();
    *reinterpret_cast<u32*>(out + lane * 5 + 4) = pack_bf16x2(d[0], d[1]);
#pragma unroll
    for (int i = 0; i < 4; ++i) out[lane * 5 + i] = d[i];
}
"""


def _nvdisasm() -> list[str] | None:
    return sass_command()


def _compile(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    src = tmp_path / "probe.cu"
    src.write_text(source)
    return subprocess.run([NVCC, "-cubin", GENCODE, "-O3", "-std=c++17", "-Xptxas=-v",
                           f"-I{Path(header_path()).parent}", "-o", str(tmp_path / "probe.cubin"),
                           str(src)], capture_output=True, text=True)


def _sass(tmp_path: Path, source: str) -> str:
    proc = _compile(tmp_path, source)
    assert proc.returncode == 0, proc.stderr
    tool = _nvdisasm()
    if tool is None:
        pytest.skip("neither nvdisasm nor cuobjdump is available")
    return subprocess.run([*tool, str(tmp_path / "probe.cubin")], capture_output=True, text=True,
                          check=True).stdout


def test_helpers_compile_for_sm_90a_without_spills(tmp_path):
    proc = _compile(tmp_path, PROBE)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", proc.stderr), proc.stderr


def test_probe_sass_holds_each_building_block(tmp_path):
    sass = _sass(tmp_path, PROBE)
    count = lambda pattern: len(re.findall(pattern, sass))  # noqa: E731
    assert count(r"LDGSTS\.E\.BYPASS\.128") == 3       # cp.async.cg 16 B
    assert count(r"\bLDGDEPBAR\b") == 3                 # commit_group
    assert count(r"DEPBAR\.LE SB0, 0x2\b") == 1         # wait_group<2>
    assert count(r"DEPBAR\.LE SB0, 0x0\b") == 1         # wait_group<0>
    assert count(r"LDSM\.16\.M88\.4") == 1              # ldmatrix.x4
    assert count(r"HMMA\.16816\.F32\.BF16") == 1        # mma.sync m16n8k16 bf16 -> f32
    assert count(r"\bBAR\.SYNC") >= 3                   # bar.sync 0, barrier.sync 1 and 2
    assert count(r"\b(LDL|STL)\b") == 0                 # no local memory


def test_header_builds_without_include_paths_as_nvrtc_would(tmp_path):
    proc = _compile(tmp_path, header_source() + PROBE.replace('#include "pipeline_h100.cuh"', ""))
    assert proc.returncode == 0, proc.stderr


def test_wait_group_beyond_the_encoding_is_refused_at_compile_time(tmp_path):
    bad = PROBE.replace("cp_async_wait_group<2>()", f"cp_async_wait_group<{MAX_WAIT_GROUP + 1}>()")
    proc = _compile(tmp_path, bad)
    assert proc.returncode != 0
    assert "cp.async.wait_group N must be in [0, 63]" in proc.stderr


def test_ptxas_clamps_a_raw_wait_group_above_63(tmp_path):
    """Why max_wait is 63: PTX accepts any integer constant, the SASS field holds 6 bits."""
    raw = PROBE.replace("cp_async_wait_group<2>();", 'asm volatile("cp.async.wait_group 64;" ::: "memory");')
    sass = _sass(tmp_path, raw)
    assert re.search(r"DEPBAR\.LE SB0, 0x3f\b", sass)
