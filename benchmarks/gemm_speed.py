"""Issue 35's speed table: ``matmul`` / ``scaled_mm`` against cuBLAS and Triton, one process.

  python3 benchmarks/gemm_speed.py --prebuild          # here, no GPU: the cubins
  python3 benchmarks/gemm_speed.py [--rounds 5] [--anchors PATH] [--shapes MxNxK,...]
  python3 benchmarks/gemm_speed.py --choice [--old FIELD=VALUE] [--fp8 MxNxK,...] [--prebuild-only]
                                   [--rounds 7] [--out PATH]

``--choice``: the wave model's pick (``Tuning.wave_model``, on) against the previous rule
(the switch off; ``--old pingpong=false``: against the ranking without the ping-pong tile) and
cuBLAS / ``torch._scaled_mm``, one process: every shape is checked first
(NaN-poisoned output, fp32 reference, each implementation eager and new / old / cublas replayed
from a CUDA graph), then all are timed in interleaved rounds, per-round ratios new/cublas,
old/cublas, new/old, eager and graph.  Where an operand's rows are off the
128-byte line (2000x5000x3000: 6000-byte rows) it also times ``new-aligned-rows``: the same
values in rows padded to 128 bytes, the kernel alone, which says what the straddling rows cost.
``--prebuild-only``: here, no GPU, every cubin that run loads, into ``PIPELINE_CORE_CACHE_DIR``.

Every shape of the issue's list (the large aligned ones, those that quantize badly, small M and
decode, and two whose natural layout TMA cannot read: 4097x4095x4096 and 1000x1000x999), bf16,
and the fp8 shapes against ``torch._scaled_mm`` with per-tensor and row-wise scales; quack's
GEMM on the aligned bf16 shapes where its wheels travelled (quack_peer.py).  Each
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
from gemm_build import under_tuning  # noqa: E402
import quack_peer  # noqa: E402  (beside this script)

#: (M, N, K, aligned): issue 35's list; aligned False: torch's default layout, unaligned rows
SHAPES = ((8192, 8192, 8192, True), (4096, 4096, 4096, True), (4096, 8192, 2048, True),
          (8192, 14336, 4096, True), (8192, 4096, 14336, True), (6144, 6144, 6144, True),
          (8192, 8192, 8000, True), (16384, 1024, 4096, True), (2000, 5000, 3000, True),
          (128, 8192, 8192, True), (512, 28672, 4096, True), (3000, 14336, 4096, True),
          (4000, 4000, 4000, True), (8192, 28672, 4096, True), (16, 8192, 8192, True),
          (1, 4096, 4096, True), (4097, 4095, 4096, False), (1000, 1000, 999, False))
FP8 = ((1000, 4096, 4096), (3000, 14336, 4096), (8192, 8192, 8192))
#: ``--choice``'s fp8 shapes (the issue's, tensor-wise scales)
CHOICE_FP8 = ((1000, 4096, 4096), (3000, 14336, 4096))
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


#: quack's import failure, said once
_QUACK_SAID: list[str] = []


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
    quack, why = quack_peer.gemm()
    if aligned and quack is not None:
        impls["quack"] = lambda: quack_peer.matmul(quack, a, b, out)
    elif aligned and why not in _QUACK_SAID:
        emit({"kind": "peer-missing", "name": "quack", "why": why})
        _QUACK_SAID.append(why)
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
                       ("ours", "triton-tma-persist"), ("ours", "quack")):
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


#: ``--choice``'s "old" tuning: the call's with these fields changed (``--old``)
OLD = {"wave_model": False}


def _tunings():
    """``--choice``'s two tunings: the call's ("new") and the same with :data:`OLD`'s fields
    ("old": by default the wave model off)."""
    import attrs

    from pipeline_core_nvidia_h100 import matmul_call as mm
    return {"new": mm.TUNING, "old": attrs.evolve(mm.TUNING, **OLD)}


def _old(text):
    """``--old FIELD=VALUE,...``: Tuning fields (true / false / an integer)."""
    out = {}
    for item in text.split(","):
        field, _, value = item.partition("=")
        out[field.strip()] = ({"true": True, "false": False}[value.lower()]
                              if value.lower() in ("true", "false") else int(value))
    return out


def _padded_rows(torch, x):
    """``x`` (2-D, unit inner stride) as a view of rows padded to 128 bytes: same values, each
    row's start on a 128-byte line (the aligned-rows probe)."""
    rows, cols = x.shape
    step = -(-cols * x.element_size() // 128) * 128 // x.element_size()
    store = torch.empty(rows, step, dtype=x.dtype, device=x.device)
    store[:, :cols].copy_(x)
    return store[:, :cols]


def _choice_cases(torch):
    """(label, {impl: fn}, out, ref, flop, picks) per shape: bf16 SHAPES (each writing
    ``out``), then fp8 CHOICE_FP8 (each returning its product)."""
    from pipeline_core_nvidia_h100 import matmul, scaled_mm

    tunings = _tunings()
    for m, n, k, aligned in SHAPES:
        a = torch.randn(m, k, device="cuda").bfloat16()
        b = (torch.randn(n, k, device="cuda").bfloat16().T if aligned else
             torch.randn(k, n, device="cuda").bfloat16())
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        impls = {name: under_tuning(t, lambda a=a, b=b, out=out: matmul(a, b, out=out))
                 for name, t in tunings.items()}
        impls["cublas"] = lambda a=a, b=b, out=out: torch.matmul(a, b, out=out)
        if aligned and (k * 2) % 128:
            pa, pb = _padded_rows(torch, a), _padded_rows(torch, b.T).T
            impls["new-aligned-rows"] = under_tuning(tunings["new"],
                                                     lambda pa=pa, pb=pb, out=out:
                                                     matmul(pa, pb, out=out))
        yield (f"bf16 {m}x{n}x{k}", impls, out, a.float() @ b.float(), 2.0 * m * n * k,
               _picks(tunings, ((m, n, k, aligned),), ()))
    for m, n, k in CHOICE_FP8:
        a = (torch.randn(m, k, device="cuda") / 2).to(torch.float8_e4m3fn)
        b = (torch.randn(n, k, device="cuda") / 2).to(torch.float8_e4m3fn).T
        sa, sb = torch.tensor(0.7, device="cuda"), torch.tensor(1.3, device="cuda")
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        impls = {name: under_tuning(t, lambda a=a, b=b, sa=sa, sb=sb: scaled_mm(
            a, b, sa, sb, out_dtype=torch.bfloat16)) for name, t in tunings.items()}
        impls["cublas"] = lambda a=a, b=b, sa=sa, sb=sb: torch._scaled_mm(
            a, b, sa, sb, out_dtype=torch.bfloat16)
        yield (f"fp8 {m}x{n}x{k}", impls, out, (a.float() @ b.float()) * 0.7 * 1.3,
               2.0 * m * n * k, _picks(tunings, (), ((m, n, k),)))


def _picks(tunings, shapes, fp8):
    """What the call launches for the one case under each tuning (tile, consumers, split)."""
    return {name: _choice_keys(t, shapes, fp8)[0][1].describe() for name, t in tunings.items()}


def _choice_keys(tuning, shapes, fp8):
    """The (variant, candidate) each ``--choice`` case launches under ``tuning``."""
    from gemm_build import kernel_key
    from pipeline_core_nvidia_h100 import matmul_call as mm
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo

    def info(shape, strides, dtype):
        return TensorInfo(shape=shape, strides=strides, dtype=dtype, ptr=0)

    keys = []
    prev, mm.TUNING = mm.TUNING, tuning
    try:
        for m, n, k, aligned in shapes:
            a, o = info((m, k), (k, 1), "bf16"), info((m, n), (n, 1), "bf16")
            keys.append(kernel_key(a, info((k, n), (1, k) if aligned else (n, 1), "bf16"),
                                   out=o))
            if aligned and (k * 2) % 128:  # the aligned-rows probe: rows padded to 128 bytes
                step = -(-k * 2 // 128) * 64
                keys.append(kernel_key(info((m, k), (step, 1), "bf16"),
                                       info((k, n), (1, step), "bf16"), out=o))
        for m, n, k in fp8:
            keys.append(kernel_key(info((m, k), (k, 1), "e4m3"), info((k, n), (1, k), "e4m3"),
                                   out_dtype="bf16", scales=(info((), (), "fp32"),
                                                             info((), (), "fp32"))))
    finally:
        mm.TUNING = prev
    return keys


def choice_prebuild() -> None:
    """``--choice --prebuild-only``: every cubin the ``--choice`` run loads, both tunings."""
    from gemm_build import prebuild as build

    keys = set()
    for t in _tunings().values():
        keys.update(_choice_keys(t, SHAPES, CHOICE_FP8))
    build(None, keys, emit)


def _poisoned(torch, fn, out):
    """``fn`` (which returns a fresh product, as scaled_mm does) checked through ``out``: a
    block of the product's size is filled with NaN and freed first (the caching allocator hands
    it to the product), the product copied into ``out`` and poisoned after, so a kernel that
    writes nothing cannot pass on an earlier implementation's result."""
    def run():
        torch.full(tuple(out.shape), float("nan"), dtype=out.dtype, device=out.device)
        y = fn()
        out.copy_(y)
        y.fill_(float("nan"))
    return run


def _graph_checked(torch, name, fn, ref, label):
    """``fn`` captured in a CUDA graph (bench_timing.graphed) and its replay checked: the
    captured product (``out`` or the graph's own) poisoned, replayed, compared with ``ref``;
    the replay, or None where it failed (reported)."""
    box = {}
    try:
        replay = graphed(torch, lambda: box.__setitem__("y", fn()))
        box["y"].fill_(float("nan"))
        replay()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001  (a refusal is a result to report)
        emit({"kind": "check-failed", "shape": label, "impl": name, "error": str(e)[:300]})
        return None
    err = float((box["y"].float() - ref).norm() / ref.norm().clamp_min(1e-12))
    if not err < TOL:
        emit({"kind": "check-failed", "shape": label, "impl": name, "rel_err": err})
        return None
    return replay


#: ``--choice``'s ratios: (ours, peer) per record, each per round
CHOICE_RATIOS = (("new", "cublas"), ("old", "cublas"), ("new", "old"),
                 ("new-graph", "cublas-graph"), ("old-graph", "cublas-graph"),
                 ("new-graph", "old-graph"), ("new-aligned-rows", "new"),
                 ("new-aligned-rows", "cublas"))


def choice(torch, rounds: int) -> None:
    """``--choice``: check every case first (eager, then each of new / old / cublas replayed
    from a CUDA graph: the GPU's time without the host's), then time them all."""
    cases = []
    for label, impls, out, ref, flop, picks in _choice_cases(torch):
        fp8 = label.startswith("fp8")
        ok = {name: fn for name, fn in impls.items()
              if check(torch, name, _poisoned(torch, fn, out) if fp8 else fn, out, ref, label)}
        for name in ("new", "old", "cublas"):
            if name in ok:
                replay = _graph_checked(torch, name + "-graph", ok[name], ref, label)
                if replay is not None:
                    ok[name + "-graph"] = replay
        emit({"kind": "choice-check", "case": label, "passed": sorted(ok),
              "failed": sorted({*impls, *(f"{x}-graph" for x in ("new", "old", "cublas"))}
                               - set(ok))})
        cases.append((label, ok, flop, picks))
    summary = []
    for label, ok, flop, picks in cases:
        per = interleaved(torch, ok, rounds)
        rec = {"kind": "choice", "case": label, "rounds": rounds, "picks": picks}
        for name, t in per.items():
            rec[name] = {"ms": round(statistics.median(t), 5),
                         "tflops": round(flop / statistics.median(t) / 1e9, 1)}
        for ours, peer in CHOICE_RATIOS:
            if ours in per and peer in per:
                rec[f"{ours}/{peer}"] = ratios(per, ours, peer)
        emit(rec)
        summary.append(rec)
        torch.cuda.empty_cache()
    keys = ("new/cublas", "old/cublas", "new/old", "new-graph/cublas-graph",
            "old-graph/cublas-graph")
    print("\ncase                  new/cub old/cub new/old  graph: new/cub old/cub   picks (new | old)")
    for r in summary:
        med = [statistics.median(r[x]) if x in r else float("nan") for x in keys]
        print(f"{r['case']:21} {med[0]:7.3f} {med[1]:7.3f} {med[2]:7.3f}  {med[3]:14.3f} "
              f"{med[4]:7.3f}   {r['picks']['new'][:20]} | {r['picks']['old'][:20]}")
    for key in keys:
        good = [statistics.median(r[key]) for r in summary if key in r]
        if good:
            print(f"geomean {key}: {statistics.geometric_mean(good):.3f}; min {min(good):.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--anchors", default=str(ROOT.parent / "shared" / "tools" / "gemm_anchors.py"))
    ap.add_argument("--shapes", default=None, help="MxNxK,... (bf16, aligned layout)")
    ap.add_argument("--no-fp8", action="store_true")
    ap.add_argument("--out", default=None, help="a results .jsonl to write")
    ap.add_argument("--prebuild", action="store_true", help="here, no GPU: build the cubins")
    ap.add_argument("--choice", action="store_true",
                    help="the wave model's pick against the previous rule and cuBLAS")
    ap.add_argument("--prebuild-only", action="store_true",
                    help="with --choice, here, no GPU: build the cubins it loads")
    ap.add_argument("--fp8", default=None,
                    help="with --choice: its fp8 shapes, MxNxK,... (default: CHOICE_FP8)")
    ap.add_argument("--old", default=None, type=_old,
                    help="with --choice: the old tuning's fields, e.g. pingpong=false "
                         "(default: wave_model=false)")
    args = ap.parse_args()
    if args.old is not None:
        OLD.clear()
        OLD.update(args.old)
    if args.fp8 is not None:
        global CHOICE_FP8
        CHOICE_FP8 = tuple(tuple(int(x) for x in s.split("x")) for s in args.fp8.split(","))
    if args.prebuild_only and not args.choice:
        ap.error("--prebuild-only: goes with --choice; the plain run's is --prebuild")
    if args.prebuild or args.prebuild_only:
        choice_prebuild() if args.choice else prebuild()
        return 0
    import torch

    torch.manual_seed(35)
    if args.out:
        OUT.append(Path(args.out))
        OUT[0].write_text("")
    peers = load_anchors(args.anchors).gemm_peers() if Path(args.anchors).exists() else {}
    emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__,
          "peers": sorted(peers)})
    if args.choice:
        choice(torch, args.rounds)
        return 0
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
          "  graph/graph  ours/triton  ours/quack")
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
        oq = statistics.median(r["ours/quack"]) if "ours/quack" in r else float("nan")
        med.append(max(oc, gg) if gg == gg else oc)
        print(f"{'x'.join(map(str, r['shape'])):18} {r['decomposition'][:48]:48} {oc:11.3f}"
              f" {gg:12.3f} {ot:12.3f} {oq:11.3f}")
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
