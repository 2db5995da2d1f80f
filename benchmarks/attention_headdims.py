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
   no key are exactly 0.
2. **time**: :data:`TIMED` (D 96, 192, 256 and 128 beside them; S 4k and 16k at 16k tokens,
   heads 2048 // D; causal or not), bf16, against sdpa-flash and sdpa-cudnn in interleaved
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
from attention_window import _build, _Shape  # noqa: E402  (beside this script)
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
#: the sanitizers' calls: the new head dims at tails, rows with no key, grouped-query heads
SANITIZE = [(1, 2, 1, 100, 77, d, dt, c) for d in (96, 192, 256)
            for dt, c in (("bf16", False), ("fp16", "bottom_right"), ("bf16", True))]
#: the timed calls: (D, S), each causal and not
TIMED = [(d, s) for d in (96, 128, 192, 256) for s in (4096, 16384)]


def run_case(torch: Any, case: tuple) -> dict:
    return {**check_case(torch, case, slack=1e-3), "case": repr(case)}


def correct(torch: Any) -> bool:
    done = [run_case(torch, c) for c in CASES]
    for r in done:
        emit(r)
    bad = [r for r in done if not r["ok"] or r["nan"]]
    emit({"kind": "correct-summary", "cases": len(done), "failed": len(bad),
          "per_head_dim": {d: sum(r["D"] == d for r in done) for d in HEAD_DIMS},
          "max_ratio": max(r["ratio"] or 0 for r in done),
          "peers": sorted({str(r["peer"]) for r in done})})
    return not bad


def _sdpa(torch: Any, backend: str, q: Any, k: Any, v: Any, causal: bool) -> Any:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([getattr(SDPBackend, backend)]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def timing(torch: Any, rounds: int) -> None:
    from pipeline_core_schedules_attention.call import attention

    for d, s in TIMED:
        for causal in (False, True):
            b, h = max(1, 16384 // s), 2048 // d
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3))
            fns = {"ours": lambda: attention(q, k, v, causal=causal)}
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
            flop = 4 * b * h * s * s * d / (2 if causal else 1)
            emit({"kind": "time", "D": d, "S": s, "B": b, "H": h, "causal": causal, "ms": ms,
                  "tflops": {n: round(flop / t / 1e9, 1) for n, t in ms.items()},
                  **{f"ratio_vs_{n}": ratios(per, "ours", n) for n in fns if n != "ours"},
                  "device": torch.cuda.get_device_name()})


def sanitize_run(torch: Any) -> None:
    for case in SANITIZE:
        r = run_case(torch, case)
        emit({"kind": "sanitized-run", "case": r["case"], "nan": r["nan"], "ok": r["ok"]})


def kernel_keys() -> list[tuple]:
    """Every kernel the runs load, as attention_window._build takes it: (head dim, dtype,
    causal, align, short, window, softcap)."""
    from pipeline_core_schedules_attention.call import plan_attention

    torch_dtype = {"bf16": "bfloat16", "fp16": "float16"}
    calls = CASES + SANITIZE + [(max(1, 16384 // s), 2048 // d, 2048 // d, s, s, d, "bf16", c)
                                for d, s in TIMED for c in (False, True)]
    keys = set()
    for b, hq, hkv, sq, sk, d, dtype, causal in calls:
        q = _Shape((b, hq, sq, d), torch_dtype[dtype])
        k = _Shape((b, hkv, sk, d), torch_dtype[dtype])
        c = plan_attention(q, k, k, causal=causal)
        keys.add((c.head_dim, c.dtype, c.causal, c.align, c.short, c.window, False))
    return sorted(keys)


def main() -> None:
    run_check(Path(__file__), "attention_headdims.jsonl", CASES, len(SANITIZE), kernel_keys, _build,
              correct, timing, sanitize_run)


if __name__ == "__main__":
    main()
