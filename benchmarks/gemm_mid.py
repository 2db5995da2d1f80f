"""Mid-size GEMMs (a wave of tiles or less): the call, cuBLAS and a panel of tiles with and
without split-K, each a CUDA-graph replay (the GPU's time), checked first.

  python3 benchmarks/gemm_mid.py [--rounds 5] [--out FILE]     # on the GPU

Why (session 23): at 1000x2000x1000, 2000x1000x4000, 500x4000x2000 and 1000^3 the call ran
0.57-0.76 of cuBLAS: rows off the 128-byte line kept only 128x256 tiles, which K then split,
and a split's fixed time was not in the wave model (wave_cost.SPLIT_FIXED_S).  Each shape's
line gives every implementation's median (us), the call's pick, and the call's per-round ratios
against cuBLAS in graph replays and eagerly (host and GPU: what the events see when the host
leads).  Results: benchmarks/results/gemm_mid_s23_h200.jsonl.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "plugins" / "nvidia_h100"), str(ROOT)]
os.environ.setdefault("PIPELINE_CORE_CACHE_DIR", str(ROOT / "benchmarks" / "_kitcache"))

from bench_checks import emit, timing_args  # noqa: E402
from bench_timing import graphed, interleaved, ratios  # noqa: E402

#: (BM, BN, consumers, split): the panel (a split only where the shape's plan splits)
PANEL = ((128, 256, 2, True), (128, 256, 2, False), (128, 128, 2, True), (128, 128, 2, False),
         (64, 256, 1, True), (64, 256, 1, False), (128, 192, 2, False), (256, 128, 2, False),
         (256, 160, 2, False))
#: M, N, K; a K that is not a multiple of 8 takes torch's default layout and the call alone
SHAPES = ((1000, 1000, 1000), (1024, 1024, 1024), (1000, 2000, 1000), (2000, 1000, 4000),
          (500, 4000, 2000), (512, 512, 8192), (1024, 4096, 1024), (4096, 1024, 1024),
          (1536, 1536, 1536), (1000, 4096, 4096), (1000, 1000, 999))
TOL = 2e-2


def shape_row(torch, m: int, n: int, k: int, rounds: int) -> None:
    from pipeline_core_nvidia_h100 import matmul, matmul_call as mm
    from pipeline_core_nvidia_h100.autotune import Candidate

    dev = torch.cuda.current_device()
    sms = mm.sm_count(dev)
    aligned = k % 8 == 0
    a = (torch.randn(m, k, device="cuda") / 4).bfloat16()
    b = ((torch.randn(n, k, device="cuda") / 4).bfloat16().t() if aligned
         else (torch.randn(k, n, device="cuda") / 4).bfloat16())
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()

    def err(t) -> float:
        return ((t.float() - ref).norm() / ref.norm()).item()

    impls = {"cublas": graphed(torch, lambda: torch.matmul(a, b, out=out)),
             "call": graphed(torch, lambda: matmul(a, b, out=out))}
    out.fill_(float("nan"))
    impls["call"]()
    torch.cuda.synchronize()
    plan = mm._plan(a, b, None, None, None, out, sms, mm.TUNING)
    pick = mm.decomposition(plan, sms)
    emit({"call-check": [m, n, k], "err": err(out), "pick": pick.describe()})
    for bm, bn, consumers, split in PANEL if aligned else ():
        c = Candidate(bm=bm, bn=bn, stages=4, consumers=consumers, split_k=split)
        try:
            p = mm._plan(a, b, None, None, None, out, sms, mm.TUNING, c)
        except Exception as e:  # noqa: BLE001  (a candidate that does not build: one line)
            emit({"shape": [m, n, k], "cand": c.describe(), "error": str(e)[:100]})
            continue
        if split and p.splits < 2:
            continue
        res = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)

        # the recipe on the stream it runs on (a graph's capture stream, not the eager one)
        def run(p=p, c=c, res=res):
            r = mm._recipe(p, dev, torch.cuda.current_stream().cuda_stream, c)
            mm.launch_recipe(r, a, b, None, res)
        run()
        torch.cuda.synchronize()
        if not err(res) < TOL:
            emit({"wrong": [m, n, k], "cand": c.describe(), "err": err(res)})
            continue
        impls[f"{bm}x{bn}/{p.splits}"] = graphed(torch, run)
    eager = {"cublas-eager": lambda: torch.matmul(a, b, out=out),
             "call-eager": lambda: matmul(a, b, out=out)}
    per = interleaved(torch, {**impls, **eager}, rounds)
    emit({"shape": [m, n, k],
          "us": {name: round(statistics.median(t) * 1e3, 2) for name, t in per.items()},
          "call/cublas graph": ratios(per, "call", "cublas"),
          "call/cublas eager": ratios(per, "call-eager", "cublas-eager")})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    args = timing_args(ap)
    import torch

    torch.manual_seed(23)

    for m, n, k in SHAPES:
        shape_row(torch, m, n, k, args.rounds)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
