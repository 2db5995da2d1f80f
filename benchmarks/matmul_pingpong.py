"""Consumer ping-pong across output tiles (``warpspecialized-gemm -p pingpong=true``) on the GPU.

  python3 benchmarks/matmul_pingpong.py [--cases 64] [--anchors PATH] [--sanitize] [--out DIR]
                                        [--raster]

Each consumer warp group owns a whole output tile; the two take the persistent CTA's tiles in
turn and their mainloops are ordered by named barriers, so one's epilogue overlaps the other's
mainloop (docs/guide/matmul.md, "Ping-pong"; docs/guide/agents.md, "Tile splits").  The call's
planning (tails, layouts, the fused epilogue, the persistent grid) is ``matmul()``'s; only the
kernel differs (``GemmVariant.pingpong``, the tile and store of :data:`VARIANTS`).

1. Correctness (METHOD.md): random (shape, dtype, layout, epilogue) cases drawn as
   benchmarks/matmul_call.py draws them, fresh random inputs, NaN-poisoned outputs, fp32 torch
   reference.
2. ``--sanitize``: a few small shapes with tails in M, N and K (run under compute-sanitizer).
3. Timing: each ping-pong variant against the call (``matmul()``, its own pick: "cooperative"
   in the records, the cooperative kernel until the call ranked ping-pong in session 25),
   cuBLAS and triton-tma-persist (../shared/tools/gemm_anchors.py) in this process: CUDA-event
   medians after warm-up, interleaved rounds with the order rotated, per-round ratios.
Every result is one JSON line on stdout (and in --out/results.jsonl); a table closes the output.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

_spec = importlib.util.spec_from_file_location("matmul_call_bench", ROOT / "benchmarks" /
                                               "matmul_call.py")
mc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mc)

from bench_timing import interleaved, ratios  # noqa: E402  (beside this script)
from bench_peers import anchors as load_anchors  # noqa: E402  (beside this script)
TIMED = ((8192, 8192, 8192), (8192, 14336, 4096), (6144, 6144, 6144), (4096, 4096, 4096),
         (4096, 8192, 2048))
#: The ping-pong kernels run: name -> (BM, BN, ring stages, TMA store).  128 x 192 holds 192
#: fp32 accumulators a consumer thread (setmaxnreg 232), quack's default tile; its TMA store's
#: staging (2 x 8 KB a consumer) leaves room for 4 stages of 40 KB, not 5.
VARIANTS = {"pp128-s4": (128, 128, 4, False), "pp128-s5": (128, 128, 5, False),
            "pp192-tma-s4": (128, 192, 4, True)}
#: ``--raster``: the call's ping-pong kernel with other grouped-raster widths (GROUP_M: the M
#: tiles a CTA wave sweeps before the next N tile), 8 being the call's
RASTERS = {"pp192-tma-s4": (128, 192, 4, True, 8), "pp192-tma-g4": (128, 192, 4, True, 4),
           "pp192-tma-g16": (128, 192, 4, True, 16), "pp192-tma-g2": (128, 192, 4, True, 2)}
NAMES = tuple(VARIANTS)  # the variant names, in the order cases cycle through them


def candidate(name):
    from pipeline_core_nvidia_h100 import autotune
    bm, bn, stages, _, *group_m = VARIANTS[name]
    return autotune.Candidate(bm=bm, bn=bn, stages=stages, consumers=2, pingpong=True,
                              group_m=group_m[0] if group_m else 8)


def pp_plan(a, b, bias, act, od, out, name):
    """The call's plan with the variant's ping-pong candidate (no split; the TMA store where
    the variant takes it and the call's plan would; the cooperative kernel of the same tile
    where the plan does not take ping-pong, gemm_call.pingpong_taken)."""
    import attrs

    from pipeline_core_nvidia_h100 import matmul_call as m
    return m._plan(a, b, bias, act, od, out, m.sm_count(0),
                   attrs.evolve(m.TUNING, split_k=False, tma_store=VARIANTS[name][3]),
                   candidate(name))


def meta_plan(torch, case, name):
    out_name, _, act = mc.EPILOGUES[case[-1]]
    a, b, bias = mc.case_tensors(torch, case, "meta")
    return pp_plan(a, b, bias, act, None if out_name is None else mc.torch_dtype(torch, out_name),
                   None, name)


def recipe(torch, a, b, bias, act, od, out, name):
    """The ping-pong kernel's launch of ``matmul(a, b, bias=, activation=, out=)``: the call's
    own plan with the variant's ping-pong candidate (:func:`pp_plan`)."""
    from pipeline_core_nvidia_h100 import matmul_call as m
    c = candidate(name)
    plan = pp_plan(a, b, bias, act, od, out, name)  # unsplit: _recipe keeps it, builds it
    return m._recipe(plan, 0, torch.cuda.current_stream().cuda_stream, c)


def case_variant(i):
    """The variant case ``i`` runs: the variants in turn."""
    return NAMES[i % len(NAMES)]


def prebuild(torch, cases, timed):
    """Every ping-pong kernel the run launches, built with nvcc in parallel (the cases time no
    build): planned on meta tensors as the launches will plan them."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from pipeline_core.api import compile_named
    from pipeline_core_nvidia_h100 import matmul_call as m
    from pipeline_core_nvidia_h100.emit_wgmma import KERNEL_NAME, emit_wgmma
    from pipeline_core_nvidia_h100.kernel_cache import cubin_path
    from pipeline_core_nvidia_h100.warpspecialized import SCHEDULE_NAME
    t0 = time.time()
    wanted = set()
    for i, case in enumerate(cases):
        wanted.add((meta_plan(torch, case, case_variant(i)).variant, case_variant(i)))
    for case in timed:
        wanted |= {(meta_plan(torch, case, s).variant, s) for s in NAMES}
    for case in SANITIZE:  # built here, so the sanitizer's run loads them from the cache
        wanted |= {(meta_plan(torch, case, s).variant, s) for s in NAMES}
    host = m.CALL.host()
    sources = [emit_wgmma(compile_named(SCHEDULE_NAME, target="h100",
                                        params=candidate(s).params(v),
                                        target_args={"stages": str(VARIANTS[s][2])}, host=host))
               for v, s in sorted(wanted, key=repr)]
    with ThreadPoolExecutor(14) as pool:
        list(pool.map(lambda src: cubin_path(src, KERNEL_NAME, ("-std=c++17",), "sm_90a"),
                      sources))
    for v, s in wanted:
        m.CALL.kernels.kernel((v, candidate(s), 0))
    mc.emit({"kind": "pp-prebuild", "kernels": len(wanted), "seconds": round(time.time() - t0, 1)})


def run_case(torch, case, name=NAMES[0]):
    from pipeline_core_nvidia_h100 import matmul_call as m
    mm, n, k, dt, a_col, b_col, e = case
    out_name, bias_kind, act = mc.EPILOGUES[e]
    a, b, bias = mc.case_tensors(torch, case)
    od = out_name or dt
    out = torch.full((mm, n), float("nan"), device="cuda", dtype=mc.torch_dtype(torch, od))
    r = recipe(torch, a, b, bias, act, None if out_name is None else mc.torch_dtype(torch, od),
               out, name)
    m.launch_recipe(r, a, b, bias, out)
    torch.cuda.synchronize()
    ref = mc.reference(torch, a, b, bias, act)
    unwritten = int(torch.isnan(out.float()).sum())
    err = float((out.float() - ref).norm() / ref.norm().clamp_min(1e-30))
    return out, unwritten, err, od, r.plan.grid


def correctness(torch, cases):
    failures, table = 0, {}
    for i, case in enumerate(cases):
        name = case_variant(i)
        out, unwritten, err, od, grid = run_case(torch, case, name)
        m, n, k, dt, a_col, b_col, e = case
        ok = unwritten == 0 and err <= mc.TOL[od]
        failures += not ok
        key = f"{dt} A{'col' if a_col else 'row'} B{'col' if b_col else 'row'}"
        row = table.setdefault(key, [0, 0, 0.0])
        row[0] += 1
        row[1] += ok
        row[2] = max(row[2], err)
        if not ok or i < 3:
            mc.emit({"kind": "pp-case", "i": i, "M": m, "N": n, "K": k, "dtype": dt,
                     "a": "col" if a_col else "row", "b": "col" if b_col else "row", "out": od,
                     "epilogue": mc.EPILOGUES[e], "variant": name, "grid": grid,
                     "rel_err": err, "unwritten": unwritten, "ok": ok})
    for key, (count, good, worst) in sorted(table.items()):
        mc.emit({"kind": "pp-correct-table", "layout": key, "cases": count, "ok": good,
                 "max_rel_err": worst})
    mc.emit({"kind": "pp-correctness", "cases": len(cases), "failures": failures})
    return failures


#: small shapes with tails in M, N and K, for compute-sanitizer (racecheck / synccheck); 300
#: rows: a CTA runs 2 output tiles of 128 x 128 columns-wise (each consumer one), and more
SANITIZE = ((200, 300, 130, "bf16", False, False, 1), (130, 260, 70, "fp16", True, True, 2),
            (300, 520, 200, "bf16", True, False, 3))


def sanitize_run(torch):
    for case in SANITIZE:
        for s in NAMES:
            _, unwritten, err, _, grid = run_case(torch, case, s)
            print(json.dumps({"kind": "pp-sanitize-case", "case": case, "variant": s,
                              "grid": grid, "rel_err": err, "unwritten": unwritten}), flush=True)


def timing(torch, anchors_path, rounds=5, reps=20, shapes=TIMED):
    from pipeline_core_nvidia_h100 import matmul
    from pipeline_core_nvidia_h100 import matmul_call as m
    peers = load_anchors(anchors_path).gemm_peers()
    summary = []
    for mm, n, k in shapes:
        a = torch.randn(mm, k, device="cuda").to(torch.bfloat16)
        bt = torch.randn(n, k, device="cuda").to(torch.bfloat16)  # B stored [N, K]
        c = torch.empty(mm, n, device="cuda", dtype=torch.bfloat16)
        impls = {}
        for s in NAMES:
            r = recipe(torch, a, bt.T, None, None, None, c, s)
            impls[s] = (lambda r=r: m.launch_recipe(r, a, bt.T, None, c))
        impls["cooperative"] = lambda: matmul(a, bt.T, out=c)
        impls["cublas"] = lambda: peers["cublas"](a, bt, c)
        impls["triton-tma-persist"] = lambda: peers["triton-tma-persist"](a, bt, c)
        ref = a.float() @ bt.float().T
        for name, fn in impls.items():  # warm-up and a check on this shape
            c.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            err = float((c.float() - ref).norm() / ref.norm())
            mc.emit({"kind": "pp-timing-check", "shape": [mm, n, k], "impl": name,
                     "rel_err": err, "ok": err < mc.TOL["bf16"]})
        del ref
        names = list(impls)
        per = interleaved(torch, impls, rounds, reps)
        flop = 2.0 * mm * n * k
        rec = {"kind": "pp-timing", "shape": [mm, n, k], "rounds": rounds, "reps": reps}
        for name in names:
            med = statistics.median(per[name])
            rec[name] = {"ms": round(med, 4), "tflops": round(flop / med / 1e9, 1)}
        for ours in NAMES:
            for peer in ("cooperative", "cublas", "triton-tma-persist"):
                rec[f"{ours}/{peer}"] = ratios(per, ours, peer)
        mc.emit(rec)
        summary.append(rec)
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=64)
    ap.add_argument("--anchors", default=str(ROOT.parent / "shared" / "tools" / "gemm_anchors.py"))
    ap.add_argument("--out", default=None, help="folder for results.jsonl")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--raster", action="store_true",
                    help="time RASTERS (the call's ping-pong kernel's raster widths) instead")
    args = ap.parse_args(argv)
    if args.raster:
        global VARIANTS, NAMES
        VARIANTS, NAMES = RASTERS, tuple(RASTERS)
    import torch
    if args.sanitize:
        sanitize_run(torch)
        return 0
    mc.emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__})
    # tails (1, 7, 17, 100, 127, 1000 ...), both dtypes, every layout and epilogue
    cases = mc.draw_cases(args.cases, seed=126)
    timed = [] if args.skip_timing else [(m, n, k, "bf16", False, True, 0) for m, n, k in TIMED]
    prebuild(torch, cases, timed)
    failures = correctness(torch, cases)
    summary = [] if args.skip_timing else timing(torch, args.anchors)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "results.jsonl").write_text("".join(json.dumps(x) + "\n"
                                                           for x in mc.LINES))
    cols = list(NAMES) + ["cooperative", "cublas", "triton-tma-persist"]
    print("\nshape             " + "  ".join(f"{c:>18}" for c in cols) + "  (TFLOPS)")
    for r in summary:
        print(f"{'x'.join(map(str, r['shape'])):17} "
              + "  ".join(f"{r[c]['tflops']:18}" for c in cols))
        for s in NAMES:
            print("   " + "  ".join(f"{s}/{p} {statistics.median(r[f'{s}/{p}']):.3f}"
                                    for p in ("cooperative", "cublas", "triton-tma-persist")))
    print(f"ping-pong correctness failures: {failures} of {args.cases}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
