"""Stream-K (docs/guide/matmul.md, "Stream-K") on the GPU: correctness, determinism, timing.

  python3 benchmarks/gemm_streamk.py --prebuild-only   # here, no GPU: the cubins into the cache
  python3 benchmarks/gemm_streamk.py                   # on the GPU: every check, then timing
  compute-sanitizer --tool racecheck python3 benchmarks/gemm_streamk.py --sanitize

1. Correctness, stream-K forced on: :data:`CASES` (tails in M, N and K, odd shapes, bf16 /
   fp16 / fp8 e4m3 scaled, every epilogue of the call, both majors of B), each planned for a
   grid of ``sms`` CTAs (a few, so small shapes run the hybrid with tiles shared by 2-4 CTAs,
   or the device's), fresh random inputs, NaN-poisoned outputs, against an fp32 reference; each
   case run twice on the same inputs must give the same bits (the fixup adds in K order).
2. Timing (interleaved rounds, CUDA-event medians, per-round ratios) on :data:`TIMED`: the
   stream-K plan (``sk``: the wave model's pick with stream-K allowed where it takes it, else
   128x256 with it forced), the call's pick (``pick``: what ``matmul`` launches now; stream-K is
   off by default, ``Tuning.stream_k``), the data-parallel pick (``dp``: the wave model with
   stream-K off) and cuBLAS (the anchors' peer, or ``torch.matmul`` without them).
3. ``--sanitize``: a few small cases with tails for compute-sanitizer racecheck / synccheck.

Every result is one JSON line; the last line is ``PASS`` or ``FAIL`` with the counts.  Runs with
``PYTHONPATH=$PWD:$PWD/plugins/nvidia_h100 PIPELINE_CORE_CACHE_DIR=$PWD/benchmarks/_kitcache``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Iterator, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

from bench_timing import interleaved, ratios, warm_and_check  # noqa: E402  (beside this script)


class Case(NamedTuple):
    """One forced stream-K case: shape, input type, B's major (``k``: B [K, N] read K-major,
    stored [N, K]; ``mn``: B [K, N] row-major), the epilogue (out type or None, bias type or
    None, activation), the grid it is planned for (``sms``), fp8's scales (``tensor`` /
    ``row``; ``none`` for the 16-bit types)."""

    m: int
    n: int
    k: int
    dtype: str = "bf16"
    b_major: str = "mn"
    out: str | None = None
    bias: str | None = None
    act: str | None = None
    sms: int = 7
    scale: str = "none"


#: tails everywhere (M, N, K off the tile), odd shapes, every epilogue, grids of 3 .. 132 CTAs
#: (tiles / sms between 1 and 4 waves, the last under and over half full), both B majors
CASES = (
    Case(1000, 1000, 999),                                    # 32 tiles on 7: 4 whole waves + 4
    Case(1000, 1000, 999, "fp16", "k", "fp32", "fp32", "gelu"),
    Case(999, 2050, 1001, "bf16", "k", None, "bf16", "relu", sms=10),
    Case(257, 513, 4097, "bf16", "mn", "fp16", None, "silu", sms=4),
    Case(129, 600, 129, "fp16", "mn", None, "fp16", None, sms=4),  # 1-2 K tiles a share
    Case(640, 768, 640, "bf16", "k", "fp32", None, None, sms=4),   # ranges on tile edges
    Case(4000, 4000, 4000, "bf16", "k", None, None, None, sms=132),
    Case(2000, 5000, 3000, "bf16", "k", None, "bf16", "gelu", sms=132),
    Case(512, 28672, 4096, "bf16", "k", None, None, None, sms=132),
    Case(512, 28672, 4096, "fp16", "mn", "fp32", "fp32", "relu", sms=132),
    Case(300, 3000, 777, "fp16", "k", None, "fp16", "silu", sms=5),
    Case(1, 4096, 4096, "bf16", "k", None, None, None, sms=5),     # one row: 64-row tiles
    Case(17, 1000, 2100, "bf16", "mn", "fp32", "bf16", "gelu", sms=3),
    Case(2050, 130, 3000, "fp16", "k", "bf16", None, "relu", sms=9),
    Case(3000, 14336, 4096, "bf16", "k", None, None, None, sms=132),
    Case(1000, 4096, 4096, "bf16", "mn", None, "bf16", None, sms=11),
    Case(128, 256, 64, "bf16", "k", None, None, None, sms=1),      # one tile, one CTA: no share
    Case(384, 512, 1000, "bf16", "k", None, "fp32", "silu", sms=5),
    Case(777, 333, 1555, "fp16", "mn", "fp16", "fp16", "gelu", sms=5),
    Case(4097, 4095, 4096, "bf16", "k", None, None, None, sms=100),
    Case(1024, 1024, 8192, "bf16", "k", "fp32", None, None, sms=13),
    Case(257, 300, 190, "bf16", "mn", None, "bf16", "relu", sms=4),
    Case(65, 520, 200, "fp16", "k", "fp32", "fp16", "silu", sms=4),
    Case(2000, 2000, 2000, "bf16", "mn", None, None, "gelu", sms=40),
    Case(1000, 4096, 4096, "e4m3", "k", "bf16", None, None, sms=11, scale="row"),
    Case(2000, 5000, 3072, "e4m3", "k", "bf16", "bf16", None, sms=132, scale="tensor"),
    Case(513, 1027, 640, "e4m3", "k", "fp16", "fp32", None, sms=7, scale="row"),
    Case(999, 999, 999, "bf16", "mn", "bf16", "bf16", "silu", sms=9),
    Case(1500, 700, 2500, "fp16", "k", None, None, None, sms=10),
    Case(256, 8192, 1024, "bf16", "k", "fp32", "bf16", "gelu", sms=20),
)
#: the timed shapes (issue 35's that do not fill the machine), all bf16 with B stored [N, K]
TIMED = ((2000, 5000, 3000), (512, 28672, 4096), (4000, 4000, 4000), (3000, 14336, 4096))
#: shapes ``matmul`` itself runs with stream-K (its decomposition's pick on 132 SMs): a
#: [M, K] @ b [K, N] row-major, bf16 bias, the activation
PUBLIC = ((2000, 5000, 3000, "gelu"), (512, 28672, 4096, None))
#: small cases with tails for compute-sanitizer (few CTAs: every tile of the last wave shared)
SANITIZE = (Case(257, 300, 190, "bf16", "mn", None, "bf16", "relu", sms=4),
            Case(130, 520, 333, "fp16", "k", "fp32", None, "gelu", sms=4),
            Case(300, 520, 700, "bf16", "k", None, "fp32", None, sms=4))
TOL = {"bf16": 1.5e-2, "fp16": 4e-3, "fp32": 2e-3}
LINES: list[dict] = []


def emit(record: dict) -> None:
    LINES.append(record)
    print(json.dumps(record), flush=True)


def _infos(c: Case) -> tuple[Any, Any, Any, Any]:
    """The case's a, b, bias and scales as gemm_call.TensorInfo (what the plan reads; no
    torch): a [M, K] row-major with rows padded to 16 bytes, b [K, N] (row-major padded, or
    [N, K] transposed), the bias contiguous, fp8's scales fp32."""
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo
    pad = 16 // (1 if c.dtype == "e4m3" else 2)
    kp, np_ = -(-c.k // pad) * pad, -(-c.n // pad) * pad
    a = TensorInfo(shape=(c.m, c.k), strides=(kp, 1), dtype=c.dtype, ptr=4096)
    b = (TensorInfo(shape=(c.k, c.n), strides=(1, kp), dtype=c.dtype, ptr=4096)
         if c.b_major == "k" else
         TensorInfo(shape=(c.k, c.n), strides=(np_, 1), dtype=c.dtype, ptr=4096))
    bias = None if c.bias is None else TensorInfo(shape=(c.n,), strides=(1,), dtype=c.bias)
    scales = None
    if c.scale != "none":
        rows = (c.m, c.n) if c.scale == "row" else (1, 1)
        scales = (TensorInfo(shape=(rows[0], 1), strides=(1, 1), dtype="fp32"),
                  TensorInfo(shape=(1, rows[1]), strides=(rows[1], 1), dtype="fp32"))
    return a, b, bias, scales


def _forced(c: Case) -> tuple[Any, Any]:
    """The case's stream-K plan and candidate: the call's decomposition with stream-K forced
    on (the plan shares the last partial wave of its ``sms`` CTAs; none where the waves
    divide or a share would be empty)."""
    import attrs

    from pipeline_core_nvidia_h100 import decompose
    from pipeline_core_nvidia_h100 import matmul_call as mm
    a, b, bias, scales = _infos(c)
    od = c.out if c.out is not None else ("bf16" if c.dtype == "e4m3" else None)
    base = mm.plan_infos(a, b, bias, c.act, od, None, c.sms, mm.TUNING, scales=scales)
    cand = attrs.evolve(decompose.for_plan(base, c.sms), stream_k=True, split_k=False)
    return mm.plan_infos(a, b, bias, c.act, od, None, c.sms, _on(mm.TUNING), cand, scales), cand


def _on(tuning: Any) -> Any:
    """``tuning`` with stream-K allowed (the call's default, ``Tuning.stream_k``, is off)."""
    import attrs
    return attrs.evolve(tuning, stream_k=True)


@contextlib.contextmanager
def _call_takes_stream_k() -> Iterator[None]:
    """``matmul`` itself with stream-K allowed (its ``TUNING``), restored after the block."""
    from pipeline_core_nvidia_h100 import matmul_call as mm
    saved = mm.TUNING
    mm.TUNING = _on(saved)
    try:
        yield
    finally:
        mm.TUNING = saved


def _timed_plans(m: int, n: int, k: int, sms: int = 132) -> dict[str, tuple[Any, Any]]:
    """The timed shape's plans by name (``sk``, ``pick``, ``dp``; the module says which)."""
    import attrs

    from pipeline_core_nvidia_h100 import decompose
    from pipeline_core_nvidia_h100 import matmul_call as mm
    from pipeline_core_nvidia_h100.autotune import Candidate
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo
    a = TensorInfo(shape=(m, k), strides=(k, 1), dtype="bf16", ptr=4096)
    b = TensorInfo(shape=(k, n), strides=(1, k), dtype="bf16", ptr=4096)
    out = TensorInfo(shape=(m, n), strides=(n, 1), dtype="bf16", ptr=4096)
    base = mm.plan_infos(a, b, None, None, None, out, sms, mm.TUNING)
    pick = decompose.for_plan(base, sms, mm.TUNING.stream_k)
    dp = decompose.for_plan(base, sms, stream_k=False)
    asked = decompose.for_plan(base, sms)  # the wave model's pick with stream-K allowed
    sk = asked if asked.stream_k else attrs.evolve(Candidate(), stream_k=True)
    return {name: (mm.plan_infos(a, b, None, None, None, out, sms, t, c), c)
            for name, c, t in (("sk", sk, _on(mm.TUNING)), ("pick", pick, mm.TUNING),
                               ("dp", dp, mm.TUNING))}


def prebuild(torch: Any, sanitize: bool = False) -> None:
    """Every kernel the run launches, built in parallel into the disk cache (gemm_build)."""
    from gemm_build import prebuild as build
    keys = {(p.variant, c) for p, c in map(_forced, SANITIZE if sanitize else CASES)}
    if not sanitize:
        from gemm_build import kernel_key
        from pipeline_core_nvidia_h100.gemm_call import TensorInfo
        keys |= {(p.variant, c) for m, n, k in TIMED for p, c in _timed_plans(m, n, k).values()}
        with _call_takes_stream_k():
            keys |= {kernel_key(TensorInfo(shape=(m, k), strides=(k, 1), dtype="bf16",
                                           ptr=4096),
                                TensorInfo(shape=(k, n), strides=(n, 1), dtype="bf16",
                                           ptr=4096),
                                bias=TensorInfo(shape=(n,), strides=(1,), dtype="bf16"),
                                activation=act) for m, n, k, act in PUBLIC}
    build(torch, keys, emit)


def _tensors(torch: Any, c: Case) -> tuple[Any, Any, Any, Any]:
    """The case's a, b, bias and scales as the plan describes them (_infos), random."""
    a_i, b_i, bias_i, scales_i = _infos(c)
    half = torch.float16 if c.dtype == "fp16" else torch.bfloat16

    def make(info: Any) -> Any:
        # cast the padded store whole, then take the view: a cast of the view would be a
        # compact copy (torch's preserve_format keeps the strides of dense tensors only), whose
        # row stride k (n) is not the plan's padded one, and the kernel would read its rows
        # at the wrong stride, past its end (the first H200 run's 11 failures)
        rows, cols = info.shape
        if info.strides[0] == 1:  # [K, N] K-major: the transpose of [N, K] padded
            store = torch.randn(cols, info.strides[1], device="cuda")
            return _cast(torch, store, c.dtype, half)[:, :rows].T
        store = torch.randn(rows, info.strides[0], device="cuda")
        return _cast(torch, store, c.dtype, half)[:, :cols]
    bias = None
    if bias_i is not None:
        bias = torch.randn(c.n, device="cuda").to({"bf16": torch.bfloat16, "fp16": torch.float16,
                                                   "fp32": torch.float32}[c.bias])
    scales = None
    if scales_i is not None:
        scales = (torch.rand(scales_i[0].shape, device="cuda") + 0.5,
                  torch.rand(scales_i[1].shape, device="cuda") + 0.5)
    a, b = make(a_i), make(b_i)
    for name, t, info in (("a", a, a_i), ("b", b, b_i)):
        if tuple(t.stride()) != info.strides:
            raise RuntimeError(f"case {c}: operand {name} has strides {tuple(t.stride())}, its "
                               f"plan reads {info.strides}: lay it out as _infos describes")
    return a, b, bias, scales


def _cast(torch: Any, x: Any, dtype: str, half: Any) -> Any:
    if dtype == "e4m3":
        return (x * 4).to(torch.float8_e4m3fn)
    return x.to(half)


def _reference(torch: Any, c: Case, a: Any, b: Any, bias: Any, scales: Any) -> Any:
    ref = a.float() @ b.float()
    if scales is not None:
        ref = ref * scales[0] * scales[1]
    if bias is not None:
        ref = ref + bias.float()
    if c.act == "relu":
        ref = torch.relu(ref)
    elif c.act == "gelu":
        ref = torch.nn.functional.gelu(ref, approximate="tanh")
    elif c.act == "silu":
        ref = torch.nn.functional.silu(ref)
    return ref


def _launcher(torch: Any, plan: Any, cand: Any, a: Any, b: Any, bias: Any, scales: Any,
              out: Any, act: str | None) -> Any:
    """A function launching ``plan`` (built with ``cand``) on these tensors into ``out``."""
    from pipeline_core_nvidia_h100 import matmul_call as mm
    from pipeline_core_nvidia_h100.launch_cache import current_stream
    assert not plan.staged, "the cases' operands are read in place"
    device = torch.cuda.current_device()
    r = mm._recipe(plan, device, current_stream(torch, device), cand)
    return lambda: mm.launch_recipe(r, a, b, bias, out, scales)


def correctness(torch: Any, cases: tuple[Case, ...]) -> tuple[int, int, int]:
    """Each case forced to stream-K against the fp32 reference (NaN-poisoned out), then run
    again on the same inputs: (failures, cases that shared tiles, runs not bitwise equal)."""
    failures = shared = unequal = 0
    for i, c in enumerate(cases):
        plan, cand = _forced(c)
        a, b, bias, scales = _tensors(torch, c)
        od = plan.variant.out_dtype
        out = torch.full((c.m, c.n), float("nan"), device="cuda",
                         dtype={"bf16": torch.bfloat16, "fp16": torch.float16,
                                "fp32": torch.float32}[od])
        run = _launcher(torch, plan, cand, a, b, bias, scales, out, c.act)
        run()
        torch.cuda.synchronize()
        first = out.clone()
        out.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        ref = _reference(torch, c, a, b, bias, scales)
        unwritten = int(torch.isnan(first.float()).sum())
        floor = 1e-3 * max(1, ref.numel()) ** 0.5
        err = float((first.float() - ref).norm() / ref.norm().clamp_min(floor))
        same = bool(torch.equal(first, out))
        ok = unwritten == 0 and err <= TOL[od] and same
        failures += not ok
        shared += plan.sk_tiles > 0
        unequal += not same
        emit({"kind": "case", "i": i, **c._asdict(), "tile": [cand.bm, cand.bn],
              "grid": plan.grid, "sk_tiles": plan.sk_tiles, "variant_stream_k":
              plan.variant.stream_k, "rel_err": round(err, 6), "unwritten": unwritten,
              "bitwise_repeat": same, "ok": ok})
    emit({"kind": "correctness", "cases": len(cases), "stream_k_cases": shared,
          "failures": failures, "not_bitwise_repeatable": unequal})
    return failures, shared, unequal


def public_calls(torch: Any) -> int:
    """``matmul`` itself, stream-K allowed (its ``TUNING``; off by default), on shapes whose
    decomposition then takes it (the device's SMs): the call plans it, allocates its
    workspace and matches the reference; the failures."""
    with _call_takes_stream_k():
        return _public_calls(torch)


def _public_calls(torch: Any) -> int:
    from pipeline_core_nvidia_h100 import matmul
    failures = 0
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m, n, k, act in PUBLIC:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
        bias = torch.randn(n, device="cuda").to(torch.bfloat16)
        plans = _timed_plans(m, n, k, sms)
        got = matmul(a, b, bias=bias, activation=act)
        again = matmul(a, b, bias=bias, activation=act)
        torch.cuda.synchronize()
        c = Case(m, n, k, act=act, bias="bf16")
        ref = _reference(torch, c, a, b, bias, None)
        err = float((got.float() - ref).norm() / ref.norm())
        ok = err <= TOL["bf16"] and bool(torch.equal(got, again))
        failures += not ok
        emit({"kind": "public-call", "shape": [m, n, k], "pick": plans["pick"][1].describe(),
              "rel_err": round(err, 6), "bitwise_repeat": bool(torch.equal(got, again)),
              "ok": ok})
    return failures


def _cublas(torch: Any, anchors: str) -> Any:
    """cuBLAS: the anchors' peer (C = A . B^T, B stored [N, K]) or torch.matmul."""
    if Path(anchors).is_file():
        from bench_peers import anchors as load
        return load(anchors).gemm_peers()["cublas"]
    return lambda a, bt, c: torch.matmul(a, bt.T, out=c)


def timing(torch: Any, anchors: str, rounds: int = 5, reps: int = 20) -> list[dict]:
    """sk, pick, dp and cuBLAS on each TIMED shape (the module says what each is)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cublas = _cublas(torch, anchors)
    out = []
    for m, n, k in TIMED:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        bt = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        plans = _timed_plans(m, n, k, sms)
        impls = {name: _launcher(torch, p, cand, a, bt.T, None, None, c, None)
                 for name, (p, cand) in plans.items()}
        impls["cublas"] = lambda: cublas(a, bt, c)
        ref = a.float() @ bt.float().T
        for name, err in warm_and_check(torch, impls, c, ref, TOL["bf16"]):  # (and builds)
            emit({"kind": "timing-check", "shape": [m, n, k], "impl": name, "rel_err": err})
        del ref
        per = interleaved(torch, impls, rounds, reps)
        flop = 2.0 * m * n * k
        rec: dict = {"kind": "timing", "shape": [m, n, k], "rounds": rounds}
        for name, (p, cand) in plans.items():
            rec[f"{name}_plan"] = cand.describe() + f", sk_tiles {p.sk_tiles}"
        for name in impls:
            med = statistics.median(per[name])
            rec[name] = {"ms": round(med, 4), "tflops": round(flop / med / 1e9, 1)}
        for ours, peer in (("sk", "dp"), ("sk", "cublas"), ("pick", "cublas"), ("dp", "cublas")):
            rec[f"{ours}/{peer}"] = ratios(per, ours, peer)
        emit(rec)
        out.append(rec)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prebuild-only", action="store_true",
                    help="build every kernel the run launches into $PIPELINE_CORE_CACHE_DIR "
                         "(no torch, no GPU) and stop")
    ap.add_argument("--sanitize", action="store_true",
                    help="only the small SANITIZE cases (run under compute-sanitizer)")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--anchors", default=str(ROOT / "benchmarks" / "_kitcache" /
                                             "gemm_anchors.py"))
    ap.add_argument("--out", default=None, help="a file for the JSON lines")
    args = ap.parse_args(argv)
    if args.prebuild_only:
        prebuild(None, sanitize=False)
        prebuild(None, sanitize=True)
        return 0
    import torch
    emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__})
    prebuild(torch, args.sanitize)
    cases = SANITIZE if args.sanitize else CASES
    failures, shared, unequal = correctness(torch, cases)
    if not args.sanitize:
        failures += public_calls(torch)
    summary = [] if args.sanitize or args.skip_timing else timing(torch, args.anchors)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(x) + "\n" for x in LINES))
    if summary:
        print("\nshape              sk TF  pick TF  dp TF  cublas TF  sk/dp  sk/cublas  "
              "pick/cublas  dp/cublas")
    for r in summary:
        med = {key: statistics.median(r[key]) for key in
               ("sk/dp", "sk/cublas", "pick/cublas", "dp/cublas")}
        print(f"{'x'.join(map(str, r['shape'])):18} {r['sk']['tflops']:6} {r['pick']['tflops']:8}"
              f" {r['dp']['tflops']:6} {r['cublas']['tflops']:10} {med['sk/dp']:6.3f}"
              f" {med['sk/cublas']:10.3f} {med['pick/cublas']:12.3f} {med['dp/cublas']:10.3f}")
    ok = failures == 0 and shared >= (len(cases) * 2) // 3
    print(f"{'PASS' if ok else 'FAIL'}: stream-K correctness {len(cases) - failures}/{len(cases)} "
          f"cases ({shared} shared tiles), bitwise repeat failures {unequal}"
          + (f", timed {len(summary)} shapes" if summary else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
