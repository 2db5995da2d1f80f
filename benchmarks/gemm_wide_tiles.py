"""Wider tiles (256x160, 128x192, 256x192) against 128x256, the call and cuBLAS on issue 35's gap
shapes, each forced through ``matmul_call._plan(..., c)``; the direct store beside the TMA store.

  python3 benchmarks/gemm_wide_tiles.py [--panel store|first|pingpong|pingpong-aligned|
                                                 pingpong-stages] [--rounds 5] [--out FILE]
                                        [--skip-checks] [--row64]
  python3 benchmarks/gemm_wide_tiles.py --panel P --prebuild-only   # here, no GPU: the cubins

Why (session 23): 2000x5000x3000 ran 0.66-0.69 of cuBLAS with 128x256 tiles, 320 of them on 132
SMs (three rounds, the last 42% full); cuBLAS runs 256 rows by 152 columns there (264 tiles, two
whole rounds).  Every kernel is built first (in parallel); then the 48 epilogue checks of the
64-byte-row TMA store (fp32 / bf16 out, bias, gelu, tails); then per shape, each candidate
checked against an fp32 reference (NaN-poisoned output) and timed in interleaved rounds,
CUDA-event medians, per-round ratios against cuBLAS.  ``--panel first`` is the session's first
panel (BN 160 and 224 stored directly).  Results: benchmarks/results/gemm_wide_tiles_s23_h200.jsonl.
``--panel pingpong`` (session 25): ping-pong tiles (a spec's ``"pingpong"``) beside the call's
picks on the shapes still below cuBLAS.  ``--panel pingpong-stages --row64``: a probe, the
call's 128x192 ping-pong kernel with 64-byte TMA-store rows, which leave room for a fifth ring
stage (``--row64`` narrows ``warpspecialized.STORE_ROW_BYTES`` for the process: the plan's C box
and the kernel's sub-tile both read it; run it in a process of its own, since the kernel table
keys by variant and candidate, not the row width, and compare runs through their ratios to the
call, ``vs_call``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "plugins" / "nvidia_h100"), str(ROOT)]
os.environ.setdefault("PIPELINE_CORE_CACHE_DIR", str(ROOT / "benchmarks" / "_kitcache"))

from bench_checks import emit, timing_args  # noqa: E402
from bench_timing import interleaved, ratios  # noqa: E402

#: (BM, BN, stages, consumers[, "direct"]) per shape: "direct" forces the direct store
PANELS = {
    "store": {
        (2000, 5000, 3000): ((128, 256, 4, 2), (256, 160, 4, 2), (256, 160, 4, 2, "direct"),
                             (256, 192, 3, 2), (128, 192, 4, 2), (256, 160, 3, 2)),
        (2000, 5000, 3072): ((128, 256, 4, 2), (256, 160, 4, 2), (256, 192, 3, 2),
                             (128, 192, 4, 2)),
        (512, 28672, 4096): ((128, 128, 4, 2), (256, 160, 4, 2), (128, 192, 4, 2),
                             (256, 192, 3, 2)),
        (3000, 14336, 4096): ((64, 256, 4, 1), (256, 160, 4, 2), (256, 192, 3, 2),
                              (128, 192, 4, 2)),
        (4000, 4000, 4000): ((128, 256, 4, 2), (256, 160, 4, 2), (256, 192, 3, 2),
                             (128, 192, 4, 2)),
        (8192, 8192, 8192): ((128, 256, 4, 2), (256, 160, 4, 2), (256, 192, 3, 2)),
        (1000, 1000, 1000): ((256, 160, 4, 2), (128, 192, 4, 2), (256, 192, 3, 2)),
    },
    "first": {
        (2000, 5000, 3000): ((128, 256, 4, 2), (256, 160, 4, 2), (128, 224, 4, 2),
                             (256, 192, 3, 2), (128, 192, 4, 2), (192, 160, 4, 3),
                             (256, 160, 3, 2)),
        (2000, 5000, 3072): ((128, 256, 4, 2), (256, 160, 4, 2), (128, 224, 4, 2),
                             (256, 192, 3, 2)),
        (512, 28672, 4096): ((128, 128, 4, 2), (128, 224, 4, 2), (128, 192, 4, 2),
                             (256, 160, 4, 2), (128, 256, 4, 2)),
        (3000, 14336, 4096): ((64, 256, 4, 1), (128, 224, 4, 2), (256, 192, 3, 2),
                              (128, 256, 4, 2)),
        (4000, 4000, 4000): ((128, 256, 4, 2), (128, 224, 4, 2), (256, 160, 4, 2)),
    },
    "pingpong": {
        (512, 28672, 4096): ((128, 192, 4, 2, "pingpong"), (128, 224, 4, 2, "direct"),
                             (128, 128, 4, 2), (128, 128, 4, 2, "pingpong"),
                             (128, 160, 4, 2, "pingpong")),
        (2000, 5000, 3000): ((256, 160, 4, 2), (128, 160, 4, 2, "pingpong"),
                             (128, 128, 4, 2, "pingpong"), (128, 128, 5, 2, "pingpong")),
        (4000, 4000, 4000): ((128, 256, 4, 2), (128, 128, 4, 2, "pingpong"),
                             (128, 128, 5, 2, "pingpong")),
    },
    # the call's ping-pong kernel at 4 and 5 stages (5 fit with --row64 alone)
    "pingpong-stages": {
        (8192, 8192, 8192): ((128, 192, 4, 2, "pingpong"), (128, 192, 5, 2, "pingpong")),
        (8192, 14336, 4096): ((128, 192, 4, 2, "pingpong"), (128, 192, 5, 2, "pingpong")),
        (6144, 6144, 6144): ((128, 192, 4, 2, "pingpong"), (128, 192, 5, 2, "pingpong")),
        (3000, 14336, 4096): ((128, 192, 4, 2, "pingpong"), (128, 192, 5, 2, "pingpong")),
    },
    # the same tiles with K = 3072 (rows on the 128-byte line): is it the rows?
    "pingpong-aligned": {
        (2000, 5000, 3072): ((256, 160, 4, 2), (128, 160, 4, 2, "pingpong"),
                             (128, 128, 4, 2, "pingpong")),
    },
}
#: the 64-byte store's epilogue checks: shapes (tails) and tiles
CHECK_SHAPES = ((1000, 1000, 1000), (333, 520, 200), (2000, 5000, 3000), (64, 96, 64))
CHECK_TILES = ((256, 160, 4, 2), (128, 192, 4, 2), (256, 192, 3, 2))
TOL = 2e-2


def candidate(spec: tuple) -> tuple:
    """(Candidate, Tuning) of a panel entry."""
    import attrs
    from pipeline_core_nvidia_h100 import matmul_call as mm
    from pipeline_core_nvidia_h100.autotune import Candidate

    bm, bn, stages, consumers, *flags = spec
    tuning = attrs.evolve(mm.TUNING, tma_store=False) if "direct" in flags else mm.TUNING
    return Candidate(bm=bm, bn=bn, stages=stages, consumers=consumers,
                     pingpong="pingpong" in flags), tuning


def prebuild(panel: dict) -> None:
    """Here, no GPU: every kernel of the panel's timing (not the epilogue checks'), planned from
    tensor descriptions as time_shape plans them on 132 SMs, built into the disk cache."""
    from gemm_build import prebuild as build
    from pipeline_core_nvidia_h100 import matmul_call as mm
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo

    keys = set()
    for (m, n, k), specs in panel.items():
        a = TensorInfo(shape=(m, k), strides=(k, 1), dtype="bf16", ptr=0)
        b = TensorInfo(shape=(k, n), strides=(1, k), dtype="bf16", ptr=0)
        out = TensorInfo(shape=(m, n), strides=(n, 1), dtype="bf16", ptr=0)
        for spec in specs:
            c, tuning = candidate(spec)
            keys.add((mm.plan_infos(a, b, None, None, None, out, 132, tuning, c).variant, c))
    build(None, keys, emit)


def operands(torch, m: int, n: int, k: int, fill: bool = True) -> tuple:
    """A [m, k] and B [k, n] K-major (a weight [n, k] transposed), bf16."""
    make = (lambda *s: (torch.randn(*s, device="cuda") / 4).bfloat16()) if fill else (
        lambda *s: torch.empty(*s, device="cuda", dtype=torch.bfloat16))
    return make(m, k), make(n, k).t()


def build_all(torch, panel: dict) -> None:
    """Every kernel of the panel built (nvcc, in parallel) before any timing."""
    from pipeline_core_nvidia_h100 import matmul_call as mm

    dev = torch.cuda.current_device()
    stream, sms = torch.cuda.current_stream().cuda_stream, mm.sm_count(dev)
    jobs = []
    for (m, n, k), specs in panel.items():
        a, b = operands(torch, m, n, k, fill=False)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        jobs += [(a, b, out, *candidate(s)) for s in specs]

    def build(job) -> str | None:
        a, b, out, c, tuning = job
        try:
            mm._recipe(mm._plan(a, b, None, None, None, out, sms, tuning, c), dev, stream, c)
        except Exception as e:  # noqa: BLE001  (a candidate that does not build: one line)
            return f"{c.describe()}: {str(e)[:200]}"
        return None
    with ThreadPoolExecutor(16) as pool:
        for why in pool.map(build, jobs):
            if why:
                emit({"build-error": why})


def epilogue_checks(torch) -> None:
    """The 64-byte-row TMA store under every epilogue: fp32 / bf16 out, bias, gelu, tails."""
    import torch.nn.functional as F
    from pipeline_core_nvidia_h100 import matmul_call as mm

    dev = torch.cuda.current_device()
    stream, sms = torch.cuda.current_stream().cuda_stream, mm.sm_count(dev)
    ok = total = 0
    for m, n, k in CHECK_SHAPES:
        for spec in CHECK_TILES:
            c, tuning = candidate(spec)
            for out_dt in (torch.bfloat16, torch.float32):
                for act in (None, "gelu"):
                    a, b = operands(torch, m, n, k)
                    bias = torch.randn(n, device="cuda").bfloat16()
                    ref = a.float() @ b.float() + bias.float()
                    if act:
                        ref = F.gelu(ref, approximate="tanh")
                    res = torch.full((m, n), float("nan"), device="cuda", dtype=out_dt)
                    try:
                        p = mm._plan(a, b, bias, act, out_dt, res, sms, tuning, c)
                        mm.launch_recipe(mm._recipe(p, dev, stream, c), a, b, bias, res)
                        torch.cuda.synchronize()
                        err: float | str = ((res.float() - ref).norm() / ref.norm()).item()
                        store = p.variant.store
                    except Exception as e:  # noqa: BLE001  (a failed case is a result)
                        err, store = str(e)[:150], "?"
                    passed = isinstance(err, float) and err < TOL
                    total += 1
                    ok += passed
                    if not passed or store == "tma":
                        emit({"check": [m, n, k], "cand": f"{c.bm}x{c.bn}", "out": str(out_dt),
                              "act": act, "store": store, "err": err, "ok": passed})
    emit({"checks": total, "ok": ok})


def time_shape(torch, m: int, n: int, k: int, specs: tuple, rounds: int) -> None:
    from pipeline_core_nvidia_h100 import matmul, matmul_call as mm

    dev = torch.cuda.current_device()
    stream, sms = torch.cuda.current_stream().cuda_stream, mm.sm_count(dev)
    a, b = operands(torch, m, n, k)
    ref = a.float() @ b.float()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    impls = {"cublas": lambda: torch.matmul(a, b, out=out), "call": lambda: matmul(a, b, out=out)}
    for spec in specs:
        c, tuning = candidate(spec)
        try:
            p = mm._plan(a, b, None, None, None, out, sms, tuning, c)
            r = mm._recipe(p, dev, stream, c)
        except Exception as e:  # noqa: BLE001  (a candidate that does not build: one line)
            emit({"shape": [m, n, k], "cand": c.describe(), "error": str(e)[:200]})
            continue
        res = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        mm.launch_recipe(r, a, b, None, res)
        torch.cuda.synchronize()
        err = ((res.float() - ref).norm() / ref.norm()).item()
        if not err < TOL:
            emit({"shape": [m, n, k], "cand": c.describe(), "wrong": err})
            continue
        name = (f"{c.bm}x{c.bn}s{c.stages}c{c.consumers}{'pp' if p.variant.pingpong else ''}"
                f"/{p.splits}/{p.variant.store}")
        impls[name] = lambda r=r, res=res: mm.launch_recipe(r, a, b, None, res)
    per = interleaved(torch, impls, rounds)
    for name in impls:
        med = statistics.median(per[name])
        emit({"shape": [m, n, k], "cand": name, "us": round(med * 1e3, 2),
              "tflops": round(2.0 * m * n * k / med / 1e9, 1),
              "vs_cublas": None if name == "cublas" else ratios(per, name, "cublas"),
              "vs_call": None if name in ("cublas", "call") else ratios(per, name, "call")})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--panel", choices=sorted(PANELS), default="store")
    ap.add_argument("--prebuild-only", action="store_true",
                    help="here, no GPU: the panel's cubins into PIPELINE_CORE_CACHE_DIR")
    ap.add_argument("--skip-checks", action="store_true",
                    help="time the panel without the 64-byte store's epilogue checks")
    ap.add_argument("--row64", action="store_true",
                    help="a probe: every TMA-store sub-tile in 64-byte rows (--panel "
                         "pingpong-stages)")
    args = timing_args(ap)
    if args.row64:
        from pipeline_core_nvidia_h100 import warpspecialized
        warpspecialized.STORE_ROW_BYTES = (warpspecialized.SWIZZLE_BYTES // 2,)
    if args.prebuild_only:
        prebuild(PANELS[args.panel])
        return
    import torch

    torch.manual_seed(23)

    panel = PANELS[args.panel]
    build_all(torch, panel)
    if not args.skip_checks:
        epilogue_checks(torch)
    for (m, n, k), specs in panel.items():
        time_shape(torch, m, n, k, specs, args.rounds)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
