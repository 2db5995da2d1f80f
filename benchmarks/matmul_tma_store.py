"""The TMA-store epilogue on the GPU (issue 26; docs/guide/matmul.md, "The TMA-store epilogue").

  python3 benchmarks/matmul_tma_store.py [--cases 64] [--anchors PATH] [--sanitize]

1. Correctness (METHOD.md): random (shape, dtype, layout, epilogue) cases drawn as
   benchmarks/matmul_call.py draws them, kept where the call with ``Tuning(tma_store=True)``
   launches the TMA-store kernel (C's row stride 16-byte aligned, no split), fresh random inputs,
   NaN-poisoned outputs, against an fp32 torch reference (matmul_call.py's correctness()).
2. ``--sanitize``: a few small cases with tails in M, N and K through the TMA store only (run it
   under compute-sanitizer racecheck / synccheck).
3. Timing at 8192^3, 4096^3, 4096x8192x2048 and 6144^3: the call with the direct store
   (``tma-off``) and with the TMA store (``tma``) against the anchors' cublas and
   triton-tma-persist, in this process: CUDA-event medians after warm-up, interleaved rounds
   with the order rotated, per-round ratios.  Every result is one JSON line on stdout.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

from bench_timing import interleaved, ratios  # beside this script
from bench_peers import anchors as load_anchors  # beside this script

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("matmul_call_bench", HERE / "matmul_call.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)  # its sys.path set-up, case drawing, reference, correctness

TIMED = ((8192, 8192, 8192), (4096, 4096, 4096), (4096, 8192, 2048), (6144, 6144, 6144))
#: small shapes with tails in M, N and K whose C the TMA store can describe
SANITIZE = ((200, 320, 130, "bf16", False, False, 1), (130, 264, 70, "fp16", True, True, 2),
            (65, 520, 200, "bf16", True, False, 3))


def tma_tuning():
    import attrs

    from pipeline_core_nvidia_h100 import matmul_call
    return attrs.evolve(matmul_call.TUNING, tma_store=True)


def tma_cases(torch, n):
    """``n`` random cases the TMA-store kernel runs (drawn as matmul_call.py draws them)."""
    found, pool = [], bench.draw_cases(20 * n, seed=2626)
    for case in pool:
        plan = bench.plan_of(torch, case)
        if plan.variant.store == "tma":
            found.append(case)
        if len(found) == n:
            break
    return found


def timing(torch, anchors_path, rounds=7, reps=20, shapes=TIMED):
    from pipeline_core_nvidia_h100 import matmul, matmul_call
    peers = load_anchors(anchors_path).gemm_peers()
    on, off = tma_tuning(), bench_off()
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        bt = torch.randn(n, k, device="cuda").to(torch.bfloat16)  # B stored [N, K]
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

        def ours(tuning):
            def run():
                matmul_call.TUNING = tuning
                matmul(a, bt.T, out=c)
            return run

        impls = {"tma": ours(on), "tma-off": ours(off),
                 "cublas": lambda: peers["cublas"](a, bt, c),
                 "triton-tma-persist": lambda: peers["triton-tma-persist"](a, bt, c)}
        stores = {}
        for name, tuning in (("tma", on), ("tma-off", off)):
            matmul_call.TUNING = tuning
            stores[name] = bench.plan_of(torch, (m, n, k, "bf16", False, True, 0)).variant.store
        ref = a.float() @ bt.float().T
        for name, fn in impls.items():  # warm-up (builds, autotuning) and a check
            c.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            err = float((c.float() - ref).norm() / ref.norm())
            bench.emit({"kind": "timing-check", "shape": [m, n, k], "impl": name,
                        "rel_err": err, "ok": err < bench.TOL["bf16"]})
        del ref
        names = list(impls)
        per = interleaved(torch, impls, rounds, reps)
        flop = 2.0 * m * n * k
        rec = {"kind": "timing", "shape": [m, n, k], "rounds": rounds, "reps": reps,
               "stores": stores}
        for name in names:
            med = statistics.median(per[name])
            rec[name] = {"ms": round(med, 4), "tflops": round(flop / med / 1e9, 1)}
        for mine, peer in (("tma", "tma-off"), ("tma", "cublas"), ("tma", "triton-tma-persist"),
                           ("tma-off", "cublas"), ("tma-off", "triton-tma-persist")):
            rec[f"{mine}/{peer}"] = ratios(per, mine, peer)
        bench.emit(rec)
    matmul_call.TUNING = off


def bench_off():
    import attrs

    from pipeline_core_nvidia_h100 import matmul_call
    return attrs.evolve(matmul_call.TUNING, tma_store=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=64)
    ap.add_argument("--anchors", default=str(bench.ROOT.parent / "shared" / "tools" /
                                             "gemm_anchors.py"))
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--shapes", default=None,
                    help="timed shapes, MxNxK comma-separated (default: the slice's four)")
    args = ap.parse_args(argv)
    shapes = TIMED if args.shapes is None else tuple(
        tuple(int(x) for x in s.split("x")) for s in args.shapes.split(","))
    import torch

    from pipeline_core_nvidia_h100 import matmul_call
    matmul_call.TUNING = tma_tuning()
    if args.sanitize:
        from pipeline_core_nvidia_h100 import matmul
        for case in SANITIZE:
            a, b, bias = bench.case_tensors(torch, case)
            out_name, _, act = bench.EPILOGUES[case[-1]]
            od = None if out_name is None else bench.torch_dtype(torch, out_name)
            got = matmul(a, b, bias=bias, activation=act, out_dtype=od)
            torch.cuda.synchronize()
            ref = bench.reference(torch, a, b, bias, act)
            err = float((got.float() - ref).norm() / ref.norm())
            print(json.dumps({"kind": "sanitize-case", "case": case,
                              "store": bench.plan_of(torch, case).variant.store,
                              "rel_err": err}), flush=True)
        return 0
    bench.emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__})
    cases = tma_cases(torch, args.cases) if args.cases else []
    variants = {bench.variant_of(torch, c) for c in cases + list(SANITIZE)}
    timed = [(m, n, k, "bf16", False, True, 0) for m, n, k in shapes]
    variants |= {bench.variant_of(torch, c) for c in timed}
    matmul_call.TUNING = bench_off()
    variants |= {bench.variant_of(torch, c) for c in timed}
    matmul_call.TUNING = tma_tuning()
    bench.prebuild(torch, sorted(variants, key=repr))
    failures = bench.correctness(torch, cases)
    bench.emit({"kind": "tma-cases", "cases": len(cases),
                "tma": sum(bench.variant_of(torch, c).store == "tma" for c in cases)})
    if not args.skip_timing:
        timing(torch, args.anchors, shapes=shapes)
    print(f"correctness failures: {failures} of {len(cases)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
