"""Mid-size GEMMs (a wave of tiles or less): the call, cuBLAS and a panel of tiles with and
without split-K, each a CUDA-graph replay (the GPU's time), checked first.

  python3 benchmarks/gemm_mid.py      # on the GPU

Why (session 23): at 1000x2000x1000, 2000x1000x4000, 500x4000x2000 and 1000^3 the call ran
0.63-0.73 of cuBLAS: rows off the 128-byte line kept only 128x256 tiles, which K then split,
and a split's fixed time was not in the wave model.  Results:
benchmarks/results/gemm_mid_s23_h200.jsonl.
"""
import json, os, statistics, sys
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "plugins" / "nvidia_h100"), str(ROOT)]
os.environ.setdefault("PIPELINE_CORE_CACHE_DIR", str(ROOT / "benchmarks" / "_kitcache"))
from pipeline_core_nvidia_h100 import matmul_call as mm, matmul, decompose
from pipeline_core_nvidia_h100.autotune import Candidate
from bench_timing import interleaved, ratios, graphed
import torch
dev = torch.cuda.current_device(); stream = torch.cuda.current_stream().cuda_stream; sms = mm.sm_count(dev)
C = lambda bm, bn, cs, sk: Candidate(bm=bm, bn=bn, stages=4, consumers=cs, split_k=sk)
CANDS = [C(128, 256, 2, True), C(128, 256, 2, False), C(128, 128, 2, True), C(128, 128, 2, False),
         C(64, 256, 1, True), C(64, 256, 1, False), C(128, 192, 2, False), C(256, 128, 2, False), C(256, 160, 2, False)]
SHAPES = [(1000, 1000, 1000), (1024, 1024, 1024), (1000, 2000, 1000), (2000, 1000, 4000), (500, 4000, 2000),
          (512, 512, 8192), (1024, 4096, 1024), (4096, 1024, 1024), (1536, 1536, 1536), (1000, 4096, 4096),
          (1000, 1000, 999)]
for (m, n, k) in SHAPES:
    a = (torch.randn(m, k, device="cuda") / 4).bfloat16()
    b = (torch.randn(n, k, device="cuda") / 4).bfloat16().t() if k % 8 == 0 else (torch.randn(k, n, device="cuda") / 4).bfloat16()
    # a call's eager time too (host and GPU: what the events see when the host leads)
    eager = {"cublas-eager": lambda: torch.matmul(a, b, out=out), "call-eager": lambda: matmul(a, b, out=out)}
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    impls = {"cublas": graphed(torch, lambda: torch.matmul(a, b, out=out)),
             "call": graphed(torch, lambda: matmul(a, b, out=out))}
    out.fill_(float("nan")); impls["call"](); torch.cuda.synchronize()
    print(json.dumps({"call-check": [m, n, k], "err": ((out.float() - ref).norm() / ref.norm()).item(),
                      "pick": decompose.for_plan(mm._plan(a, b, None, None, None, out, sms, mm.TUNING), sms, mm.TUNING.stream_k, mm.TUNING.wave_model).describe()}))
    for c in CANDS if k % 8 == 0 else ():
        try:
            p = mm._plan(a, b, None, None, None, out, sms, mm.TUNING, c)
            if c.split_k and p.splits < 2:
                continue
            r = mm._recipe(p, dev, stream, c)
            res = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            mm.launch_recipe(r, a, b, None, res); torch.cuda.synchronize()
            err = ((res.float() - ref).norm() / ref.norm()).item()
            if not err < 2e-2:
                print(json.dumps({"wrong": [m, n, k], "c": str(c), "err": err})); continue
        except Exception as e:
            print(json.dumps({"err": str(e)[:100]})); continue
        impls[f"{c.bm}x{c.bn}/{p.splits}"] = graphed(torch, lambda p=p, c=c, res=res: mm.launch_recipe(
            mm._recipe(p, dev, torch.cuda.current_stream().cuda_stream, c), a, b, None, res))
    per = interleaved(torch, {**impls, **eager}, 5)
    print(json.dumps({"shape": [m, n, k], "us": {k2: round(statistics.median(v) * 1e3, 2) for k2, v in per.items()},
                      "call/cublas graph": ratios(per, "call", "cublas"),
                      "call/cublas eager": ratios(per, "call-eager", "cublas-eager")}), flush=True)
    del impls; torch.cuda.empty_cache()
