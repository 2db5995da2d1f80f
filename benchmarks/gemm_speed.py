"""Issue 35's speed table: ``matmul`` / ``scaled_mm`` against cuBLAS and Triton, one process.

  python3 benchmarks/gemm_speed.py --prebuild          # here, no GPU: the cubins
  python3 benchmarks/gemm_speed.py [--rounds 5] [--anchors PATH] [--shapes MxNxK,...]

Every shape of the issue's list (the large aligned ones, those that quantize badly, small M and
decode, and two whose natural layout TMA cannot read: 4097x4095x4096 and 1000x1000x999), bf16,
and the fp8 shapes against ``torch._scaled_mm`` with per-tensor and row-wise scales.  Each
implementation is first checked against an fp32 reference on fresh random inputs with a
NaN-poisoned output; then CUDA-event medians after warm-up, interleaved rounds with the order
rotated, per-round ratios.  Each implementation is timed eagerly and replayed from a CUDA graph
of one call (``-graph``: the GPU's time without the host's launch), cuBLAS likewise, so small
shapes compare like with like.  Aligned shapes read ``a [M, K]`` row-major and B stored
``[N, K]`` (the peers' layout); the unaligned ones are torch's default layout, ``b [K, N]``
row-major, which cuBLAS takes as it is and the call stages (docs/guide/matmul.md).
One JSON line per shape on stdout (and --out), a table at the end.
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

from bench_peers import anchors as load_anchors  # noqa: E402
from bench_timing import graphed, interleaved, ratios  # noqa: E402

#: (M, N, K, aligned): issue 35's list; aligned False: torch's default layout, unaligned rows
SHAPES = ((8192, 8192, 8192, True), (4096, 4096, 4096, True), (4096, 8192, 2048, True),
          (8192, 14336, 4096, True), (8192, 4096, 14336, True), (6144, 6144, 6144, True),
          (8192, 8192, 8000, True), (16384, 1024, 4096, True), (2000, 5000, 3000, True),
          (128, 8192, 8192, True), (512, 28672, 4096, True), (3000, 14336, 4096, True),
          (4000, 4000, 4000, True), (8192, 28672, 4096, True), (16, 8192, 8192, True),
          (1, 4096, 4096, True), (4097, 4095, 4096, False), (1000, 1000, 999, False))
FP8 = ((1000, 4096, 4096), (3000, 14336, 4096), (8192, 8192, 8192))
TOL = 2e-2
LINES: list[dict] = []


OUT: list[Path] = []


def emit(rec: dict) -> None:
    LINES.append(rec)
    print(json.dumps(rec), flush=True)
    for path in OUT:  # line by line: a run stopped halfway keeps what it measured
        with path.open("a") as f:
            f.write(json.dumps(rec) + "\n")


def check(torch, name, fn, out, ref, shape) -> bool:
    out.fill_(float("nan"))
    try:
        fn()
    except Exception as e:  # noqa: BLE001  (a refusal is a result to report)
        emit({"kind": "check-failed", "shape": shape, "impl": name, "error": str(e)[:300]})
        return False
    torch.cuda.synchronize()
    err = float((out.float() - ref).norm() / ref.norm().clamp_min(1e-12))
    ok = err < TOL
    if not ok:
        emit({"kind": "check-failed", "shape": shape, "impl": name, "rel_err": err})
    return ok


def bf16_row(torch, peers, m, n, k, aligned, rounds):
    from pipeline_core_nvidia_h100 import matmul
    from pipeline_core_nvidia_h100 import matmul_call as mm

    a = torch.randn(m, k, device="cuda").bfloat16()
    if aligned:
        bt = torch.randn(n, k, device="cuda").bfloat16()
        b = bt.T
    else:
        b = torch.randn(k, n, device="cuda").bfloat16()
        bt = None
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    impls = {"ours": lambda: matmul(a, b, out=out),
             "cublas": lambda: torch.matmul(a, b, out=out)}
    if aligned and "triton-tma-persist" in peers:
        impls["triton-tma-persist"] = lambda: peers["triton-tma-persist"](a, bt, out)
    checked = {name: fn for name, fn in impls.items()
               if check(torch, name, fn, out, ref, [m, n, k])}
    for name in ("ours", "cublas"):
        if name in checked:
            g = graphed(torch, checked[name])
            if check(torch, name + "-graph", g, out, ref, [m, n, k]):
                checked[name + "-graph"] = g
    try:
        plan = mm._plan(a, b, None, None, None, out, mm.sm_count(0), mm.TUNING)
        c = mm._candidate(a, b, None, None, None, out, plan, 0, 0, mm.sm_count(0), False)
        plan = mm._plan(a, b, None, None, None, out, mm.sm_count(0), mm.TUNING, c)
        decomposition = c.describe() + (f", {plan.splits} splits" if plan.splits > 1 else "")
    except Exception as e:  # noqa: BLE001  (reported by the check above)
        decomposition = f"refused: {str(e)[:60]}"
    per = interleaved(torch, checked, rounds)
    rec = {"kind": "bf16", "shape": [m, n, k], "aligned": aligned, "rounds": rounds,
           "decomposition": decomposition}
    flop = 2.0 * m * n * k
    for name, t in per.items():
        rec[name] = {"ms": round(statistics.median(t), 5),
                     "tflops": round(flop / statistics.median(t) / 1e9, 1)}
    for ours, peer in (("ours", "cublas"), ("ours-graph", "cublas-graph"),
                       ("ours", "triton-tma-persist")):
        if ours in per and peer in per:
            rec[f"{ours}/{peer}"] = ratios(per, ours, peer)
    emit(rec)
    return rec


def fp8_row(torch, m, n, k, rowwise, rounds):
    from pipeline_core_nvidia_h100 import scaled_mm

    a = (torch.randn(m, k, device="cuda") / 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") / 2).to(torch.float8_e4m3fn).T
    if rowwise:
        sa = torch.rand(m, 1, device="cuda") + 0.5
        sb = torch.rand(1, n, device="cuda") + 0.5
    else:
        sa, sb = torch.tensor(0.7, device="cuda"), torch.tensor(1.3, device="cuda")
    ref = (a.float() @ b.float()) * sa * sb
    box = {}

    def ours():
        box["out"] = scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)

    def peer():
        box["out"] = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)

    impls = {}
    for name, fn in (("ours", ours), ("torch-scaled-mm", peer)):
        fn()
        torch.cuda.synchronize()
        err = float((box["out"].float() - ref).norm() / ref.norm())
        if err < TOL:
            impls[name] = fn
        else:
            emit({"kind": "check-failed", "shape": [m, n, k], "impl": name, "rel_err": err})
    for name in list(impls):  # each replayed from a CUDA graph too: the GPU's time alone
        impls[name + "-graph"] = graphed(torch, impls[name])
    per = interleaved(torch, impls, rounds)
    flop = 2.0 * m * n * k
    rec = {"kind": "fp8", "shape": [m, n, k], "scales": "row" if rowwise else "tensor",
           "rounds": rounds}
    for name, t in per.items():
        rec[name] = {"ms": round(statistics.median(t), 5),
                     "tflops": round(flop / statistics.median(t) / 1e9, 1)}
    for ours, peer in (("ours", "torch-scaled-mm"), ("ours-graph", "torch-scaled-mm-graph")):
        if ours in per and peer in per:
            rec[f"{ours}/{peer}"] = ratios(per, ours, peer)
    emit(rec)
    return rec


def prebuild() -> None:
    """Here, with no GPU: every kernel the run launches, built into the disk cache
    (gemm_build: the plan and decomposition from the tensors' descriptions, on 132 SMs)."""
    from gemm_build import kernel_key
    from gemm_build import prebuild as build
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo

    def info(shape, strides, dtype):
        return TensorInfo(shape=shape, strides=strides, dtype=dtype, ptr=0)

    keys = set()
    for m, n, k, aligned in SHAPES:
        keys.add(kernel_key(info((m, k), (k, 1), "bf16"),
                            info((k, n), (1, k) if aligned else (n, 1), "bf16"),
                            out=info((m, n), (n, 1), "bf16")))
    for m, n, k in FP8:
        a, b = info((m, k), (k, 1), "e4m3"), info((k, n), (1, k), "e4m3")
        keys.add(kernel_key(a, b, out_dtype="bf16", scales=(info((), (), "fp32"),
                                                            info((), (), "fp32"))))
        keys.add(kernel_key(a, b, out_dtype="bf16", scales=(info((m, 1), (1, 1), "fp32"),
                                                            info((1, n), (n, 1), "fp32"))))
    build(None, keys, emit)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--anchors", default=str(ROOT.parent / "shared" / "tools" / "gemm_anchors.py"))
    ap.add_argument("--shapes", default=None, help="MxNxK,... (bf16, aligned layout)")
    ap.add_argument("--no-fp8", action="store_true")
    ap.add_argument("--out", default=None, help="a results .jsonl to write")
    ap.add_argument("--prebuild", action="store_true", help="here, no GPU: build the cubins")
    args = ap.parse_args()
    if args.prebuild:
        prebuild()
        return 0
    import torch

    torch.manual_seed(35)
    if args.out:
        OUT.append(Path(args.out))
        OUT[0].write_text("")
    peers = load_anchors(args.anchors).gemm_peers() if Path(args.anchors).exists() else {}
    emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__,
          "peers": sorted(peers)})
    shapes = SHAPES if args.shapes is None else tuple(
        (*(int(x) for x in s.split("x")), True) for s in args.shapes.split(","))
    rows = []
    for m, n, k, aligned in shapes:
        rows.append(bf16_row(torch, peers, m, n, k, aligned, args.rounds))
        torch.cuda.empty_cache()
    fp8 = []
    if not args.no_fp8:
        for m, n, k in FP8:
            for rowwise in (False, True):
                fp8.append(fp8_row(torch, m, n, k, rowwise, args.rounds))
    print("\nshape              decomposition                                     ours/cublas"
          "  graph/graph  ours/triton")
    med = []
    for r in rows:
        oc = statistics.median(r["ours/cublas"]) if "ours/cublas" in r else float("nan")
        if "ours" not in r:
            print(f"{'x'.join(map(str, r['shape'])):18} {r['decomposition'][:48]}")
            continue
        gg = (statistics.median(r["ours-graph/cublas-graph"])
              if "ours-graph/cublas-graph" in r else float("nan"))
        ot = (statistics.median(r["ours/triton-tma-persist"])
              if "ours/triton-tma-persist" in r else float("nan"))
        med.append(max(oc, gg) if gg == gg else oc)
        print(f"{'x'.join(map(str, r['shape'])):18} {r['decomposition'][:48]:48} {oc:11.3f}"
              f" {gg:12.3f} {ot:12.3f}")
    good = [x for x in med if x == x]
    if good:
        print(f"geomean ours/cublas (best of eager and graph per shape): "
              f"{statistics.geometric_mean(good):.3f}; min {min(good):.3f}")
    for r in fp8:
        if "ours/torch-scaled-mm" in r:
            graph = r.get("ours-graph/torch-scaled-mm-graph")
            print(f"fp8 {'x'.join(map(str, r['shape'])):18} {r['scales']:7} "
                  f"{statistics.median(r['ours/torch-scaled-mm']):.3f} eager, "
                  f"{statistics.median(graph) if graph else float('nan'):.3f} graph")
    return 0


if __name__ == "__main__":
    sys.exit(main())
