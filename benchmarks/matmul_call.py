"""``pipeline_core_nvidia_h100.matmul`` on the GPU: correctness on random cases, then timing.

  python3 benchmarks/matmul_call.py [--cases 320] [--anchors ../shared/tools/gemm_anchors.py]

1. Correctness (METHOD.md): CASES random (shape, dtype, layout, epilogue) cases, M, N, K drawn
   from SIZES, fresh random inputs each, NaN-poisoned outputs, against an fp32 torch reference;
   operands whose natural strides TMA cannot read are made as views into padded storage, and a
   contiguous one of that kind must be refused with one line naming it.
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
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

from bench_timing import interleaved, ratios  # noqa: E402  (beside this script)
from bench_peers import anchors as load_anchors  # noqa: E402  (beside this script)
SIZES = (1, 7, 8, 17, 100, 127, 128, 1000, 4000, 4096)
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


def operand(torch, rows, cols, dtype, col_major, pad, device="cuda"):
    """A [rows, cols] operand: row- or column-major; ``pad``: its leading dimension rounded up
    to 8 elements (a view into wider storage), else contiguous."""
    inner, outer = (rows, cols) if col_major else (cols, rows)
    width = -(-inner // 8) * 8 if pad else inner
    store = torch.randn(outer, width, device=device).to(dtype)
    view = store[:, :inner]
    return view.T if col_major else view


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
    rng = random.Random(seed)
    cases = [(1, 1, 1, "bf16", False, False, 0), (4000, 4000, 4000, "bf16", False, False, 0),
             (1, 4096, 4096, "bf16", False, False, 0), (4096, 1, 7, "fp16", True, True, 2)]
    while len(cases) < n:
        cases.append((rng.choice(SIZES), rng.choice(SIZES), rng.choice(SIZES),
                      rng.choice(("bf16", "fp16")), rng.random() < 0.5, rng.random() < 0.5,
                      rng.randrange(len(EPILOGUES))))
    return cases


def draw_split_cases(n, seed=27):
    rng = random.Random(seed)
    return [(rng.choice(SPLIT_M), rng.choice(SPLIT_N), rng.choice(SPLIT_K),
             rng.choice(("bf16", "fp16")), rng.random() < 0.5, rng.random() < 0.5,
             rng.randrange(len(EPILOGUES))) for _ in range(n)]


def case_tensors(torch, case, device="cuda"):
    """A case's a, b and bias (on ``device``; ``meta`` for planning only)."""
    m, n, k, dt, a_col, b_col, e = case
    _, bias_kind, _ = EPILOGUES[e]
    dtype = torch_dtype(torch, dt)
    a = operand(torch, m, k, dtype, a_col, True, device)
    b = operand(torch, k, n, dtype, b_col, True, device)
    bias = None
    if bias_kind is not None:
        bias = torch.randn(n, device=device).to(dtype if bias_kind == "same"
                                                else torch_dtype(torch, bias_kind))
    return a, b, bias


def plan_of(torch, case):
    """The plan a case will launch, planned on meta tensors (to build kernels first)."""
    from pipeline_core_nvidia_h100 import matmul_call
    out, _, act = EPILOGUES[case[-1]]
    a, b, bias = case_tensors(torch, case, "meta")
    od = None if out is None else torch_dtype(torch, out)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return matmul_call._plan(a, b, bias, act, od, None, sms, matmul_call.TUNING)


def variant_of(torch, case):
    return plan_of(torch, case).variant


def prebuild(torch, variants):
    """Every variant's cubin built in parallel (nvcc), then loaded: the cases time no build."""
    from concurrent.futures import ThreadPoolExecutor

    from pipeline_core.api import compile_named
    from pipeline_core_nvidia_h100.emit_wgmma import KERNEL_NAME, emit_wgmma
    from pipeline_core_nvidia_h100.kernel_cache import cubin_path
    from pipeline_core_nvidia_h100.autotune import DEFAULT
    from pipeline_core_nvidia_h100.matmul_call import CALL, CALL_STAGES, schedule_params
    from pipeline_core_nvidia_h100.warpspecialized import SCHEDULE_NAME
    t0 = time.time()
    host = CALL.host()
    sources = [emit_wgmma(compile_named(SCHEDULE_NAME, target="h100", params=schedule_params(v),
                                        target_args={"stages": str(CALL_STAGES)}, host=host))
               for v in variants]
    with ThreadPoolExecutor(14) as pool:
        list(pool.map(lambda s: cubin_path(s, KERNEL_NAME, ("-std=c++17",), "sm_90a"), sources))
    for v in variants:
        CALL.kernels.kernel((v, DEFAULT, torch.cuda.current_device()))
    emit({"kind": "prebuild", "variants": len(variants), "seconds": round(time.time() - t0, 1)})


def correctness(torch, cases):
    from pipeline_core_nvidia_h100 import MatmulArgumentError, matmul
    failures, table, splits = 0, {}, 0
    for i, case in enumerate(cases):
        split = plan_of(torch, case).splits
        m, n, k, dt, a_col, b_col, e = case
        out_name, bias_kind, act = EPILOGUES[e]
        a, b, bias = case_tensors(torch, case)
        od = out_name or dt
        use_out = i % 2 == 0
        if use_out:
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch_dtype(torch, od))
            got = matmul(a, b, bias=bias, activation=act, out=out)
            assert got is out
        else:
            poison = torch.full((m, n), float("nan"), device="cuda", dtype=torch_dtype(torch, od))
            del poison  # the caching allocator hands this block to the call's output
            got = matmul(a, b, bias=bias, activation=act,
                         out_dtype=None if out_name is None else torch_dtype(torch, od))
        torch.cuda.synchronize()
        ref = reference(torch, a, b, bias, act)
        unwritten = int(torch.isnan(got.float()).sum())
        err = float((got.float() - ref).norm() / ref.norm().clamp_min(1e-30))
        ok = unwritten == 0 and err <= TOL[od] and tuple(got.shape) == (m, n)
        failures += not ok
        splits += split > 1
        key = (f"{dt} A{'col' if a_col else 'row'} B{'col' if b_col else 'row'}"
               + (" split-K" if split > 1 else ""))
        row = table.setdefault(key, [0, 0, 0.0])
        row[0] += 1
        row[1] += ok
        row[2] = max(row[2], err)
        if not ok or i < 3:
            emit({"kind": "case", "i": i, "M": m, "N": n, "K": k, "dtype": dt, "a": "col" if a_col
                  else "row", "b": "col" if b_col else "row", "out": od, "bias": bias_kind,
                  "activation": act, "splits": split, "rel_err": err, "unwritten": unwritten,
                  "ok": ok})
    for key, (count, good, worst) in sorted(table.items()):
        emit({"kind": "correct-table", "layout": key, "cases": count, "ok": good,
              "max_rel_err": worst})
    emit({"kind": "correctness", "cases": len(cases), "split_cases": splits,
          "failures": failures})
    # refusals: contiguous operands whose row stride TMA cannot read, each one line
    refusals = 0
    for m, n, k in ((100, 50, 7), (17, 17, 17), (127, 1000, 100)):
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
        try:
            matmul(a, b)
            emit({"kind": "refusal", "shape": [m, n, k], "refused": False})
        except MatmulArgumentError as exc:
            refusals += "\n" not in str(exc)
            emit({"kind": "refusal", "shape": [m, n, k], "message": str(exc)})
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
    """Small shapes with tails in M, N and K, for compute-sanitizer (racecheck / synccheck)."""
    from pipeline_core_nvidia_h100 import matmul
    for case in ((200, 300, 130, "bf16", False, False, 1), (130, 260, 70, "fp16", True, True, 2),
                 (65, 520, 200, "bf16", True, False, 3), (100, 300, 2100, "bf16", False, True, 1)):
        a, b, bias = case_tensors(torch, case)
        out_name, _, act = EPILOGUES[case[-1]]
        od = None if out_name is None else torch_dtype(torch, out_name)
        got = matmul(a, b, bias=bias, activation=act, out_dtype=od)
        torch.cuda.synchronize()
        ref = reference(torch, a, b, bias, act)
        err = float((got.float() - ref).norm() / ref.norm())
        print(json.dumps({"kind": "sanitize-case", "case": case, "splits": plan_of(torch, case).splits,
                          "rel_err": err}), flush=True)


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

        # the ours-graph replay: warm on its stream first (split-K's workspace is per stream)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            ours()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=side):
                ours()
        torch.cuda.current_stream().wait_stream(side)
        impls = {"ours": ours,
                 "ours-graph": graph.replay,
                 "ours-op": lambda: ops.matmul_out(a, bt.T, None, None, c),
                 "ours-nopersist": tuned(attrs.evolve(default, persistent=False), ours),
                 "ours-notma": tuned(attrs.evolve(default, tma_store=False), ours),
                 "cublas": lambda: peers["cublas"](a, bt, c),
                 "triton-tma-persist": lambda: peers["triton-tma-persist"](a, bt, c)}
        if plan.splits > 1:
            impls["ours-nosplit"] = tuned(attrs.evolve(default, split_k=False), ours)
        ref = a.float() @ bt.float().T
        for name, fn in impls.items():  # warm-up (autotuning, builds) and a check
            c.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            err = float((c.float() - ref).norm() / ref.norm())
            if not err < TOL["bf16"]:
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
    args = ap.parse_args(argv)
    import torch
    if args.sanitize:
        sanitize_run(torch)
        return 0
    emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__})
    from pipeline_core_nvidia_h100.kernel_cache import cache_dir
    cases = draw_cases(args.cases) + draw_split_cases(args.split_cases)
    shapes = TIMED if args.shapes is None else tuple(
        tuple(int(x) for x in s.split("x")) for s in args.shapes.split(","))
    timed = [] if args.skip_timing else [(m, n, k, "bf16", False, True, 0) for m, n, k in shapes]
    prebuild(torch, sorted({variant_of(torch, c) for c in cases + timed}, key=repr))
    failures = correctness(torch, cases)
    split_determinism(torch)
    graph_and_compile(torch)
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
