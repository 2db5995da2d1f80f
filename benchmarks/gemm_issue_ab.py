"""The GEMM call's kernels against the same kernels with the consumer index read through a warp
shuffle, as the attention kernels read it (``issue_probe.with_uniform_consumer``), in one
process: CUDA-graph replays of one ``matmul`` call each (the GPU's time), interleaved rounds
with the order rotated, against cuBLAS's replay; per-round ratios.  Measured on an H200
(session 18): no gain on the large shapes and 3.5% lost at 1 x 4096 x 4096, so the GEMM's
kernels keep the plain index (kit/frame.py's ``uniform_consumer``).

  python3 benchmarks/gemm_issue_ab.py [--rounds 5] [--out FILE] [--prebuild-only]

Each shape's two kernels are built through the call (its disk cache), the old one under the
rewrite, and each captured with its own kernel in the call's cache; both are checked against
an fp32 reference into a NaN-poisoned output first.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gemm_build import contiguous, kernel_key, prebuild  # noqa: E402
from issue_probe import with_uniform_consumer  # noqa: E402

SHAPES = ((8192, 8192, 8192), (4096, 4096, 4096), (2000, 5000, 3000), (512, 28672, 4096),
          (3000, 14336, 4096), (128, 8192, 8192), (16, 8192, 8192), (1, 4096, 4096))


def _info(shape):
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo
    return TensorInfo(shape=shape, strides=contiguous(shape), dtype="bf16", ptr=0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prebuild-only", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from pipeline_core_nvidia_h100 import matmul_call as mm
    keys = [kernel_key(_info((m, k)), _info((k, n))) for m, n, k in SHAPES]
    source = mm.kernel_source
    shuffled = lambda v, c: (lambda r: (r[0], with_uniform_consumer(r[1])))(  # noqa: E731
        source(v, c))
    for kernel_source in (source, shuffled):
        mm.kernel_source = kernel_source
        if args.prebuild_only:
            prebuild(None, keys, print)
    mm.kernel_source = source
    if args.prebuild_only:
        return
    import torch

    from bench_timing import graphed, interleaved, ratios
    lines = []
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        impls = {}
        for name, kernel_source in (("call", source), ("shuffled", shuffled)):
            mm.kernel_source = kernel_source
            for cache in (mm.CALL.kernels, mm.CALL.recipes, mm.CALL.args):
                cache.clear()  # a recipe's packed arguments name the kernel they launch
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            mm.matmul(a, b, out=out)
            torch.cuda.synchronize()
            err = float((out.float() - ref).norm() / ref.norm())
            lines.append({"kind": "check", "shape": f"{m}x{n}x{k}", "kernel": name,
                          "rel_err": err, "ok": err < 1e-2})
            print(json.dumps(lines[-1]), flush=True)
            o = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            impls[name] = graphed(torch, lambda o=o: mm.matmul(a, b, out=o))
        mm.kernel_source = source
        for cache in (mm.CALL.kernels, mm.CALL.recipes, mm.CALL.args):
            cache.clear()
        oc = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        impls["cublas"] = graphed(torch, lambda: torch.matmul(a, b, out=oc))
        per = interleaved(torch, impls, args.rounds)
        row = {"kind": "time", "shape": f"{m}x{n}x{k}",
               "us": {name: round(statistics.median(v) * 1000, 2) for name, v in per.items()},
               **{f"{o}/{p}": ratios(per, o, p) for o, p in (("shuffled", "call"),
                                                             ("call", "cublas"),
                                                             ("shuffled", "cublas"))}}
        lines.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(x) + "\n" for x in lines))


if __name__ == "__main__":
    main()
