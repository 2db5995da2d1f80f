"""The small-M kernels' ring depth and tile, forced, against cuBLAS (docs/guide/matmul.md,
"Decomposition"): which (tile, stages) streams the weight fastest where M is 1 to 128.

Why: at M <= 128 the GEMM reads B once and is bound by memory; how many bytes each SM keeps in
flight (stages x the stage's bytes) is what the ring depth buys.  The call's small-M tiles run
5 stages (24 KB each); cuBLAS's kernels there run 8 and 16 (nvjet ..._64x8_1x2_..., _64x16_...).

  python3 benchmarks/gemm_small_m.py --prebuild-only     # here, no GPU: the cubins
  python3 benchmarks/gemm_small_m.py [--rounds 5] [--out PATH]

Each (shape, candidate) is checked against an fp32 reference into a NaN-poisoned output, then
timed as a CUDA-graph replay of one call (the GPU's time) against cuBLAS's replay, interleaved
rounds with the order rotated; per-round ratios ours / cuBLAS (above 1: ours faster).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gemm_build import contiguous, prebuild  # noqa: E402

SHAPES = ((1, 4096, 4096), (16, 8192, 8192), (64, 8192, 8192), (128, 8192, 8192))
#: (bm, bn, stages) forced; the split follows the call's rule for the tile
FORCED = ((64, 128, 5), (64, 128, 7), (64, 128, 8), (128, 64, 5), (128, 64, 7), (128, 64, 8),
          (64, 64, 8), (64, 256, 5))


def _info(shape):
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo
    return TensorInfo(shape=shape, strides=contiguous(shape), dtype="bf16", ptr=0)


def forced(m, n, k, bm, bn, stages, sms=132):
    """(variant, candidate, splits) the call launches at (m, n, k) with this tile and depth
    forced, K split where the call's rule splits that tile (gemm_call.split_count)."""
    from pipeline_core_nvidia_h100 import matmul_call as mm
    from pipeline_core_nvidia_h100.autotune import Candidate

    a, b = _info((m, k)), _info((k, n))
    c = Candidate(bm=bm, bn=bn, stages=stages, consumers=1, split_k=True)
    plan = mm.plan_infos(a, b, None, None, None, None, sms, mm.TUNING, c)
    return plan.variant, c, plan.splits


#: ``--sweep``: M across the small range on three weights, the two 64-row tiles at eight stages
SWEEP_SHAPES = tuple((m, n, k) for n, k in ((8192, 8192), (4096, 4096), (14336, 4096))
                     for m in (1, 8, 16, 24, 32, 40, 48, 56, 64, 96, 128))
SWEEP_FORCED = ((64, 128, 8), (64, 64, 8))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prebuild-only", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--sweep", action="store_true",
                    help="M from 8 to 128 on three weights, 64x128 against 64x64 (8 stages)")
    args = ap.parse_args()
    shapes, tiles = (SWEEP_SHAPES, SWEEP_FORCED) if args.sweep else (SHAPES, FORCED)
    keys = {forced(m, n, k, *f)[:2] for m, n, k in shapes for f in tiles}
    if args.prebuild_only:
        prebuild(None, keys, print)
        return
    import torch

    from bench_timing import graphed, interleaved
    from pipeline_core_nvidia_h100 import decompose
    from pipeline_core_nvidia_h100 import matmul_call as mm
    prebuild(torch, keys, print)
    lines = []
    real_for_plan = decompose.for_plan
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        impls = {}
        for f in tiles:
            _, c, splits = forced(m, n, k, *f)
            decompose.for_plan = lambda *_, c=c: c
            try:
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                mm.matmul(a, b, out=out)
                torch.cuda.synchronize()
                err = float((out.float() - ref).norm() / ref.norm())
                name = f"{f[0]}x{f[1]}-s{f[2]}{'-split' if splits > 1 else ''}"
                lines.append({"kind": "check", "shape": f"{m}x{n}x{k}", "candidate": name,
                              "splits": splits, "rel_err": err,
                              "ok": err < 1e-2})
                print(json.dumps(lines[-1]), flush=True)
                if err < 1e-2:
                    o = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                    impls[name] = graphed(torch, lambda o=o: mm.matmul(a, b, out=o))
            finally:
                decompose.for_plan = real_for_plan
        oc = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        impls["cublas"] = graphed(torch, lambda: torch.matmul(a, b, out=oc))
        per = interleaved(torch, impls, args.rounds)
        row = {"kind": "time", "shape": f"{m}x{n}x{k}",
               "us": {name: round(statistics.median(v) * 1000, 2) for name, v in per.items()},
               "vs_cublas": {name: [round(c / o, 3) for o, c in zip(v, per["cublas"])]
                             for name, v in per.items() if name != "cublas"}}
        lines.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(x) + "\n" for x in lines))


if __name__ == "__main__":
    main()
