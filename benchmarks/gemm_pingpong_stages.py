"""Probe: the call's ping-pong 128x192 kernel (docs/guide/matmul.md, "Ping-pong") with 64-byte
TMA-store rows, which leave room for a fifth ring stage, against the call and cuBLAS.

  python3 benchmarks/gemm_pingpong_stages.py            # 128-byte rows, 4 stages
  python3 benchmarks/gemm_pingpong_stages.py --row64    # 64-byte rows, 4 and 5 stages

A probe, not a kernel the call builds: ``--row64`` narrows ``warpspecialized.STORE_ROW_BYTES``
for the process (the plan's C box and the kernel's sub-tile both read it), so each row width
runs in its own process (the kernel table keys by variant and candidate, not the row width);
compare the two runs through their ratios to the call.  Each kernel is checked against an fp32
reference before the interleaved rounds (5, CUDA-event medians).  Session 25's run:
results/gemm_pingpong_stages_s25_h200.jsonl (5 stages 0.954-0.967 of the call; 64-byte rows
at 4 stages 0.988-1.015).
"""
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "plugins" / "nvidia_h100"), str(ROOT)]

from bench_timing import interleaved, ratios  # noqa: E402  (beside this script)

SHAPES = ((8192, 8192, 8192), (8192, 14336, 4096), (6144, 6144, 6144), (3000, 14336, 4096))


def main() -> None:
    import torch
    from pipeline_core_nvidia_h100 import matmul, matmul_call as mm, warpspecialized as ws
    from pipeline_core_nvidia_h100.autotune import Candidate

    row64 = "--row64" in sys.argv
    if row64:
        ws.STORE_ROW_BYTES = (64,)
    stages = (4, 5) if row64 else (4,)
    dev = torch.cuda.current_device()
    stream, sms = torch.cuda.current_stream().cuda_stream, mm.sm_count(dev)
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda").bfloat16()
        b = torch.randn(n, k, device="cuda").bfloat16().T
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        impls = {"call": lambda: matmul(a, b, out=out),
                 "cublas": lambda: torch.matmul(a, b, out=out)}
        for s in stages:
            c = Candidate(bm=128, bn=192, stages=s, consumers=2, pingpong=True)
            p = mm._plan(a, b, None, None, None, out, sms, mm.TUNING, c)
            r = mm._recipe(p, dev, stream, c)
            res = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            mm.launch_recipe(r, a, b, None, res)
            torch.cuda.synchronize()
            err = ((res.float() - ref).norm() / ref.norm()).item()
            print(json.dumps({"shape": [m, n, k], "stages": s, "row64": row64,
                              "box": p.c.box_inner, "err": err}), flush=True)
            if err < 2e-2:
                impls[f"pp192-s{s}" + ("-r64" if row64 else "")] = (
                    lambda r=r: mm.launch_recipe(r, a, b, None, out))
        del ref
        per = interleaved(torch, impls, 5)
        rec = {"shape": [m, n, k]}
        for name in impls:
            rec[name] = round(2.0 * m * n * k / statistics.median(per[name]) / 1e9, 1)
            if name != "call":
                rec[name + "/call"] = statistics.median(ratios(per, name, "call"))
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
