"""``attention(q, k, v, window=(left, right), softcap=...)`` on the GPU (issue 37: sliding
windows and softcap; docs/guide/attention.md, "Sliding windows and softcap").

  PYTHONPATH=$PWD:$PWD/plugins/nvidia_h100:$PWD/plugins/schedules_attention \\
  PIPELINE_CORE_CACHE_DIR=$PWD/benchmarks/_kitcache python3 benchmarks/attention_window.py
  ... attention_window.py --prebuild-only   # no GPU: every cubin into PIPELINE_CORE_CACHE_DIR
  ... attention_window.py --sanitize        # racecheck + synccheck at small shapes with tails
  ... attention_window.py --dry-run         # the configurations, no torch

1. **correct**: :data:`CASES` (windows (0, 0), (16, 0), (128, 128), (1000, -1), (-1, 0) and
   none; lengths with tails, more queries than keys and fewer; causal off, top-left and
   bottom-right; grouped-query heads; D 64 / 128; bf16 / fp16; softcap 30 and 50 with and
   without windows), fresh inputs, the output NaN-poisoned, against an fp32 reference with the
   window's explicit mask and the cap (a row that sees no key: 0).  The peer is computed in the
   case's dtype: SDPA with the same explicit boolean mask (no cap), or, with a cap, the eager
   math a model runs without FlashAttention (scores in the dtype, capped, masked, softmax in
   fp32, P cast back).  A case passes when ours has no NaN, its rows with no key are exactly 0,
   and its max error over the other rows is at most 1.5x the peer's (+1e-3).
2. **time**: D 128, S 4k and 16k (16k tokens), causal windows (256, 0) and (1024, 0), against
   SDPA with the boolean mask (its fastest backend that takes one) and our causal call without
   the window; FlashAttention's expectation, a windowed call's time scaling with the window and
   not with S: per-token time at 16k over 4k near 1 (``scaling``).
3. **--sanitize**: racecheck and synccheck over :data:`SANITIZE` (tails, empty rows, softcap).

The last line is one summary, PASS or FAIL (correctness and the sanitizers; the timings are
reported, not judged).  Every result is one JSON line on stdout (and in --out).
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

from bench_checks import emit, run_check  # noqa: E402  (beside this script)
from bench_timing import interleaved, ratios  # noqa: E402  (beside this script)

WINDOWS = ((0, 0), (16, 0), (128, 128), (1000, -1), (-1, 0))
#: (B, Hq, Hkv, Sq, Sk, D, dtype, causal, window, softcap)
CASES: list[tuple] = []
for _n, _w in enumerate(WINDOWS):
    for _m, (_sq, _sk) in enumerate(((1000, 1000), (77, 300), (300, 77), (2048, 1500))):
        _d = (64, 128)[(_n + _m) % 2]
        _dt = ("bf16", "fp16")[_m % 2]
        _causal = (False, True, "bottom_right")[(_n + _m) % 3]
        _gqa = (4, 2) if (_n + _m) % 2 else (2, 2)
        CASES.append((1 + _m % 2, *_gqa, _sq, _sk, _d, _dt, _causal, _w, None))
for _cap in (30.0, 50.0):
    for _w, _causal, _d, _dt in (((-1, -1), False, 64, "bf16"), ((-1, -1), True, 128, "fp16"),
                                 ((128, 128), False, 128, "bf16"), ((16, 0), "bottom_right", 64,
                                                                   "fp16")):
        CASES.append((2, 4, 2, 1000, 777, _d, _dt, _causal,
                      None if _w == (-1, -1) else _w, _cap))
#: the sanitizers' calls: tails, rows that see no key, both reaches, the cap
SANITIZE = [(1, 2, 1, 100, 77, d, "bf16", causal, w, cap) for d in (64, 128)
            for causal, w, cap in ((False, (16, 0), None), ("bottom_right", (8, -1), 30.0),
                                   (True, (40, -1), None), (False, (5, 7), 50.0))]
#: the timed calls: (D, S, left reach), causal
TIMED = [(128, s, left) for s in (4096, 16384) for left in (256, 1024)]


def keep_mask(torch: Any, sq: int, sk: int, causal: object, window: Any, device: str) -> Any:
    """[Sq, Sk] bool: FlashAttention's window (bottom-right without causal), written from its
    definition, not from the kernel's rule."""
    align = "bottom_right" if causal == "bottom_right" or (not causal and window) else "top_left"
    off = sk - sq if align == "bottom_right" else 0
    left, right = window or (-1, -1)
    right = 0 if causal else right
    r = torch.arange(sq, device=device)[:, None] + off
    k = torch.arange(sk, device=device)[None, :]
    keep = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if causal or right >= 0:
        keep &= k <= r + max(right, 0)
    if left >= 0:
        keep &= k >= r - left
    return keep


def scores(torch: Any, q: Any, k: Any, scale: float, cap: float | None, fp32: bool) -> Any:
    """q.k^T * scale, capped (cap * tanh(x / cap)): in fp32, or in the inputs' dtype."""
    s = (q.float() @ k.float().transpose(-1, -2)) if fp32 else q @ k.transpose(-1, -2)
    s = s * scale
    return cap * torch.tanh(s / cap) if cap else s


def reference(torch: Any, q: Any, k: Any, v: Any, keep: Any, cap: float | None,
              fp32: bool = True) -> Any:
    """softmax(masked capped scores).v (a row with no key: 0), in fp32 or (the peer with a
    cap) the dtype with the softmax in fp32."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = scores(torch, q, k, q.shape[-1] ** -0.5, cap, fp32).float()
    p = torch.nan_to_num(torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1), nan=0.0)
    return p @ v.float() if fp32 else (p.to(q.dtype) @ v).float()


def sdpa_masked(torch: Any, q: Any, k: Any, v: Any, keep: Any) -> Any:
    import torch.nn.functional as F

    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def max_err(torch: Any, a: Any, b: Any) -> float:
    return float((torch.nan_to_num(a.float(), nan=1e6) - b).abs().max()) if a.numel() else 0.0


def run_case(torch: Any, case: tuple) -> dict:
    from pipeline_core_schedules_attention.call import attention

    b, hq, hkv, sq, sk, d, dtype, causal, window, cap = case
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    q = torch.randn(b, hq, sq, d, device="cuda", dtype=dt)
    k = torch.randn(b, hkv, sk, d, device="cuda", dtype=dt)
    v = torch.randn(b, hkv, sk, d, device="cuda", dtype=dt)
    if cap:  # scores large enough for the cap to bite
        q = q * 3
    keep = keep_mask(torch, sq, sk, causal, window, "cuda")
    ref = reference(torch, q, k, v, keep, cap)
    poison = torch.full_like(q, float("nan"))
    del poison  # the call's output reuses this freed NaN block
    out = attention(q, k, v, causal=causal, window=window, softcap=cap)
    torch.cuda.synchronize()
    empty = ~keep.any(dim=-1)
    peer = (reference(torch, q, k, v, keep, cap, fp32=False) if cap
            else sdpa_masked(torch, q, k, v, keep).float())
    rows = ~empty
    err, perr = max_err(torch, out[:, :, rows], ref[:, :, rows]), max_err(
        torch, peer[:, :, rows], ref[:, :, rows])
    zero = max_err(torch, out[:, :, empty], torch.zeros_like(ref[:, :, empty]))
    nan = bool(torch.isnan(out).any())
    return {"kind": "correct", "case": repr(case), "err": err, "peer": "eager-capped" if cap
            else "sdpa-masked", "peer_err": perr, "no_key_rows": int(empty.sum()),
            "no_key_max_abs": zero, "nan": nan,
            "ok": not nan and zero == 0.0 and err <= 1.5 * perr + 1e-3}


def correct(torch: Any) -> bool:
    done = [run_case(torch, c) for c in CASES]
    for r in done:
        emit(r)
    bad = [r for r in done if not r["ok"]]
    emit({"kind": "correct-summary", "cases": len(done), "failed": len(bad),
          "max_err": max(r["err"] for r in done)})
    return not bad


def timing(torch: Any, rounds: int) -> None:
    from pipeline_core_schedules_attention.call import attention

    per_token: dict[tuple[int, int], float] = {}
    for d, s, left in TIMED:
        b, h = max(1, 16384 // s), 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        keep = keep_mask(torch, s, s, True, (left, 0), "cuda")
        fns = {"ours-window": lambda: attention(q, k, v, causal=True, window=(left, 0)),
               "ours-causal": lambda: attention(q, k, v, causal=True),
               "sdpa-masked": lambda: sdpa_masked(torch, q, k, v, keep)}
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        per = interleaved(torch, fns, rounds, 5)
        ms = {n: statistics.median(t) for n, t in per.items()}
        per_token[(s, left)] = ms["ours-window"] / (b * s)
        emit({"kind": "time", "D": d, "S": s, "B": b, "H": h, "window": [left, 0],
              "ms": ms, "ratio_vs_sdpa_masked": ratios(per, "ours-window", "sdpa-masked"),
              "ratio_vs_ours_causal": ratios(per, "ours-window", "ours-causal"),
              "device": torch.cuda.get_device_name()})
    for left in sorted({w for _, _, w in TIMED}):
        if (4096, left) in per_token and (16384, left) in per_token:
            emit({"kind": "scaling", "window": [left, 0],
                  "per_token_16k_over_4k": per_token[(16384, left)] / per_token[(4096, left)]})


def sanitize_run(torch: Any) -> None:
    for case in SANITIZE:
        r = run_case(torch, case)
        emit({"kind": "sanitized-run", "case": r["case"], "nan": r["nan"], "ok": r["ok"]})


class HostShape:
    """Just what plan_attention and plan_varlen read of a tensor (the prebuilds plan without
    torch)."""

    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        self.shape, self.dtype, self.is_cuda, self.device = shape, f"torch.{dtype}", True, "cuda:0"

    def stride(self, i: int) -> int:
        out = 1
        for n in self.shape[i + 1:]:
            out *= n
        return out

    def element_size(self) -> int:
        return 2

    def data_ptr(self) -> int:
        return 1 << 20


def kernel_keys() -> list[tuple]:
    """Every kernel the runs load: (head dim, dtype, causal, align, short, window, softcap)."""
    from pipeline_core_schedules_attention.call import plan_attention

    torch_dtype = {"bf16": "bfloat16", "fp16": "float16"}
    calls = [(c[:8], c[8], c[9]) for c in CASES + SANITIZE]
    calls += [((max(1, 16384 // s), 2048 // d, 2048 // d, s, s, d, "bf16", True), w, None)
              for d, s, left in TIMED for w in ((left, 0), None)]
    keys = set()
    for (b, hq, hkv, sq, sk, d, dtype, causal), window, cap in calls:
        q = HostShape((b, hq, sq, d), torch_dtype[dtype])
        k = HostShape((b, hkv, sk, d), torch_dtype[dtype])
        c = plan_attention(q, k, k, causal=causal, window=window, softcap=cap)
        keys.add((c.head_dim, c.dtype, c.causal, c.align, c.short, c.window, bool(c.softcap)))
    return sorted(keys)


def _build(key: tuple) -> bool:
    from pipeline_core_nvidia_h100.kit_api import ARCH, BUILD_OPTIONS, cubin_path

    from pipeline_core_schedules_attention.call import _source
    from pipeline_core_schedules_attention.signature import KERNEL_NAME

    # both kernels of the key: the LSE's (a gradient) and the one without (-p lse=false: the
    # timed calls, which need none)
    return all(cubin_path(_source(*key, lse=lse)[1], KERNEL_NAME, BUILD_OPTIONS, ARCH) is not None
               for lse in (True, False))


def main() -> None:
    run_check(Path(__file__), "attention_window.jsonl", CASES, len(SANITIZE), kernel_keys, _build,
              correct, timing, sanitize_run)


if __name__ == "__main__":
    main()
