"""The cp.async producer against the TMA one and cuBLAS, on operands whose rows are off the
128-byte line (issue 35; docs/guide/matmul.md, "The cp.async producer").

  python3 benchmarks/gemm_cpasync.py [--rounds 5]      # on the GPU

Why: a K-major operand of row stride 6000 bytes (2000x5000x3000 bf16, contiguous) makes every
128-byte row of a TMA box straddle two 128-byte lines; the call ran 0.59 of cuBLAS there by
TMA and 0.94 with the rows padded to 3072.  First every case is checked against an fp32
reference (the output NaN-poisoned first: a tile never written shows), by cp.async (the
default pick) and by TMA (``Tuning(cp_async=False)``), with tails in M, N and K (a K of 999
whose last 16-byte chunk is partial, zero-filled by cp.async's src-size), padded strides, the
epilogue and split-K; then each timed shape runs cuBLAS (torch.matmul on the same views), the
TMA producer and the cp.async one at the 128x256 and 128x128 tiles in one process, CUDA-event
medians after warm-up, interleaved rounds with the order rotated, per-round ratios.  One JSON
line per check and per (shape, tile) on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))
os.environ.setdefault("PIPELINE_CORE_CACHE_DIR", str(ROOT / "benchmarks" / "_kitcache"))

from bench_timing import interleaved, ratios  # noqa: E402

#: correctness: (M, N, K, A's row stride, B's row stride, epilogue) with B K-major ([N, K]
#: storage read as b = storage[:, :K].t())
CHECKS = ((2000, 5000, 3000, 3000, 3000, None), (2000, 5000, 3000, 3008, 3008, None),
          (2000, 5000, 3000, 3072, 3072, None), (2000, 5000, 3000, 3072, 3000, None),
          (1000, 1000, 1000, 1000, 1000, None), (129, 257, 200, 200, 200, None),
          (129, 257, 999, 1000, 1000, None), (77, 300, 999, 1008, 1000, "gelu"),
          (128, 1024, 8192, 8200, 8200, None), (4000, 4000, 4000, 4000, 4000, "relu"),
          (1, 4096, 3000, 3000, 3000, None), (300, 1, 3000, 3000, 3000, None),
          (2000, 5000, 3000, 3001, 3001, None))
#: timed: (M, N, K, row stride of both operands)
SHAPES = ((2000, 5000, 3000, 3000), (2000, 5000, 3000, 3072), (4000, 4000, 4000, 4000),
          (1000, 1000, 1000, 1000), (2048, 5120, 3000, 3000), (2048, 5120, 3072, 3072))


def operands(torch, m, n, k, lda, ldb, dtype):
    """A [m, k] and B [k, n] (K-major: [n, ldb] storage transposed), rows ``lda`` / ``ldb``
    elements apart, with garbage in the padding."""
    sa = torch.randn(m, lda, device="cuda", dtype=torch.float32).to(dtype)
    sb = torch.randn(n, ldb, device="cuda", dtype=torch.float32).to(dtype)
    return sa[:, :k], sb[:, :k].t()


def forced(torch, a, b, tuning, c):
    """The call's plan and kernel for ``a @ b`` under ``tuning`` and candidate ``c``, and a
    launch of it into its own output."""
    from pipeline_core_nvidia_h100 import matmul_call as mc

    dev = a.device.index or 0
    stream = torch.cuda.current_stream().cuda_stream
    plan = mc._plan(a, b, None, None, None, None, mc.sm_count(dev), tuning, c)
    out = torch.empty(plan.out_shape, dtype=a.dtype, device=a.device)
    r = mc._recipe(plan, dev, stream, c)

    def go():
        mc.launch_recipe(r, a, b, None, out)
        return out
    return plan, out, go


def check(torch, case):
    import attrs
    from pipeline_core_nvidia_h100 import matmul_call as mc
    from pipeline_core_nvidia_h100.autotune import DEFAULT
    from pipeline_core_nvidia_h100.matmul_call import matmul

    m, n, k, lda, ldb, act = case
    torch.manual_seed(m * 7 + n * 3 + k)
    a, b = operands(torch, m, n, k, lda, ldb, torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.float32) if act else None
    ref = a.float() @ b.float()
    if bias is not None:
        ref = ref + bias
        ref = {"relu": torch.relu, "gelu": lambda x: torch.nn.functional.gelu(
            x, approximate="tanh")}[act](ref)
    line = {"check": f"{m}x{n}x{k}", "lda": lda, "ldb": ldb, "epilogue": act or "none"}
    for label, on in (("cp_async", True), ("tma", False)):
        tuning = attrs.evolve(mc.TUNING, cp_async=on)
        try:
            if act:  # the public call (its default tuning picks the producer)
                if not on:
                    continue
                got = matmul(a, b, bias=bias, activation=act)
                load = "default pick"
            else:
                plan, out, go = forced(torch, a, b, tuning, DEFAULT)
                out.fill_(float("nan"))
                got = go()
                load = plan.variant.load
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a refusal is a result here
            line[label] = f"refused: {str(exc).splitlines()[0][:160]}"
            continue
        err = (got.float() - ref).abs()
        tol = 2e-2 * ref.abs().max().item() + 1e-2
        line[label] = {"load": load, "nan": bool(torch.isnan(got).any()),
                       "max_err": round(err.max().item(), 4), "ok": bool(err.max() <= tol)
                       and not torch.isnan(got).any()}
    print(json.dumps(line), flush=True)
    results = [v for key, v in line.items() if key in ("cp_async", "tma")]
    return bool(results) and all(isinstance(v, dict) and v["ok"] for v in results)


def time_shape(torch, shape, rounds):
    import attrs
    from pipeline_core_nvidia_h100 import matmul_call as mc
    from pipeline_core_nvidia_h100.autotune import DEFAULT, Candidate

    m, n, k, ld = shape
    a, b = operands(torch, m, n, k, ld, ld, torch.bfloat16)
    flop = 2.0 * m * n * k
    for label, c in (("128x256", DEFAULT), ("128x128", Candidate(bm=128, bn=128, stages=5))):
        impls = {"cublas": lambda: torch.matmul(a, b)}
        loads = {}
        for load, on in (("tma", False), ("cp_async", True)):
            plan, _, go = forced(torch, a, b, attrs.evolve(mc.TUNING, cp_async=on), c)
            loads[load] = plan.variant.load
            impls[load] = go
        per = interleaved(torch, impls, rounds)
        med = {name: statistics.median(v) for name, v in per.items()}
        print(json.dumps({
            "shape": f"{m}x{n}x{k}", "stride": ld, "tile": label, "planned": loads,
            "ms": {k_: round(v, 4) for k_, v in med.items()},
            "tflops": {k_: round(flop / v / 1e9, 1) for k_, v in med.items()},
            "vs_cublas": {x: ratios(per, x, "cublas") for x in ("tma", "cp_async")},
            "cp_async_vs_tma": ratios(per, "cp_async", "tma")}), flush=True)


def prebuild() -> None:
    """Here, with no GPU: every kernel the checks and timings force (both producers, both
    tiles), built into the disk cache (gemm_build.prebuild)."""
    import attrs
    from gemm_build import prebuild as build
    from pipeline_core_nvidia_h100 import matmul_call as mc
    from pipeline_core_nvidia_h100.autotune import DEFAULT, Candidate
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo

    keys = set()
    shapes = [(m, n, k, lda, ldb, DEFAULT) for m, n, k, lda, ldb, _ in CHECKS]
    shapes += [(m, n, k, ld, ld, c) for m, n, k, ld in SHAPES
               for c in (DEFAULT, Candidate(bm=128, bn=128, stages=5))]
    for m, n, k, lda, ldb, c in shapes:
        a = TensorInfo(shape=(m, k), strides=(lda, 1), dtype="bf16", ptr=0)
        b = TensorInfo(shape=(k, n), strides=(1, ldb), dtype="bf16", ptr=0)
        for on in (True, False):
            try:
                plan = mc.plan_infos(a, b, None, None, None, None, 132,
                                     attrs.evolve(mc.TUNING, cp_async=on), c)
            except Exception:  # noqa: BLE001  (a refusal: nothing to build)
                continue
            keys.add((plan.variant, c))
    build(None, keys)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--checks-only", action="store_true")
    ap.add_argument("--prebuild", action="store_true", help="here, no GPU: build the cubins")
    args = ap.parse_args()
    if args.prebuild:
        prebuild()
        return
    import torch

    ok = [check(torch, case) for case in CHECKS]
    print(json.dumps({"checks": len(ok), "passed": sum(ok)}), flush=True)
    if not args.checks_only:
        for shape in SHAPES:
            time_shape(torch, shape, args.rounds)


if __name__ == "__main__":
    main()
