"""Which decomposition each GEMM shape wants: every candidate of a panel timed against cuBLAS.

  python3 benchmarks/gemm_decompose.py --prebuild     # here, no GPU: the panel's cubins
  python3 benchmarks/gemm_decompose.py [--rounds 3]   # on the GPU

Why: the untuned call launched one tile (128x256) for every shape, and fell to 0.61x cuBLAS on
shapes whose tiles do not fill the machine (issue 35).  Before choosing a rule, measure: for
each shape of the issue's list, the call as it stands (``default``), the wave model's choice
(``model``: autotune.rank's best), and a fixed panel of tiles, consumer counts and split-K,
each forced through ``matmul_call._plan(..., c)``; all in one process with cuBLAS, CUDA-event
medians after warm-up, interleaved rounds with the order rotated, per-round ratios.  Each
candidate's result is checked against an fp32 reference (NaN-poisoned output) before timing.
One JSON line per (shape, candidate) on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))
os.environ.setdefault("PIPELINE_CORE_CACHE_DIR", str(ROOT / "benchmarks" / "_kitcache"))

from bench_timing import interleaved, ratios  # noqa: E402

SMS = 132
#: issue 35's shapes (bf16): M, N, K
SHAPES = ((8192, 8192, 8192), (4096, 4096, 4096), (4096, 8192, 2048), (8192, 14336, 4096),
          (8192, 4096, 14336), (6144, 6144, 6144), (8192, 8192, 8000), (16384, 1024, 4096),
          (2000, 5000, 3000), (128, 8192, 8192), (512, 28672, 4096), (3000, 14336, 4096),
          (4000, 4000, 4000), (8192, 28672, 4096), (16, 8192, 8192), (1, 4096, 4096),
          (1000, 4096, 4096))
FP8 = ((1000, 4096, 4096), (3000, 14336, 4096))


def panel(m: int, n: int, k: int, variant, scaled: bool = False):
    """The candidates timed for one shape: the model's best few and a fixed panel."""
    from pipeline_core_nvidia_h100 import autotune
    from pipeline_core_nvidia_h100.autotune import Candidate

    fixed = [Candidate(bm=128, bn=128, stages=s, consumers=2) for s in (4, 5)]
    fixed += [Candidate(bm=256, bn=128, stages=4, consumers=2),
              Candidate(bm=128, bn=256, stages=4, consumers=2),
              Candidate(bm=192, bn=128, stages=4, consumers=3),
              Candidate(bm=64, bn=256, stages=4, consumers=1),
              Candidate(bm=128, bn=64, stages=5, consumers=1)]
    fixed += [Candidate(bm=bm, bn=bn, stages=st, consumers=cs, split_k=True)
              for bm, bn, st, cs in ((128, 256, 4, 2), (128, 128, 5, 2), (64, 128, 5, 1),
                                     (64, 256, 4, 1), (128, 64, 5, 1))]
    found = []
    if not scaled:
        seen = set()
        for _, c in autotune.rank(m, n, k, variant, SMS):
            key = (c.bm, c.bn, c.consumers, c.split_k)
            if key not in seen:
                seen.add(key)
                found.append(("model", c))
            if len(found) == 3:
                break
    out, names = [], set()
    for why, c in found + [("panel", c) for c in fixed]:
        if c in names:
            continue
        if c.split_k:
            from pipeline_core_nvidia_h100.gemm_call import split_count
            tiles = -(-m // c.bm) * -(-n // c.bn)
            if split_count(tiles, -(-k // 64), SMS) < 2:
                continue
        if not (autotune.takes(c, variant) or autotune.takes(c, autotune.direct_store(variant))):
            continue
        names.add(c)
        out.append((why, c))
    return out


def _infos(m, n, k, dtype="bf16"):
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo
    a = TensorInfo(shape=(m, k), strides=(k, 1), dtype=dtype, ptr=0)
    b = TensorInfo(shape=(k, n), strides=(1, k), dtype=dtype, ptr=0)
    return a, b


def sources():
    """(source, kernel name) of every kernel the run launches."""
    from pipeline_core_nvidia_h100 import autotune, matmul_call as mm
    from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma
    from pipeline_core_nvidia_h100.gemm_call import TileShape, Tuning, plan_call
    from pipeline_core_nvidia_h100.gemm_signature import KERNEL_NAME

    keys = set()
    for shapes, scaled in ((SHAPES, False), (FP8, True)):
        for m, n, k in shapes:
            a, b = _infos(m, n, k, "e4m3" if scaled else "bf16")
            od = "bf16" if scaled else None
            base = plan_call(a, b, tile=mm.CALL_TILE, sms=SMS, tuning=mm.TUNING,
                             scale="tensor" if scaled else "none", out_dtype=od)
            keys.add((base.variant, autotune.DEFAULT))
            for _, c in panel(m, n, k, base.variant, scaled):
                tuning = mm.TUNING if c.split_k else Tuning(split_k=False)
                p = plan_call(a, b, tile=TileShape(bm=c.bm, bn=c.bn), sms=SMS, tuning=tuning,
                              scale="tensor" if scaled else "none", out_dtype=od)
                v = p.variant
                if v.store == "tma" and not autotune.takes(c, v):
                    v = autotune.direct_store(v)
                keys.add((v, c))
    out = []
    for v, c in sorted(keys, key=repr):
        compiled = mm.CALL.compile(mm.schedule_params(v, c),
                                   mm.CALL_STAGES if c == autotune.DEFAULT else c.stages)
        out.append((emit_wgmma(compiled), KERNEL_NAME))
    return out


def prebuild() -> None:
    from pipeline_core_nvidia_h100.kernel_cache import cubin_path
    from pipeline_core_nvidia_h100.runtime import ARCH

    todo = sources()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        paths = list(pool.map(lambda sn: cubin_path(sn[0], sn[1], ("-std=c++17",), ARCH), todo))
    print(json.dumps({"kind": "prebuild", "kernels": len(todo),
                      "built": sum(p is not None for p in paths)}), flush=True)


def run(rounds: int) -> None:
    import torch
    from pipeline_core_nvidia_h100 import autotune, matmul_call as mm

    torch.manual_seed(35)
    dev = torch.cuda.current_device()
    stream = torch.cuda.current_stream().cuda_stream
    summary = []
    for shapes, scaled in ((SHAPES, False), (FP8, True)):
        for m, n, k in shapes:
            dt = torch.float8_e4m3fn if scaled else torch.bfloat16
            a = (torch.randn(m, k, device="cuda") / 4).to(dt)
            bt = (torch.randn(n, k, device="cuda") / 4).to(dt)
            b = bt.t()
            scales = None
            if scaled:
                scales = (torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda"))
            ref = (a.float() @ b.float())
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            impls = {}
            if scaled:
                impls["cublas"] = lambda: torch._scaled_mm(a, b, scales[0], scales[1],
                                                           out_dtype=torch.bfloat16)
            else:
                impls["cublas"] = lambda: torch.matmul(a, b, out=out)
            base = mm._plan(a, b, None, None, None, None if scaled else out, mm.sm_count(dev),
                            mm.TUNING, scales=scales)
            cands = [("default", autotune.DEFAULT)] + panel(m, n, k, base.variant, scaled)
            rows = {}
            for why, c in cands:
                try:
                    p = mm._plan(a, b, None, None, None, None if scaled else out,
                                 mm.sm_count(dev), mm.TUNING, c, scales)
                    r = mm._recipe(p, dev, stream, c)
                except Exception as e:  # noqa: BLE001  (a candidate that does not build)
                    print(json.dumps({"shape": [m, n, k], "cand": c.describe(),
                                      "error": str(e)[:200]}), flush=True)
                    continue
                res = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                res.fill_(float("nan"))
                mm.launch_recipe(r, a, b, None, res, scales)
                torch.cuda.synchronize()
                want = ref * (1.0 if not scaled else 1.0)
                err = ((res.float() - want).norm() / want.norm().clamp_min(1e-6)).item()
                if not err < 2e-2:
                    print(json.dumps({"shape": [m, n, k], "cand": c.describe(), "wrong": err}),
                          flush=True)
                    continue
                name = f"{why}:{c.describe()}:split{p.splits}"
                rows[name] = (r, res)
                impls[name] = (lambda r=r, res=res: mm.launch_recipe(r, a, b, None, res, scales))
            per = interleaved(torch, impls, rounds)
            flops = 2.0 * m * n * k
            best = None
            for name in impls:
                if name == "cublas":
                    continue
                rr = ratios(per, name, "cublas")
                med = statistics.median(per[name])
                rec = {"shape": [m, n, k], "fp8": scaled, "cand": name,
                       "ms": round(med, 5), "tflops": round(flops / med / 1e9, 1),
                       "vs_cublas": rr, "cublas_ms": round(statistics.median(per["cublas"]), 5)}
                print(json.dumps(rec), flush=True)
                if best is None or med < best[1]:
                    best = (name, med, rr)
            summary.append({"shape": [m, n, k], "fp8": scaled, "best": best[0],
                            "best_vs_cublas": best[2]})
            del a, bt, b, ref, out, rows
            torch.cuda.empty_cache()
    for s in summary:
        print(json.dumps({"kind": "summary", **s}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prebuild", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.prebuild:
        prebuild()
    else:
        run(args.rounds)


if __name__ == "__main__":
    main()
