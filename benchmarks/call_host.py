"""What an eager call costs the host: microseconds per ``matmul`` / ``scaled_mm`` / ``attention``
call against torch's own call on the same tensors, on shapes so small the GPU rarely holds the
host back (16x8192x8192's kernel outlasts both calls' host time: there the GPU's time shows).

Why: a small GEMM in eager mode waits on the host (docs/guide/matmul.md, "Speed": 1x4096x4096
ran 0.73 of cuBLAS eager and 0.86 in a CUDA graph, 16x8192x8192 0.68 and 0.78), so the call
layer's Python is part of the kernel's speed there.  Each figure is the median over rounds of
``calls`` back-to-back calls timed on the host clock (``time.perf_counter``), the queue drained
between rounds; the profile is cProfile's top entries over one round of our call.

  python3 benchmarks/call_host.py --prebuild-only    # here, no GPU: the cubins
  python3 benchmarks/call_host.py [--calls 2000] [--rounds 7] [--out PATH]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from gemm_build import contiguous, kernel_key  # noqa: E402

#: (label, M, N, K): tiny shapes (the host bound) and the small-M shapes of the speed table
SHAPES = (("64x64x64", 64, 64, 64), ("1x4096x4096", 1, 4096, 4096),
          ("16x8192x8192", 16, 8192, 8192), ("1000x1000x999", 1000, 1000, 999))


def _info(shape, strides, dtype):
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo
    return TensorInfo(shape=shape, strides=strides, dtype=dtype, ptr=0)


def prebuild_keys():
    keys = []
    for _, m, n, k in SHAPES:
        keys.append(kernel_key(_info((m, k), contiguous((m, k)), "bf16"),
                               _info((k, n), contiguous((k, n)), "bf16")))
    m, n, k = 64, 64, 64
    keys.append(kernel_key(_info((m, k), (k, 1), "e4m3"), _info((k, n), (1, k), "e4m3"),
                           out_dtype="bf16", scales=(_info((), (), "fp32"),
                                                     _info((), (), "fp32"))))
    return keys


def host_us(torch, fn, calls: int, rounds: int) -> float:
    """The median over ``rounds`` of the host's microseconds per call of ``fn``."""
    per = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(per)


def profile(fn, calls: int, top: int = 25) -> str:
    p = cProfile.Profile()
    p.enable()
    for _ in range(calls):
        fn()
    p.disable()
    s = io.StringIO()
    pstats.Stats(p, stream=s).sort_stats("tottime").print_stats(top)
    return s.getvalue()


def attention_rows(torch, calls: int, rounds: int, prof: list[str]) -> list[dict]:
    """``attention`` (no gradient: the no-LSE kernel) against SDPA, [B, H, S, D] bf16, small S;
    the first shape's call profiled into ``prof``."""
    from pipeline_core_schedules_attention.call import attention
    rows = []
    for b, h, s, d, causal in ((1, 8, 128, 64, False), (1, 32, 256, 128, True)):
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        impls = {"ours": lambda: attention(q, k, v, causal=causal),
                 "sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(
                     q, k, v, is_causal=causal)}
        for f in impls.values():
            f()
        us = {name: round(host_us(torch, f, calls, rounds), 2) for name, f in impls.items()}
        rows.append({"kind": "host", "case": f"attention {b}x{h}x{s}x{d}"
                     f"{' causal' if causal else ''}", "us_per_call": us})
        print(json.dumps(rows[-1]), flush=True)
        if not causal:
            prof.append(f"== attention {b}x{h}x{s}x{d}\n" + profile(impls["ours"], calls))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prebuild-only", action="store_true")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=None)
    ap.add_argument("--profile", default=None, help="write cProfile's tables here")
    args = ap.parse_args()
    from gemm_build import prebuild
    if args.prebuild_only:
        prebuild(None, prebuild_keys(), print)
        return
    import torch

    from pipeline_core_nvidia_h100 import matmul_call as mm
    prebuild(torch, prebuild_keys(), print)
    rows, prof = [], []
    for label, m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        impls = {"ours": lambda: mm.matmul(a, b), "torch.matmul": lambda: torch.matmul(a, b),
                 "ours-out": (lambda o=torch.empty(m, n, device="cuda",
                                                    dtype=torch.bfloat16):
                              mm.matmul(a, b, out=o))}
        for f in impls.values():
            f()
        us = {name: round(host_us(torch, f, args.calls, args.rounds), 2)
              for name, f in impls.items()}
        rows.append({"kind": "host", "case": f"bf16 {label}", "us_per_call": us})
        print(json.dumps(rows[-1]), flush=True)
        if label == "64x64x64":
            prof.append(f"== matmul bf16 {label}\n" + profile(impls["ours"], args.calls))
    a8 = torch.randn(64, 64, device="cuda").to(torch.float8_e4m3fn)
    b8 = torch.randn(64, 64, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    impls = {"ours": lambda: mm.scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16),
             "torch._scaled_mm": lambda: torch._scaled_mm(a8, b8, one, one,
                                                          out_dtype=torch.bfloat16)}
    for f in impls.values():
        f()
    us = {name: round(host_us(torch, f, args.calls, args.rounds), 2) for name, f in impls.items()}
    rows.append({"kind": "host", "case": "fp8 64x64x64", "us_per_call": us})
    print(json.dumps(rows[-1]), flush=True)
    prof.append("== scaled_mm fp8 64x64x64\n" + profile(impls["ours"], args.calls))
    rows += attention_rows(torch, args.calls, args.rounds, prof)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    if args.profile:
        Path(args.profile).write_text("\n".join(prof))
    else:
        print("\n".join(prof))


if __name__ == "__main__":
    main()
