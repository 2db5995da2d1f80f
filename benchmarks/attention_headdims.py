"""``attention(q, k, v)`` at head dims 64, 96, 128, 192 and 256 on the GPU (issue 37: head dims;
docs/guide/attention.md, "Head dims").

  PYTHONPATH=$PWD:$PWD/plugins/nvidia_h100:$PWD/plugins/schedules_attention \\
  PIPELINE_CORE_CACHE_DIR=$PWD/benchmarks/_kitcache python3 benchmarks/attention_headdims.py
  ... attention_headdims.py --prebuild-only   # no GPU: every cubin into PIPELINE_CORE_CACHE_DIR
  ... attention_headdims.py --sanitize        # racecheck + synccheck at small shapes with tails
  ... attention_headdims.py --dry-run         # the configurations, no torch

1. **correct**: :data:`CASES`, per head dim: lengths with tails, more queries than keys and
   fewer, one query and one key; causal off, top-left and bottom-right; grouped-query heads;
   bf16 / fp16; fresh inputs, the output NaN-poisoned, against an fp32 reference
   (attention_checks.reference: GQA, both alignments, a row with no key 0).  A case passes when
   its error over the rows that see a key is at most 1.5x (+1e-3) the first SDPA backend's on
   the same inputs (attention_checks.judge: flash, cuDNN, efficient, math) and its rows with
   no key are exactly 0.  Then :data:`PADDED` (head dims the kernels do not build, and q / k
   and v of different head dims, which the call zero-pads: call.kernel_head_dim) the same way,
   and :data:`PADDED_GRAD` through autograd against fp32 gradients (attention_bwd's bound).
2. **time**: :data:`TIMED` (D 96, 192, 256 and 128 beside them; S 4k and 16k at 16k tokens,
   heads 2048 // D; causal or not) and :data:`PADDED_TIMED`, bf16, against sdpa-flash and
   sdpa-cudnn in interleaved
   rounds, per-round ratios (above 1: ours faster) and TFLOPS (causal: the kept half).
3. **--sanitize**: racecheck and synccheck over :data:`SANITIZE` (the new head dims' kernels
   at tails, rows with no key, grouped-query heads).

Each result is one JSON line (stdout, and --out); the last, a summary, says PASS or FAIL for
the correctness cases and the sanitizers, the timings being reported only
(bench_checks.run_check).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

from attention_checks import check_case  # noqa: E402  (beside this script)
from attention_window import HostShape  # noqa: E402  (beside this script)
from bench_checks import emit, run_check  # noqa: E402  (beside this script)
from bench_timing import interleaved, ratios  # noqa: E402  (beside this script)
from pipeline_core_schedules_attention.schedule import HEAD_DIMS  # noqa: E402

#: (Sq, Sk) per case: a square with a tail, fewer queries, more queries (rows with no key
#: under bottom-right), long and uneven, one and one
LENGTHS = ((1000, 1000), (77, 300), (300, 77), (2048, 1500), (1, 1), (4096, 4096))
#: (B, Hq, Hkv, Sq, Sk, D, dtype, causal)
CASES: list[tuple] = [
    (1 + n % 2, *((4, 2) if (n + i) % 2 else (2, 2)), sq, sk, d,
     ("bf16", "fp16")[(n + i) % 2], (False, True, "bottom_right")[(n + 2 * i) % 3])
    for i, d in enumerate(HEAD_DIMS) for n, (sq, sk) in enumerate(LENGTHS)]
#: every head dim at every causal mode and dtype once more, with grouped-query heads
CASES += [(2, 8, 2, 513, 1025, d, dt, c) for d in HEAD_DIMS for dt in ("bf16", "fp16")
          for c in (False, True, "bottom_right")]
#: head dims the kernels do not build, and q / k and v of different head dims (session 26):
#: attention() zero-pads them to call.kernel_head_dim and slices the output;
#: (B, Hq, Hkv, Sq, Sk, Dqk, Dv, dtype, causal)
PAIRS = ((80, 80), (32, 32), (48, 48), (72, 72), (112, 112), (160, 160), (200, 200),
         (192, 128), (64, 128), (128, 96), (96, 64))
PADDED = [(1 + n % 2, 4, 2, sq, sk, dq, dv, ("bf16", "fp16")[n % 2],
           (False, True, "bottom_right")[(n + i) % 3])
          for i, (dq, dv) in enumerate(PAIRS) for n, (sq, sk) in enumerate(((300, 257), (1, 77)))]
#: v's own head dim on a kernel of its own (call.VALUE_TILES: DeepSeek's MLA prefill, 192 /
#: 128; session 27): tails, one query, more queries than keys, grouped-query heads, every
#: causal mode, both dtypes; judged as PADDED's
VALUE_CASES = [(b, hq, hkv, sq, sk, 192, 128, dt, c)
               for (b, hq, hkv, sq, sk), dt, c in (
                   ((1, 4, 2, 1000, 1000), "bf16", False), ((2, 4, 4, 77, 300), "fp16", True),
                   ((1, 8, 2, 300, 77), "bf16", "bottom_right"), ((2, 2, 1, 1, 1), "fp16", False),
                   ((1, 4, 4, 2048, 1500), "fp16", "bottom_right"),
                   ((2, 8, 8, 513, 1025), "bf16", True))]
PADDED += VALUE_CASES
#: the same with a gradient: the backward's head dim that holds both (64 or 128)
PADDED_GRAD = [(2, 4, 2, 300, 257, dq, dv, dt, c)
               for (dq, dv), dt in (((96, 96), "bf16"), ((80, 80), "fp16"), ((64, 128), "bf16"),
                                    ((112, 112), "bf16"), ((32, 32), "fp16"))
               for c in (False, "bottom_right")]
#: the sanitizers' calls: the new head dims at tails, rows with no key, grouped-query heads
SANITIZE = [(1, 2, 1, 100, 77, d, dt, c) for d in (96, 192, 256)
            for dt, c in (("bf16", False), ("fp16", "bottom_right"), ("bf16", True))]
#: v's own head dim's kernel under the sanitizers: tails, grouped-query heads, rows with no key
VALUE_SANITIZE = [(1, 2, 1, 100, 77, 192, 128, dt, c)
                  for dt, c in (("bf16", False), ("fp16", "bottom_right"), ("bf16", True))]
#: the timed calls: (D, S), each causal and not
TIMED = [(d, s) for d in (96, 128, 192, 256) for s in (4096, 16384)]
#: the padded calls timed (Dqk, Dv, S): Phi-2's 80, DeepSeek's MLA 192 / 128 (the FLOPs counted
#: at the caller's head dims, not the padded ones)
PADDED_TIMED = [(80, 80, 4096), (192, 128, 4096), (192, 128, 16384)]


def run_case(torch: Any, case: tuple) -> dict:
    return {**check_case(torch, case, slack=1e-3), "case": repr(case)}


def padded_case(torch: Any, case: tuple) -> dict:
    """One PADDED case: q and k of Dqk columns, v of Dv, fresh; every block the padded call
    allocates NaN-poisoned first (its pads and its output reuse them); judged as check_case's."""
    from attention_checks import judge, reference
    from pipeline_core_schedules_attention.call import attention

    b, hq, hkv, sq, sk, dq, dv, dtype, causal = case
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    q = torch.randn(b, hq, sq, dq, device="cuda", dtype=dt)
    k = torch.randn(b, hkv, sk, dq, device="cuda", dtype=dt)
    v = torch.randn(b, hkv, sk, dv, device="cuda", dtype=dt)
    ref, empty = reference(torch, q, k, v, dq ** -0.5, causal)
    d = 256  # the largest the call pads to: blocks of every size it may take
    poison = [torch.full((b, h, n, d), float("nan"), device="cuda", dtype=dt)
              for h, n in ((hq, sq), (hkv, sk), (hkv, sk), (hq, sq))]
    del poison
    o = attention(q, k, v, causal=causal)
    torch.cuda.synchronize()
    rec = judge(torch, o, q, k, v, ref, empty, causal, 1e-3)
    return {"kind": "correct-padded", "case": repr(case), "Dqk": dq, "Dv": dv,
            "shape_ok": tuple(o.shape) == (b, hq, sq, dv), **rec,
            "ok": rec["ok"] and tuple(o.shape) == (b, hq, sq, dv)}


def padded_grad_case(torch: Any, case: tuple) -> dict:
    """One PADDED_GRAD case: dQ, dK, dV through the padded call against fp32 autograd, each
    within 1.5x the first SDPA backend's error on the same inputs (attention_bwd's rule)."""
    import attention_bwd as bwd
    from attention_checks import peer, sdpa_readable
    from pipeline_core_schedules_attention.call import attention

    b, hq, hkv, sq, sk, dq, dv, dtype, causal = case
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dt, requires_grad=True)
               for h, n, d in ((hq, sq, dq), (hkv, sk, dq), (hkv, sk, dv)))
    do = torch.randn(b, hq, sq, dv, device="cuda", dtype=dt)
    _, ref, _ = bwd.reference(torch, q, k, v, do, dq ** -0.5, causal)
    bwd.poison(torch, q, k, v)
    ours = torch.autograd.grad(attention(q, k, v, causal=causal), (q, k, v), do)
    torch.cuda.synchronize()
    scale = bwd.gradient_scale(torch, ref)
    errs = [bwd.rel_err(torch, g, r, scale) for g, r in zip(ours, ref)]
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    pname, po = peer(torch, *leaves, causal)
    try:  # a backend whose backward refuses the case: attention_bwd's fixed bound
        perrs = [bwd.rel_err(torch, g, r, scale)
                 for g, r in zip(torch.autograd.grad(po, leaves, sdpa_readable(do)), ref)]
        bounds = [max(1.5 * e, bwd.MIN_BOUND) for e in perrs]
    except Exception:  # noqa: BLE001
        pname, perrs, bounds = None, None, [bwd.FIXED_BOUND[dtype]] * 3
    nan = any(bool(torch.isnan(g).any()) for g in ours)
    return {"kind": "correct-padded-grad", "case": repr(case), "Dqk": dq, "Dv": dv,
            "err": dict(zip(("dq", "dk", "dv"), errs)), "peer": pname,
            "peer_err": dict(zip(("dq", "dk", "dv"), perrs)) if perrs else None, "nan": nan,
            "ok": not nan and all(e <= bd for e, bd in zip(errs, bounds))}


def correct(torch: Any) -> bool:
    done = [run_case(torch, c) for c in CASES]
    padded = [padded_case(torch, c) for c in PADDED]
    padded += [padded_grad_case(torch, c) for c in PADDED_GRAD]
    for r in done + padded:
        emit(r)
    emit({"kind": "padded-summary", "cases": len(padded),
          "failed": sum(not r["ok"] or r["nan"] for r in padded)})
    done += padded
    bad = [r for r in done if not r["ok"] or r["nan"]]
    emit({"kind": "correct-summary", "cases": len(done), "failed": len(bad),
          "per_head_dim": {d: sum(r.get("D") == d for r in done) for d in HEAD_DIMS},
          "max_ratio": max(r.get("ratio") or 0 for r in done),
          "peers": sorted({str(r["peer"]) for r in done})})
    return not bad


def _sdpa(torch: Any, backend: str, q: Any, k: Any, v: Any, causal: bool) -> Any:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([getattr(SDPBackend, backend)]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def timing(torch: Any, rounds: int) -> None:
    from pipeline_core_schedules_attention.call import VALUE_TILES, attention

    for d, dv, s in [(d, d, s) for d, s in TIMED] + PADDED_TIMED:
        for causal in (False, True):
            b, h = max(1, 16384 // s), 2048 // d
            q, k = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                    for _ in range(2))
            v = torch.randn(b, h, s, dv, device="cuda", dtype=torch.bfloat16)
            fns = {"ours": lambda: attention(q, k, v, causal=causal)}
            if dv != d and (d, dv) in VALUE_TILES:  # the zero-padded call it replaced
                fns["ours-padded"] = (lambda: attention(
                    q, k, torch.nn.functional.pad(v, (0, d - dv)), causal=causal,
                    scale=d ** -0.5)[..., :dv])
            for name, backend in (("sdpa-flash", "FLASH_ATTENTION"),
                                  ("sdpa-cudnn", "CUDNN_ATTENTION")):
                fn = (lambda backend=backend: _sdpa(torch, backend, q, k, v, causal))
                try:  # a backend that refuses the head dim is left out, and said so
                    fn()
                    torch.cuda.synchronize()
                    fns[name] = fn
                except Exception as e:  # noqa: BLE001 - any refusal
                    emit({"kind": "peer-refused", "peer": name, "D": d, "S": s,
                          "causal": causal, "why": str(e).splitlines()[0][:160]})
            fns["ours"]()
            torch.cuda.synchronize()
            per = interleaved(torch, fns, rounds, 10)
            ms = {n: statistics.median(t) for n, t in per.items()}
            flop = 2 * b * h * s * s * (d + dv) / (2 if causal else 1)
            emit({"kind": "time", "D": d, **({"Dv": dv} if dv != d else {}), "S": s, "B": b,
                  "H": h, "causal": causal, "ms": ms,
                  "tflops": {n: round(flop / t / 1e9, 1) for n, t in ms.items()},
                  **{f"ratio_vs_{n}": ratios(per, "ours", n) for n in fns if n != "ours"},
                  "device": torch.cuda.get_device_name()})


def sanitize_run(torch: Any) -> None:
    for r in ([run_case(torch, case) for case in SANITIZE]
              + [padded_case(torch, case) for case in VALUE_SANITIZE]):
        emit({"kind": "sanitized-run", "case": r["case"], "nan": r["nan"], "ok": r["ok"]})


def kernel_keys() -> list[tuple]:
    """Every kernel the runs load, as :func:`_build` takes it: (head dim, dtype,
    causal, align, short, window, softcap, v's own head dim or 0)."""
    from pipeline_core_schedules_attention.call import VALUE_TILES, plan_attention

    torch_dtype = {"bf16": "bfloat16", "fp16": "float16"}
    calls = CASES + SANITIZE + [(max(1, 16384 // s), 2048 // d, 2048 // d, s, s, d, "bf16", c)
                                for d, s in TIMED for c in (False, True)]
    from pipeline_core_schedules_attention.call import kernel_head_dim

    calls += [(b, hq, hkv, sq, sk, kernel_head_dim(dq, dv, False), dtype, causal)
              for b, hq, hkv, sq, sk, dq, dv, dtype, causal in PADDED
              if (dq, dv) not in VALUE_TILES]
    calls += [(max(1, 16384 // s), 2048 // d, 2048 // d, s, s, (d, dv), "bf16", c)
              for d, dv, s in PADDED_TIMED if (d, dv) in VALUE_TILES for c in (False, True)]
    calls += [(b, hq, hkv, sq, sk, (dq, dv), dtype, causal)
              for b, hq, hkv, sq, sk, dq, dv, dtype, causal in PADDED + VALUE_SANITIZE
              if (dq, dv) in VALUE_TILES]
    calls += [(b, hq, hkv, sq, sk, kernel_head_dim(dq, dv, True), dtype, causal)
              for b, hq, hkv, sq, sk, dq, dv, dtype, causal in PADDED_GRAD]
    keys = set()
    for b, hq, hkv, sq, sk, d, dtype, causal in calls:
        d, dv = d if isinstance(d, tuple) else (d, d)
        q = HostShape((b, hq, sq, d), torch_dtype[dtype])
        k = HostShape((b, hkv, sk, d), torch_dtype[dtype])
        v = HostShape((b, hkv, sk, dv), torch_dtype[dtype])
        c = plan_attention(q, k, v, causal=causal)
        keys.add((c.head_dim, c.dtype, c.causal, c.align, c.short, c.window, False,
                  c.head_dim_v))
    return sorted(keys)


def _build(key: tuple) -> bool:
    """One key of :func:`kernel_keys` built into the disk cache: both kernels, the LSE's (a
    gradient) and the one without (the timed calls)."""
    from pipeline_core_nvidia_h100.kit_api import ARCH, BUILD_OPTIONS, cubin_path

    from pipeline_core_schedules_attention.call import _source
    from pipeline_core_schedules_attention.signature import KERNEL_NAME

    *rest, dv = key
    return all(cubin_path(_source(*rest, lse=lse, head_dim_v=dv)[1], KERNEL_NAME,
                          BUILD_OPTIONS, ARCH) is not None for lse in (True, False))


def main() -> None:
    run_check(Path(__file__), "attention_headdims.jsonl", CASES,
              len(SANITIZE) + len(VALUE_SANITIZE), kernel_keys, _build,
              correct, timing, sanitize_run)


if __name__ == "__main__":
    main()
