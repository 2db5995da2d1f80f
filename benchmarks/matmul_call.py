"""``pipeline_core_nvidia_h100.matmul`` on the GPU: correctness on random cases, then timing.

  python3 benchmarks/matmul_call.py [--cases 320] [--anchors ../shared/tools/gemm_anchors.py]

1. Correctness (METHOD.md): CASES random (shape, dtype, layout, epilogue, out=, batch) cases,
   M, N, K drawn from SIZES (odd ones included: 999, 2050, 4095, 4097), fresh random inputs
   each, NaN-poisoned outputs, against an fp32 torch reference.  Operands in every LAYOUTS
   (contiguous with odd rows, padded, column-major, sliced, every other element, one element
   past an aligned address, an expanded row), a strided bias, out= in every OUTS (column-major,
   sliced, misaligned), batched forms with broadcasting (BATCHED, a batch expanded with stride
   0): what TMA cannot read is staged by the call (docs/guide/matmul.md, "Layouts TMA cannot
   read") and must be correct, as must the shapes the call used to refuse.
2. CUDA-graph capture and replay on new inputs, ``torch.compile(fullgraph=True)`` through the
   custom op, and a second process that must find every kernel in the disk cache.
   Split-K cases (small M x N, long K) besides, and a split call run twice must match bit for bit.
3. Timing against the anchors' peers (cublas, triton-tma-persist) in this process: CUDA-event
   medians after warm-up, interleaved rounds with the order rotated, per-round ratios; the
   ablation rows turn each launch technique off (``matmul_call.TUNING``: the persistent grid,
   split-K, the TMA-store epilogue) or go through the custom op's dispatch instead of the
   eager path; ``ours-graph`` replays the call from a CUDA graph (the GPU's time alone, no
   host launch cost).
Every result is one JSON line on stdout (and in --out/results.jsonl); a table closes the output.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

from bench_timing import graphed, interleaved, ratios, warm_and_check  # noqa: E402  (beside this script)
from gemm_build import contiguous  # noqa: E402  (beside this script)
from bench_peers import anchors as load_anchors  # noqa: E402  (beside this script)
SIZES = (1, 7, 8, 17, 100, 127, 128, 999, 1000, 2050, 4000, 4095, 4096, 4097)
#: operand layouts (:func:`operand`): row / col contiguous (odd rows: unaligned), row-pad /
#: col-pad (the leading dimension padded to 8: read in place), slice (rows 3 elements wider
#: than the view), neither (every other element of wider rows), offset (contiguous from one
#: element past an aligned address), expand (one row repeated: a stride of 0)
LAYOUTS = ("row", "col", "row-pad", "col-pad", "slice", "neither", "offset", "expand")
#: out= layouts (:func:`out_tensor`): new (the call allocates it), row, col (column-major),
#: slice (row stride N + 3), offset (one element past an aligned address)
OUTS = ("new", "row", "col", "slice", "offset")
#: batched forms: ab (both 3-D), a (3-D a @ 2-D b), b (2-D a @ 3-D b), a1 ([1, M, K] @ 3-D b),
#: b-expand (3-D a @ a 2-D b expanded to [B, K, N], batch stride 0)
BATCHED = ("ab", "a", "b", "a1", "b-expand")
B_SIZES = (2, 3, 4)
#: (out_dtype or None: a's, bias dtype or None, activation): the epilogues drawn from
EPILOGUES = ((None, None, None), (None, "same", "relu"), ("fp32", None, "gelu"),
             ("fp16", "fp32", "silu"), ("bf16", "same", None), ("fp32", "same", "relu"))
TOL = {"bf16": 1.5e-2, "fp16": 4e-3, "fp32": 2e-3}
TIMED = ((8192, 8192, 8192), (6144, 6144, 6144), (4096, 4096, 4096), (4096, 8192, 2048),
         (8192, 14336, 4096), (8192, 4096, 14336), (16384, 4096, 4096), (2048, 2048, 8192),
         (4000, 4000, 4000), (1000, 4096, 4096), (128, 4096, 4096))
#: split-K cases: few output tiles, long K (the call splits them, gemm_call.split_count)
SPLIT_M = (1, 7, 17, 100, 127, 128, 300)
SPLIT_N = (1, 8, 100, 256, 1000, 2000)
SPLIT_K = (1000, 2048, 4000, 4096, 8192)

LINES: list[dict] = []


def emit(record: dict) -> None:
    LINES.append(record)
    print(json.dumps(record), flush=True)


def torch_dtype(torch, name):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


class Case(NamedTuple):
    """One correctness case: shape, dtype, each operand's layout (LAYOUTS), the epilogue (an
    index into EPILOGUES), out= (OUTS; None: a legacy 7-tuple's, out= on even cases), the
    batch (0: 2-D) and its form (BATCHED), and whether the bias is strided."""

    m: int
    n: int
    k: int
    dtype: str
    a: str = "row-pad"
    b: str = "row-pad"
    epilogue: int = 0
    out: str | None = None
    batch: int = 0
    batched: str = ""
    bias_strided: bool = False


def as_case(case):
    """A :class:`Case`, or the legacy tuple (m, n, k, dtype, a_col, b_col, epilogue) other
    benchmarks draw (padded leading dimensions, read in place) as one."""
    if isinstance(case, Case):
        return case
    m, n, k, dt, a_col, b_col, e = case
    return Case(m, n, k, dt, "col-pad" if a_col else "row-pad",
                "col-pad" if b_col else "row-pad", e)


def operand(torch, rows, cols, dtype, layout, device="cuda", lead=()):
    """A [*lead, rows, cols] operand in ``layout`` (LAYOUTS)."""
    col = layout in ("col", "col-pad")
    inner, outer = (rows, cols) if col else (cols, rows)
    if layout == "expand":
        return torch.randn(*lead, 1, cols, device=device).to(dtype).expand(*lead, rows, cols)
    if layout == "offset":
        flat = torch.randn(math.prod(lead) * rows * cols + 1, device=device).to(dtype)
        return flat[1:].view(*lead, rows, cols)
    width = {"row": inner, "col": inner, "row-pad": -(-inner // 8) * 8,
             "col-pad": -(-inner // 8) * 8, "slice": inner + 3, "neither": 2 * inner}[layout]
    store = torch.randn(*lead, outer, width, device=device).to(dtype)
    view = store[..., ::2] if layout == "neither" else store[..., :inner]
    return view.transpose(-1, -2) if col else view


def out_tensor(torch, layout, shape, dtype, device="cuda"):
    """A NaN-poisoned out= of ``shape`` in ``layout`` (OUTS but new)."""
    *lead, m, n = shape
    if layout == "row":
        out = torch.empty(shape, device=device, dtype=dtype)
    elif layout == "col":
        out = torch.empty(*lead, n, m, device=device, dtype=dtype).transpose(-1, -2)
    elif layout == "slice":
        out = torch.empty(*lead, m, n + 3, device=device, dtype=dtype)[..., :n]
    else:  # offset
        out = torch.empty(math.prod(shape) + 1, device=device, dtype=dtype)[1:].view(shape)
    return out.fill_(float("nan"))


def _contiguous(shape):
    return contiguous(shape)


def _operand_info(rows, cols, dtype, layout, lead=()):
    """:func:`operand`'s shape, strides and address alignment as a TensorInfo (no torch)."""
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo
    shape = (*lead, rows, cols)
    col = layout in ("col", "col-pad")
    inner, outer = (rows, cols) if col else (cols, rows)
    ptr = 4096
    if layout == "expand":
        strides = (*_contiguous((*lead, 1, cols))[:-2], 0, 1)
    elif layout == "offset":
        strides, ptr = _contiguous(shape), 4098
    else:
        width = {"row": inner, "col": inner, "row-pad": -(-inner // 8) * 8,
                 "col-pad": -(-inner // 8) * 8, "slice": inner + 3, "neither": 2 * inner}[layout]
        strides = (*((outer * width,) if lead else ()), width, 2 if layout == "neither" else 1)
        if col:
            strides = (*strides[:-2], strides[-1], strides[-2])
    return TensorInfo(shape=shape, strides=strides, dtype=dtype, ptr=ptr)


def case_infos(case):
    """A case's (a, b, bias, out) as TensorInfos, as :func:`case_tensors` and :func:`case_out`
    (on an odd case) make them: what the dry run plans with no torch and no GPU."""
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo
    c = as_case(case)
    out_name, bias_kind, _ = EPILOGUES[c.epilogue]
    lead_a, lead_b = leads(c)
    a = _operand_info(c.m, c.k, c.dtype, c.a, lead_a)
    b = _operand_info(c.k, c.n, c.dtype, c.b, lead_b)
    if c.batched == "b-expand":
        b = TensorInfo(shape=(c.batch, *b.shape), strides=(0, *b.strides), dtype=c.dtype,
                       ptr=b.ptr)
    bias = None
    if bias_kind is not None:
        bdt = c.dtype if bias_kind == "same" else bias_kind
        bias = TensorInfo(shape=(c.n,), strides=(2 if c.bias_strided else 1,), dtype=bdt)
    out = None
    if c.out not in (None, "new"):
        shape, od = product_shape(c), out_name or c.dtype
        *lead, m, n = shape
        strides, ptr = _contiguous(shape), 4096
        if c.out == "col":
            base = _contiguous((*lead, n, m))
            strides = (*base[:-2], base[-1], base[-2])
        elif c.out == "slice":
            strides = _contiguous((*lead, m, n + 3))
        elif c.out == "offset":
            ptr = 4096 + {"fp32": 4}.get(od, 2)
        out = TensorInfo(shape=shape, strides=strides, dtype=od, ptr=ptr)
    return a, b, bias, out


def dry_run(n_cases, n_split, build=False):
    """The cases drawn and planned from their shapes alone (no torch, no GPU): every one must
    plan (no refusal); what is staged, and how many kernels the run builds."""
    from collections import Counter

    from pipeline_core_nvidia_h100.gemm_call import plan_call
    import attrs

    staged, variants, kinds = Counter(), set(), Counter()
    cases = draw_layout_cases(n_cases) + draw_split_cases(n_split)
    for case in cases:
        c = as_case(case)
        a, b, bias, out = case_infos(c)
        out_name, _, act = EPILOGUES[c.epilogue]
        plan = plan_call(a, b, bias=bias, activation=act,
                         out_dtype=None if out is not None else out_name, out=out, sms=132)
        staged.update(s.operand for s in plan.staged)
        staged["none"] += not plan.staged
        kinds.update((f"a {c.a}", f"b {c.b}", f"out {c.out}", f"batched {c.batched or '2-D'}",
                      f"epilogue {c.epilogue}"))
        v = plan.variant
        variants.add(attrs.evolve(v, store="direct") if c.out == "offset" else v)
    emit({"kind": "dry-run", "cases": len(cases), "staged": dict(sorted(staged.items())),
          "variants": len(variants), "drawn": dict(sorted(kinds.items()))})
    if build:  # here, before a device run: the cubins into the disk cache
        prebuild(None, {kernel_of(c) for c in cases})
    return 0


def leads(c):
    """The batch dimensions a case's a and b are made with (BATCHED; b-expand's b is 2-D,
    expanded afterwards)."""
    if not c.batch:
        return (), ()
    return ({"ab": (c.batch,), "a": (c.batch,), "b": (), "a1": (1,),
             "b-expand": (c.batch,)}[c.batched],
            {"ab": (c.batch,), "a": (), "b": (c.batch,), "a1": (c.batch,),
             "b-expand": ()}[c.batched])


def product_shape(case):
    c = as_case(case)
    return (c.batch, c.m, c.n) if c.batch else (c.m, c.n)


def reference(torch, a, b, bias, activation):
    ref = a.float() @ b.float()
    if bias is not None:
        ref = ref + bias.float()
    if activation == "relu":
        ref = torch.relu(ref)
    elif activation == "gelu":
        ref = torch.nn.functional.gelu(ref, approximate="tanh")
    elif activation == "silu":
        ref = torch.nn.functional.silu(ref)
    return ref


def draw_cases(n, seed=26):
    """Legacy tuples (padded operands, read in place): what the other GEMM benchmarks draw."""
    rng = random.Random(seed)
    cases = [(1, 1, 1, "bf16", False, False, 0), (4000, 4000, 4000, "bf16", False, False, 0),
             (1, 4096, 4096, "bf16", False, False, 0), (4096, 1, 7, "fp16", True, True, 2)]
    while len(cases) < n:
        cases.append((rng.choice(SIZES), rng.choice(SIZES), rng.choice(SIZES),
                      rng.choice(("bf16", "fp16")), rng.random() < 0.5, rng.random() < 0.5,
                      rng.randrange(len(EPILOGUES))))
    return cases


def draw_layout_cases(n, seed=35):
    """``n`` cases over every layout, out=, batched form and epilogue (issue 35's held-out
    kinds first: the shapes the call used to refuse)."""
    rng = random.Random(seed)
    cases = [Case(1000, 2050, 3000, "bf16", "row", "row", 2, "new"),  # matmul(a, w) of the issue
             Case(300, 200, 500, "bf16", "row", "row", 0, "new", 4, "a"),  # [4,300,500]@[500,200]
             Case(4097, 4095, 4096, "bf16", "row", "row", 0, "row"),
             Case(1000, 1000, 999, "fp16", "row", "row", 1, "col"),
             Case(1, 1, 1, "bf16", "offset", "offset", 3, "offset"),
             Case(127, 17, 7, "fp16", "neither", "slice", 4, "slice", bias_strided=True),
             Case(100, 2050, 999, "bf16", "col", "expand", 5, "row", 3, "b-expand")]
    while len(cases) < n:
        batch = rng.choice(B_SIZES) if rng.random() < 0.25 else 0
        cases.append(Case(rng.choice(SIZES), rng.choice(SIZES), rng.choice(SIZES),
                          rng.choice(("bf16", "fp16")), rng.choice(LAYOUTS),
                          rng.choice(LAYOUTS), rng.randrange(len(EPILOGUES)), rng.choice(OUTS),
                          batch, rng.choice(BATCHED) if batch else "", rng.random() < 0.2))
    return cases[:n]


def draw_split_cases(n, seed=27):
    rng = random.Random(seed)
    return [(rng.choice(SPLIT_M), rng.choice(SPLIT_N), rng.choice(SPLIT_K),
             rng.choice(("bf16", "fp16")), rng.random() < 0.5, rng.random() < 0.5,
             rng.randrange(len(EPILOGUES))) for _ in range(n)]


def case_tensors(torch, case, device="cuda"):
    """A case's a, b and bias (on ``device``; ``meta`` for planning only)."""
    c = as_case(case)
    _, bias_kind, _ = EPILOGUES[c.epilogue]
    dtype = torch_dtype(torch, c.dtype)
    lead_a, lead_b = leads(c)
    a = operand(torch, c.m, c.k, dtype, c.a, device, lead_a)
    b = operand(torch, c.k, c.n, dtype, c.b, device, lead_b)
    if c.batched == "b-expand":
        b = b.expand(c.batch, c.k, c.n)
    bias = None
    if bias_kind is not None:
        bdt = dtype if bias_kind == "same" else torch_dtype(torch, bias_kind)
        bias = (torch.randn(2 * c.n, device=device).to(bdt)[::2] if c.bias_strided
                else torch.randn(c.n, device=device).to(bdt))
    return a, b, bias


def case_out(torch, case, i, device="cuda"):
    """The case's out= (None: the call allocates it): its OUTS layout; a legacy tuple's is
    row-major on even cases."""
    c = as_case(case)
    layout = c.out if c.out is not None else ("row" if i % 2 == 0 else "new")
    if layout == "new":
        return None
    od = EPILOGUES[c.epilogue][0] or c.dtype
    return out_tensor(torch, layout, product_shape(c), torch_dtype(torch, od), device)


def plan_of(torch, case, i=1):
    """The plan a case will launch, planned on meta tensors (to build kernels first; a meta
    tensor's address is not known, see :func:`variant_of`)."""
    from pipeline_core_nvidia_h100 import matmul_call
    c = as_case(case)
    out, _, act = EPILOGUES[c.epilogue]
    a, b, bias = case_tensors(torch, c, "meta")
    given = case_out(torch, c, i, "meta") if c.out is not None else None
    od = None if out is None or given is not None else torch_dtype(torch, out)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return matmul_call._plan(a, b, bias, act, od, given, sms, matmul_call.TUNING)


def variant_of(torch, case):
    """The variant a case launches: an out= at an odd address stores directly (what the meta
    plan, with no address, cannot see)."""
    import attrs

    v = plan_of(torch, case).variant
    if as_case(case).out == "offset":
        v = attrs.evolve(v, store="direct")
    return v


def prebuild(torch, keys):
    """Every kernel's cubin built in parallel, then loaded (gemm_build.prebuild): ``keys`` are
    (variant, candidate) pairs (:func:`kernel_of`) or bare variants (the default tile)."""
    from gemm_build import prebuild as build
    build(torch, keys, emit)


def kernel_of(case):
    """The (variant, candidate) a case launches, from its tensors' descriptions (no torch:
    gemm_build.kernel_key): the shape's decomposition, and an out= at an odd address stores
    directly."""
    from gemm_build import kernel_key
    c = as_case(case)
    a, b, bias, out = case_infos(c)
    out_name, _, act = EPILOGUES[c.epilogue]
    return kernel_key(a, b, bias=bias, activation=act,
                      out_dtype=None if out is not None else out_name, out=out,
                      store="direct" if c.out == "offset" else None)


def correctness(torch, cases):
    """Every case against the fp32 reference with NaN-poisoned outputs; a table per layout of
    each operand, out=, batched form, epilogue and split."""
    from pipeline_core_nvidia_h100 import matmul
    failures, table, splits = 0, {}, 0
    for i, case in enumerate(cases):
        c = as_case(case)
        split = plan_of(torch, case, i).splits
        out_name, bias_kind, act = EPILOGUES[c.epilogue]
        a, b, bias = case_tensors(torch, c)
        info_a, info_b, _, _ = case_infos(c)  # the dry run's mirror of the layouts, checked
        if (tuple(a.stride()), tuple(b.stride())) != (info_a.strides, info_b.strides):
            emit({"kind": "case-info-mismatch", "i": i, "a": [a.stride(), info_a.strides],
                  "b": [b.stride(), info_b.strides]})
        od = out_name or c.dtype
        out = case_out(torch, case, i)
        shape = product_shape(c)
        if out is not None:
            got = matmul(a, b, bias=bias, activation=act, out=out)
            assert got is out
        else:
            poison = torch.full(shape, float("nan"), device="cuda", dtype=torch_dtype(torch, od))
            del poison  # the caching allocator hands this block to the call's output
            got = matmul(a, b, bias=bias, activation=act,
                         out_dtype=None if out_name is None else torch_dtype(torch, od))
        torch.cuda.synchronize()
        ref = reference(torch, a, b, bias, act)
        unwritten = int(torch.isnan(got.float()).sum())
        # relative to the reference's norm, floored at a 1e-3 a element: a single output that
        # the activation sends to ~0 (silu of a large negative sum, -1e-20 in fp16 is 0) has no
        # relative error worth the name (case 363, M = N = 1, rounds to 0 on some draws)
        floor = 1e-3 * max(1, ref.numel()) ** 0.5
        err = float((got.float() - ref).norm() / ref.norm().clamp_min(floor))
        ok = unwritten == 0 and err <= TOL[od] and tuple(got.shape) == shape
        failures += not ok
        splits += split > 1
        out_layout = "new" if out is None else (c.out or "row")
        for key in (f"{c.dtype} a {c.a}", f"{c.dtype} b {c.b}", f"out {out_layout}",
                    f"batched {c.batched or '2-D'}", f"epilogue {EPILOGUES[c.epilogue]}",
                    f"bias {'strided' if c.bias_strided and bias is not None else 'plain'}",
                    "split-K" if split > 1 else "unsplit"):
            row = table.setdefault(key, [0, 0, 0.0])
            row[0] += 1
            row[1] += ok
            row[2] = max(row[2], err)
        if not ok or i < 3:
            emit({"kind": "case", "i": i, "M": c.m, "N": c.n, "K": c.k, "dtype": c.dtype,
                  "a": c.a, "b": c.b, "out": od, "out_layout": out_layout, "bias": bias_kind,
                  "bias_strided": c.bias_strided, "activation": act, "batch": c.batch,
                  "batched": c.batched, "splits": split, "rel_err": err,
                  "unwritten": unwritten, "ok": ok})
    for key, (count, good, worst) in sorted(table.items()):
        emit({"kind": "correct-table", "layout": key, "cases": count, "ok": good,
              "max_rel_err": worst})
    emit({"kind": "correctness", "cases": len(cases), "split_cases": splits,
          "failures": failures})
    return failures


def formerly_refused(torch):
    """Contiguous operands whose rows TMA cannot step, refused before issue 35: each must now
    run (staged) and match the reference."""
    from pipeline_core_nvidia_h100 import matmul
    failures = 0
    for m, n, k, lead in ((100, 50, 7, ()), (17, 17, 17, ()), (127, 1000, 100, ()),
                          (1000, 2050, 3000, ()), (300, 200, 500, (4,))):
        a = torch.randn(*lead, m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
        bias = torch.randn(n, device="cuda").to(torch.bfloat16)
        got = matmul(a, b, bias=bias, activation="gelu")
        ref = reference(torch, a, b, bias, "gelu")
        err = float((got.float() - ref).norm() / ref.norm().clamp_min(1e-30))
        ok = err <= TOL["bf16"] and tuple(got.shape) == tuple(ref.shape)
        failures += not ok
        emit({"kind": "formerly-refused", "shape": [*lead, m, n, k], "rel_err": err, "ok": ok})
    return failures


def split_determinism(torch):
    """A split-K call run twice gives the same bits (the slices are added in split order)."""
    from pipeline_core_nvidia_h100 import matmul
    case = (128, 1000, 8192, "bf16", False, False, 1)
    a, b, bias = case_tensors(torch, case)
    first = matmul(a, b, bias=bias, activation="relu")
    again = matmul(a, b, bias=bias, activation="relu")
    torch.cuda.synchronize()
    emit({"kind": "split-determinism", "splits": plan_of(torch, case).splits,
          "identical": bool(torch.equal(first, again))})


def graph_and_compile(torch):
    from pipeline_core_nvidia_h100 import matmul
    a = torch.randn(300, 512, device="cuda").to(torch.bfloat16)
    b = torch.randn(512, 1000, device="cuda").to(torch.bfloat16)
    bias = torch.randn(1000, device="cuda").to(torch.bfloat16)
    out = torch.empty(300, 1000, device="cuda", dtype=torch.bfloat16)
    matmul(a, b, bias=bias, activation="silu", out=out)  # warm: kernel and tensor maps built
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            matmul(a, b, bias=bias, activation="silu", out=out)
    torch.cuda.current_stream().wait_stream(s)
    errs = []
    for _ in range(3):
        a.copy_(torch.randn_like(a, dtype=torch.float32))
        b.copy_(torch.randn_like(b, dtype=torch.float32))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref = reference(torch, a, b, bias, "silu")
        errs.append(float((out.float() - ref).norm() / ref.norm()))
    emit({"kind": "cuda-graph", "replays": 3, "max_rel_err": max(errs),
          "ok": max(errs) < TOL["bf16"]})

    def f(x, y, z):
        return matmul(x, y, bias=z, activation="relu", out_dtype=torch.float32) * 2.0

    cf = torch.compile(f, fullgraph=True)
    try:
        got = cf(a, b, bias)
    except Exception as exc:  # recorded, and the timing still runs
        emit({"kind": "torch-compile", "ok": False, "error": str(exc).splitlines()[0]})
        return
    ref = 2.0 * reference(torch, a, b, bias, "relu")
    err = float((got - ref).norm() / ref.norm())
    emit({"kind": "torch-compile", "fullgraph": True, "rel_err": err, "ok": err < TOL["fp32"],
          "op": str(torch.ops.pipeline_core.matmul.default)})


def graph_staged(torch):
    """A call that stages (a's 1022-byte rows, a column-major out=) captured in a CUDA graph
    and replayed on new data (the copies are in the graph), and through torch.compile."""
    from pipeline_core_nvidia_h100 import matmul
    a = torch.randn(300, 511, device="cuda").to(torch.bfloat16)
    b = torch.randn(511, 1000, device="cuda").to(torch.bfloat16)
    out = torch.empty(1000, 300, device="cuda", dtype=torch.bfloat16).T
    matmul(a, b, out=out)  # warm: kernel and tensor maps built
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        matmul(a, b, out=out)
        with torch.cuda.graph(g, stream=side):
            matmul(a, b, out=out)
    torch.cuda.current_stream().wait_stream(side)
    errs = []
    for _ in range(3):
        a.copy_(torch.randn_like(a, dtype=torch.float32))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref = reference(torch, a, b, None, None)
        errs.append(float((out.float() - ref).norm() / ref.norm()))
    emit({"kind": "cuda-graph-staged", "replays": 3, "max_rel_err": max(errs),
          "ok": max(errs) < TOL["bf16"]})
    cf = torch.compile(lambda x, y: matmul(x, y, activation="relu") * 2.0, fullgraph=True)
    try:
        got = cf(a, b)
    except Exception as exc:  # recorded, and the rest still runs
        emit({"kind": "torch-compile-staged", "ok": False, "error": str(exc).splitlines()[0]})
        return
    ref = 2.0 * reference(torch, a, b, None, "relu")
    err = float((got.float() - ref).norm() / ref.norm())
    emit({"kind": "torch-compile-staged", "fullgraph": True, "rel_err": err,
          "ok": err < TOL["bf16"]})


def edge_cases(torch):
    """Empty products, CuPy arrays in and out."""
    from pipeline_core_nvidia_h100 import matmul
    bias = torch.randn(300, device="cuda").to(torch.bfloat16)
    zero_k = matmul(torch.empty(5, 0, device="cuda", dtype=torch.bfloat16),
                    torch.empty(0, 300, device="cuda", dtype=torch.bfloat16), bias=bias,
                    activation="relu", out_dtype=torch.float32)
    want = torch.relu(bias.float()).expand(5, 300)
    empty = matmul(torch.empty(0, 64, device="cuda", dtype=torch.bfloat16),
                   torch.randn(64, 300, device="cuda").to(torch.bfloat16))
    emit({"kind": "edge", "what": "K=0 with bias+relu, M=0",
          "ok": bool(torch.equal(zero_k, want)) and tuple(empty.shape) == (0, 300)})
    import cupy as cp
    a = cp.random.standard_normal((300, 200), dtype=cp.float32).astype(cp.float16)
    b = cp.random.standard_normal((200, 136), dtype=cp.float32).astype(cp.float16)
    c = matmul(a, b)
    ref = a.astype(cp.float32) @ b.astype(cp.float32)
    err = float(cp.linalg.norm(c.astype(cp.float32) - ref) / cp.linalg.norm(ref))
    emit({"kind": "edge", "what": "cupy fp16 in, cupy out", "type": type(c).__module__,
          "rel_err": err, "ok": type(c).__module__.startswith("cupy") and err < TOL["fp16"]})


def sanitize_run(torch):
    """Small shapes with tails in M, N and K, for compute-sanitizer (racecheck / synccheck):
    padded operands read in place, and staged ones (odd K and N, a sliced view, a column-major
    out=, a broadcast batch)."""
    from pipeline_core_nvidia_h100 import matmul
    for case in ((200, 300, 130, "bf16", False, False, 1), (130, 260, 70, "fp16", True, True, 2),
                 (65, 520, 200, "bf16", True, False, 3), (100, 300, 2100, "bf16", False, True, 1),
                 Case(130, 257, 71, "bf16", "row", "slice", 1, "col"),
                 Case(100, 9, 999, "fp16", "neither", "row", 2, "new", 3, "b-expand"),
                 (17, 1000, 2100, "bf16", False, True, 1)):  # small M: 64-row tiles, split K
        c = as_case(case)
        a, b, bias = case_tensors(torch, c)
        out_name, _, act = EPILOGUES[c.epilogue]
        od = None if out_name is None else torch_dtype(torch, out_name)
        out = case_out(torch, case, 1)
        got = matmul(a, b, bias=bias, activation=act, out_dtype=None if out is not None else od,
                     out=out)
        torch.cuda.synchronize()
        ref = reference(torch, a, b, bias, act)
        err = float((got.float() - ref).norm() / ref.norm())
        print(json.dumps({"kind": "sanitize-case", "case": list(case),
                          "splits": plan_of(torch, case).splits, "rel_err": err}), flush=True)


def second_process(cache):
    """A fresh process calling matmul once: the kernel must come from the disk cache."""
    before = set(os.listdir(cache))
    code = ("import torch, time, sys; sys.path[:0]=['.', 'plugins/nvidia_h100'];"
            "from pipeline_core_nvidia_h100 import matmul;"
            "a=torch.randn(300,512,device='cuda').bfloat16();b=torch.randn(512,1000,device='cuda').bfloat16();"
            "t=time.time();c=matmul(a,b);torch.cuda.synchronize();print(round(time.time()-t,2))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ})
    after = set(os.listdir(cache))
    emit({"kind": "second-process", "rc": proc.returncode, "first_call_s": proc.stdout.strip(),
          "new_cubins": len(after - before), "stderr_tail": proc.stderr.strip()[-300:]})


def timing(torch, anchors_path, rounds=5, reps=20, shapes=TIMED):
    import attrs

    from pipeline_core_nvidia_h100 import matmul, matmul_call
    peers = load_anchors(anchors_path).gemm_peers()
    ops = matmul_call.CALL.ops()
    default = matmul_call.TUNING
    summary = []

    def tuned(tuning, fn):
        def run():
            matmul_call.TUNING = tuning
            try:
                fn()
            finally:
                matmul_call.TUNING = default
        return run

    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        bt = torch.randn(n, k, device="cuda").to(torch.bfloat16)  # B stored [N, K]
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        plan = matmul_call._plan(a, bt.T, None, None, None, c,
                                 matmul_call.sm_count(0), default)

        def ours():
            matmul(a, bt.T, out=c)

        impls = {"ours": ours,
                 "ours-graph": graphed(torch, ours),
                 "ours-op": lambda: ops.matmul_out(a, bt.T, None, None, c),
                 "ours-nopersist": tuned(attrs.evolve(default, persistent=False), ours),
                 "ours-notma": tuned(attrs.evolve(default, tma_store=False), ours),
                 "cublas": lambda: peers["cublas"](a, bt, c),
                 "triton-tma-persist": lambda: peers["triton-tma-persist"](a, bt, c)}
        if plan.splits > 1:
            impls["ours-nosplit"] = tuned(attrs.evolve(default, split_k=False), ours)
        ref = a.float() @ bt.float().T
        for name, err in warm_and_check(torch, impls, c, ref, TOL["bf16"]):  # (and builds)
            emit({"kind": "timing-check", "shape": [m, n, k], "impl": name, "rel_err": err})
        del ref
        names = list(impls)
        per = interleaved(torch, impls, rounds, reps)
        flop = 2.0 * m * n * k
        rec = {"kind": "timing", "shape": [m, n, k], "rounds": rounds, "grid": plan.grid,
               "splits": plan.splits}
        for name in names:
            med = statistics.median(per[name])
            rec[name] = {"ms": round(med, 4), "tflops": round(flop / med / 1e9, 1)}
        for name in ("ours", "ours-graph"):
            for peer in ("cublas", "triton-tma-persist"):
                rec[f"{name}/{peer}"] = ratios(per, name, peer)
        emit(rec)
        summary.append(rec)
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=320)
    ap.add_argument("--anchors", default=str(ROOT.parent / "shared" / "tools" / "gemm_anchors.py"))
    ap.add_argument("--out", default=None, help="folder for results.jsonl")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--split-cases", type=int, default=80)
    ap.add_argument("--shapes", default=None,
                    help="timed shapes, MxNxK comma-separated (default: the issue's list)")
    ap.add_argument("--sanitize", action="store_true",
                    help="only a few small cases with tails (run under compute-sanitizer)")
    ap.add_argument("--dry-run", action="store_true",
                    help="draw and plan the cases from their shapes alone (no torch, no GPU)")
    ap.add_argument("--prebuild", action="store_true",
                    help="with --dry-run: build every kernel the cases launch into the disk "
                         "cache (here, before a device run)")
    args = ap.parse_args(argv)
    if args.dry_run:
        return dry_run(args.cases, args.split_cases, args.prebuild)
    import torch
    if args.sanitize:
        sanitize_run(torch)
        return 0
    emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__})
    from pipeline_core_nvidia_h100.kernel_cache import cache_dir
    cases = draw_layout_cases(args.cases) + draw_split_cases(args.split_cases)
    shapes = TIMED if args.shapes is None else tuple(
        tuple(int(x) for x in s.split("x")) for s in args.shapes.split(","))
    timed = [] if args.skip_timing else [(m, n, k, "bf16", False, True, 0) for m, n, k in shapes]
    prebuild(torch, {kernel_of(c) for c in cases + timed})
    failures = correctness(torch, cases) + formerly_refused(torch)
    split_determinism(torch)
    graph_and_compile(torch)
    graph_staged(torch)
    edge_cases(torch)
    second_process(cache_dir())
    summary = [] if args.skip_timing else timing(torch, args.anchors, shapes=shapes)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in LINES))
    print("\nshape              ours TF  graph TF  cublas  triton-tma  ours/cublas  ours/triton")
    for r in summary:
        print(f"{'x'.join(map(str, r['shape'])):18} {r['ours']['tflops']:7} {r['ours-graph']['tflops']:9}"
              f" {r['cublas']['tflops']:7} {r['triton-tma-persist']['tflops']:10}"
              f" {statistics.median(r['ours/cublas']):11.3f} "
              f"{statistics.median(r['ours/triton-tma-persist']):11.3f}")
    print(f"correctness failures: {failures} of {len(cases)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
