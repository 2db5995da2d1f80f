"""``scaled_mm`` (fp8 e4m3) and batched ``matmul`` on the GPU: correctness, then timing.

  python3 benchmarks/matmul_fp8_call.py [--fp8-cases 64] [--batched-cases 44] [--out DIR]

1. Correctness (METHOD.md), fresh random inputs each case, NaN-poisoned outputs, an fp32
   reference: FP8 random scaled_mm cases (M, N from SIZES, K a multiple of 16 from K_SIZES,
   per-tensor or row-wise scales, bias, bf16 / fp16 / fp32 out; the reference is the fp8
   inputs dequantized to fp32, multiplied, scaled, biased), each also run through
   ``torch._scaled_mm`` against the same reference (its own error beside ours); BATCHED random
   batched cases (both 3-D, 3-D @ 2-D folded or not, 2-D @ 3-D; row- or column-major
   operands) against ``torch.matmul`` in fp32; fp8 and batched operands in layouts TMA cannot
   read where they lie, which the call stages (``fp8_staged``).  Then CUDA-graph replay and
   ``torch.compile`` of scaled_mm.
2. Timing: 8192 x 8192 x 4096 fp8 against ``torch._scaled_mm`` (per-tensor and row-wise
   scales), one batched shape against ``torch.bmm``: CUDA-event medians after warm-up,
   interleaved rounds with the order rotated, per-round ratios.
Every result is one JSON line on stdout (and in --out/results.jsonl); a table closes the output.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

from bench_timing import interleaved, ratios  # noqa: E402  (beside this script)

SIZES = (1, 7, 8, 17, 100, 127, 128, 1000, 4000, 4096)
K_SIZES = (16, 32, 48, 112, 128, 1008, 4000, 4096)
#: (out dtype, bias dtype or None)
FP8_EPILOGUES = (("bf16", None), ("bf16", "bf16"), ("fp16", "fp32"), ("fp32", None),
                 ("fp32", "fp32"))
TOL = {"bf16": 1.5e-2, "fp16": 4e-3, "fp32": 2e-3}
B_SIZES = (1, 2, 3, 5, 8)
BM_SIZES = (1, 7, 8, 17, 100, 127, 128, 300, 1000)
BATCH_KINDS = ("ab", "a-fold", "a-strided", "b")

LINES: list[dict] = []


def emit(record: dict) -> None:
    LINES.append(record)
    print(json.dumps(record), flush=True)


def tdt(torch, name):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def draw_fp8(n, seed=2608):
    rng = random.Random(seed)
    cases = [(1, 1, 16, "tensor", 0), (4000, 4000, 4000, "row", 1), (128, 4096, 4096, "row", 2),
             (1000, 4096, 4096, "tensor", 3), (7, 1, 32, "row", 4)]
    while len(cases) < n:
        cases.append((rng.choice(SIZES), rng.choice(SIZES), rng.choice(K_SIZES),
                      rng.choice(("tensor", "row")), rng.randrange(len(FP8_EPILOGUES))))
    return cases


def fp8_tensors(torch, case, device="cuda"):
    m, n, k, kind, e = case
    _, bias_kind = FP8_EPILOGUES[e]
    a = (torch.randn(m, k, device=device) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device=device) * 2).to(torch.float8_e4m3fn).t()  # column-major
    if kind == "tensor":
        sa = torch.rand((), device=device) + 0.5
        sb = torch.rand((), device=device) + 0.5
    else:
        sa = torch.rand(m, 1, device=device) + 0.5
        sb = torch.rand(1, n, device=device) + 0.5
    bias = None if bias_kind is None else torch.randn(n, device=device).to(tdt(torch, bias_kind))
    return a, b, sa.float(), sb.float(), bias


def fp8_plan(torch, case):
    from pipeline_core_nvidia_h100 import matmul_call
    a, b, sa, sb, bias = fp8_tensors(torch, case, "meta")
    out = tdt(torch, FP8_EPILOGUES[case[-1]][0])
    return matmul_call._plan(a, b, bias, None, out, None, matmul_call.sm_count(0),
                             matmul_call.TUNING, scales=(sa, sb))


def draw_batched(n, seed=2609):
    rng = random.Random(seed)
    cases = [(4, 100, 72, 64, "ab", "bf16", False, False),
             (3, 1, 1, 8, "a-fold", "fp16", False, False)]
    while len(cases) < n:
        cases.append((rng.choice(B_SIZES), rng.choice(BM_SIZES), rng.choice(BM_SIZES),
                      rng.choice(BM_SIZES), rng.choice(BATCH_KINDS), rng.choice(("bf16", "fp16")),
                      rng.random() < 0.5, rng.random() < 0.5))
    return cases


def _mat(torch, batch, rows, cols, dtype, col_major, device, interleave=False):
    """A [batch, rows, cols] operand (batch None: 2-D), row- or column-major in padded rows
    (8 elements); ``interleave``: the batch is the middle storage dimension (no fold)."""
    inner, outer = (rows, cols) if col_major else (cols, rows)
    width = -(-inner // 8) * 8
    if batch is None:
        v = torch.randn(outer, width, device=device).to(dtype)[:, :inner]
        return v.T if col_major else v
    if interleave:
        v = torch.randn(outer, batch, width, device=device).to(dtype)[:, :, :inner]
        v = v.permute(1, 0, 2)
    else:
        v = torch.randn(batch, outer, width, device=device).to(dtype)[:, :, :inner]
    return v.transpose(1, 2) if col_major else v


def batched_tensors(torch, case, device="cuda"):
    bsz, m, n, k, kind, dt, a_col, b_col = case
    dtype = tdt(torch, dt)
    a3 = kind in ("ab", "a-fold", "a-strided")
    b3 = kind in ("ab", "b")
    a = _mat(torch, bsz if a3 else None, m, k, dtype, a_col and kind != "a-fold", device,
             interleave=kind == "a-strided")
    b = _mat(torch, bsz if b3 else None, k, n, dtype, b_col, device)
    return a, b


def batched_plan(torch, case):
    from pipeline_core_nvidia_h100 import matmul_call
    a, b = batched_tensors(torch, case, "meta")
    return matmul_call._plan(a, b, None, None, None, None, matmul_call.sm_count(0),
                             matmul_call.TUNING)


def _pad8(x):
    return -(-x // 8) * 8


def _mat_info(batch, rows, cols, dtype, col_major, interleave=False):
    """:func:`_mat`'s shape and strides as a TensorInfo (planning with no torch: prebuild)."""
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo
    inner = rows if col_major else cols
    w = _pad8(inner)
    if batch is None:
        strides = (1, w) if col_major else (w, 1)
        shape = (rows, cols)
    elif interleave:
        strides = (w, 1, batch * w) if col_major else (w, batch * w, 1)
        shape = (batch, rows, cols)
    else:
        outer = cols if col_major else rows
        strides = (outer * w, 1, w) if col_major else (outer * w, w, 1)
        shape = (batch, rows, cols)
    return TensorInfo(shape=shape, strides=strides, dtype=dtype)


def variants_without_torch(fp8, batched, sms=132):
    """The (variant, candidate) pairs the cases launch, planned from shapes alone with the
    shapes' decomposition (gemm_build.kernel_key; the local prebuild)."""
    from gemm_build import kernel_key
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo
    found = set()
    for m, n, k, kind, e in fp8:
        out, bias = FP8_EPILOGUES[e]
        info = lambda shape, strides, dt="fp32": TensorInfo(shape=shape, strides=strides, dtype=dt)
        sa = info((), ()) if kind == "tensor" else info((m, 1), (1, 1))
        sb = info((), ()) if kind == "tensor" else info((1, n), (n, 1))
        found.add(kernel_key(info((m, k), (k, 1), "e4m3"), info((k, n), (1, k), "e4m3"),
                             scales=(sa, sb), bias=None if bias is None else info((n,), (1,), bias),
                             out_dtype=out, sms=sms))
    for bsz, m, n, k, kind, dt, a_col, b_col in batched:
        a3, b3 = kind in ("ab", "a-fold", "a-strided"), kind in ("ab", "b")
        a = _mat_info(bsz if a3 else None, m, k, dt, a_col and kind != "a-fold",
                      kind == "a-strided")
        b = _mat_info(bsz if b3 else None, k, n, dt, b_col)
        found.add(kernel_key(a, b, sms=sms))
    return found


def prebuild(torch, keys):
    """Every kernel's cubin built in parallel, then loaded (gemm_build.prebuild; carried ones
    come from the disk cache): (variant, candidate) pairs or bare variants (the default tile)."""
    from gemm_build import prebuild as build
    build(torch, keys, emit)


def rel(torch, x, ref):
    d = ref.norm()
    return float((x.float() - ref).norm() / (d if d > 0 else 1))


def fp8_correctness(torch, cases):
    from pipeline_core_nvidia_h100 import matmul_call, scaled_mm
    failures, table = 0, {}
    for i, case in enumerate(cases):
        m, n, k, kind, e = case
        out_name, bias_kind = FP8_EPILOGUES[e]
        a, b, sa, sb, bias = fp8_tensors(torch, case)
        ref = (a.float() @ b.float()) * sa * sb
        if bias is not None:
            ref = ref + bias.float()
        od = tdt(torch, out_name)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=od)
        matmul_call._run(a, b, bias, None, od, out, (sa, sb))  # the kernel, poisoned output
        pub = scaled_mm(a, b, sa, sb, out_dtype=od, bias=bias)  # the public call
        torch.cuda.synchronize()
        unwritten = int(torch.isnan(out.float()).sum())
        err = rel(torch, out, ref)
        same = bool(torch.equal(pub, out))
        try:
            theirs = torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=od)
            their_err = rel(torch, theirs, ref)
        except Exception as exc:  # noqa: BLE001  (a combination torch does not take)
            their_err = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        ok = unwritten == 0 and err < TOL[out_name] and same
        failures += not ok
        splits = fp8_plan(torch, case).splits
        emit({"kind": "fp8-case", "i": i, "M": m, "N": n, "K": k, "scale": kind, "out": out_name,
              "bias": bias_kind, "splits": splits, "rel_err": err, "torch_scaled_mm_rel_err":
              their_err, "unwritten": unwritten, "public_equal": same, "ok": ok})
        row = table.setdefault(f"{kind} {out_name}", {"cases": 0, "ok": 0, "max": 0.0,
                                                      "torch_max": 0.0})
        row["cases"] += 1
        row["ok"] += ok
        row["max"] = max(row["max"], err)
        if isinstance(their_err, float):
            row["torch_max"] = max(row["torch_max"], their_err)
    for key, row in sorted(table.items()):
        emit({"kind": "fp8-table", "layout": key, "cases": row["cases"], "ok": row["ok"],
              "max_rel_err": row["max"], "torch_scaled_mm_max_rel_err": row["torch_max"]})
    return failures


def batched_correctness(torch, cases):
    from pipeline_core_nvidia_h100 import matmul
    failures = 0
    for i, case in enumerate(cases):
        bsz, m, n, k, kind, dt, a_col, b_col = case
        a, b = batched_tensors(torch, case)
        ref = torch.matmul(a.float(), b.float())
        out = torch.full(tuple(ref.shape), float("nan"), device="cuda", dtype=a.dtype)
        matmul(a, b, out=out)
        pub = matmul(a, b)
        torch.cuda.synchronize()
        unwritten = int(torch.isnan(out.float()).sum())
        err = rel(torch, out, ref)
        plan = batched_plan(torch, case)
        ok = unwritten == 0 and err < TOL[dt] and bool(torch.equal(pub, out)) and \
            tuple(pub.shape) == tuple(ref.shape)
        failures += not ok
        emit({"kind": "batched-case", "i": i, "B": bsz, "M": m, "N": n, "K": k, "batched": kind,
              "dtype": dt, "a": "col" if a_col else "row", "b": "col" if b_col else "row",
              "grid_z": plan.batch, "variant_batch": plan.variant.batch, "rel_err": err,
              "unwritten": unwritten, "ok": ok})
    return failures


def fp8_staged(torch):
    """fp8 operands in layouts torch._scaled_mm takes but TMA cannot read where they lie, which
    scaled_mm stages into K-major copies (docs/guide/matmul.md, "Layouts TMA cannot read"):
    a slice of wider rows, an a with neither dimension contiguous, a b whose columns are not 16
    bytes apart, an a one byte past an aligned address; and batched bf16 operands with odd rows.
    Each against the fp32 reference with a NaN-poisoned out."""
    from pipeline_core_nvidia_h100 import matmul, matmul_call, scaled_mm
    failures = 0
    for m, n, k, how in ((100, 72, 64, "a-slice"), (257, 300, 128, "a-neither"),
                         (1000, 129, 4000, "b-columns"), (7, 4096, 4096, "a-offset")):
        x = (torch.randn(m, 2 * k + 16, device="cuda") * 2).to(torch.float8_e4m3fn)
        a = {"a-slice": x[:, 3:3 + k], "a-neither": x[:, :2 * k:2],
             "a-offset": x.flatten()[1:1 + m * k].view(m, k)}.get(how, x[:, :k].contiguous())
        w = (torch.randn(n, k + 5, device="cuda") * 2).to(torch.float8_e4m3fn)
        b = w[:, :k].t() if how == "b-columns" else w[:, :k].contiguous().t()
        sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
        ref = (a.float() @ b.float()) * sa * sb
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        matmul_call._run(a, b, None, None, torch.bfloat16, out, (sa, sb))
        pub = scaled_mm(a, b, sa, sb)
        torch.cuda.synchronize()
        err = rel(torch, out, ref)
        ok = int(torch.isnan(out.float()).sum()) == 0 and err < TOL["bf16"] and \
            bool(torch.equal(pub, out))
        failures += not ok
        emit({"kind": "fp8-staged", "M": m, "N": n, "K": k, "layout": how, "strides":
              [list(a.stride()), list(b.stride())], "rel_err": err, "ok": ok})
    for bsz, m, n, k in ((4, 300, 200, 500), (3, 7, 9, 999)):
        a = torch.randn(bsz, m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(k, n, device="cuda").to(torch.bfloat16).expand(bsz, k, n)
        ref = torch.matmul(a.float(), b.float())
        out = torch.full((bsz, n, m), float("nan"), device="cuda",
                         dtype=torch.bfloat16).transpose(1, 2)
        matmul(a, b, out=out)
        torch.cuda.synchronize()
        err = rel(torch, out, ref)
        ok = int(torch.isnan(out.float()).sum()) == 0 and err < TOL["bf16"]
        failures += not ok
        emit({"kind": "batched-staged", "B": bsz, "M": m, "N": n, "K": k, "rel_err": err,
              "ok": ok})
    return failures


def graph_and_compile(torch):
    from pipeline_core_nvidia_h100 import scaled_mm
    a = torch.randn(300, 256, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(200, 256, device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(300, 1, device="cuda") + 0.5, torch.rand(1, 200, device="cuda") + 0.5
    scaled_mm(a, b, sa, sb)  # warm (build) outside the capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        scaled_mm(a, b, sa, sb)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=side):
            y = scaled_mm(a, b, sa, sb)
    torch.cuda.current_stream().wait_stream(side)
    a.copy_(torch.randn(300, 256, device="cuda").to(torch.float8_e4m3fn))
    sa.copy_(torch.rand(300, 1, device="cuda") + 0.5)
    g.replay()
    torch.cuda.synchronize()
    ref = (a.float() @ b.float()) * sa * sb
    err = rel(torch, y, ref)
    emit({"kind": "fp8-graph-replay", "rel_err": err, "ok": err < TOL["bf16"]})
    f = torch.compile(lambda x, w, s, t: scaled_mm(x, w, s, t, out_dtype=torch.float32) * 2,
                      fullgraph=True)
    z = f(a, b, sa, sb)
    err = rel(torch, z, 2 * ref)
    emit({"kind": "fp8-torch-compile", "fullgraph": True, "rel_err": err, "ok": err < TOL["fp32"]})


def timing(torch, rounds=7, reps=20):
    from pipeline_core_nvidia_h100 import matmul, matmul_call, scaled_mm
    summary = []
    m, n, k = 8192, 8192, 4096
    a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn).t()
    for kind in ("tensor", "row"):
        if kind == "tensor":
            sa, sb = torch.tensor(0.7, device="cuda"), torch.tensor(1.3, device="cuda")
        else:
            sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
        ref = (a.float() @ b.float()) * sa * sb
        impls = {"ours": lambda: scaled_mm(a, b, sa, sb),
                 "torch._scaled_mm": lambda: torch._scaled_mm(a, b, sa, sb,
                                                              out_dtype=torch.bfloat16)}
        for name, fn in impls.items():
            err = rel(torch, fn(), ref)
            emit({"kind": "timing-check", "shape": [m, n, k], "scale": kind, "impl": name,
                  "rel_err": err})
        del ref
        plan = matmul_call._plan(a, b, None, None, None, None, matmul_call.sm_count(0),
                                 matmul_call.TUNING, scales=(sa, sb))
        per = interleaved(torch, impls, rounds, reps)
        flop = 2.0 * m * n * k
        rec = {"kind": "timing", "what": f"fp8 scaled_mm, {kind} scales, bf16 out",
               "shape": [m, n, k], "rounds": rounds, "grid": plan.grid, "splits": plan.splits}
        for name in impls:
            med = statistics.median(per[name])
            rec[name] = {"ms": round(med, 4), "tflops": round(flop / med / 1e9, 1)}
        rec["ours/torch._scaled_mm"] = ratios(per, "ours", "torch._scaled_mm")
        emit(rec)
        summary.append(rec)
    for bsz, m, n, k in ((16, 2048, 2048, 2048), (8, 4096, 4096, 1024)):
        a = torch.randn(bsz, m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(bsz, k, n, device="cuda").to(torch.bfloat16)
        c = torch.empty(bsz, m, n, device="cuda", dtype=torch.bfloat16)
        c2 = torch.empty_like(c)
        ref = torch.bmm(a.float(), b.float())
        impls = {"ours": lambda: matmul(a, b, out=c), "torch.bmm": lambda: torch.bmm(a, b, out=c2)}
        for name, fn in impls.items():
            fn()
            torch.cuda.synchronize()
            emit({"kind": "timing-check", "shape": [bsz, m, n, k], "impl": name,
                  "rel_err": rel(torch, c if name == "ours" else c2, ref)})
        del ref
        per = interleaved(torch, impls, rounds, reps)
        flop = 2.0 * bsz * m * n * k
        rec = {"kind": "timing", "what": "batched bf16 matmul (both 3-D, b row-major)",
               "shape": [bsz, m, n, k], "rounds": rounds}
        for name in impls:
            med = statistics.median(per[name])
            rec[name] = {"ms": round(med, 4), "tflops": round(flop / med / 1e9, 1)}
        rec["ours/torch.bmm"] = ratios(per, "ours", "torch.bmm")
        emit(rec)
        summary.append(rec)
    return summary


#: fp8 geometries explored at 8192 x 8192 x 4096 (autotune.Candidate fields; None: the call's)
#: (192 x 256 with 3 consumers does not assemble, bf16 or e4m3: ptxas aborts)
FP8_CANDIDATES = (None, dict(bm=256, bn=128, stages=4, consumers=2), dict(group_m=16),
                  dict(group_m=4))
#: the batched grid's x extent per policy: the call's (the SMs shared by the batches), one
#: persistent grid per batch (z runs batches one after another), one CTA per tile
BATCH_GRIDS = ("shared", "per-batch", "tiles")


def _recipe_for(torch, a, b, out, scales=None, cand=None, scale=None, grid=None):
    """A launch recipe through the call's own planning and build, with an explored geometry
    (``cand``), the scaling replaced (``scale``: a variant of the same plan), or the grid's x
    extent replaced (``grid``)."""
    import attrs

    from pipeline_core_nvidia_h100 import autotune, matmul_call
    c = autotune.DEFAULT if cand is None else autotune.Candidate(**cand)
    sms = matmul_call.sm_count(0)
    stream = torch.cuda.current_stream().cuda_stream
    plan = matmul_call._plan(a, b, None, None, None, out, sms, matmul_call.TUNING, c, scales)
    if scale is not None:
        plan = attrs.evolve(plan, variant=attrs.evolve(plan.variant, scale=scale))
    if grid is not None:
        plan = attrs.evolve(plan, grid=grid)
    return matmul_call._recipe(plan, 0, stream, c)


def explore(torch, rounds=7, reps=20):
    """fp8 geometries and the scaling's cost at 8192 x 8192 x 4096, the batched grid policies
    (each checked against the reference first), timed with the torch peer interleaved."""
    from pipeline_core_nvidia_h100 import matmul_call
    m, n, k = 8192, 8192, 4096
    a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    ta, tb = torch.tensor(0.7, device="cuda"), torch.tensor(1.3, device="cuda")
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    impls, checks = {}, {}
    for i, cand in enumerate(FP8_CANDIDATES):
        r = _recipe_for(torch, a, b, out, (ta, tb), cand)
        impls[f"tensor-c{i}"] = (lambda r=r: matmul_call.launch_recipe(r, a, b, None, out, (ta, tb)))
        checks[f"tensor-c{i}"] = (ta * tb, cand)
    for scale, sc in (("none", None), ("row", (sa, sb))):
        r = _recipe_for(torch, a, b, out, (ta, tb) if sc is None else sc,
                        scale="none" if sc is None else None)
        impls[f"{scale}-c0"] = (lambda r=r, sc=sc: matmul_call.launch_recipe(r, a, b, None, out, sc))
        checks[f"{scale}-c0"] = (1.0 if sc is None else sa * sb, None)
    peer = {"torch-tensor": lambda: torch._scaled_mm(a, b, ta, tb, out_dtype=torch.bfloat16),
            "torch-row": lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)}
    prod = a.float() @ b.float()
    for name, fn in impls.items():
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        factor, cand = checks[name]
        emit({"kind": "explore-check", "impl": name, "candidate": cand,
              "rel_err": rel(torch, out, prod * factor)})
    del prod
    per = interleaved(torch, {**impls, **peer}, rounds, reps)
    flop = 2.0 * m * n * k
    rec = {"kind": "explore-fp8", "shape": [m, n, k], "rounds": rounds,
           "candidates": {f"c{i}": c for i, c in enumerate(FP8_CANDIDATES)}}
    for name in per:
        rec[name] = {"ms": round(statistics.median(per[name]), 4),
                     "tflops": round(flop / statistics.median(per[name]) / 1e9, 1)}
        peer_name = "torch-row" if name.startswith("row") else "torch-tensor"
        if name in impls:
            rec[f"{name}/{peer_name}"] = ratios(per, name, peer_name)
    emit(rec)
    for bsz, m, n, k in ((16, 2048, 2048, 2048), (8, 4096, 4096, 1024)):
        a = torch.randn(bsz, m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(bsz, k, n, device="cuda").to(torch.bfloat16)
        c = torch.empty(bsz, m, n, device="cuda", dtype=torch.bfloat16)
        c2 = torch.empty_like(c)
        tiles = -(-m // 128) * -(-n // 256)
        sms = matmul_call.sm_count(0)
        impls = {}
        for policy, grid in zip(BATCH_GRIDS, (None, min(tiles, sms), tiles)):
            r = _recipe_for(torch, a, b, c, grid=grid)
            impls[f"ours-{policy}"] = (lambda r=r: matmul_call.launch_recipe(r, a, b, None, c))
        ref = torch.bmm(a.float(), b.float())
        for name, fn in impls.items():
            c.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            emit({"kind": "explore-check", "shape": [bsz, m, n, k], "impl": name,
                  "rel_err": rel(torch, c, ref)})
        del ref
        impls["torch.bmm"] = lambda: torch.bmm(a, b, out=c2)
        per = interleaved(torch, impls, rounds, reps)
        flop = 2.0 * bsz * m * n * k
        rec = {"kind": "explore-batched", "shape": [bsz, m, n, k], "rounds": rounds}
        for name in per:
            rec[name] = {"ms": round(statistics.median(per[name]), 4),
                         "tflops": round(flop / statistics.median(per[name]) / 1e9, 1)}
            if name != "torch.bmm":
                rec[f"{name}/torch.bmm"] = ratios(per, name, "torch.bmm")
        emit(rec)


def sanitize(torch):
    """A few small calls with tails in M, N and K for compute-sanitizer (racecheck, synccheck):
    fp8 row-scaled with bias, fp8 per-tensor split-K, batched (both 3-D, MN-major B; 2-D @ 3-D)."""
    from pipeline_core_nvidia_h100 import matmul, scaled_mm
    a = torch.randn(100, 48, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(72, 48, device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(100, 1, device="cuda"), torch.rand(1, 72, device="cuda")
    y = scaled_mm(a, b, sa, sb, bias=torch.randn(72, device="cuda").to(torch.bfloat16))
    a = torch.randn(7, 4000, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(100, 4000, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    z = scaled_mm(a, b, one, one, out_dtype=torch.float32)
    x = matmul(torch.randn(3, 100, 40, device="cuda").to(torch.bfloat16),
               torch.randn(3, 40, 72, device="cuda").to(torch.bfloat16))
    w = matmul(torch.randn(100, 40, device="cuda").to(torch.float16),
               torch.randn(2, 40, 72, device="cuda").to(torch.float16))
    torch.cuda.synchronize()
    print("sanitize calls done", tuple(y.shape), tuple(z.shape), tuple(x.shape), tuple(w.shape))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fp8-cases", type=int, default=64)
    ap.add_argument("--batched-cases", type=int, default=44)
    ap.add_argument("--out", default=None, help="folder for results.jsonl")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--prebuild-only", action="store_true",
                    help="build every variant's cubin into the disk cache (no GPU needed)")
    ap.add_argument("--explore", action="store_true",
                    help="only the fp8 geometries, the scaling's cost and the batched grids")
    ap.add_argument("--sanitize", action="store_true",
                    help="only a few small calls with tails (run under compute-sanitizer)")
    args = ap.parse_args(argv)
    if args.sanitize or args.explore:
        import torch
        emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__})
        sanitize(torch) if args.sanitize else explore(torch)
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            name = "sanitize.jsonl" if args.sanitize else "explore.jsonl"
            Path(args.out, name).write_text("".join(json.dumps(x) + "\n" for x in LINES))
        return 0
    fp8 = draw_fp8(args.fp8_cases)
    batched = draw_batched(args.batched_cases)
    if args.prebuild_only:
        prebuild(None, variants_without_torch(fp8, batched))
        return 0
    import torch
    variants = {fp8_plan(torch, c).variant for c in fp8}
    variants |= {batched_plan(torch, c).variant for c in batched}
    keys = variants_without_torch(fp8, batched,
                                  torch.cuda.get_device_properties(0).multi_processor_count)
    emit({"kind": "variants", "count": len(variants), "planned_without_torch_equal":
          {v for v, _ in keys} >= variants})
    emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__})
    prebuild(torch, keys)
    failures = fp8_correctness(torch, fp8)
    failures += batched_correctness(torch, batched)
    failures += fp8_staged(torch)
    graph_and_compile(torch)
    summary = [] if args.skip_timing else timing(torch)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in LINES))
    for r in summary:
        names = [x for x in r if isinstance(r[x], dict)]
        ratio = next(x for x in r if "/" in x)
        print(f"{r['what']:48} {'x'.join(map(str, r['shape'])):16} "
              + "  ".join(f"{x} {r[x]['tflops']} TF" for x in names)
              + f"  {ratio} median {statistics.median(r[ratio]):.3f} rounds {r[ratio]}")
    print(f"correctness failures: {failures} of {len(fp8) + len(batched)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
