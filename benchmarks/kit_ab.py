"""The kit's speed check (issue 34) and its worked family on the GPU, in one process:

  python3 benchmarks/ab_tree.py BASE benchmarks/_ab       # the earlier commit, renamed
  python3 benchmarks/kit_ab.py --prebuild                 # here: every cubin into the cache
  python3 benchmarks/kit_ab.py [--rounds 5]               # on the GPU

1. A/B: ``matmul`` and ``attention`` of the earlier commit (``abold_*``, benchmarks/ab_tree.py)
   and of this checkout, each checked against an fp32 reference on fresh random inputs (the
   outputs NaN-poisoned first where the call takes ``out=``), then timed in interleaved
   rounds with the order rotated (bench_timing.interleaved), per-round ratios new / old.
2. ``gemv`` (the worked family): correctness against ``a.float() @ x.float()`` on tails, odd
   strides, transposed and misaligned operands, bf16 and fp16, its autograd against torch's,
   under torch.compile and in a CUDA graph; then its bandwidth against ``torch.mv`` (cuBLAS)
   in interleaved rounds.
``--prebuild`` (no GPU): emits every kernel both trees and the family launch here and builds
each into the disk cache (``PIPELINE_CORE_CACHE_DIR``, default benchmarks/_kitcache), in
parallel, so the GPU run loads cubins instead of building them.  Every result is one JSON line.
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
OLD = ROOT / "benchmarks" / "_ab"
for extra in (OLD, ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention",
              ROOT / "plugins" / "family_gemv", ROOT / "benchmarks"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))
os.environ.setdefault("PIPELINE_CORE_CACHE_DIR", str(ROOT / "benchmarks" / "_kitcache"))

from bench_timing import interleaved, ratios  # noqa: E402

#: matmul's timed shapes (benchmarks/matmul_call.py's TIMED), bf16
GEMMS = ((8192, 8192, 8192), (6144, 6144, 6144), (4096, 4096, 4096), (4096, 8192, 2048),
         (8192, 14336, 4096), (8192, 4096, 14336), (16384, 4096, 4096), (2048, 2048, 8192),
         (4000, 4000, 4000), (1000, 4096, 4096), (128, 4096, 4096),
         # bandwidth-bound and off the 128-byte line (issue 35's list)
         (16, 8192, 8192), (1, 4096, 4096), (2000, 5000, 3000))
#: the backward's (head dim, sequence, causal) at 16k tokens and hidden 2048, timed forward and
#: backward together
BACKWARD = ((128, 1024, False), (128, 4096, False), (128, 4096, True), (64, 4096, False))
#: attention's (head dim, sequence, causal) at 16k tokens and hidden 2048 (attention_call.py)
ATTENTION = ((128, 1024, False), (128, 4096, False), (128, 16384, False), (128, 4096, True),
             (128, 16384, True), (64, 4096, False), (64, 16384, True), (128, 3000, False))
#: gemv's timed shapes (M, K): square, an MLP's up and down projections, an LM head
GEMVS = ((4096, 4096), (8192, 8192), (14336, 4096), (4096, 14336), (28672, 4096),
         (128256, 4096))
#: decode steps (batch, keys, Hq, Hkv), D 128, on a contiguous cache and pages of 64
#: (attention_decode.py's SHAPES but the two 64/8 ones)
DECODES = ((64, 8192, 32, 8), (8, 32768, 32, 8), (1, 131072, 32, 8), (8, 8192, 32, 8),
           (1, 8192, 32, 8), (1, 32768, 32, 8), (64, 1024, 32, 8), (8, 1024, 32, 8))
SMS = 132


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def _old_host() -> None:
    """The old tree's plugin host: its own plugins by module (entry points name the new)."""
    import abold_pipeline_core.plugins as plugins

    plugins._DEFAULT = plugins.PluginHost(autoload=False, extra_modules=[
        "abold_pipeline_core_nvidia_h100.plugin", "abold_pipeline_core_schedules_attention.plugin"])


def sources() -> list[tuple[str, str]]:
    """(source, kernel name) of every kernel the GPU run launches, both trees'."""
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo, plan_call
    from pipeline_core_nvidia_h100 import matmul_call as mm
    from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma
    from pipeline_core_nvidia_h100.gemm_signature import KERNEL_NAME as GEMM
    from pipeline_core_schedules_attention import call as at
    from pipeline_core_family_gemv.call import CALL, STAGES
    from pipeline_core_family_gemv.emit import KERNEL_NAME as GEMV, emit_gemv
    import abold_pipeline_core_schedules_attention.call as old_at

    _old_host()
    out = []
    variants = set()
    for m, n, k in GEMMS:
        a = TensorInfo(shape=(m, k), strides=(k, 1), dtype="bf16", ptr=0)
        b = TensorInfo(shape=(k, n), strides=(n, 1), dtype="bf16", ptr=0)
        variants.add(plan_call(a, b, tile=mm.CALL_TILE, sms=SMS, tuning=mm.TUNING).variant)
    for v in sorted(variants, key=repr):
        out.append((emit_wgmma(mm.CALL.compile(mm.schedule_params(v), mm.CALL_STAGES)), GEMM))
    for d, s, causal in ATTENTION:
        short = s <= at.SHORT_KEYS
        out.append((at._source(d, "bf16", causal, "top_left", short)[1], at.KERNEL_NAME))
        out.append((old_at._source(d, "bf16", causal, "top_left", short)[1],
                    old_at.KERNEL_NAME if hasattr(old_at, "KERNEL_NAME") else
                    "pc_flash_attention_fwd"))
    from pipeline_core_schedules_attention.decode_call import decode_source
    from pipeline_core_schedules_attention.signature import KERNEL_NAME as ATT

    out += [(decode_source(128, "bf16", False, split, chunks, chunks > 1)[1], ATT)
            for split in (False, True) for chunks in (1, 2)]
    for bm, stages in STAGES.items():
        c = CALL.compile({"block_m": str(bm)}, stages)
        out += [(emit_gemv(c, dtype=dt), GEMV) for dt in ("bf16", "fp16")]
    return out


def prebuild() -> None:
    from pipeline_core_nvidia_h100.kernel_cache import cubin_path
    from pipeline_core_nvidia_h100.runtime import ARCH

    todo = sources()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        paths = list(pool.map(lambda sn: cubin_path(sn[0], sn[1], ("-std=c++17",), ARCH), todo))
    emit({"kind": "prebuild", "kernels": len(todo), "built": sum(p is not None for p in paths),
          "cache": os.environ["PIPELINE_CORE_CACHE_DIR"]})


def rel_err(torch, out, ref) -> float:
    diff = torch.nan_to_num(out.float(), nan=1e6) - ref
    return float(diff.norm() / ref.norm().clamp_min(1e-30))


def graphed(torch, fn):
    """``fn`` called 10 times, captured once in a CUDA graph (after a warm-up on a side
    stream, as torch's graph guide does): a callable that replays it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(10):
            fn()
    return graph.replay


def ab(torch, rounds: int) -> None:
    from pipeline_core_nvidia_h100.matmul_call import matmul as new_mm
    from pipeline_core_schedules_attention.call import attention as new_at
    import abold_pipeline_core_nvidia_h100.matmul_call as old_mm_mod
    import abold_pipeline_core_schedules_attention.call as old_at_mod

    _old_host()
    for m, n, k in GEMMS:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        outs = {}
        for name, fn in (("old", old_mm_mod.matmul), ("new", new_mm)):
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            fn(a, b, out=out)
            outs[name] = rel_err(torch, out, ref)
        fns = {"old": lambda: old_mm_mod.matmul(a, b), "new": lambda: new_mm(a, b)}
        per = interleaved(torch, fns, rounds)
        r = ratios(per, "new", "old")
        # the same calls replayed from CUDA graphs (10 a graph): the GPU's time alone, so a
        # difference in the eager rows that is not here is the host's launch path
        graphs = {name: graphed(torch, fn) for name, fn in fns.items()}
        gper = interleaved(torch, graphs, rounds)
        g = ratios(gper, "new", "old")
        emit({"kind": "ab", "family": "matmul", "shape": [m, n, k], "rel_err": outs,
              "ms": {n_: statistics.median(v) for n_, v in per.items()},
              "new_over_old": r, "median": statistics.median(r),
              "graph_ms_per_call": {n_: statistics.median(v) / 10 for n_, v in gper.items()},
              "graph_new_over_old": g, "graph_median": statistics.median(g)})
    for d, s, causal in ATTENTION:
        bsz, h = 16384 // s, 2048 // d
        q, kk, v = (torch.randn(bsz, h, s, d, device="cuda", dtype=torch.bfloat16)
                    for _ in range(3))
        scores = (q.float() @ kk.float().transpose(-1, -2)) / d ** 0.5
        if causal:
            keep = torch.ones(s, s, dtype=torch.bool, device="cuda").tril()
            scores = scores.masked_fill(~keep, float("-inf"))
        ref = torch.softmax(scores, dim=-1) @ v.float()
        del scores
        errs = {"old": rel_err(torch, old_at_mod.attention(q, kk, v, causal=causal), ref),
                "new": rel_err(torch, new_at(q, kk, v, causal=causal), ref)}
        del ref
        fns = {"old": lambda: old_at_mod.attention(q, kk, v, causal=causal),
               "new": lambda: new_at(q, kk, v, causal=causal)}
        per = interleaved(torch, fns, rounds)
        r = ratios(per, "new", "old")
        emit({"kind": "ab", "family": "attention", "D": d, "S": s, "causal": causal,
              "rel_err": errs, "ms": {n_: statistics.median(x) for n_, x in per.items()},
              "new_over_old": r, "median": statistics.median(r)})


def decode_ab(torch, rounds: int) -> None:
    """attention_decode of both trees and sdpa-cudnn on a contiguous cache, and both trees on
    pages of 64 (the same values), each checked against an fp32 reference, replayed from CUDA
    graphs in interleaved rounds: per-round new / old and each against cuDNN."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from pipeline_core_schedules_attention.decode_call import attention_decode as new_dec
    from abold_pipeline_core_schedules_attention.decode_call import attention_decode as old_dec

    _old_host()
    for b, n, hq, hkv in DECODES:
        d = 128
        q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        lens = torch.full((b,), n, dtype=torch.int32, device="cuda")
        pages = n // 64
        table = torch.randperm(b * pages, device="cuda", dtype=torch.int32).view(b, pages)
        kp, vp = (torch.empty(b * pages, 64, hkv, d, device="cuda", dtype=torch.bfloat16)
                  for _ in range(2))
        kp[table.long().flatten()] = k.view(b * pages, 64, hkv, d)
        vp[table.long().flatten()] = v.view(b * pages, 64, hkv, d)
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
        fns = {"old": lambda: old_dec(q, k, v, cache_seqlens=lens),
               "new": lambda: new_dec(q, k, v, cache_seqlens=lens),
               "old-page64": lambda: old_dec(q, kp, vp, cache_seqlens=lens, block_table=table),
               "new-page64": lambda: new_dec(q, kp, vp, cache_seqlens=lens, block_table=table),
               "cudnn": lambda: cudnn().transpose(1, 2)}
        ref = F.scaled_dot_product_attention(
            qt.float(), kt.float().repeat_interleave(hq // hkv, 1),
            vt.float().repeat_interleave(hq // hkv, 1)).transpose(1, 2)
        errs = {name: rel_err(torch, fn(), ref) for name, fn in fns.items()}
        del ref
        graphs = {name: graphed(torch, fn) for name, fn in fns.items()}
        per = interleaved(torch, graphs, rounds)
        kv = 2 * b * n * hkv * d * 2
        emit({"kind": "ab", "family": "decode", "shape": [b, n, hq, hkv], "rel_err": errs,
              "tb_s": {nm: round(kv * 10 / statistics.median(x) / 1e9, 3)
                       for nm, x in per.items()},
              "new_over_old": ratios(per, "new", "old"),
              "new_over_cudnn": ratios(per, "new", "cudnn"),
              "old_over_cudnn": ratios(per, "old", "cudnn"),
              "page64_new_over_old": ratios(per, "new-page64", "old-page64")})
        del q, k, v, kp, vp, graphs, fns
        torch.cuda.empty_cache()


def backward_ab(torch, rounds: int) -> None:
    """attention's forward and backward of both trees (autograd through each tree's op): the
    gradients checked against an fp32 reference's, then timed in interleaved rounds."""
    from pipeline_core_schedules_attention.call import attention as new_at
    import abold_pipeline_core_schedules_attention.call as old_at_mod

    _old_host()
    for d, s_, causal in BACKWARD:
        bsz, h = 16384 // s_, 2048 // d
        q, k, v = (torch.randn(bsz, h, s_, d, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        g = torch.randn(bsz, h, s_, d, device="cuda", dtype=torch.bfloat16)
        qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
        torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal).backward(
            g.float())
        errs = {}
        for name, fn in (("old", old_at_mod.attention), ("new", new_at)):
            q.grad = k.grad = v.grad = None
            fn(q, k, v, causal=causal).backward(g)
            errs[name] = max(rel_err(torch, t.grad, r.grad) for t, r in
                             ((q, qf), (k, kf), (v, vf)))
        del qf, kf, vf

        def step(fn):
            return lambda: fn(q, k, v, causal=causal).backward(g)
        fns = {"old": step(old_at_mod.attention), "new": step(new_at)}
        per = interleaved(torch, fns, rounds)
        r = ratios(per, "new", "old")
        emit({"kind": "ab", "family": "attention-fwd+bwd", "D": d, "S": s_, "causal": causal,
              "grad_rel_err": errs, "ms": {n_: statistics.median(x) for n_, x in per.items()},
              "new_over_old": r, "median": statistics.median(r)})


def gemv_checks(torch) -> None:
    from pipeline_core_family_gemv import gemv

    cases = [((1, 1), "bf16", ""), ((7, 9), "fp16", ""), ((100, 257), "bf16", ""),
             ((4096, 4096), "bf16", ""), ((5000, 3001), "fp16", ""),
             ((300, 512), "bf16", "transposed"), ((300, 512), "bf16", "padded-rows"),
             ((300, 512), "fp16", "misaligned"), ((300, 512), "bf16", "strided-x"),
             ((20000, 1024), "bf16", ""), ((64, 0), "bf16", "")]
    for (m, k), dt, layout in cases:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dt]
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        x = torch.randn(k, device="cuda", dtype=dtype)
        if layout == "transposed":
            a = torch.randn(k, m, device="cuda", dtype=dtype).t()
        elif layout == "padded-rows":
            a = torch.randn(m, k + 3, device="cuda", dtype=dtype)[:, :k]
        elif layout == "misaligned":
            a = torch.randn(m * k + 1, device="cuda", dtype=dtype)[1:].view(m, k)
        elif layout == "strided-x":
            x = torch.randn(2 * k, device="cuda", dtype=dtype)[::2]
        ref = a.float() @ x.float()
        y = gemv(a, x)
        err = rel_err(torch, y, ref) if k else float(y.abs().max()) if m else 0.0
        emit({"kind": "gemv-check", "shape": [m, k], "dtype": dt, "layout": layout,
              "rel_err": err, "ok": err < (2e-2 if dt == "bf16" else 4e-3)})
    # autograd against torch's, torch.compile through the op, a CUDA graph's replay
    a = torch.randn(512, 768, device="cuda", dtype=torch.float16, requires_grad=True)
    x = torch.randn(768, device="cuda", dtype=torch.float16, requires_grad=True)
    gy = torch.randn(512, device="cuda", dtype=torch.float16)
    gemv(a, x).backward(gy)
    ga, gx = a.grad.clone(), x.grad.clone()
    a.grad = x.grad = None
    (a.float() @ x.float()).backward(gy.float())
    emit({"kind": "gemv-autograd", "da_err": rel_err(torch, ga, a.grad.float()),
          "dx_err": rel_err(torch, gx, x.grad.float())})
    a2, x2 = a.detach(), x.detach()
    compiled = torch.compile(lambda a, x: gemv(a, x) * 2, fullgraph=True)
    emit({"kind": "gemv-compile", "rel_err": rel_err(torch, compiled(a2, x2),
                                                      2 * (a2.float() @ x2.float()))})
    static_x = x2.clone()
    gemv(a2, static_x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = gemv(a2, static_x)
    static_x.copy_(torch.randn_like(static_x))
    graph.replay()
    torch.cuda.synchronize()
    emit({"kind": "gemv-graph", "rel_err": rel_err(torch, y, a2.float() @ static_x.float())})


def gemv_speed(torch, rounds: int) -> None:
    from pipeline_core_family_gemv import gemv

    for m, k in GEMVS:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(k, device="cuda", dtype=torch.bfloat16)
        err = rel_err(torch, gemv(a, x), a.float() @ x.float())
        fns = {"gemv": lambda: gemv(a, x), "torch.mv": lambda: torch.mv(a, x)}
        per = interleaved(torch, fns, rounds)
        bytes_ = (m * k + k + m) * 2
        emit({"kind": "gemv-time", "shape": [m, k], "rel_err": err,
              "ms": {n: statistics.median(v) for n, v in per.items()},
              "tb_s": {n: bytes_ / statistics.median(v) / 1e9 for n, v in per.items()},
              "ours_over_cublas": ratios(per, "gemv", "torch.mv")})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prebuild", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", choices=("ab", "gemv", "decode", "backward"), default=None)
    args = ap.parse_args()
    if args.prebuild:
        prebuild()
        return
    import torch

    emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__})
    if args.only in (None, "gemv"):
        gemv_checks(torch)
        gemv_speed(torch, args.rounds)
    if args.only in (None, "decode"):
        with torch.inference_mode():
            decode_ab(torch, args.rounds)
    if args.only in (None, "ab"):
        ab(torch, args.rounds)
    if args.only in (None, "backward"):
        backward_ab(torch, args.rounds)


if __name__ == "__main__":
    main()
