"""``attention_varlen()`` on the GPU (issue 37, packed variable-length batches): correctness,
CUDA graphs, sanitizers and timing (docs/guide/attention.md, "Packed variable-length batches").

  PYTHONPATH=$PWD:$PWD/plugins/nvidia_h100:$PWD/plugins/schedules_attention \\
  PIPELINE_CORE_CACHE_DIR=$PWD/benchmarks/_kitcache python3 benchmarks/attention_varlen.py
  ... attention_varlen.py --prebuild-only   # no GPU: every cubin into PIPELINE_CORE_CACHE_DIR
  ... attention_varlen.py --sanitize        # racecheck + synccheck at small shapes with tails
  ... attention_varlen.py --dry-run         # the configurations, no torch

1. **correct**: ``--cases`` (48) packed batches of lengths from {0, 1, 17, 128, 1000, 4096}
   mixed (query and key lengths differing in two of three), every head dim of :data:`DIMS`
   (the kernels' 64, 96, 128, 192, 256; 80 and 32, which the call zero-pads; q / k of 192 and v
   of 128, DeepSeek's MLA prefill), causal off / top-left /
   bottom-right, grouped-query heads in half, bf16 / fp16; fresh inputs, the output's and the
   LSE's memory NaN-poisoned first.  Per sequence against an fp32 reference: the rows that see
   a key within 1.5x the error of SDPA's output on the same sequence (its first backend that
   takes the case, attention_checks.peer; never asked below :data:`MIN_BOUND`; where none
   gives a finite output, :data:`FIXED_BOUND`); the rows that see none exactly 0 with LSE
   +inf; the other rows' LSE within :data:`LSE_TOL` of the reference's.
   Then ``--window-cases`` (24) packed batches with a sliding window and / or the logit softcap
   (:data:`WINDOWS`, caps 30 and 50; every kernel head dim and 192 / 128, each causal mode):
   per sequence against attention_window.py's fp32 reference (the window's explicit mask
   written from FlashAttention's definition at the sequence's own lengths, the cap), within
   1.5x (+1e-3) the max error of its peer on the same sequence (SDPA with the boolean mask, or
   with a cap the eager capped math a model runs), rows with no key exactly 0, LSE +inf there
   and within :data:`LSE_TOL` elsewhere.
2. **graph**: the call captured in a CUDA graph and replayed on new inputs (same addresses),
   bit for bit the eager call's output.
3. **time** (one process, interleaved rounds with the order rotated, CUDA-graph replays: the
   GPU's time): 16k tokens, hidden 2048 (H = 2048 / D), D 64 / 128, causal or not, bf16.
   *equal*: 4 sequences of 4096 packed, against ``attention()`` on the [B, H, S, D] view of the
   same buffer (the padded fixed-length call: no padding needed; target: varlen at least 0.95x).
   *mixed*: lengths drawn from 100-4096 up to 16k tokens, against ``attention()`` on the batch
   padded to the longest (target: varlen ahead).  Per-round ratios padded / varlen.
   *window* (D 128): the same two batches with a causal window of 256 keys and with a softcap of
   30 (not causal), each against ``attention()`` with the same window or cap.

The last line is one PASS/FAIL summary (correctness, graph; the timing targets as met or
missed).  Every result is one JSON line on stdout (and in --out/attention_varlen.jsonl).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from itertools import accumulate
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

from attention_checks import peer  # noqa: E402  (beside this script)
from attention_window import (HostShape, keep_mask, max_err, scores,  # noqa: E402  (beside)
                              sdpa_masked)
from attention_window import reference as masked_reference  # noqa: E402  (beside this script)
from bench_checks import (check_args, dispatch, each_case,  # noqa: E402  (beside this script)
                          emit, prebuild as build_all)
from bench_timing import graphed, interleaved, ratios  # noqa: E402  (beside this script)

LENGTHS = (0, 1, 17, 128, 1000, 4096)
#: (q's and k's head dim, v's): each causal mode at each in 24 cases
DIMS = ((64, 64), (128, 128), (96, 96), (192, 192), (256, 256), (80, 80), (192, 128), (32, 32))
CAUSAL = (False, True, "bottom_right")
MIN_BOUND = 1e-3
FIXED_BOUND = {"bf16": 2e-2, "fp16": 2.5e-3}
LSE_TOL = 1e-2
TOKENS, HIDDEN = 16384, 2048
#: the sanitizers' batch: tails of every kind back to back, a sequence of no row and one of no key
SANITIZE_BATCH = ((77, 100), (0, 5), (1, 1), (200, 130), (130, 0), (17, 300))
#: the window cases' reaches (left, right; -1 unbounded): empty-making, under a block, both
#: sides, left only, right only, none (the cap alone)
WINDOWS = ((0, 0), (16, 0), (128, 128), (1000, -1), (-1, 40), (-1, -1))
#: the window cases' head dims: every kernel's, and v's own (call.VALUE_TILES)
WINDOW_DIMS = ((64, 64), (128, 128), (96, 96), (192, 192), (256, 256), (192, 128))
#: the sanitizers' masks, each at head dims 64, 128 and 256 on SANITIZE_BATCH: (causal,
#: window, softcap)
SANITIZE_MASKS = ((False, (16, 0), None), ("bottom_right", (8, -1), 30.0), (True, (40, -1), None),
                  (False, (5, 7), 50.0))
SANITIZE_MASK_DIMS = (64, 128, 256)


def configs(rng: random.Random, n: int) -> list[tuple]:
    """``n`` cases (lengths per sequence, hq, hkv, (Dqk, Dv), dtype, causal): every (head
    dims, causal) in 24 cases, the dtypes alternating, a batch of 3 to 6 sequences of
    LENGTHS (each length once per round of cases at least), keys differing from queries in
    two cases of three."""
    out = []
    for i in range(n):
        d = DIMS[i % len(DIMS)]
        causal = CAUSAL[(i // 2) % 3]
        dtype = ("bf16", "fp16")[(i // 6) % 2]
        seqs = rng.randint(3, 6)
        qs = [LENGTHS[(i + j) % len(LENGTHS)] if j < 2 else rng.choice(LENGTHS)
              for j in range(seqs)]
        ks = qs if i % 3 == 0 else [rng.choice(LENGTHS) for _ in qs]
        hq, hkv = ((4, 4), (4, 2), (8, 1), (2, 2))[i % 4]
        out.append((tuple(zip(qs, ks)), hq, hkv, d, dtype, causal))
    return out


def window_configs(rng: random.Random, n: int) -> list[tuple]:
    """``n`` window cases (lengths per sequence, hq, hkv, (Dqk, Dv), dtype, causal, window,
    cap): every window of :data:`WINDOWS` at each causal mode, the caps 30 and 50 on two cases
    of three (always where there is no window), the head dims of :data:`WINDOW_DIMS` in turn, a
    batch of 3 to 6 sequences of :data:`LENGTHS`, keys differing from queries in two of
    three."""
    out = []
    for i in range(n):
        window = WINDOWS[i % len(WINDOWS)]
        cap = (None, 30.0, 50.0)[i % 3] if window != (-1, -1) else (30.0, 50.0)[i % 2]
        d = WINDOW_DIMS[(i // 2) % len(WINDOW_DIMS)]
        seqs = rng.randint(3, 6)
        qs = [LENGTHS[(i + j) % len(LENGTHS)] if j < 2 else rng.choice(LENGTHS)
              for j in range(seqs)]
        ks = qs if i % 3 == 0 else [rng.choice(LENGTHS) for _ in qs]
        hq, hkv = ((4, 4), (4, 2), (8, 1), (2, 2))[i % 4]
        out.append((tuple(zip(qs, ks)), hq, hkv, d, ("bf16", "fp16")[(i // 3) % 2],
                    CAUSAL[(i // len(WINDOWS)) % 3], None if window == (-1, -1) else window, cap))
    return out


def _dtype(torch, name: str):
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


def packed(torch, lengths, hq, hkv, d, dtype, dv=None):
    """Fresh q, k, v (v of ``dv`` columns, else ``d``) and the cumulative lengths (int32 on
    the GPU) of a packed batch."""
    tq, tk = sum(q for q, _ in lengths), sum(k for _, k in lengths)
    q, k, v = (torch.randn(t, h, n, device="cuda", dtype=_dtype(torch, dtype))
               for t, h, n in ((tq, hq, d), (tk, hkv, d), (tk, hkv, dv or d)))
    cu = [torch.tensor([0, *accumulate(n)], dtype=torch.int32, device="cuda")
          for n in ([q for q, _ in lengths], [k for _, k in lengths])]
    return q, k, v, cu[0], cu[1]


def reference(torch, q, k, v, scale, causal):
    """fp32 (output, lse, keyed rows) of one sequence given as [H, S, D]; a row that sees no
    key has output 0 and LSE +inf."""
    group = q.shape[0] // k.shape[0]
    kf, vf = (t.float().repeat_interleave(group, 0) for t in (k, v))
    s = (q.float() @ kf.transpose(-1, -2)) * scale
    sq, sk = s.shape[-2:]
    keep = torch.ones(sq, sk, dtype=torch.bool, device=s.device)
    if causal:
        off = sk - sq if causal == "bottom_right" else 0
        keep = (torch.arange(sk, device=s.device)[None, :]
                <= torch.arange(sq, device=s.device)[:, None] + off)
    keyed = keep.any(dim=-1)
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s.masked_fill(~keyed[:, None], 0.0), dim=-1) * keep
    return p @ vf, lse.masked_fill(~keyed[None, :], float("inf")), keyed


def rel(torch, got, ref) -> float:
    diff = torch.nan_to_num(got.float(), nan=1e6, posinf=1e6, neginf=1e6) - ref
    return float(diff.norm() / ref.norm().clamp_min(1e-30)) if ref.numel() else 0.0


def poison(torch, *like) -> None:
    """NaN blocks of each output's size, freed: the call's allocations reuse them."""
    blocks = [torch.full((t.numel() + 4096,), float("nan"), device="cuda", dtype=t.dtype)
              for t in like]
    del blocks


def case_check(torch, attention_varlen, case) -> dict:
    lengths, hq, hkv, (d, dv), dtype, causal = case
    q, k, v, cq, ck = packed(torch, lengths, hq, hkv, d, dtype, dv)
    scale = 1 / math.sqrt(d)
    # the padded call's operands and output take blocks of up to 256 columns
    poison(torch, *(torch.empty(t.shape[0], t.shape[1], 256, dtype=t.dtype, device="cuda")
                    for t in (q, k, v)), torch.empty(hq * q.shape[0], device="cuda"))
    out, lse = attention_varlen(q, k, v, cq, ck, max(n for n, _ in lengths),
                                max(n for _, n in lengths), causal=causal, return_lse=True)
    torch.cuda.synchronize()
    worst, fails, at_q, at_k = 0.0, [], 0, 0
    for s, (sq, sk) in enumerate(lengths):
        qs, ks, vs = (t.transpose(0, 1) for t in (q[at_q:at_q + sq], k[at_k:at_k + sk],
                                                  v[at_k:at_k + sk]))
        got, got_lse = out[at_q:at_q + sq].transpose(0, 1), lse[:, at_q:at_q + sq]
        at_q, at_k = at_q + sq, at_k + sk
        if sq == 0:
            continue
        ref, ref_lse, keyed = reference(torch, qs, ks, vs, scale, causal)
        if bool((~keyed).any()):  # rows that see no key: exactly 0, LSE +inf
            if (bool(got[:, ~keyed].ne(0).any())
                    or not bool(torch.isposinf(got_lse[:, ~keyed]).all())):
                fails.append(f"seq {s}: a row with no key is not 0 / LSE +inf")
        if not bool(keyed.any()):
            continue
        err = rel(torch, got[:, keyed], ref[:, keyed])
        lse_err = float((got_lse[:, keyed] - ref_lse[:, keyed]).abs().max())
        name, po = peer(torch, qs[None], ks[None], vs[None], causal) if sk else (None, None)
        perr = (rel(torch, po[0][:, keyed], ref[:, keyed]) if po is not None
                and bool(torch.isfinite(po[0][:, keyed]).all()) else None)
        bound = max(1.5 * perr, MIN_BOUND) if perr is not None else FIXED_BOUND[dtype]
        worst = max(worst, err / bound)
        if err > bound or not lse_err <= LSE_TOL:
            fails.append(f"seq {s} ({sq}x{sk}): error {err:.2e} (bound {bound:.2e}, "
                         f"{name or 'fixed'}), lse {lse_err:.2e}")
    if tuple(out.shape) != (q.shape[0], hq, dv):
        fails.append(f"output shape {tuple(out.shape)}, not {(q.shape[0], hq, dv)}")
    return {"kind": "case", "lengths": [list(x) for x in lengths], "hq": hq, "hkv": hkv,
            "D": d, "Dv": dv, "dtype": dtype, "causal": causal, "ok": not fails,
            "worst_ratio_to_bound": round(worst, 3), "fails": fails}


def window_case_check(torch, attention_varlen, case) -> dict:
    """One window case (:func:`window_configs`), per sequence against the masked reference and
    its peer (the module's step 1)."""
    lengths, hq, hkv, (d, dv), dtype, causal, window, cap = case
    q, k, v, cq, ck = packed(torch, lengths, hq, hkv, d, dtype, dv)
    if cap:  # scores large enough for the cap to bite
        q = q * 3
    poison(torch, q, torch.empty(hq * q.shape[0], device="cuda"))
    out, lse = attention_varlen(q, k, v, cq, ck, max(n for n, _ in lengths),
                                max(n for _, n in lengths), causal=causal, return_lse=True,
                                window=window, softcap=cap)
    torch.cuda.synchronize()
    worst, fails, at_q, at_k = 0.0, [], 0, 0
    for s, (sq, sk) in enumerate(lengths):
        qs, ks, vs = (t.transpose(0, 1)[None] for t in (q[at_q:at_q + sq], k[at_k:at_k + sk],
                                                        v[at_k:at_k + sk]))
        got, got_lse = out[at_q:at_q + sq].transpose(0, 1)[None], lse[:, at_q:at_q + sq]
        at_q, at_k = at_q + sq, at_k + sk
        if sq == 0:
            continue
        keep = keep_mask(torch, sq, sk, causal, window, "cuda")
        keyed = keep.any(dim=-1)
        if bool((~keyed).any()) and (bool(got[:, :, ~keyed].ne(0).any()) or not bool(
                torch.isposinf(got_lse[:, ~keyed]).all())):
            fails.append(f"seq {s}: a row with no key is not 0 / LSE +inf")
        if not bool(keyed.any()):
            continue
        ref = masked_reference(torch, qs, ks, vs, keep, cap)
        peer_out = (masked_reference(torch, qs, ks, vs, keep, cap, fp32=False) if cap
                    else sdpa_masked(torch, qs, ks, vs, keep).float())
        err = max_err(torch, got[:, :, keyed], ref[:, :, keyed])
        perr = max_err(torch, peer_out[:, :, keyed], ref[:, :, keyed])
        group = hq // hkv
        sc = scores(torch, qs, ks.repeat_interleave(group, dim=1), d ** -0.5, cap, True)
        ref_lse = torch.logsumexp(sc.masked_fill(~keep, float("-inf")), dim=-1)[0]
        lse_err = float((got_lse[:, keyed] - ref_lse[:, keyed]).abs().max())
        bound = 1.5 * perr + 1e-3
        worst = max(worst, err / bound)
        if err > bound or not lse_err <= LSE_TOL:
            fails.append(f"seq {s} ({sq}x{sk}): error {err:.2e} (bound {bound:.2e}), "
                         f"lse {lse_err:.2e}")
    return {"kind": "case", "lengths": [list(x) for x in lengths], "hq": hq, "hkv": hkv,
            "D": d, "Dv": dv, "dtype": dtype, "causal": causal, "window": window,
            "softcap": cap, "ok": not fails, "worst_ratio_to_bound": round(worst, 3),
            "fails": fails}


def correct(torch, cases: int, window_cases: int, seed: int) -> bool:
    from pipeline_core_schedules_attention import attention_varlen

    plain = each_case(configs(random.Random(seed), cases),
                      lambda case: case_check(torch, attention_varlen, case))
    return each_case(window_configs(random.Random(seed + 1), window_cases),
                     lambda case: window_case_check(torch, attention_varlen, case)) and plain


#: the graph and compile checks' masks: bottom-right causal, and a window with the cap (its
#: arguments through the op's schema)
GRAPH_MASKS = ({"causal": "bottom_right"}, {"causal": True, "window": (256, 0), "softcap": 30.0})


def graph(torch) -> bool:
    """Captured and replayed on new inputs at the same addresses: bit for bit eager; and under
    torch.compile(fullgraph=True), bit for bit eager; for each of :data:`GRAPH_MASKS`."""
    from pipeline_core_schedules_attention import attention_varlen

    lengths = ((1000, 1000), (0, 17), (17, 4096), (128, 1))
    q, k, v, cq, ck = packed(torch, lengths, 4, 2, 128, "bf16")
    ok = True
    for mask in GRAPH_MASKS:
        def fn():
            return attention_varlen(q, k, v, cq, ck, 1000, 4096, **mask)
        fn()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=side):
                out = fn()
        torch.cuda.current_stream().wait_stream(side)
        same = True
        for _ in range(3):
            for t in (q, k, v):
                t.copy_(torch.randn_like(t))
            g.replay()
            torch.cuda.synchronize()
            same &= bool(torch.equal(out, fn()))
        emit({"kind": "graph", "mask": repr(mask), "bitwise_equal": same})
        # the op under torch.compile (fullgraph: no break), bit for bit the eager call
        compiled = torch.compile(fn, fullgraph=True)()
        torch.cuda.synchronize()
        eq = bool(torch.equal(compiled, fn()))
        emit({"kind": "compile", "mask": repr(mask), "bitwise_equal": eq})
        ok &= same and eq
    return ok


def _mixed(rng: random.Random) -> list[int]:
    out: list[int] = []
    while sum(out) < TOKENS - 100:
        out.append(min(rng.randint(100, 4096), TOKENS - sum(out)))
    return out


def timing(torch, rounds: int, seed: int) -> dict:
    from pipeline_core_schedules_attention import attention, attention_varlen

    rng, results = random.Random(seed), {}
    for d in (64, 128):
        for causal in (False, True):
            h = HIDDEN // d
            for kind, lengths in (("equal", [4096] * 4), ("mixed", _mixed(rng))):
                try:
                    n, longest = len(lengths), max(lengths)
                    q, k, v, cq, _ = packed(torch, [(x, x) for x in lengths], h, h, d, "bf16")
                    if kind == "equal":  # the same buffer as [B, H, S, D]: no padding needed
                        pq, pk, pv = (t.view(n, longest, h, d).transpose(1, 2) for t in (q, k, v))
                    else:  # padded to the longest (a copy made once, outside the timing)
                        pq, pk, pv = (torch.zeros(n, longest, h, d, device="cuda",
                                                  dtype=torch.bfloat16).transpose(1, 2)
                                      for _ in range(3))
                    fns = {"varlen": graphed(torch, lambda: attention_varlen(
                               q, k, v, cq, cq, longest, longest, causal=causal)),
                           "padded": graphed(torch, lambda: attention(pq, pk, pv,
                                                                      causal=causal))}
                    per = interleaved(torch, fns, rounds, 20)
                    r = ratios(per, "varlen", "padded")
                    rec = {"kind": "time", "case": kind, "D": d, "causal": causal, "H": h,
                           "lengths": lengths, "varlen_ms": statistics.median(per["varlen"]),
                           "padded_ms": statistics.median(per["padded"]),
                           "ratio_padded_over_varlen": r, "median_ratio": statistics.median(r),
                           "device": torch.cuda.get_device_name()}
                    emit(rec)
                    results[(kind, d, causal)] = rec["median_ratio"]
                except Exception as exc:  # noqa: BLE001 - one line, and the run goes on
                    emit({"kind": "time-error", "case": kind, "D": d, "causal": causal,
                          "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"})
                torch.cuda.empty_cache()
    value_timing(torch, rounds, rng)
    window_timing(torch, rounds, rng)
    return results


#: the timed masks, D 128: (causal, window, softcap)
TIMED_MASKS = ((True, (256, 0), None), (False, None, 30.0))


def window_timing(torch, rounds: int, rng: random.Random) -> None:
    """A causal window of 256 keys, and a softcap of 30, packed (D 128, 16k tokens): on equal
    lengths against ``attention()`` with the same mask on the same buffer, on mixed ones against
    it on the batch padded to the longest; CUDA-graph replays, per-round ratios."""
    from pipeline_core_schedules_attention import attention, attention_varlen

    d, h = 128, HIDDEN // 128
    for causal, window, cap in TIMED_MASKS:
        for kind, lengths in (("equal", [4096] * 4), ("mixed", _mixed(rng))):
            n, longest = len(lengths), max(lengths)
            q, k, v, cq, _ = packed(torch, [(x, x) for x in lengths], h, h, d, "bf16")
            if kind == "equal":
                pq, pk, pv = (t.view(n, longest, h, d).transpose(1, 2) for t in (q, k, v))
            else:
                pq, pk, pv = (torch.zeros(n, longest, h, d, device="cuda",
                                          dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
            fns = {"varlen": graphed(torch, lambda: attention_varlen(
                       q, k, v, cq, cq, longest, longest, causal=causal, window=window,
                       softcap=cap)),
                   "padded": graphed(torch, lambda: attention(pq, pk, pv, causal=causal,
                                                              window=window, softcap=cap))}
            per = interleaved(torch, fns, rounds, 20)
            r = ratios(per, "varlen", "padded")
            emit({"kind": "time-window", "case": kind, "D": d, "causal": causal,
                  "window": window, "softcap": cap, "H": h, "lengths": lengths,
                  "varlen_ms": statistics.median(per["varlen"]),
                  "padded_ms": statistics.median(per["padded"]),
                  "ratio_padded_over_varlen": r, "median_ratio": statistics.median(r),
                  "device": torch.cuda.get_device_name()})
            torch.cuda.empty_cache()


def value_timing(torch, rounds: int, rng: random.Random) -> None:
    """v's own head dim packed (call.VALUE_TILES: 192 / 128) on a mixed batch of 16k tokens,
    causal or not: its kernel against the same call with v zero-padded to q's head dim (what
    the packed call ran before session 27), CUDA-graph replays, per-round ratios."""
    from pipeline_core_schedules_attention import attention_varlen
    from pipeline_core_schedules_attention.call import VALUE_TILES

    for d, dv in VALUE_TILES:
        for causal in (False, True):
            lengths = _mixed(rng)
            longest, h = max(lengths), HIDDEN // 128
            q, k, v, cq, _ = packed(torch, [(x, x) for x in lengths], h, h, d, "bf16", dv)
            vp = torch.nn.functional.pad(v, (0, d - dv))
            fns = {"varlen": graphed(torch, lambda: attention_varlen(
                       q, k, v, cq, cq, longest, longest, causal=causal)),
                   "varlen-padded": graphed(torch, lambda: attention_varlen(
                       q, k, vp, cq, cq, longest, longest, causal=causal,
                       scale=d ** -0.5)[..., :dv])}
            per = interleaved(torch, fns, rounds, 20)
            r = ratios(per, "varlen", "varlen-padded")
            emit({"kind": "time-value", "D": d, "Dv": dv, "causal": causal, "H": h,
                  "lengths": lengths, "varlen_ms": statistics.median(per["varlen"]),
                  "padded_ms": statistics.median(per["varlen-padded"]),
                  "ratio_padded_over_varlen": r, "median_ratio": statistics.median(r),
                  "device": torch.cuda.get_device_name()})
            torch.cuda.empty_cache()


def sanitize_run(torch) -> None:
    """The call at SANITIZE_BATCH, every kernel head dim and v's own (call.VALUE_TILES), every
    causal, grouped-query: each varlen kernel the call builds for these (long and short key
    tiles) under the sanitizer."""
    from pipeline_core_schedules_attention import attention_varlen
    from pipeline_core_schedules_attention.call import VALUE_TILES
    from pipeline_core_schedules_attention.schedule import HEAD_DIMS

    for d, dv in [(d, d) for d in HEAD_DIMS] + list(VALUE_TILES):
        for causal in CAUSAL:
            for mk in (300, 4096):  # the short tile, then the long one (max_seqlen_k)
                q, k, v, cq, ck = packed(torch, SANITIZE_BATCH, 4, 2, d, "bf16", dv)
                out = attention_varlen(q, k, v, cq, ck, 200, mk, causal=causal)
                torch.cuda.synchronize()
                print(json.dumps({"kind": "sanitized-run", "D": d, "Dv": dv, "causal": causal,
                                  "max_k": mk, "nan": bool(torch.isnan(out).any())}), flush=True)
    for d in SANITIZE_MASK_DIMS:  # the windowed and capped kernels
        for causal, window, cap in SANITIZE_MASKS:
            q, k, v, cq, ck = packed(torch, SANITIZE_BATCH, 4, 2, d, "bf16")
            out = attention_varlen(q, k, v, cq, ck, 200, 300, causal=causal, window=window,
                                   softcap=cap)
            torch.cuda.synchronize()
            print(json.dumps({"kind": "sanitized-run", "D": d, "causal": causal,
                              "window": window, "softcap": cap,
                              "nan": bool(torch.isnan(out).any())}), flush=True)


def sanitize_runs() -> int:
    """The kernel runs :func:`sanitize_run` makes."""
    from pipeline_core_schedules_attention.call import VALUE_TILES
    from pipeline_core_schedules_attention.schedule import HEAD_DIMS

    return ((len(HEAD_DIMS) + len(VALUE_TILES)) * len(CAUSAL) * 2
            + len(SANITIZE_MASK_DIMS) * len(SANITIZE_MASKS))


def _build(key: tuple) -> bool:
    from pipeline_core_nvidia_h100.kit_api import ARCH, BUILD_OPTIONS, cubin_path

    from pipeline_core_schedules_attention.call import _source
    from pipeline_core_schedules_attention.signature import KERNEL_NAME
    from pipeline_core_schedules_attention.varlen_call import varlen_source

    kind, *variant = key
    # the fixed-length calls the timing compares with need no LSE: their kernels store none
    src = (varlen_source(*variant) if kind == "varlen" else _source(*variant, lse=False))[1]
    return cubin_path(src, KERNEL_NAME, BUILD_OPTIONS, ARCH) is not None


def masked_keys(seed: int, window_cases: int) -> list[tuple]:
    """The varlen kernels of the window cases, the sanitizers' masks and the timed masks
    (varlen_call._kernel_key's, the device left out), and the fixed-length ones the timing
    compares with (call._kernel_key's)."""
    from pipeline_core_schedules_attention.call import _kernel_key as fixed_key
    from pipeline_core_schedules_attention.call import plan_attention, stores_lse
    from pipeline_core_schedules_attention.varlen_call import _kernel_key, plan_varlen

    names = {"bf16": "bfloat16", "fp16": "float16"}
    calls = [(lengths, hq, hkv, d, dtype, causal, window, cap, True) for lengths, hq, hkv, d,
             dtype, causal, window, cap in window_configs(random.Random(seed + 1), window_cases)]
    calls += [(SANITIZE_BATCH, 4, 2, (d, d), "bf16", causal, window, cap, False)
              for d in SANITIZE_MASK_DIMS for causal, window, cap in SANITIZE_MASKS]
    calls += [(((4096, 4096),), 16, 16, (128, 128), "bf16", causal, window, cap, False)
              for causal, window, cap in TIMED_MASKS]
    keys = set()
    for lengths, hq, hkv, (d, dv), dtype, causal, window, cap, lse in calls:
        tq, tk = sum(a for a, _ in lengths), sum(b for _, b in lengths)
        cu = HostShape((len(lengths) + 1,), "int32")
        q, k, v = (HostShape(s, names[dtype]) for s in ((tq, hq, d), (tk, hkv, d), (tk, hkv, dv)))
        c = plan_varlen(q, k, v, cu, cu, max(a for a, _ in lengths), max(b for _, b in lengths),
                        causal=causal, window=window, softcap=cap, grad_enabled=False)
        key = _kernel_key(c, 0, stores_lse(c.head_dim, c.causal, lse))
        keys.add(("varlen", *key[:6], *key[7:]))
    for causal, window, cap in TIMED_MASKS:  # the padded calls (no LSE)
        q = HostShape((4, 16, 4096, 128), "bfloat16")
        c = plan_attention(q, q, q, causal=causal, window=window, softcap=cap)
        key = fixed_key(c, 0, False)
        keys.add(("fixed", *key[:5], *key[6:8]))  # (window, softcap); _build adds the LSE
    return sorted(keys, key=repr)


def prebuild(jobs: int, seed: int = 0, window_cases: int = 24) -> None:
    """Every cubin the runs load into PIPELINE_CORE_CACHE_DIR (no GPU): each varlen kernel
    (varlen_call.VARIANTS, and :func:`masked_keys`'s windowed and capped ones) and the
    fixed-length bf16 kernels the timing compares with."""
    from pipeline_core_schedules_attention.varlen_call import VARIANTS

    keys = [("varlen", *v) for v in VARIANTS] + [
        ("fixed", d, "bf16", c, "top_left", s) for d in (64, 128) for c in (False, True)
        for s in (False, True)] + masked_keys(seed, window_cases)
    build_all(keys, _build, jobs)


def main() -> None:
    args = check_args(("all", "correct", "graph", "time", "sanitize-run"),
                      "attention_varlen.jsonl",
                      (("--cases", int, 48), ("--window-cases", int, 24), ("--rounds", int, 5),
                       ("--seed", int, 0), ("--jobs", int, 4), ("--timeout", float, 600.0)))
    dispatch(args, Path(__file__),
             configs(random.Random(args.seed), args.cases)
             + window_configs(random.Random(args.seed + 1), args.window_cases),
             sanitize_runs(), lambda: prebuild(args.jobs, args.seed, args.window_cases),
             sanitize_run, lambda torch: gpu(torch, args))


def gpu(torch, args: argparse.Namespace) -> dict:
    """The GPU phases (``--phase``): whether the cases and the graph passed, and the timing
    targets as met or missed."""
    out: dict = {}
    if args.phase in ("all", "correct"):
        out["correct"] = correct(torch, args.cases, args.window_cases, args.seed)
    if args.phase in ("all", "graph"):
        out["graph"] = graph(torch)
    times = timing(torch, args.rounds, args.seed) if args.phase in ("all", "time") else {}
    equal = [r for (kind, *_), r in times.items() if kind == "equal"]
    mixed = [r for (kind, *_), r in times.items() if kind == "mixed"]
    return {**out, "equal_min_ratio": min(equal, default=None),
            "equal_target_met": "yes" if equal and min(equal) >= 0.95 else "no",
            "mixed_min_ratio": min(mixed, default=None),
            "mixed_target_met": "yes" if mixed and min(mixed) > 1.0 else "no"}


if __name__ == "__main__":
    main()
