"""2-CTA clusters with TMA multicast on the GPU (issue 26; docs/guide/matmul.md, "Clusters").

  python3 benchmarks/matmul_cluster.py --smoke          # one odd-tile-count case (run it first)
  python3 benchmarks/matmul_cluster.py --cases 64       # correctness, cluster=2 on every case
  compute-sanitizer --tool racecheck python3 benchmarks/matmul_cluster.py --sanitize
  python3 benchmarks/matmul_cluster.py --timing [--anchors ../shared/tools/gemm_anchors.py]
  python3 benchmarks/matmul_cluster.py --prebuild DIR   # CPU only: build every cubin into DIR

Correctness (METHOD.md): random (shape, dtype, layout, epilogue) cases with M drawn so the pair
of M tiles is often odd (the last pair's second CTA runs past M: it must still load and multicast
its half of B and release every stage, or its peer hangs), NaN-poisoned outputs, an fp32
reference; the call runs with ``Tuning(cluster=2, split_k=False)`` so every case with two or
more M tiles launches the cluster kernel (the record says which did).  Timing: cluster 2 vs 1 vs
the anchors' cublas and triton-tma-persist in this process, CUDA-event medians after warm-up,
interleaved rounds with the order rotated, per-round ratios.  One JSON line per result.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for extra in (HERE, ROOT, ROOT / "plugins" / "nvidia_h100"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import matmul_call as mc  # noqa: E402  (benchmarks/matmul_call.py: cases, reference, checks)

#: M sizes: 2 and 3 M tiles (an odd pair count), tails, and sizes of many tiles
from bench_timing import interleaved, ratios  # noqa: E402  (beside this script)
from bench_peers import anchors as load_anchors  # noqa: E402  (beside this script)
M_SIZES = (129, 200, 256, 300, 385, 500, 640, 1000, 1153, 2000, 4000)
N_SIZES = (1, 8, 17, 100, 256, 300, 1000, 4000)
K_SIZES = (1, 7, 64, 100, 130, 1000, 4000)
#: the epilogues drawn (matmul_call.EPILOGUES indices): none; bias + relu; fp16 out, fp32 bias, silu
EPILOGUES = (0, 1, 3)
TIMED = ((8192, 8192, 8192), (4096, 4096, 4096), (4096, 8192, 2048), (6144, 6144, 6144))
SANITIZE = ((300, 300, 130, "bf16", False, False, 1), (385, 260, 70, "fp16", True, True, 0))
H100_SMS = 132


def tunings():
    from pipeline_core_nvidia_h100.gemm_call import Tuning
    return Tuning(cluster=2, split_k=False), Tuning(cluster=1)


def draw(n, seed=2626):
    rng = random.Random(seed)
    cases = [(385, 300, 130, "bf16", False, False, 0), (129, 17, 7, "fp16", True, False, 1),
             (4000, 4000, 4000, "bf16", False, True, 0), (100, 300, 64, "bf16", False, False, 0)]
    while len(cases) < n:
        cases.append((rng.choice(M_SIZES), rng.choice(N_SIZES), rng.choice(K_SIZES),
                       rng.choice(("bf16", "fp16")), rng.random() < 0.5, rng.random() < 0.5,
                       rng.choice(EPILOGUES)))
    return cases


def info_plan(case, tuning):
    """The plan of a case from its shapes alone (no GPU): operands as matmul_call.operand makes
    them (padded leading dimension; column-major ones as transposed views)."""
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo, plan_call
    m, n, k, dt, a_col, b_col, e = case
    out, bias, act = mc.EPILOGUES[e]

    def op(rows, cols, col):
        inner = rows if col else cols
        width = -(-inner // 8) * 8
        strides = (1, width) if col else (width, 1)
        return TensorInfo(shape=(rows, cols), strides=strides, dtype=dt, ptr=4096, device="cuda:0")
    b_info = None if bias is None else TensorInfo(shape=(n,), strides=(1,), dtype=dt if bias ==
                                                  "same" else bias, ptr=4096, device="cuda:0")
    return plan_call(op(m, k, a_col), op(k, n, b_col), bias=b_info, activation=act,
                     out_dtype=out, sms=H100_SMS, tuning=tuning)


def all_variants(cases):
    cl, plain = tunings()
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo, plan_call
    vs = {info_plan(c, cl).variant for c in [*cases, *SANITIZE]}
    for m, n, k in TIMED:  # A row-major, B stored [N, K] (B.T is K-major)
        a = TensorInfo(shape=(m, k), strides=(k, 1), dtype="bf16", ptr=4096, device="cuda:0")
        b = TensorInfo(shape=(k, n), strides=(1, k), dtype="bf16", ptr=4096, device="cuda:0")
        for tuning in (cl, plain):
            vs.add(plan_call(a, b, sms=H100_SMS, tuning=tuning).variant)
    return sorted(vs, key=repr)


def prebuild(folder, cases):
    """Every variant's cubin into ``folder`` (PIPELINE_CORE_CACHE_DIR), in parallel."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    os.environ["PIPELINE_CORE_CACHE_DIR"] = folder
    from pipeline_core.api import compile_named
    from pipeline_core_nvidia_h100.emit_wgmma import KERNEL_NAME, emit_wgmma
    from pipeline_core_nvidia_h100.kernel_cache import cubin_path
    from pipeline_core_nvidia_h100.matmul_call import CALL, CALL_STAGES, schedule_params
    from pipeline_core_nvidia_h100.warpspecialized import SCHEDULE_NAME
    t0 = time.time()
    vs = all_variants(cases)
    host = CALL.host()
    sources = [emit_wgmma(compile_named(SCHEDULE_NAME, target="h100", params=schedule_params(v),
                                        target_args={"stages": str(CALL_STAGES)}, host=host))
               for v in vs]
    workers = int(os.environ.get("PREBUILD_WORKERS", "2"))
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda s: cubin_path(s, KERNEL_NAME, ("-std=c++17",), "sm_90a"), sources))
    print(json.dumps({"kind": "prebuild", "variants": len(vs), "seconds": round(time.time() - t0)}))


def correctness(torch, cases):
    from pipeline_core_nvidia_h100 import matmul_call
    cl, _ = tunings()
    matmul_call.TUNING = cl
    clustered = sum(mc.plan_of(torch, c).variant.cluster == 2 for c in cases)
    odd = sum(mc.plan_of(torch, c).variant.cluster == 2 and -(-c[0] // 128) % 2 == 1
              for c in cases)
    mc.emit({"kind": "cluster-cases", "cases": len(cases), "cluster2": clustered,
             "odd_m_tiles": odd})
    return mc.correctness(torch, cases)


def sanitize(torch):
    from pipeline_core_nvidia_h100 import matmul, matmul_call
    cl, _ = tunings()
    matmul_call.TUNING = cl
    for case in SANITIZE:
        a, b, bias = mc.case_tensors(torch, case)
        out_name, _, act = mc.EPILOGUES[case[-1]]
        od = None if out_name is None else mc.torch_dtype(torch, out_name)
        got = matmul(a, b, bias=bias, activation=act, out_dtype=od)
        torch.cuda.synchronize()
        ref = mc.reference(torch, a, b, bias, act)
        err = float((got.float() - ref).norm() / ref.norm())
        print(json.dumps({"kind": "sanitize-case", "case": case, "rel_err": err,
                          "cluster": mc.plan_of(torch, case).variant.cluster}), flush=True)


def timing(torch, anchors_path, rounds=5, reps=20):
    from pipeline_core_nvidia_h100 import matmul, matmul_call
    peers = load_anchors(anchors_path).gemm_peers()
    cl, plain = tunings()
    out = []
    for m, n, k in TIMED:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        bt = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

        def ours(tuning):
            def run():
                matmul_call.TUNING = tuning
                matmul(a, bt.T, out=c)
            return run
        impls = {"cluster2": ours(cl), "cluster1": ours(plain),
                 "cublas": lambda: peers["cublas"](a, bt, c),
                 "triton-tma-persist": lambda: peers["triton-tma-persist"](a, bt, c)}
        ref = a.float() @ bt.float().T
        for name, fn in impls.items():  # warm-up and a check, NaN-poisoned
            c.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            err = float((c.float() - ref).norm() / ref.norm())
            mc.emit({"kind": "timing-check", "shape": [m, n, k], "impl": name, "rel_err": err,
                     "ok": err < mc.TOL["bf16"]})
        del ref
        names = list(impls)
        per = interleaved(torch, impls, rounds, reps)
        flop = 2.0 * m * n * k
        matmul_call.TUNING = cl
        grid = matmul_call._plan(a, bt.T, None, None, None, c, matmul_call.sm_count(0), cl).grid
        rec = {"kind": "timing", "shape": [m, n, k], "rounds": rounds, "reps": reps,
               "cluster2_grid": grid}
        for name in names:
            med = statistics.median(per[name])
            rec[name] = {"ms": round(med, 4), "tflops": round(flop / med / 1e9, 1)}
        for peer in ("cluster1", "cublas", "triton-tma-persist"):
            rec[f"cluster2/{peer}"] = ratios(per, "cluster2", peer)
        mc.emit(rec)
        out.append(rec)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=0)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--timing", action="store_true")
    ap.add_argument("--prebuild", default=None)
    ap.add_argument("--anchors", default=str(ROOT.parent / "shared" / "tools" / "gemm_anchors.py"))
    args = ap.parse_args(argv)
    if args.prebuild:
        prebuild(args.prebuild, draw(max(args.cases, 64)))
        return 0
    import torch
    if args.sanitize:
        sanitize(torch)
        return 0
    mc.emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__})
    failures = 0
    if args.smoke:
        failures += correctness(torch, draw(1))
    if args.cases:
        failures += correctness(torch, draw(args.cases))
    if args.timing:
        for r in timing(torch, args.anchors):
            print(f"{'x'.join(map(str, r['shape'])):16} c2 {r['cluster2']['tflops']:6} "
                  f"c1 {r['cluster1']['tflops']:6} cublas {r['cublas']['tflops']:6} "
                  f"triton {r['triton-tma-persist']['tflops']:6}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
