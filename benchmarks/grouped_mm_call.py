"""``grouped_mm`` / ``scaled_grouped_mm`` on the GPU: correctness, then timing against torch.

  python3 benchmarks/grouped_mm_call.py [--cases 120] [--fp8-cases 24] [--out DIR]
  python3 benchmarks/grouped_mm_call.py --dry-run      # the cases drawn and planned, no GPU
  python3 benchmarks/grouped_mm_call.py --along-k      # only 2-D x 2-D (about a minute)
  python3 benchmarks/grouped_mm_call.py --store tma --skip-timing   # every case by TMA store
  python3 benchmarks/grouped_mm_call.py --store-timing # tma / tma-s3 / direct / torch

1. Correctness (METHOD.md), fresh random inputs each case, NaN-poisoned outputs, an fp32
   reference per group: CASES random grouped GEMMs (G from 1 to 128; uneven token counts with
   empty groups and groups smaller than a tile; K, N from the MoE configurations and small
   sizes, multiples of 8; bf16 / fp16 in, the input's type or fp32 out; B K- or N-contiguous;
   2-D x 3-D, 3-D x 2-D with offs along N, 3-D x 3-D), each also run through
   ``torch._grouped_mm`` where it takes it (its error beside ours); rows past offs[-1] must stay
   unwritten.  FP8_CASES fp8 row-scaled ones against the dequantized reference.  Then a CUDA
   graph captured once and replayed with other group sizes written into ``offs`` (the kernel
   reads them on the device), and ``torch.compile(fullgraph=True)`` through the op.
2. Timing: Mixtral-like (8 experts, hidden 4096, FFN 14336, 16k tokens), DeepSeek-like (64 and
   256 experts, hidden 7168, FFN 2048, 32k tokens), Qwen3-30B-like (128 experts, hidden 2048,
   FFN 768, 64k tokens), up and down projections, tokens from a fixed-seed skewed multinomial
   over the experts; against ``torch._grouped_mm`` (bf16) and ``torch._scaled_grouped_mm``
   (fp8 row-wise): CUDA-event medians after warm-up, interleaved rounds with the order rotated,
   per-round ratios, TFLOPS.
3. Groups along K (2-D x 2-D, the weight gradient ``dW[g] = X[k0:k1]^T dY[k0:k1]``):
   K_CASES cases with uneven, empty and sub-tile K groups (every offset a multiple of 8
   elements, as torch requires), each group's [M, N] against an fp32 reference (an empty group:
   zeros, every element written), beside torch._grouped_mm; one timing row, Mixtral-like
   (M = hidden 4096, N = FFN 14336, 8 experts over 16k tokens).  ``--along-k`` runs only these
   and ends with one PASS / FAIL line.
4. The epilogue's store (``--store``, docs/guide/matmul.md, "Grouped GEMM"): ``call`` launches
   what grouped_mm picks (the TMA store where two staging buffers fit beside the groups' table,
   else direct), ``tma`` the TMA store at the call's tile and stages (one buffer per consumer
   where two do not fit: 128x256 along M / N at 4 stages), ``tma-s3`` the same with 3 ring
   stages there (two buffers), ``direct`` the direct store; every correctness case and
   ``--sanitize`` launch that store.  ``--store-timing`` times tma, tma-s3 and direct against
   torch's grouped kernels on every MoE configuration above, up and down, bf16 and fp8
   row-wise, and Mixtral's dW along K, in interleaved rounds, one process.
Every result is one JSON line on stdout (and in --out/results.jsonl); a table closes the output.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

# the fp8 benchmark beside this script puts the checkout's plugins on the path and holds the
# timing loop's import, the relative error and the parallel prebuild this script shares
from matmul_fp8_call import interleaved, prebuild, ratios, rel  # noqa: E402
from gemm_build import contiguous  # noqa: E402  (beside this script)

GROUPS = (1, 2, 3, 4, 7, 8, 16, 32, 64, 128)
#: K and N: the MoE layers' (hidden, FFN) and small sizes, every one a multiple of 8 (TMA's
#: 16-byte rows, which torch._grouped_mm asks of its operands too)
KN = (8, 24, 64, 72, 128, 200, 256, 768, 1000, 2048, 4096)
#: one group's tokens: empty, under a tile (128 rows), about one, several
ROWS = (0, 0, 1, 5, 63, 100, 127, 128, 129, 250, 600)
KINDS = ("2d3d",) * 6 + ("3d2d", "3d3d")
TOL = {"bf16": 1.5e-2, "fp16": 4e-3, "fp32": 2e-3}
#: (name, experts, hidden, FFN, tokens)
CONFIGS = (("mixtral", 8, 4096, 14336, 16384), ("deepseek-64", 64, 7168, 2048, 32768),
           ("deepseek-256", 256, 7168, 2048, 32768), ("qwen3-30b", 128, 2048, 768, 65536))

LINES: list[dict] = []
#: the epilogue's store every correctness launch takes (``--store``; :func:`store_choice`)
STORES = ("call", "tma", "tma-s3", "direct")
STORE = "call"


def emit(record: dict) -> None:
    LINES.append(record)
    print(json.dumps(record), flush=True)


def draw_cases(n, seed=3501):
    """Random cases (kind, G, group sizes, K, N, dtype, out dtype, B K-contiguous), no torch:
    first the edge cases (one group, every group empty, one token, all past one tile)."""
    rng = random.Random(seed)
    cases = [("2d3d", 1, (300,), 64, 72, "bf16", "bf16", True),
             ("2d3d", 4, (0, 0, 0, 0), 64, 72, "bf16", "bf16", True),
             ("2d3d", 128, tuple(rng.choice((0, 1, 2)) for _ in range(128)), 256, 256, "bf16",
              "bf16", True),
             ("2d3d", 3, (0, 1, 0), 128, 8, "fp16", "fp32", False),
             ("3d2d", 5, (7, 0, 256, 1, 300), 64, 96, "bf16", "bf16", True)]
    while len(cases) < n:
        kind = rng.choice(KINDS)
        g = rng.choice(GROUPS)
        sizes = tuple(rng.choice(ROWS) for _ in range(g))
        dt = rng.choice(("bf16", "fp16"))
        # b [K, sum N_g] N-contiguous needs 16-byte rows (torch's rule too): else K-contiguous
        kmajor = rng.random() < 0.7 or (kind == "3d2d" and sum(sizes) % 8 != 0)
        cases.append((kind, g, sizes, rng.choice(KN), rng.choice(KN), dt,
                       rng.choice((dt, dt, "fp32")), kmajor))
    return cases


#: compute-sanitizer's cases: tails in M, N, K, an empty group, a group under a tile, both
#: directions of the groups
SANITIZE = (("2d3d", 3, (130, 0, 7), 72, 200, "bf16", "bf16", True),
            ("2d3d", 2, (1, 257), 64, 24, "fp16", "fp32", False),
            ("3d2d", 3, (8, 0, 136), 64, 96, "bf16", "bf16", True),
            # 128-row tiles (over 256 rows a group): tiles inside a group, tiles crossing its end
            ("2d3d", 3, (700, 0, 150), 64, 264, "bf16", "bf16", True))
SANITIZE_FP8 = (("2d3d", 3, (100, 0, 129), 128, 128),)
#: groups along K: a sub-tile group, an empty one, one over two K tiles; tails in M and N
SANITIZE_K = ((3, (8, 0, 136), 72, 200, "bf16", "bf16", True, True),
              (2, (64, 16), 136, 24, "fp16", "fp32", False, False))


def draw_fp8(n, seed=3502):
    rng = random.Random(seed)
    cases = [("2d3d", 8, (100, 0, 1, 300, 128, 129, 5, 0), 256, 512)]
    while len(cases) < n:
        g = rng.choice(GROUPS[:8])
        k = rng.choice((128, 256, 768, 2048))  # fp8 K: multiples of 16
        cases.append((rng.choice(("2d3d", "2d3d", "3d2d")), g,
                      tuple(rng.choice(ROWS) for _ in range(g)), k, rng.choice((16, 128, 768))))
    return cases


def skewed_counts(experts, tokens, seed):
    """Tokens per expert from a fixed-seed multinomial over skewed expert weights (a router's
    uneven load: some experts several times the mean, some near none)."""
    rng = random.Random(seed)
    weights = [rng.gammavariate(2.0, 1.0) for _ in range(experts)]
    counts = [0] * experts
    for e in rng.choices(range(experts), weights, k=tokens):
        counts[e] += 1
    return counts


def _ends(sizes):
    out, total = [], 0
    for s in sizes:
        total += s
        out.append(total)
    return out


# --- the cases' tensors ---------------------------------------------------------------------------

def tdt(torch, name):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
            "e4m3": torch.float8_e4m3fn}[name]


def case_tensors(torch, case, device="cuda"):
    """a, b, offs (None for 3-D x 3-D) of a case; b K-contiguous (a model's weights [G, N, K]
    transposed) or N-contiguous."""
    kind, g, sizes, k, n, dt, _, b_kmajor = case
    dtype = tdt(torch, dt)

    def mat(batch, rows, cols, kmajor):  # [.., rows=K, cols] with K contiguous or not
        shape = (*batch, cols, rows) if kmajor else (*batch, rows, cols)
        return torch.randn(shape, device=device).to(dtype).transpose(-2, -1) if kmajor else \
            torch.randn(shape, device=device).to(dtype)

    total = sum(sizes)
    offs = torch.tensor(_ends(sizes), dtype=torch.int32, device=device)
    if kind == "2d3d":
        return torch.randn(total, k, device=device).to(dtype), mat((g,), k, n, b_kmajor), offs
    if kind == "3d2d":
        return torch.randn(g, n, k, device=device).to(dtype), mat((), k, total, b_kmajor), offs
    return (torch.randn(g, max(total // max(g, 1), 1), k, device=device).to(dtype),
            mat((g,), k, n, b_kmajor), None)


def reference(torch, a, b, offs_list, kind):
    """The fp32 product, group by group (rows past the last group: NaN, never compared)."""
    if kind == "3d3d":
        return torch.bmm(a.float(), b.float())
    if kind == "2d3d":
        ref = torch.full((a.shape[0], b.shape[-1]), float("nan"), device=a.device)
        begin = 0
        for g, end in enumerate(offs_list):
            ref[begin:end] = a[begin:end].float() @ b[g].float()
            begin = end
        return ref
    ref = torch.full((a.shape[1], b.shape[1]), float("nan"), device=a.device)
    begin = 0
    for g, end in enumerate(offs_list):
        ref[:, begin:end] = a[g].float() @ b[:, begin:end].float()
        begin = end
    return ref


def store_choice(a, b, offs, out_dtype, scales, sms, store):
    """(plan, candidate) of a launch with the epilogue's ``store`` (:data:`STORES`), on tensor
    descriptions: ``call`` grouped_mm's own (matmul_call.plan_grouped_infos); ``direct`` its
    tile storing directly; ``tma`` the TMA store at the call's tile and stages (one staging
    buffer per consumer where two leave no room beside the groups' table: 128x256 along M / N
    at 4 stages); ``tma-s3`` the same but 3 ring stages where 4 take one buffer, so two fit."""
    import attrs
    from pipeline_core_nvidia_h100 import matmul_call as mc
    from pipeline_core_nvidia_h100.warpspecialized import STORE_BUFFERS
    c = _candidate(a, b)
    tuning = attrs.evolve(mc.TUNING, tma_store=False) if store == "direct" else mc.TUNING
    plan = mc.plan_grouped_infos(a, b, offs, None, out_dtype, sms, scales, c, tuning,
                                 one_buffer=store != "call")
    if store == "tma-s3" and plan.variant.store == "tma" \
            and c.geometry(plan.variant).store_buffers < STORE_BUFFERS:
        c = attrs.evolve(c, stages=3)
        plan = mc.plan_grouped_infos(a, b, offs, None, out_dtype, sms, scales, c, tuning)
    return plan, c


def _recipe_for(torch, a, b, offs, out_dtype, scales, store):
    """The recipe of a launch with ``store`` on these tensors (:func:`store_choice`)."""
    from pipeline_core_nvidia_h100 import matmul_call as mc
    device = torch.cuda.current_device()
    stream = torch.cuda.current_stream().cuda_stream
    infos = None if scales is None else (mc._info(scales[0], "scale_a"),
                                         mc._info(scales[1], "scale_b"))
    plan, c = store_choice(mc._info(a, "a"), mc._info(b, "b"),
                           None if offs is None else mc._info(offs, "offs"),
                           mc._dtype_name(out_dtype), infos, mc.sm_count(device), store)
    return mc._recipe(plan, device, stream, c)


def _launch(r, a, b, offs, out, scales):
    from pipeline_core_nvidia_h100 import matmul_call as mc
    more = () if scales is None else scales
    mc.CALL.launch(r, (r, a.data_ptr(), b.data_ptr(), out.data_ptr(), offs.data_ptr(),
                       *(x.data_ptr() for x in more)), (a, b, None, out, *more, offs))


def launch_into(torch, a, b, offs, out, out_dtype, scales=None, store=None):
    """The plan, recipe and launch with ``store`` (None: :data:`STORE`) into ``out``
    (NaN-poisoned by the caller): what grouped_mm runs, without its allocation."""
    r = _recipe_for(torch, a, b, offs, out_dtype, scales, store or STORE)
    _launch(r, a, b, offs, out, scales)
    return r.plan


def launcher(torch, a, b, offs, out_dtype, scales, store):
    """A call of grouped_mm's launch with ``store``, its output allocated as the call's."""
    from pipeline_core_nvidia_h100 import matmul_call as mc
    r = _recipe_for(torch, a, b, offs, out_dtype, scales, store)

    def run():
        out = mc._grouped_out(torch, a, r.plan)
        _launch(r, a, b, offs, out, scales)
        return out
    return run


# --- correctness ----------------------------------------------------------------------------------

def correctness(torch, cases):
    from pipeline_core_nvidia_h100 import grouped_mm
    failures, table = 0, {}
    for i, case in enumerate(cases):
        kind, g, sizes, k, n, dt, out_name, b_kmajor = case
        a, b, offs = case_tensors(torch, case)
        od = tdt(torch, out_name)
        ends = _ends(sizes)
        ref = reference(torch, a, b, ends, kind)
        pub = grouped_mm(a, b, offs=offs, out_dtype=od)
        if kind == "3d3d":
            out, unwritten, past = pub, 0, 0
            err = rel(torch, pub, ref)
            same = True
        else:
            out = torch.empty_strided(tuple(pub.shape), pub.stride(), device="cuda",
                                      dtype=od).fill_(float("nan"))  # the call's layout
            if 0 not in out.shape and k > 0 and g > 0:
                launch_into(torch, a, b, offs, out, od)
            elif k == 0:
                out.zero_()
            torch.cuda.synchronize()
            mask = ~torch.isnan(ref)
            unwritten = int((torch.isnan(out.float()) & mask).sum())
            past = int((~torch.isnan(out.float()) & ~mask).sum())  # written past the groups
            err = rel(torch, torch.where(mask, out.float(), 0), torch.where(mask, ref, 0))
            same = bool(torch.equal(torch.where(mask, pub.float(), 0),
                                    torch.where(mask, out.float(), 0)))
        theirs = "not run"
        # torch's own error on the same reference, where it takes the case: groups along N
        # whose widths are not 16 bytes fail a device-side assert in torch._grouped_mm, which
        # ends the process's CUDA context (seen on the H200), so those are not run
        if kind != "3d2d" or all(size * a.element_size() % 16 == 0 for size in sizes):
            try:
                t = torch._grouped_mm(a, b, offs=offs, out_dtype=od)
                mask = ~torch.isnan(ref)
                theirs = rel(torch, torch.where(mask, t.float(), 0), torch.where(mask, ref, 0))
            except Exception as exc:  # noqa: BLE001  (a combination torch does not take)
                theirs = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        ok = unwritten == 0 and past == 0 and err < TOL[out_name] and same
        failures += not ok
        emit({"kind": "case", "i": i, "shape": kind, "G": g, "tokens": sum(sizes),
              "empty_groups": sizes.count(0), "small_groups": sum(0 < s < 128 for s in sizes),
              "K": k, "N": n, "dtype": dt, "out": out_name, "b": "k" if b_kmajor else "n",
              "rel_err": err, "torch_grouped_mm_rel_err": theirs, "unwritten": unwritten,
              "written_past_groups": past, "public_equal": same, "ok": ok})
        row = table.setdefault(f"{kind} {dt}->{out_name}", {"cases": 0, "ok": 0, "max": 0.0})
        row["cases"] += 1
        row["ok"] += ok
        row["max"] = max(row["max"], err)
    for key, row in sorted(table.items()):
        emit({"kind": "table", "what": key, "cases": row["cases"], "ok": row["ok"],
              "max_rel_err": row["max"]})
    return failures


def fp8_tensors(torch, case, device="cuda"):
    kind, g, sizes, k, n = case
    total = sum(sizes)
    f8 = torch.float8_e4m3fn
    offs = torch.tensor(_ends(sizes), dtype=torch.int32, device=device)
    if kind == "2d3d":
        a = (torch.randn(total, k, device=device) * 2).to(f8)
        b = (torch.randn(g, n, k, device=device) * 2).to(f8).transpose(-2, -1)
        sa, sb = torch.rand(total, device=device) + 0.5, torch.rand(g, n, device=device) + 0.5
    else:
        a = (torch.randn(g, n, k, device=device) * 2).to(f8)
        b = (torch.randn(total, k, device=device) * 2).to(f8).t()
        sa, sb = torch.rand(g, n, device=device) + 0.5, torch.rand(total, device=device) + 0.5
    return a, b, sa, sb, offs


def fp8_correctness(torch, cases):
    from pipeline_core_nvidia_h100 import scaled_grouped_mm
    failures = 0
    for i, case in enumerate(cases):
        kind, g, sizes, k, n = case
        a, b, sa, sb, offs = fp8_tensors(torch, case)
        ends = _ends(sizes)
        if kind == "2d3d":
            ref = reference(torch, a.float() * sa[:, None], b.float() * sb[:, None, :], ends,
                            kind)
        else:
            ref = reference(torch, a.float() * sa[:, :, None], b.float() * sb[None, :], ends,
                            kind)
        pub = scaled_grouped_mm(a, b, sa, sb, offs=offs)
        out = torch.empty_strided(tuple(pub.shape), pub.stride(), device="cuda",
                                  dtype=torch.bfloat16).fill_(float("nan"))
        if 0 not in out.shape:
            launch_into(torch, a, b, offs, out, torch.bfloat16, (sa, sb))
        torch.cuda.synchronize()
        mask = ~torch.isnan(ref)
        unwritten = int((torch.isnan(out.float()) & mask).sum())
        err = rel(torch, torch.where(mask, out.float(), 0), torch.where(mask, ref, 0))
        theirs = "not run"  # (16-byte group widths along N only: see correctness)
        if kind != "3d2d" or all(size * 2 % 16 == 0 for size in sizes):
            try:
                t = torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16)
                theirs = rel(torch, torch.where(mask, t.float(), 0), torch.where(mask, ref, 0))
            except Exception as exc:  # noqa: BLE001
                theirs = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        ok = unwritten == 0 and err < TOL["bf16"]
        failures += not ok
        emit({"kind": "fp8-case", "i": i, "shape": kind, "G": g, "tokens": sum(sizes), "K": k,
              "N": n, "rel_err": err, "torch_scaled_grouped_mm_rel_err": theirs,
              "unwritten": unwritten, "ok": ok})
    return failures


def graph_and_compile(torch):
    """A CUDA graph captured once, replayed with other group sizes in ``offs`` (same tokens);
    torch.compile(fullgraph=True) through the op."""
    from pipeline_core_nvidia_h100 import grouped_mm
    g, k, n = 8, 256, 512
    first, second = [100, 0, 3, 400, 128, 1, 250, 142], [0, 512, 0, 0, 1, 7, 300, 204]
    a = torch.randn(sum(first), k, device="cuda").to(torch.bfloat16)
    b = torch.randn(g, n, k, device="cuda").to(torch.bfloat16).transpose(-2, -1)
    offs = torch.tensor(_ends(first), dtype=torch.int32, device="cuda")
    grouped_mm(a, b, offs=offs)  # warm (build) outside the capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        grouped_mm(a, b, offs=offs)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            y = grouped_mm(a, b, offs=offs)
    torch.cuda.current_stream().wait_stream(side)
    for sizes in (first, second):
        offs.copy_(torch.tensor(_ends(sizes), dtype=torch.int32, device="cuda"))
        a.copy_(torch.randn(sum(first), k, device="cuda").to(torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
        err = rel(torch, y.float(), reference(torch, a, b, _ends(sizes), "2d3d"))
        emit({"kind": "graph-replay", "sizes": sizes, "rel_err": err, "ok": err < TOL["bf16"]})
    f = torch.compile(lambda x, w, o: grouped_mm(x, w, offs=o, out_dtype=torch.float32) * 2,
                      fullgraph=True)
    z = f(a, b, offs)
    err = rel(torch, z, 2 * reference(torch, a, b, _ends(second), "2d3d"))
    emit({"kind": "torch-compile", "fullgraph": True, "rel_err": err, "ok": err < TOL["fp32"]})


# --- groups along K (2-D x 2-D): the weight gradient -------------------------------------------

#: M and N of the along-K cases: multiples of 8 (16-byte rows of X^T and dY), with tails
K_MN = (8, 24, 64, 72, 128, 136, 200, 256, 1000)
#: one group's K (tokens): empty, under a K tile (64), about one, several; multiples of 8
K_SIZES = (0, 0, 8, 16, 56, 64, 72, 128, 136, 200, 512)


def draw_k_cases(n=24, seed=3503):
    """Along-K cases (G, group K sizes, M, N, dtype, out dtype, X^T or a row-major a, dY or a
    K-contiguous b): first the edges (every group empty, one group under a K tile, a trailing K
    no group takes, groups starting off the K tile)."""
    rng = random.Random(seed)
    cases = [(4, (0, 0, 0, 0), 64, 72, "bf16", "bf16", True, True),
             (1, (8,), 128, 256, "bf16", "bf16", True, True),
             (3, (56, 0, 72), 200, 136, "bf16", "fp32", False, False),
             (5, (64, 8, 0, 136, 16), 72, 24, "fp16", "fp16", True, False)]
    while len(cases) < n:
        g = rng.choice((1, 2, 3, 4, 7, 8, 16))
        dt = rng.choice(("bf16", "fp16"))
        cases.append((g, tuple(rng.choice(K_SIZES) for _ in range(g)), rng.choice(K_MN),
                      rng.choice(K_MN), dt, rng.choice((dt, dt, "fp32")), rng.random() < 0.7,
                      rng.random() < 0.7))
    return cases


def k_case_tensors(torch, case, trailing=8, device="cuda"):
    """a [M, K_total] (X^T of X [K_total, M], or row-major), b [K_total, N] (dY, or dY^T
    transposed), offs; ``trailing`` K rows past the last group that no group reads."""
    g, sizes, m, n, dt, _, a_mn, b_mn = case
    dtype, total = tdt(torch, dt), sum(sizes) + trailing
    a = (torch.randn(total, m, device=device).to(dtype).t() if a_mn else
         torch.randn(m, total, device=device).to(dtype))
    b = (torch.randn(total, n, device=device).to(dtype) if b_mn else
         torch.randn(n, total, device=device).to(dtype).t())
    return a, b, torch.tensor(_ends(sizes), dtype=torch.int32, device=device)


def k_reference(torch, a, b, ends):
    ref, begin = [], 0
    for end in ends:
        ref.append(a[:, begin:end].float() @ b[begin:end].float())
        begin = end
    return torch.stack(ref) if ref else torch.empty(0, a.shape[0], b.shape[1], device=a.device)


def along_k_correctness(torch, cases):
    """Ours on every case first (the verdict rests on these), each line emitted at once."""
    from pipeline_core_nvidia_h100 import grouped_mm
    failures = 0
    for i, case in enumerate(cases):
        g, sizes, m, n, dt, out_name, a_mn, b_mn = case
        a, b, offs = k_case_tensors(torch, case)
        od = tdt(torch, out_name)
        ref = k_reference(torch, a, b, _ends(sizes))
        pub = grouped_mm(a, b, offs=offs, out_dtype=od)
        out = torch.empty_strided(tuple(pub.shape), pub.stride(), device="cuda",
                                  dtype=od).fill_(float("nan"))
        launch_into(torch, a, b, offs, out, od)
        torch.cuda.synchronize()
        unwritten = int(torch.isnan(out.float()).sum())
        err = rel(torch, torch.nan_to_num(out.float(), nan=1e4), ref)
        same = bool(torch.equal(pub, out))
        ok = unwritten == 0 and err < TOL[out_name] and same and tuple(pub.shape) == (g, m, n)
        failures += not ok
        emit({"kind": "k-case", "i": i, "G": g, "k_sizes": list(sizes), "M": m, "N": n,
              "dtype": dt, "out": out_name, "a": "X^T" if a_mn else "row-major",
              "b": "dY" if b_mn else "K-contiguous", "rel_err": err, "unwritten": unwritten,
              "public_equal": same, "ok": ok})
    return failures


def along_k_torch(torch, cases):
    """torch._grouped_mm's error on the same cases, last (a device-side assert of torch's would
    end the process's CUDA context: ours are all in by then)."""
    for i, case in enumerate(cases):
        g, sizes, m, n, dt, out_name, _, _ = case
        a, b, offs = k_case_tensors(torch, case)
        ref = k_reference(torch, a, b, _ends(sizes))
        try:
            t = torch._grouped_mm(a, b, offs=offs, out_dtype=tdt(torch, out_name))
            theirs: object = rel(torch, t.float(), ref)
        except Exception as exc:  # noqa: BLE001  (a combination torch does not take)
            theirs = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        emit({"kind": "k-case-torch", "i": i, "torch_grouped_mm_rel_err": theirs})


def k_timing_counts(experts=8, tokens=16384):
    """The Mixtral-like weight gradient's tokens per expert: the skewed router load, each a
    multiple of 8 (torch's 16-byte offsets), summing to ``tokens``."""
    counts = [c // 8 * 8 for c in skewed_counts(experts, tokens, seed=35)]
    counts[counts.index(max(counts))] += tokens - sum(counts)
    return counts


def along_k_timing(torch, rounds=5, reps=10):
    """dW = X^T dY per expert, Mixtral-like: M = hidden 4096, N = FFN 14336, 16k tokens."""
    from pipeline_core_nvidia_h100 import grouped_mm, matmul_call
    hidden, ffn, counts = 4096, 14336, k_timing_counts()
    tokens = sum(counts)
    offs = torch.tensor(_ends(counts), dtype=torch.int32, device="cuda")
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    dy = torch.randn(tokens, ffn, device="cuda").to(torch.bfloat16)
    fns = {"ours": lambda: grouped_mm(x.t(), dy, offs=offs),
           "torch._grouped_mm": lambda: torch._grouped_mm(x.t(), dy, offs=offs)}
    outs = {name: fn() for name, fn in fns.items()}
    torch.cuda.synchronize()
    agree = rel(torch, outs["ours"].float(), outs["torch._grouped_mm"].float())
    if not agree < TOL["bf16"]:
        raise SystemExit(f"ALONG-K FAIL: Mixtral dW differs from torch._grouped_mm by {agree}")
    del outs
    per = interleaved(torch, fns, rounds, reps)
    flop = 2.0 * tokens * hidden * ffn
    plan = matmul_call._plan_grouped(x.t(), dy, offs, None, None, matmul_call.sm_count(0))
    rec = {"kind": "timing", "config": "mixtral", "proj": "dW", "what": "bf16 along K",
           "experts": len(counts), "tokens": tokens, "K": tokens, "M": hidden, "N": ffn,
           "min_max_tokens": [min(counts), max(counts)], "rounds": rounds, "grid": plan.grid,
           "rel_diff_to_peer": agree}
    for name in fns:
        med = statistics.median(per[name])
        rec[name] = {"ms": round(med, 4), "tflops": round(flop / med / 1e9, 1)}
    rec["ours/torch._grouped_mm"] = ratios(per, "ours", "torch._grouped_mm")
    emit(rec)
    return rec


def k_plan_without_torch(case, sms=132):
    """An along-K case's plan from its shapes alone (the tensors k_case_tensors makes)."""
    return k_choice(case, sms)[0]


def k_choice(case, sms=132, store=None):
    """An along-K case's (plan, candidate) with ``store`` (None: :data:`STORE`)."""
    g, sizes, m, n, dt, out_name, a_mn, b_mn = case
    total = sum(sizes) + 8
    a = _info((m, total), (1, m) if a_mn else (total, 1), dt)
    b = _info((total, n), (n, 1) if b_mn else (1, total), dt)
    return store_choice(a, b, _info((g,), (1,), "int32"), out_name, None, sms, store or STORE)


def k_timing_plan(sms=132, store=None):
    return k_timing_choice(sms, store)[0]


def k_timing_choice(sms=132, store=None):
    tokens = sum(k_timing_counts())
    return store_choice(_info((4096, tokens), (1, 4096), "bf16"),
                        _info((tokens, 14336), (14336, 1), "bf16"), _info((8,), (1,), "int32"),
                        None, None, sms, store or STORE)


def k_keys(cases, sms=132):
    """The (variant, candidate) pairs the along-K cases and timing row build."""
    return {(p.variant, c) for p, c in [*(k_choice(x, sms) for x in cases),
                                         k_timing_choice(sms)]}


def along_k(torch, cases, timed=True):
    """The along-K section alone, failing loudly: its kernels built, its cases, its timing."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    prebuild(torch, k_keys(cases, sms))
    failures = along_k_correctness(torch, cases)
    verdict = "PASS" if failures == 0 else "FAIL"
    print(f"ALONG-K {verdict}: {len(cases) - failures} of {len(cases)} cases correct",
          flush=True)
    if timed:
        rec = along_k_timing(torch)
        print(f"ALONG-K timing: Mixtral dW ours {rec['ours']['tflops']} TF, torch._grouped_mm "
              f"{rec['torch._grouped_mm']['tflops']} TF, per-round ratios "
              f"{rec['ours/torch._grouped_mm']}", flush=True)
    along_k_torch(torch, cases)
    return failures


# --- timing ---------------------------------------------------------------------------------------

def projections(torch, configs):
    """Each MoE projection of ``configs``, the tensors made one projection at a time: (config,
    experts, tokens, counts, offs, proj, K, N, a [tokens, K], w [experts, N, K]) bf16, the
    tokens from the skewed router load; ``w.transpose(-2, -1)`` is b as a model holds it."""
    for name, experts, hidden, ffn, tokens in configs:
        counts = skewed_counts(experts, tokens, seed=35)
        offs = torch.tensor(_ends(counts), dtype=torch.int32, device="cuda")
        for proj, k, n in (("up", hidden, ffn), ("down", ffn, hidden)):
            yield (name, experts, tokens, counts, offs, proj, k, n,
                   torch.randn(tokens, k, device="cuda").to(torch.bfloat16),
                   torch.randn(experts, n, k, device="cuda").to(torch.bfloat16))


def fp8_operands(torch, a, w):
    """a's and w's fp8 e4m3 operands (b K-major) and their row-wise scales."""
    a8 = (a.float() * 0.5).to(torch.float8_e4m3fn)
    b8 = (w.float() * 0.5).to(torch.float8_e4m3fn).transpose(-2, -1)
    return (a8, b8, torch.rand(a.shape[0], device="cuda") + 0.5,
            torch.rand(w.shape[0], w.shape[1], device="cuda") + 0.5)


def timing(torch, rounds=7, reps=20, fp8=True):
    from pipeline_core_nvidia_h100 import grouped_mm, matmul_call, scaled_grouped_mm
    summary = []
    for name, experts, tokens, counts, offs, proj, k, n, a, w in projections(torch, CONFIGS):
        b = w.transpose(-2, -1)  # [G, K, N], K contiguous: a model's weights
        impls = {"ours": lambda: grouped_mm(a, b, offs=offs),
                 "torch._grouped_mm": lambda: torch._grouped_mm(a, b, offs=offs)}
        kinds = [("bf16", impls)]
        if fp8:
            a8, b8, sa, sb = fp8_operands(torch, a, w)
            kinds.append(("fp8 row-wise", {
                "ours": lambda: scaled_grouped_mm(a8, b8, sa, sb, offs=offs),
                "torch._scaled_grouped_mm": lambda: torch._scaled_grouped_mm(
                    a8, b8, sa, sb, offs=offs, out_dtype=torch.bfloat16)}))
        for what, fns in kinds:
            peer = next(x for x in fns if x != "ours")
            outs = {x: fn() for x, fn in fns.items()}
            torch.cuda.synchronize()
            agree = rel(torch, outs["ours"].float(), outs[peer].float())
            del outs
            per = interleaved(torch, fns, rounds, reps)
            flop = 2.0 * tokens * k * n
            plan = matmul_call._plan_grouped(a8 if what != "bf16" else a,
                                             b8 if what != "bf16" else b, offs, None, None,
                                             matmul_call.sm_count(0),
                                             (sa, sb) if what != "bf16" else None)
            rec = {"kind": "timing", "config": name, "proj": proj, "what": what,
                   "experts": experts, "tokens": tokens, "K": k, "N": n,
                   "min_max_tokens": [min(counts), max(counts)], "rounds": rounds,
                   "grid": plan.grid, "rel_diff_to_peer": agree}
            for x in fns:
                med = statistics.median(per[x])
                rec[x] = {"ms": round(med, 4), "tflops": round(flop / med / 1e9, 1)}
            rec[f"ours/{peer}"] = ratios(per, "ours", peer)
            emit(rec)
            summary.append(rec)
        del a, w, b
    return summary


#: the stores --store-timing compares (tma-s3 only where it differs from tma)
TIMED_STORES = ("tma", "tma-s3", "direct")


def _store_fns(torch, a, b, offs, scales):
    """A launch of each of :data:`TIMED_STORES` on these tensors, each kernel once (tma-s3 is
    left out where it launches what tma does: two buffers fit at 4 stages already)."""
    fns, seen = {}, set()
    for store in TIMED_STORES:
        key = repr(_recipe_for(torch, a, b, offs, None, scales, store).kernels)
        if key not in seen:
            seen.add(key)
            fns[store] = launcher(torch, a, b, offs, None, scales, store)
    return fns


def _store_row(torch, fns, rounds, reps, flop, rec):
    """Time ``fns`` (the stores, then the torch peer) interleaved, after checking that every
    store writes the same bits and agrees with the peer; the record with TFLOPS and per-round
    ratios of each store to the peer and to the direct store."""
    peer = list(fns)[-1]
    outs = {x: fn() for x, fn in fns.items()}
    torch.cuda.synchronize()
    rec["stores_equal"] = all(torch.equal(outs[x], outs["direct"]) for x in fns if x != peer)
    rec["rel_diff_to_peer"] = rel(torch, outs["direct"].float(), outs[peer].float())
    del outs
    per = interleaved(torch, fns, rounds, reps)
    for x in fns:
        med = statistics.median(per[x])
        rec[x] = {"ms": round(med, 4), "tflops": round(flop / med / 1e9, 1)}
    for x in fns:
        if x != peer:
            rec[f"{x}/{peer}"] = ratios(per, x, peer)
            if x != "direct":
                rec[f"{x}/direct"] = ratios(per, x, "direct")
    rec["peer"] = peer
    emit(rec)
    return rec


def store_timing(torch, rounds=7, reps=20):
    """The stores (:data:`TIMED_STORES`) against torch's grouped kernels (--store-timing): each
    MoE projection of :data:`CONFIGS` (DeepSeek-256's 64-row tiles take two buffers at 4
    stages: there tma-s3 is tma, and the call's default), bf16 and fp8 row-wise, and Mixtral's dW along K,
    all in interleaved rounds; the kernels are built (prebuild) before the first row."""
    summary = []
    for name, experts, tokens, _, offs, proj, k, n, a, w in projections(torch, CONFIGS):
        b = w.transpose(-2, -1)
        a8, b8, sa, sb = fp8_operands(torch, a, w)
        rows = (("bf16", a, b, None, "torch._grouped_mm",
                 lambda: torch._grouped_mm(a, b, offs=offs)),
                ("fp8 row-wise", a8, b8, (sa, sb), "torch._scaled_grouped_mm",
                 lambda: torch._scaled_grouped_mm(a8, b8, sa, sb, offs=offs,
                                                  out_dtype=torch.bfloat16)))
        for what, x, y, scales, peer, theirs in rows:
            fns = {**_store_fns(torch, x, y, offs, scales), peer: theirs}
            summary.append(_store_row(torch, fns, rounds, reps, 2.0 * tokens * k * n, {
                "kind": "store-timing", "config": name, "proj": proj, "what": what,
                "experts": experts, "tokens": tokens, "K": k, "N": n, "rounds": rounds}))
        del a, w, b, a8, b8
    hidden, ffn, counts = 4096, 14336, k_timing_counts()
    tokens = sum(counts)
    offs = torch.tensor(_ends(counts), dtype=torch.int32, device="cuda")
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    dy = torch.randn(tokens, ffn, device="cuda").to(torch.bfloat16)
    fns = {**_store_fns(torch, x.t(), dy, offs, None),
           "torch._grouped_mm": lambda: torch._grouped_mm(x.t(), dy, offs=offs)}
    summary.append(_store_row(torch, fns, rounds, reps, 2.0 * tokens * hidden * ffn, {
        "kind": "store-timing", "config": "mixtral", "proj": "dW", "what": "bf16 along K",
        "experts": len(counts), "tokens": tokens, "K": tokens, "M": hidden, "N": ffn,
        "rounds": rounds}))
    for r in summary:
        print(_store_table_row(r), flush=True)
    return summary


def _store_table_row(r):
    """One --store-timing record as a line: TFLOPS each, the median per-round ratios."""
    speeds = "  ".join(f"{x} {r[x]['tflops']}" for x in r if isinstance(r[x], dict))
    ratio = "  ".join(f"{x} {statistics.median(r[x]):.3f}" for x in r if "/" in x)
    return (f"{r['config']:12} {r['proj']:4} {r['what']:13} TF: {speeds} | medians: {ratio} | "
            f"stores equal {r['stores_equal']}")


# --- planning without torch: the dry run and the prebuild -----------------------------------------

def _info(shape, strides, dtype):
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo
    return TensorInfo(shape=tuple(shape), strides=tuple(strides), dtype=dtype)


def _contiguous(shape):
    return contiguous(shape)


def plan_without_torch(case, sms=132):
    """A case's (plan, candidate) from its shapes alone (the tensors case_tensors makes)."""
    kind, g, sizes, k, n, dt, out_name, b_kmajor = case
    total = sum(sizes)

    def mat(batch, rows, cols, kmajor):
        if kmajor:  # [.., cols, rows] contiguous, transposed
            s = _contiguous((*batch, cols, rows))
            return _info((*batch, rows, cols), (*s[:-2], s[-1], s[-2]), dt)
        return _info((*batch, rows, cols), _contiguous((*batch, rows, cols)), dt)

    offs = _info((g,), (1,), "int32")
    if kind == "2d3d":
        a, b = _info((total, k), _contiguous((total, k)), dt), mat((g,), k, n, b_kmajor)
    elif kind == "3d2d":
        a, b = _info((g, n, k), _contiguous((g, n, k)), dt), mat((), k, total, b_kmajor)
    else:
        m = max(total // max(g, 1), 1)
        a, b, offs = _info((g, m, k), _contiguous((g, m, k)), dt), mat((g,), k, n, b_kmajor), None
    return store_choice(a, b, offs, out_name, None, sms, STORE)


def _candidate(a, b):
    """The tile the call picks for these descriptions (matmul_call._grouped_candidate's rule,
    decompose.grouped, on shapes alone)."""
    from pipeline_core_nvidia_h100 import decompose
    along_m = len(a.shape) == 2 and len(b.shape) == 3
    return decompose.grouped(a.shape[0], b.shape[0] if along_m else 0, a.dtype, not along_m)


def fp8_plan_without_torch(case, sms=132):
    kind, g, sizes, k, n = case
    total = sum(sizes)
    offs = _info((g,), (1,), "int32")
    if kind == "2d3d":
        a = _info((total, k), _contiguous((total, k)), "e4m3")
        b = _info((g, k, n), (n * k, 1, k), "e4m3")
        scales = (_info((total,), (1,), "fp32"), _info((g, n), (n, 1), "fp32"))
    else:
        a = _info((g, n, k), _contiguous((g, n, k)), "e4m3")
        b = _info((k, total), (1, k), "e4m3")
        scales = (_info((g, n), (n, 1), "fp32"), _info((total,), (1,), "fp32"))
    return store_choice(a, b, offs, None, scales, sms, STORE)


def timing_plans(sms=132, store="call", configs=CONFIGS):
    """(plan, candidate) of each timed MoE projection, bf16 and fp8, with ``store``."""
    found = []
    for _, experts, hidden, ffn, tokens in configs:
        for k, n in ((hidden, ffn), (ffn, hidden)):
            offs = _info((experts,), (1,), "int32")
            for dt in ("bf16", "e4m3"):
                scales = None if dt == "bf16" else (_info((tokens,), (1,), "fp32"),
                                                    _info((experts, n), (n, 1), "fp32"))
                a = _info((tokens, k), (k, 1), dt)
                b = _info((experts, k, n), (n * k, 1, k), dt)
                found.append(store_choice(a, b, offs, None, scales, sms, store))
    return found


def store_timing_keys(sms=132):
    """The (variant, candidate) pairs --store-timing builds: each projection and the along-K
    row with each of :data:`TIMED_STORES`."""
    return {(p.variant, c) for store in TIMED_STORES
            for p, c in [*timing_plans(sms, store, CONFIGS), k_timing_choice(sms, store)]}


def dry_run(cases, fp8, k_cases=()):
    """The drawn cases, planned (every check, no GPU): what the GPU run will launch."""
    from pipeline_core_nvidia_h100.warpspecialized import describe_variant
    variants: dict = {}  # (variant, candidate): the kernels the run builds, and their cases
    for case in cases:
        p, c = plan_without_torch(case)
        variants.setdefault((p.variant, c), 0)
        variants[(p.variant, c)] += 1
    for case in fp8:
        p, c = fp8_plan_without_torch(case)
        variants.setdefault((p.variant, c), 0)
        variants[(p.variant, c)] += 1
    for p, c in timing_plans():
        variants.setdefault((p.variant, c), 0)
    for case in k_cases:
        p, c = k_choice(case)
        variants[(p.variant, c)] = variants.get((p.variant, c), 0) + 1
    p, c = k_timing_choice()
    variants.setdefault((p.variant, c), 0)
    groups = [c[1] for c in cases]
    sizes = [s for c in cases for s in c[2]]
    emit({"kind": "dry-run", "cases": len(cases), "fp8_cases": len(fp8),
          "shapes": {k: sum(c[0] == k for c in cases) for k in sorted(set(KINDS))},
          "G_min_max": [min(groups), max(groups)] if groups else None, "groups": len(sizes),
          "empty_groups": sizes.count(0), "groups_under_a_tile": sum(0 < s < 128 for s in sizes),
          "k_cases": len(k_cases), "variants": len(variants)})
    for (v, c), count in sorted(variants.items(), key=lambda x: repr(x[0])):
        emit({"kind": "variant", "cases": count, "variant": describe_variant(v),
              "tile": c.describe()})
    for name, experts, hidden, ffn, tokens in CONFIGS:
        counts = skewed_counts(experts, tokens, seed=35)
        emit({"kind": "config", "config": name, "experts": experts, "tokens": tokens,
              "min_max_mean_tokens": [min(counts), max(counts), tokens // experts],
              "empty": counts.count(0)})
    return variants


def write_out(out):
    """Every result line so far into ``out``/results.jsonl (``--out``; None: nowhere)."""
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in LINES))


def sanitize_keys(sms=132):
    """The (variant, candidate) pairs the --sanitize cases build with :data:`STORE`."""
    return ({(p.variant, c) for p, c in map(lambda x: plan_without_torch(x, sms), SANITIZE)}
            | {(p.variant, c) for p, c in map(lambda x: fp8_plan_without_torch(x, sms),
                                               SANITIZE_FP8)}
            | {(p.variant, c) for p, c in (k_choice(x, sms) for x in SANITIZE_K)})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true",
                    help="draw and plan the cases (every check), no GPU, no torch")
    ap.add_argument("--cases", type=int, default=120)
    ap.add_argument("--no-fp8", action="store_true", help="bf16 only (no scaled_grouped_mm)")
    ap.add_argument("--fp8-cases", type=int, default=24)
    ap.add_argument("--k-cases", type=int, default=24, help="2-D x 2-D cases (groups along K)")
    ap.add_argument("--along-k", action="store_true",
                    help="only the 2-D x 2-D cases and their timing row (about a minute)")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--prebuild-only", action="store_true",
                    help="build every variant's cubin into the disk cache (no GPU needed)")
    ap.add_argument("--out", default=None, help="folder for results.jsonl")
    ap.add_argument("--sanitize", action="store_true",
                    help="only a few small cases with tails and empty groups (run under "
                         "compute-sanitizer racecheck / synccheck)")
    ap.add_argument("--store", choices=STORES, default="call",
                    help="the epilogue's store every correctness case launches: the call's "
                         "choice, tma everywhere (one buffer where two do not fit), tma-s3 "
                         "(3 stages there, two buffers), or direct")
    ap.add_argument("--store-timing", action="store_true",
                    help="only tma / tma-s3 / direct vs torch on the MoE configurations "
                         "(with --prebuild-only: build those kernels)")
    args = ap.parse_args(argv)
    global STORE
    STORE = args.store
    if args.store_timing:
        if args.prebuild_only:
            prebuild(None, store_timing_keys())
            return 0
        import torch
        emit({"kind": "device", "name": torch.cuda.get_device_name(),
              "torch": torch.__version__})
        prebuild(torch, store_timing_keys(torch.cuda.get_device_properties(0)
                                          .multi_processor_count))
        store_timing(torch)
        write_out(args.out)
        return 0
    if args.sanitize:
        if args.prebuild_only:
            prebuild(None, sanitize_keys())
            return 0
        import torch
        failures = (correctness(torch, SANITIZE) + fp8_correctness(torch, SANITIZE_FP8)
                    + along_k_correctness(torch, SANITIZE_K))
        print(f"sanitize cases: {failures} failures")
        return 1 if failures else 0
    k_cases = draw_k_cases(args.k_cases)
    if args.along_k and not args.dry_run:
        import torch
        emit({"kind": "device", "name": torch.cuda.get_device_name(),
              "torch": torch.__version__})
        return 1 if along_k(torch, k_cases, timed=not args.skip_timing) else 0
    cases = [] if args.along_k else draw_cases(args.cases)
    fp8 = [] if args.no_fp8 or args.along_k else draw_fp8(args.fp8_cases)
    if args.dry_run or args.prebuild_only:
        variants = dry_run(cases, fp8, k_cases)
        if args.prebuild_only:
            prebuild(None, set(variants))
        return 0
    import torch
    emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__})
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    keys = {(p.variant, c) for p, c in map(lambda x: plan_without_torch(x, sms), cases)}
    keys |= {(p.variant, c) for p, c in map(lambda x: fp8_plan_without_torch(x, sms), fp8)}
    if not args.skip_timing:
        keys |= {(p.variant, c) for p, c in timing_plans(sms)}
    keys |= k_keys(k_cases, sms)
    prebuild(torch, keys)
    failures = correctness(torch, cases)
    failures += fp8_correctness(torch, fp8)
    failures += along_k_correctness(torch, k_cases)
    graph_and_compile(torch)
    along_k_torch(torch, k_cases)
    summary = [] if args.skip_timing else timing(torch, fp8=not args.no_fp8)
    if not args.skip_timing:
        summary.append(along_k_timing(torch))
    write_out(args.out)
    print("\n".join(map(_table_row, summary)))
    print(f"correctness failures: {failures} of {len(cases) + len(fp8) + len(k_cases)}")
    return 1 if failures else 0


def _table_row(r: dict) -> str:
    """One timing record as a line of the closing table: TFLOPS each, the per-round ratios."""
    ratio = next(x for x in r if x.startswith("ours/"))
    speeds = "  ".join(f"{x} {r[x]['tflops']} TF" for x in r if isinstance(r[x], dict))
    return (f"{r['config']:13} {r['proj']:4} {r['what']:13} {speeds}  {ratio} median "
            f"{statistics.median(r[ratio]):.3f} rounds {r[ratio]}")


if __name__ == "__main__":
    sys.exit(main())
