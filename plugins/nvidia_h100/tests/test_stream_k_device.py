"""Stream-K's device scheduler (``gemm_stream_k_h100.cuh``, ``pcsk::StreamK``) is the twin of
the trip rule the core proves (``gemm_tiles.StreamKTrips``): built for the host by nvcc and run
on the rule's sample problems, it gives every CTA the units the rule gives (tile, first K tile,
K tiles), each shared tile's count of CTAs, and a fixup that reads, in K order, the very slots
the tile's CTAs stored their pieces to.  And the stream-K kernel builds without spills."""
from __future__ import annotations

import subprocess

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402

from pipeline_core_nvidia_h100.cuda import gemm_stream_k_header_source  # noqa: E402
from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma  # noqa: E402
from pipeline_core_nvidia_h100.gemm_tiles import STREAM_K_SAMPLES, StreamKTrips  # noqa: E402
from pipeline_core_nvidia_h100.toolchain import compile_cubin, nvcc  # noqa: E402

NVCC = nvcc() or "nvcc"  # the needs_nvcc rule (conftest.py) skips or fails without it
pytestmark = pytest.mark.needs_nvcc

_MAIN = r"""
#include <cstdio>
int main() {
    int tiles, kt, ctas, sk;
    while (std::scanf("%d %d %d %d", &tiles, &kt, &ctas, &sk) == 4) {
        const pcsk::StreamK s(tiles, kt, ctas, sk);
        std::printf("problem %d %d %d %d\n", tiles, kt, ctas, sk);
        for (int c = 0; c < ctas; ++c)
            for (int u = 0; u < s.units(c); ++u) {
                const pcsk::Unit w = s.unit(c, u);
                std::printf("unit %d %d %d %d %d %d\n", c, w.tile, w.k0, w.kt, w.parts, w.slot);
            }
        for (int t = 0; t < sk; ++t) {
            std::printf("fixup %d", tiles - sk + t);
            const int first = s.cta_of((long long)t * kt);
            const int last = s.cta_of((long long)(t + 1) * kt - 1);
            for (int y = first; y <= last; ++y) std::printf(" %d:%d", y, s.slot(y, t));
            std::printf("\n");
        }
    }
}
"""


def _device(tmp_path) -> list[str]:
    src = tmp_path / "twin.cu"
    src.write_text(gemm_stream_k_header_source() + _MAIN)
    exe = tmp_path / "twin"
    subprocess.run([NVCC, "-std=c++17", "-o", str(exe), str(src)], check=True,
                   capture_output=True, text=True)
    stdin = "\n".join(" ".join(map(str, p)) for p in STREAM_K_SAMPLES)
    return subprocess.run([str(exe)], input=stdin, capture_output=True, text=True,
                          check=True).stdout.splitlines()


def _host() -> list[str]:
    rule = StreamKTrips(block_m=128, block_n=256, block_k=64)
    out = []
    for p in STREAM_K_SAMPLES:
        tiles, kt, ctas, sk = p
        out.append(f"problem {tiles} {kt} {ctas} {sk}")
        slots: dict[tuple[int, int], int] = {}
        for c in range(ctas):
            stream = 0
            for tile, k0, n in rule.units(p, c):
                parts = rule.arrivals(p, tile)
                slot = 2 * c + (stream > 0) if tile >= tiles - sk else 0
                stream += tile >= tiles - sk
                out.append(f"unit {c} {tile} {k0} {n} {parts} {slot}")
                slots[(c, tile)] = slot
        for tile in range(tiles - sk, tiles):
            order = rule.fixup_order(p, tile, 0)
            out.append(f"fixup {tile}" + "".join(f" {y}:{slots[(y, tile)]}" for y in order))
    return out


def test_the_device_scheduler_is_the_proven_rules_twin(tmp_path):
    assert _device(tmp_path) == _host()


def test_the_fixup_reads_the_slots_its_tiles_ctas_stored(tmp_path):
    stored: dict[tuple[int, int], int] = {}
    fixups = 0
    for line in _device(tmp_path):
        kind, *rest = line.split()
        if kind == "problem":
            stored = {}
        elif kind == "unit":
            c, tile, _, _, parts, slot = map(int, rest)
            if parts > 1:
                assert slot not in stored.values()  # one piece a slot
                stored[(c, tile)] = slot
        else:
            reads = [tuple(map(int, r.split(":"))) for r in rest[1:]]
            if len(reads) > 1:
                fixups += 1
                assert all(stored[(c, int(rest[0]))] == slot for c, slot in reads)
    assert fixups > 100


@pytest.mark.parametrize("params", [{}, {"dtype": "fp16", "bias": "fp32", "activation": "gelu",
                                         "out_dtype": "fp32"},
                                    {"consumers": "1", "BM": "64", "BN": "128"}])
def test_the_stream_k_kernel_builds_without_spills(tmp_path, params):
    c = compile_named("warpspecialized-gemm", target="h100", host=default_host(),
                      params={"stream_k": "true", **params}, target_args={"stages": "4"})
    proc, _ = compile_cubin(emit_wgmma(c), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
