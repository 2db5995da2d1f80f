"""Wider tiles (256x160, 128x192, 256x192) against 128x256, the call and cuBLAS on issue 35's gap
shapes, each forced through ``matmul_call._plan(..., c)``; the direct store beside the TMA store.

  python3 benchmarks/gemm_wide_tiles.py            # on the GPU: checks, then timing
  SET=1 python3 benchmarks/gemm_wide_tiles.py      # the first panel (direct stores of BN 160/224)

Why (session 23): 2000x5000x3000 ran 0.66-0.69 of cuBLAS with 128x256 tiles, 320 of them on 132
SMs (three rounds, the last 42% full); cuBLAS runs 256 rows by 152 columns there (264 tiles, two
whole rounds).  First the 48 epilogue checks of the 64-byte-row TMA store (fp32 / bf16 out, bias,
gelu, tails), then interleaved rounds, CUDA-event medians, per-round ratios against cuBLAS.
Results: benchmarks/results/gemm_wide_tiles_s23_h200.jsonl.
"""
import json, os, statistics, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "plugins" / "nvidia_h100"), str(ROOT)]
os.environ.setdefault("PIPELINE_CORE_CACHE_DIR", str(ROOT / "benchmarks" / "_kitcache"))
from pipeline_core_nvidia_h100 import matmul_call as mm  # noqa: E402
from pipeline_core_nvidia_h100.autotune import Candidate  # noqa: E402
from bench_timing import interleaved, ratios

C = lambda bm, bn, st, cs: Candidate(bm=bm, bn=bn, stages=st, consumers=cs)
import attrs  # noqa: E402
DIRECT = attrs.evolve(mm.TUNING, tma_store=False)
CANDS2 = {
    (2000, 5000, 3000): [C(128, 256, 4, 2), C(256, 160, 4, 2), (C(256, 160, 4, 2), DIRECT), C(256, 192, 3, 2), C(128, 192, 4, 2), C(256, 160, 3, 2)],
    (2000, 5000, 3072): [C(128, 256, 4, 2), C(256, 160, 4, 2), C(256, 192, 3, 2), C(128, 192, 4, 2)],
    (512, 28672, 4096): [C(128, 128, 4, 2), C(256, 160, 4, 2), C(128, 192, 4, 2), C(256, 192, 3, 2)],
    (3000, 14336, 4096): [C(64, 256, 4, 1), C(256, 160, 4, 2), C(256, 192, 3, 2), C(128, 192, 4, 2)],
    (4000, 4000, 4000): [C(128, 256, 4, 2), C(256, 160, 4, 2), C(256, 192, 3, 2), C(128, 192, 4, 2)],
    (8192, 8192, 8192): [C(128, 256, 4, 2), C(256, 160, 4, 2), C(256, 192, 3, 2)],
    (1000, 1000, 1000): [C(256, 160, 4, 2), C(128, 192, 4, 2), C(256, 192, 3, 2)],
}
CANDS1 = {
    (2000, 5000, 3000): [C(128, 256, 4, 2), C(256, 160, 4, 2), C(128, 224, 4, 2), C(256, 192, 3, 2),
                         C(128, 192, 4, 2), C(192, 160, 4, 3), C(256, 160, 3, 2)],
    (2000, 5000, 3072): [C(128, 256, 4, 2), C(256, 160, 4, 2), C(128, 224, 4, 2), C(256, 192, 3, 2)],
    (512, 28672, 4096): [C(128, 128, 4, 2), C(128, 224, 4, 2), C(128, 192, 4, 2), C(256, 160, 4, 2),
                         C(128, 256, 4, 2)],
    (3000, 14336, 4096): [C(64, 256, 4, 1), C(128, 224, 4, 2), C(256, 192, 3, 2), C(128, 256, 4, 2)],
    (4000, 4000, 4000): [C(128, 256, 4, 2), C(128, 224, 4, 2), C(256, 160, 4, 2)],
}


CANDS = CANDS2 if os.environ.get("SET", "2") == "2" else CANDS1


def split(c):
    return c if isinstance(c, tuple) else (c, mm.TUNING)


def main():
    import torch
    torch.manual_seed(23)
    dev = torch.cuda.current_device()
    stream = torch.cuda.current_stream().cuda_stream
    sms = mm.sm_count(dev)
    rounds = int(os.environ.get("ROUNDS", "5"))
    # build every kernel first, in parallel
    jobs = []
    for (m, n, k), cands in CANDS.items():
        a = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.empty(n, k, device="cuda", dtype=torch.bfloat16).t()
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for c in cands:
            jobs.append((a, b, out, *split(c)))
    def build(j):
        a, b, out, c, tu = j
        try:
            p = mm._plan(a, b, None, None, None, out, sms, tu, c)
            mm._recipe(p, dev, stream, c)
            return None
        except Exception as e:
            return f"{c.describe()}: {str(e)[:200]}"
    with ThreadPoolExecutor(16) as pool:
        for r in pool.map(build, jobs):
            if r:
                print(json.dumps({"build-error": r}), flush=True)
    del jobs
    extra_checks(torch, dev, stream, sms)
    for (m, n, k), cands in CANDS.items():
        a = (torch.randn(m, k, device="cuda") / 4).bfloat16()
        b = (torch.randn(n, k, device="cuda") / 4).bfloat16().t()
        ref = a.float() @ b.float()
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        from pipeline_core_nvidia_h100 import matmul
        impls = {"cublas": lambda: torch.matmul(a, b, out=out),
                 "call": lambda: matmul(a, b, out=out)}
        for cc in cands:
            c, tu = split(cc)
            try:
                p = mm._plan(a, b, None, None, None, out, sms, tu, c)
                r = mm._recipe(p, dev, stream, c)
            except Exception as e:
                print(json.dumps({"shape": [m, n, k], "cand": c.describe(), "error": str(e)[:200]}), flush=True)
                continue
            res = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            res.fill_(float("nan"))
            mm.launch_recipe(r, a, b, None, res)
            torch.cuda.synchronize()
            err = ((res.float() - ref).norm() / ref.norm()).item()
            if not err < 2e-2:
                print(json.dumps({"shape": [m, n, k], "cand": c.describe(), "wrong": err}), flush=True)
                continue
            impls[f"{c.bm}x{c.bn}s{c.stages}c{c.consumers}/{p.splits}/{p.variant.store}"] = (
                lambda r=r, res=res: mm.launch_recipe(r, a, b, None, res))
        per = interleaved(torch, impls, rounds)
        flops = 2.0 * m * n * k
        for name in impls:
            med = statistics.median(per[name])
            print(json.dumps({"shape": [m, n, k], "cand": name, "us": round(med * 1e3, 2),
                              "tflops": round(flops / med / 1e9, 1),
                              "vs_cublas": None if name == "cublas" else ratios(per, name, "cublas")}),
                  flush=True)
        del a, b, ref, out
        torch.cuda.empty_cache()


def extra_checks(torch, dev, stream, sms):
    """The 32-column TMA store under every epilogue: fp32 / bf16 out, bias, gelu, tails."""
    import torch.nn.functional as F
    n_ok = n_all = 0
    for (m, n, k) in ((1000, 1000, 1000), (333, 520, 200), (2000, 5000, 3000), (64, 96, 64)):
        for c in (C(256, 160, 4, 2), C(128, 192, 4, 2), C(256, 192, 3, 2)):
            for out_dt in (torch.bfloat16, torch.float32):
                for act in (None, "gelu"):
                    a = (torch.randn(m, k, device="cuda") / 4).bfloat16()
                    b = (torch.randn(n, k, device="cuda") / 4).bfloat16().t()
                    bias = torch.randn(n, device="cuda").bfloat16()
                    ref = a.float() @ b.float() + bias.float()
                    if act:
                        ref = F.gelu(ref, approximate="tanh")
                    res = torch.empty(m, n, device="cuda", dtype=out_dt)
                    res.fill_(float("nan"))
                    try:
                        p = mm._plan(a, b, bias, act, out_dt, res, sms, mm.TUNING, c)
                        r = mm._recipe(p, dev, stream, c)
                        mm.launch_recipe(r, a, b, bias, res)
                        torch.cuda.synchronize()
                        err = ((res.float() - ref).norm() / ref.norm()).item()
                        store = p.variant.store
                    except Exception as e:
                        err, store = str(e)[:150], "?"
                    n_all += 1
                    ok = isinstance(err, float) and err < 2e-2
                    n_ok += ok
                    if not ok or store == "tma":
                        print(json.dumps({"check": [m, n, k], "cand": f"{c.bm}x{c.bn}", "out": str(out_dt),
                                          "act": act, "store": store, "err": err, "ok": ok}), flush=True)
    print(json.dumps({"checks": n_all, "ok": n_ok}), flush=True)


if __name__ == "__main__":
    main()
