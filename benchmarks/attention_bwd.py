"""``attention()``'s backward on the GPU (issue 36): correctness first, determinism, sanitizers,
then timing against the same-process peers (docs/guide/attention.md, "Backward and training").

  python3 benchmarks/attention_bwd.py [--phase all|correct|graph|determinism|time|strides]
                                      [--out DIR]
  python3 benchmarks/attention_bwd.py --determinism        # 20 runs, deterministic=True
  python3 benchmarks/attention_bwd.py --sanitize           # racecheck + synccheck, small shapes
  python3 benchmarks/attention_bwd.py --prebuild-only      # here, no GPU: every cubin on disk
  python3 benchmarks/attention_bwd.py --dry-run            # the plan, no torch

1. **correct**: for the default and deterministic=True each, ``--cases`` configurations (attention_checks.configs: S in {1, 17, 128, 1000,
   4096}, Sq != Sk in most, causal off / top-left / bottom-right, grouped-query, D 64 / 128,
   bf16 / fp16), fresh random inputs and dO, the gradients' memory NaN-poisoned first, dQ, dK
   and dV against an fp32 autograd reference (a row that sees no key: P = 0), each as
   ||g - ref|| / ||ref|| (||ref|| no smaller than a thousandth of the case's largest gradient
   RMS: a gradient that is exactly zero, dQ and dK over one key, is judged by its absolute
   error, :func:`rel_err`).  A case passes when each of ours is at most 1.5x the error of the
   peer's backward on the same inputs, and never asked below 1e-3 (:data:`MIN_BOUND`: sdpa-math
   in fp32 is exact on a zero gradient, where a bf16 kernel's reductions round): sdpa-flash, or where flash refuses the case (bottom-right
   with Sq != Sk), the next SDPA backend that takes it (cuDNN, efficient, math; named in the
   record as ``peer``); where no backend gives a finite gradient, the fixed bound
   :data:`FIXED_BOUND` (named ``"bound": "fixed"``).  The forward's saved LSE is checked too
   (+inf exactly on the rows that see no key), and dQ's no-key rows must be exactly 0.
2. **graph**: forward+backward captured in a CUDA graph and replayed on new inputs, and
   torch.compile(fullgraph=True) of a loss through attention(), against the eager gradients.
3. **determinism**: on every timed configuration, 20 backward runs with deterministic=True,
   dQ, dK and dV each bitwise equal to the first run's (and, for the record, how many the
   default gives equal).
4. **time**: one process, 16k tokens, hidden 2048 (B = 16384 / S, H = 2048 / D), D 64 and 128,
   S 1k / 4k / 16k, causal or not: forward+backward and backward alone for ours (default and
   deterministic), sdpa-cudnn, sdpa-flash and, if importable, FlashAttention-4
   (``flash_attn.cute``), interleaved rounds with the order rotated (bench_timing), CUDA-event
   medians, per-round ratios (deterministic's against the default's too: its cost, summed up
   in the summary line); TFLOPS with the backward counted 2.5x the forward's.

``--sanitize`` runs both the default and the deterministic backward under each tool;
``--prebuild-only`` builds both main kernels of every variant (``bwd_call.prebuild``).

5. **strides** (issue 37): the correct phase's check on q, k, v and dO of every layout of
   attention_layouts.LAYOUTS (contiguous, a [B, S, H, D] buffer's transposed view, every
   other head, a stride TMA cannot take: the copy path, a mix), x D 64 / 128 x bf16 / fp16 x
   causal off / top-left / bottom-right, tails (S 77, 1000) and grouped-query heads rotating;
   each gradient also in its input's layout (attention_layouts.same_layout).

A case or configuration that fails prints one line and the run goes on; a summary line ends
each phase.  Every result is one JSON line on stdout (and in --out/attention_bwd.jsonl).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

from attention_checks import (CAUSAL, SANITIZE_SHAPES, _job, _sanitizer,  # noqa: E402
                              configs, peer, sdpa_readable)
from bench_timing import graphed, interleaved, ratios  # noqa: E402  (beside this script)
import attention_layouts as layouts  # noqa: E402  (beside this script)
import fa4_peer  # noqa: E402  (beside this script)

TOKENS, HIDDEN = 16384, 2048
#: the timed configurations: (head dim, S, causal)
TIMED = [(d, s, c) for d in (64, 128) for s in (1024, 4096, 16384) for c in (False, True)]
#: the bound where no SDPA backend gives a finite gradient: twice the METHOD's bf16 ceiling
#: (1e-2) for bf16, and fp16's three more mantissa bits' worth for fp16
FIXED_BOUND = {"bf16": 2e-2, "fp16": 2.5e-3}
DETERMINISM_RUNS = 20
LINES: list[dict] = []


def emit(record: dict) -> None:
    LINES.append(record)
    print(json.dumps(record), flush=True)


def _dtype(torch, name: str):
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _causal_op(causal) -> str:
    return {False: "none", True: "top_left", "top_left": "top_left",
            "bottom_right": "bottom_right"}[causal]


def reference(torch, q, k, v, do, scale, causal):
    """fp32 autograd: (lse, (dq, dk, dv), keyed rows or None), K and V repeated per group; a
    row that sees no key has P = 0 (its scores are zeroed before the softmax, then masked, so
    no NaN reaches the gradients) and lse -inf."""
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    s = (qf @ kf.repeat_interleave(group, 1).transpose(-1, -2)) * scale
    keep = keyed = None
    if causal:
        sq, sk = s.shape[-2:]
        off = sk - sq if causal == "bottom_right" else 0
        keep = (torch.arange(sk, device=s.device)[None, :]
                <= torch.arange(sq, device=s.device)[:, None] + off)
        keyed = keep.any(dim=-1)
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s.detach(), dim=-1)
    if keep is not None:
        s = s.masked_fill(~keyed[:, None], 0.0)
    p = torch.softmax(s, dim=-1)
    if keep is not None:
        p = p * keep
    o = p @ vf.repeat_interleave(group, 1)
    return lse, torch.autograd.grad(o, (qf, kf, vf), do.float()), keyed


#: a reference gradient whose RMS is under this share of the case's scale (its largest
#: gradient's RMS) counts as zero: a softmax over one key has dQ = dK = 0 exactly, where a
#: relative error divides rounding noise by nothing (1e24 measured)
ZERO_SHARE = 1e-3
#: the tightest bound a case gets: where the peer's error is (near) zero (sdpa-math in fp32 on
#: a gradient that is exactly zero), 1.5x of it would ask a bf16 kernel for no rounding at all
MIN_BOUND = 1e-3


def rel_err(torch, got, ref, scale: float = 1.0) -> float:
    """||got - ref|| / ||ref||, with ||ref|| no smaller than ZERO_SHARE * ``scale`` (the case's
    gradient RMS) * sqrt(numel): a reference that is (nearly) zero is judged by its absolute RMS
    error against a thousandth of the case's gradients.  NaN and inf in ``got`` count as 1e6 (a
    poisoned output never written fails)."""
    diff = torch.nan_to_num(got.float(), nan=1e6, posinf=1e6, neginf=1e6) - ref
    floor = ZERO_SHARE * scale * math.sqrt(max(ref.numel(), 1))
    return float(diff.norm() / ref.norm().clamp_min(max(floor, 1e-30)))


def gradient_scale(torch, refs) -> float:
    """The case's scale for :func:`rel_err`: the largest RMS of its reference gradients."""
    return max(float(r.float().pow(2).mean().sqrt()) for r in refs)


def poison(torch, *like) -> None:
    """NaN-filled blocks of each gradient's size, freed: the backward's allocations reuse them
    (the caching allocator), so an element it does not write shows."""
    blocks = [torch.full_like(t, float("nan")) for t in like]
    blocks += [torch.full((t.numel() * 2,), float("nan"), device=t.device) for t in like[:1]]
    del blocks


#: the query rows a case's error is judged over: a case with fewer (B * Hq * Sq) is drawn
#: again on fresh inputs until it has this many, and its error is the RMS over its draws, ours
#: and the peer's on the same draws.  dQ's and dK's errors are dominated by one scalar per query
#: row, delta = rowsum(dO * O) from the rounded output O (every kernel's backward computes it
#: so), and a row's error scales with that scalar's rounding: with one row, one draw's error
#: ratio between two equally good kernels is a ratio of two random scalars, which is heavy-
#: tailed (``--phase spread`` measures it: sdpa-cudnn's against sdpa-flash's at Sq = 1).
POOL_ROWS = 64


def draws_for(case) -> int:
    """How many fresh draws a case gets: enough for :data:`POOL_ROWS` query rows."""
    b, hq, _, sq = case[:4]
    return max(1, math.ceil(POOL_ROWS / (b * hq * sq)))


def _draw(torch, ops, attention, case, deterministic: bool, kind: str) -> dict:
    """One draw of a case: fresh inputs and dO, ours and the peer's gradients against the fp32
    reference (:func:`rel_err`), the saved LSE, the no-key rows and the gradients' layouts."""
    b, hq, hkv, sq, sk, d, dtype, causal = case
    dt = _dtype(torch, dtype)
    lq, lk, lv, ldo = layouts.operand_layouts(kind)
    q, k, v = (layouts.tensor(torch, b, h, n, d, dt, lay, requires_grad=True)
               for h, n, lay in ((hq, sq, lq), (hkv, sk, lk), (hkv, sk, lv)))
    do = layouts.tensor(torch, b, hq, sq, d, dt, ldo)
    lse_ref, ref, keyed = reference(torch, q, k, v, do, d ** -0.5, causal)
    rec: dict = {}
    _, lse = ops.attention(q.detach(), k.detach(), v.detach(), _causal_op(causal), None, False)
    poison(torch, q, k, v)
    o = attention(q, k, v, causal=causal, deterministic=deterministic)
    ours = torch.autograd.grad(o, (q, k, v), do)
    torch.cuda.synchronize()
    rows = (lambda x: x) if keyed is None else (lambda x: x[:, :, keyed])
    rec["lse_err"] = float((rows(lse) - rows(lse_ref)).abs().max())
    if keyed is not None and not bool(keyed.all()):
        rec["no_key_rows"] = int((~keyed).sum())
        rec["no_key_lse_inf"] = bool(torch.isposinf(lse[:, :, ~keyed]).all())
        rec["no_key_dq_max_abs"] = float(ours[0][:, :, ~keyed].float().abs().max())
    scale = gradient_scale(torch, ref)
    rec["errs"] = [rel_err(torch, g, r, scale) for g, r in zip(ours, ref)]
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    rec["peer"], po = peer(torch, *leaves, causal)
    rec["perrs"] = None
    if po is not None:
        try:
            pg = torch.autograd.grad(po, leaves, sdpa_readable(do))
            rec["perrs"] = [rel_err(torch, g, r, scale) for g, r in zip(pg, ref)]
        except Exception as exc:  # noqa: BLE001 - its backward refuses: the fixed bound
            rec["peer_backward_error"] = str(exc).splitlines()[0][:200]
    rec["nan"] = any(bool(torch.isnan(g).any()) for g in ours)
    rec["layout_ok"] = all(layouts.same_layout(g, t) for g, t in zip(ours, (q, k, v)))
    return rec


def _rms(values) -> float:
    values = list(values)
    return math.sqrt(sum(x * x for x in values) / len(values))


def grad_case(torch, ops, attention, case, deterministic: bool = False,
              kind: str = "contiguous") -> dict:
    """One case on q, k, v and dO in layout ``kind`` (attention_layouts; the correct phase's
    are contiguous), over :func:`draws_for` fresh draws: the gradients' errors (RMS over the
    draws) against 1.5x the peer's on the same draws, and in their inputs' layouts."""
    b, hq, hkv, sq, sk, d, dtype, causal = case
    rec = {"kind": "correct", "B": b, "Hq": hq, "Hkv": hkv, "Sq": sq, "Sk": sk, "D": d,
           "dtype": dtype, "causal": causal, "deterministic": deterministic,
           **({"layout": kind} if kind != "contiguous" else {})}
    draws = [_draw(torch, ops, attention, case, deterministic, kind)
             for _ in range(draws_for(case))]
    first = draws[0]
    errs = [_rms(dr["errs"][i] for dr in draws) for i in range(3)]
    finite = all(dr["perrs"] is not None and dr["peer"] == first["peer"]
                 and all(math.isfinite(e) and e < 1e5 for e in dr["perrs"]) for dr in draws)
    perrs = [_rms(dr["perrs"][i] for dr in draws) for i in range(3)] if finite else None
    bounds = ([max(1.5 * e, MIN_BOUND) for e in perrs] if perrs
              else [FIXED_BOUND[dtype]] * 3)
    rec["lse_err"] = max(dr["lse_err"] for dr in draws)
    for key in ("no_key_rows", "peer_backward_error"):
        if key in first:
            rec[key] = first[key]
    if "no_key_lse_inf" in first:
        rec["no_key_lse_inf"] = all(dr["no_key_lse_inf"] for dr in draws)
        rec["no_key_dq_max_abs"] = max(dr["no_key_dq_max_abs"] for dr in draws)
    rec.update({"draws": len(draws), "err": dict(zip(("dq", "dk", "dv"), errs)),
                "peer": first["peer"] if finite else None,
                "peer_err": dict(zip(("dq", "dk", "dv"), perrs)) if perrs else None,
                "bound": "1.5x peer" if finite else "fixed",
                "nan": any(dr["nan"] for dr in draws),
                "layout_ok": all(dr["layout_ok"] for dr in draws)})
    if len(draws) > 1:  # the first draw alone, for the record
        rec["first_draw"] = {"err": first["errs"], "peer_err": first["perrs"]}
    rec["ok"] = (not rec["nan"] and rec["layout_ok"]
                 and all(e <= bd for e, bd in zip(errs, bounds)) and rec["lse_err"] < 1e-2
                 and rec.get("no_key_lse_inf", True)
                 and rec.get("no_key_dq_max_abs", 0.0) == 0.0)
    return rec


def correct(torch, cases: int, seed: int) -> None:
    from pipeline_core_schedules_attention import attention
    from pipeline_core_schedules_attention.call import CALL

    ops = CALL.ops()
    done = []
    for case in configs(random.Random(seed), cases):
        for det in (False, True):  # the same case list for both
            try:
                rec = grad_case(torch, ops, attention, case, det)
            except Exception as exc:  # noqa: BLE001 - one line, and the run goes on
                rec = {"kind": "correct", "case": list(case), "deterministic": det, "ok": False,
                       "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
            emit(rec)
            done.append(rec)
    emit({"kind": "correct-summary", "cases": len(done), "failed": sum(not r["ok"] for r in done),
          "deterministic_failed": sum(not r["ok"] for r in done if r["deterministic"]),
          "errors": sum("error" in r for r in done),
          "differ": sum(r.get("Sq") != r.get("Sk") for r in done),
          "gqa": sum(r.get("Hq") != r.get("Hkv") for r in done),
          "bottom_right": sum(r.get("causal") == "bottom_right" for r in done),
          "fixed_bound": sum(r.get("bound") == "fixed" for r in done),
          "peers": sorted({str(r.get("peer")) for r in done if "peer" in r}),
          "max_err": max((max(r["err"].values()) for r in done if "err" in r), default=None)})


#: the spread phase's cases: the one-row case a single draw failed from session 12 to 26
#: (1.53x flash's dQ error), and the same keys over 64 query heads (64 rows a draw)
SPREAD_CASES = [(1, 1, 1, 1, 128, 128, "bf16", "bottom_right"),
                (1, 64, 64, 1, 128, 128, "bf16", "bottom_right")]
SPREAD_BACKENDS = ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient")


def spread(torch, draws: int) -> None:
    """Per-draw error ratios on :data:`SPREAD_CASES`: ours and each SDPA backend against
    sdpa-flash on the same fresh inputs, and the error of the fp32 reference rounded to the
    input dtype (what a correctly rounded gradient makes): how far one draw's ratio between
    equally good kernels strays, the reason for :data:`POOL_ROWS`."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    from pipeline_core_schedules_attention import attention

    backends = {"sdpa-flash": SDPBackend.FLASH_ATTENTION,
                "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
                "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION}
    for case in SPREAD_CASES:
        b, hq, hkv, sq, sk, d, dtype, causal = case
        dt = _dtype(torch, dtype)
        per: dict[str, list[list[float]]] = {}
        for _ in range(draws):
            q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dt, requires_grad=True)
                       for h, n in ((hq, sq), (hkv, sk), (hkv, sk)))
            do = torch.randn(b, hq, sq, d, device="cuda", dtype=dt)
            _, ref, _ = reference(torch, q, k, v, do, d ** -0.5, causal)
            scale = gradient_scale(torch, ref)
            got = {"ours": torch.autograd.grad(attention(q, k, v, causal=causal), (q, k, v), do)}
            for name in SPREAD_BACKENDS:
                leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
                try:
                    with sdpa_kernel([backends[name]]):
                        o = F.scaled_dot_product_attention(
                            *leaves, attn_mask=causal_lower_right(sq, sk))
                    got[name] = torch.autograd.grad(o, leaves, do)
                except Exception:  # noqa: BLE001 - this backend refuses the case
                    continue
            got["rounded reference"] = tuple(r.to(dt) for r in ref)
            for name, grads in got.items():
                per.setdefault(name, []).append(
                    [rel_err(torch, g, r, scale) for g, r in zip(grads, ref)])
        flash = per.get("sdpa-flash")
        rec: dict = {"kind": "spread", "case": list(case), "draws": draws, "vs": "sdpa-flash"}
        for name, rows in per.items():
            entry: dict = {"rms": [_rms(r[i] for r in rows) for i in range(3)]}
            if flash is not None and name != "sdpa-flash":
                for i, grad in enumerate(("dq", "dk")):
                    ratio = sorted(r[i] / f[i] for r, f in zip(rows, flash) if f[i] > 0)
                    entry[grad] = {
                        "median": statistics.median(ratio),
                        "p90": ratio[int(0.9 * (len(ratio) - 1))], "max": ratio[-1],
                        "over_1.5": sum(x > 1.5 for x in ratio) / len(ratio)}
            rec[name] = entry
        emit(rec)


def strided(torch) -> None:
    """The correct phase's check over every layout (attention_layouts.LAYOUTS) x head dim x
    dtype x causal mode, the lengths (tails) and grouped-query heads rotating."""
    from pipeline_core_schedules_attention import attention
    from pipeline_core_schedules_attention.call import CALL

    ops = CALL.ops()
    done = layouts.run_all(layouts.strided_cases(),
                           lambda c: grad_case(torch, ops, attention, c[1:], kind=c[0]), emit,
                           "correct")
    emit({"kind": "strided-summary", "cases": len(done), "failed": sum(not r["ok"] for r in done),
          "layout_failed": sum(not r.get("layout_ok", True) for r in done),
          "max_err": max((max(r["err"].values()) for r in done if "err" in r), default=None)})


def _inputs(torch, d: int, s: int):
    b, h = TOKENS // s, HIDDEN // d
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    return b, h, q, k, v, torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)


def determinism(torch) -> None:
    from pipeline_core_schedules_attention import attention

    ok = 0
    for d, s, causal in TIMED:
        rec = {"kind": "determinism", "D": d, "S": s, "causal": causal, "runs": DETERMINISM_RUNS}
        try:
            _, _, q, k, v, do = _inputs(torch, d, s)
            for det in (True, False):
                o = attention(q, k, v, causal=causal, deterministic=det)
                first = torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
                same = 1
                for _ in range(DETERMINISM_RUNS - 1):  # compared as they come: little memory
                    again = torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
                    same += all(torch.equal(a, b) for a, b in zip(first, again))
                if det:
                    rec.update(identical=same, ok=same == DETERMINISM_RUNS)
                else:  # the default, for the record
                    rec["default_identical"] = same
                del o, first
        except Exception as exc:  # noqa: BLE001 - one line, and the run goes on
            rec.update(ok=False, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
        ok += bool(rec.get("ok"))
        emit(rec)
    emit({"kind": "determinism-summary", "configs": len(TIMED), "ok": ok})


#: the graph checks' case: (B, Hq, Hkv, Sq, Sk, D, causal): tails, grouped-query, no-key rows
GRAPH_CASE = (1, 4, 2, 300, 200, 128, "bottom_right")


def graph(torch) -> None:
    """CUDA-graph capture of forward+backward, replayed on new inputs, and torch.compile
    (fullgraph=True) of a loss through attention(), its backward through the registered
    formula; each against the eager gradients (bitwise with deterministic=True where the main
    kernel gives it; else the largest relative difference)."""
    from pipeline_core_schedules_attention import attention

    b, hq, hkv, sq, sk, d, causal = GRAPH_CASE

    def fresh():
        return [torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
                for h, n in ((hq, sq), (hkv, sk), (hkv, sk), (hq, sq))]

    def diff(a, b) -> float:
        return max(float((x.float() - y.float()).norm() / y.float().norm().clamp_min(1e-30))
                   for x, y in zip(a, b))

    q, k, v = (t.requires_grad_() for t in fresh()[:3])
    do = torch.randn_like(q)
    for det in (True, False):
        rec = {"kind": "cuda-graph", "deterministic": det, "case": list(GRAPH_CASE)}
        try:
            def step(det=det):
                return torch.autograd.grad(attention(q, k, v, causal=causal, deterministic=det),
                                           (q, k, v), do)
            captured: dict = {}  # the graph's outputs, which each replay rewrites
            replay = graphed(torch, lambda: captured.update(grads=step()))
            static = captured["grads"]
            same, diffs = [], []
            for _ in range(3):
                with torch.no_grad():
                    for dst, src in zip((q, k, v, do), fresh()):
                        dst.copy_(src)
                replay()
                eager = step()
                torch.cuda.synchronize()
                same.append(all(torch.equal(a, b) for a, b in zip(static, eager)))
                diffs.append(diff(static, eager))
            rec.update(replays=3, identical_to_eager=same, max_rel_diff=max(diffs),
                       ok=all(same) if det else max(diffs) < 1e-2)
        except Exception as exc:  # noqa: BLE001 - one line, and the run goes on
            rec.update(ok=False, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
        emit(rec)

    def loss(q, k, v, do):
        o = attention(q, k, v, causal=causal, scale=0.1)
        return (o.float() * do.float()).sum()

    rec = {"kind": "torch-compile", "fullgraph": True, "case": list(GRAPH_CASE)}
    try:
        want = torch.autograd.grad(loss(q, k, v, do), (q, k, v))
        got = torch.autograd.grad(torch.compile(loss, fullgraph=True)(q, k, v, do), (q, k, v))
        torch.cuda.synchronize()
        rec.update(max_rel_diff=diff(got, want), ok=diff(got, want) < 1e-2)
    except Exception as exc:  # noqa: BLE001 - one line, and the run goes on
        rec.update(ok=False, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    emit(rec)


def _peers(torch, q, k, v, do, causal):
    """{name: (forward+backward, backward alone)} of the peers that import and run here."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    found = {}

    def sdpa(be):
        def fwd():
            with sdpa_kernel([be]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return fwd

    fwds = {"sdpa-cudnn": (sdpa(SDPBackend.CUDNN_ATTENTION), (q, k, v), do),
            "sdpa-flash": (sdpa(SDPBackend.FLASH_ATTENTION), (q, k, v), do)}
    flash_attn_func = _fa4()
    if flash_attn_func is not None:  # FlashAttention-4, [B, S, H, D]
        qb, kb, vb = (fa4_peer.bshd(t.detach()).requires_grad_() for t in (q, k, v))
        fwds["fa4"] = (lambda: fa4_peer.forward(flash_attn_func, qb, kb, vb, causal),
                       (qb, kb, vb), fa4_peer.bshd(do))
    for name, (fwd, leaves, g) in fwds.items():
        found[name] = _timed_pair(torch, name, fwd, leaves, g)
    return {n: f for n, f in found.items() if f is not None}


def _fa4():
    """FlashAttention-4's ``flash_attn_func`` (fa4_peer.py), or None where it does not import
    (said once, in one line)."""
    f, why = fa4_peer.flash_attn_func()
    if f is None and not _FA4_SAID:
        emit({"kind": "peer-missing", "name": "fa4", "why": why})
        _FA4_SAID.append(True)
    return f


_FA4_SAID: list = []


def _timed_pair(torch, name, fwd, leaves, g):
    """(forward+backward, backward alone) of ``fwd`` on ``leaves`` with output gradient
    ``g``, run once first; None (and one line) where it fails."""
    try:
        saved = fwd()
        torch.autograd.grad(saved, leaves, g, retain_graph=True)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - one line, and the run goes on
        emit({"kind": "refused", "name": name, "why": str(exc).splitlines()[0][:300]})
        return None
    return (lambda: torch.autograd.grad(fwd(), leaves, g),
            lambda: torch.autograd.grad(saved, leaves, g, retain_graph=True))


def timing(torch, rounds: int) -> None:
    from pipeline_core_schedules_attention import attention

    done = []
    for d, s, causal in TIMED:
        try:
            b, h, q, k, v, do = _inputs(torch, d, s)
            fns = {name: _timed_pair(torch, name, lambda det=det: attention(
                        q, k, v, causal=causal, deterministic=det), (q, k, v), do)
                   for name, det in (("ours", False), ("ours-det", True))}
            fns = {**{n: f for n, f in fns.items() if f is not None},
                   **_peers(torch, q, k, v, do, causal)}
            if "ours" not in fns:
                continue
            flop = 4 * b * h * s * s * d // (2 if causal else 1)
            for mode, i, mult in (("fwd+bwd", 0, 3.5), ("bwd", 1, 2.5)):
                per = interleaved(torch, {n: f[i] for n, f in fns.items()}, rounds, 10)
                for n in per:
                    ms = statistics.median(per[n])
                    rec = {"kind": "time", "mode": mode, "name": n, "D": d, "S": s, "B": b,
                           "H": h, "causal": causal, "dtype": "bf16", "ms": ms,
                           "tflops": mult * flop / ms / 1e9,
                           "device": torch.cuda.get_device_name()}
                    if n.startswith("ours"):
                        for p in ("sdpa-flash", "sdpa-cudnn", "fa4", "ours"):
                            if p in per and p != n:
                                rec[f"ratio_vs_{p}"] = ratios(per, n, p)
                    emit(rec)
                    done.append(rec)
            del fns
        except Exception as exc:  # noqa: BLE001 - one line, and the run goes on
            emit({"kind": "time-error", "D": d, "S": s, "causal": causal,
                  "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"})
        torch.cuda.empty_cache()
    summary = {"kind": "time-summary", "configs": len(TIMED),
               "timed": len({(r["D"], r["S"], r["causal"]) for r in done})}
    for p in ("sdpa-flash", "sdpa-cudnn", "fa4"):
        rs = [statistics.median(r[f"ratio_vs_{p}"]) for r in done
              if r["name"] == "ours" and r["mode"] == "bwd" and f"ratio_vs_{p}" in r]
        if rs:
            summary[f"bwd_geomean_vs_{p}"] = math.exp(sum(map(math.log, rs)) / len(rs))
            summary[f"bwd_min_vs_{p}"] = min(rs)
    for mode in ("fwd+bwd", "bwd"):  # deterministic's speed as a fraction of the default's
        rs = [statistics.median(r["ratio_vs_ours"]) for r in done
              if r["name"] == "ours-det" and r["mode"] == mode and "ratio_vs_ours" in r]
        if rs:
            summary[f"{mode}_det_geomean_vs_default"] = math.exp(sum(map(math.log, rs)) / len(rs))
            summary[f"{mode}_det_min_vs_default"] = min(rs)
    emit(summary)


# ---- sanitizers: the op's every kernel at small shapes with tails ----------------------------

def sanitize_run(torch) -> None:
    """Forward and backward through attention() at attention_checks' sanitizer shapes (tails,
    causal, bottom-right grouped-query with no-key rows), D 64 and 128, default and
    deterministic: every kernel of the op (forward, preprocess, main in both variants,
    postprocess) runs under the sanitizer."""
    from pipeline_core_schedules_attention import attention

    for d, det in ((d, det) for d in (64, 128) for det in (False, True)):
        for b, hq, hkv, sq, sk, causal in SANITIZE_SHAPES:
            case = (b, hq, hkv, sq, sk, d, "bf16", causal)
            q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16,
                                   requires_grad=True) for h, n in ((hq, sq), (hkv, sk), (hkv, sk)))
            do = torch.randn(b, hq, sq, d, device="cuda", dtype=torch.bfloat16)
            grads = torch.autograd.grad(attention(q, k, v, causal=causal, deterministic=det),
                                        (q, k, v), do)
            torch.cuda.synchronize()
            print(json.dumps({"kind": "sanitized-run", "case": list(case), "deterministic": det,
                              "nan": any(bool(torch.isnan(g).any()) for g in grads)}), flush=True)


def sanitize(out: Path | None, timeout: float, kernels: str) -> None:
    """racecheck and synccheck, one process each, over :func:`sanitize_run`; ``kernels``: the
    kernel-name substring checked (every kernel of ours is named ``pc_...``; torch's own
    kernels are left out), or "" for every kernel."""
    import re

    me = [sys.executable, str(Path(__file__).resolve()), "--phase", "sanitize-run"]
    only = ["--kernel-name", f"kns={kernels}"] if kernels else []
    for tool in ("racecheck", "synccheck"):
        rc, text, secs = _job(("sanitize", tool), [_sanitizer(), "--tool", tool, *only, *me],
                              timeout, out)
        runs = re.findall(r'^\{"kind": "sanitized-run".*$', text, re.M)
        emit({"kind": "sanitizer", "tool": tool, "rc": rc, "kernel_runs": len(runs),
              "summary": sorted(set(re.findall(r"(RACECHECK SUMMARY: .*|ERROR SUMMARY: .*)",
                                               text))),
              "nan": any(json.loads(r)["nan"] for r in runs), "seconds": round(secs)})


# ---- no GPU: the plan, and every cubin into the disk cache -----------------------------------

def forward_kernels() -> list[tuple]:
    """The forward kernels the runs launch: (head dim, dtype, causal, align, short)."""
    from pipeline_core_schedules_attention.bwd_schedule import BWD_HEAD_DIMS
    from pipeline_core_schedules_attention.call import CAUSAL_ALIGN

    return [(d, dt, CAUSAL_ALIGN[c] is not None, CAUSAL_ALIGN[c] or "top_left", short)
            for d in BWD_HEAD_DIMS for dt in ("bf16", "fp16") for c in CAUSAL
            for short in (False, True)]


def _build_forward(key: tuple) -> bool:
    from pipeline_core_nvidia_h100.kit_api import ARCH, BUILD_OPTIONS, cubin_path

    from pipeline_core_schedules_attention.call import _source
    from pipeline_core_schedules_attention.signature import KERNEL_NAME

    return cubin_path(_source(*key)[1], KERNEL_NAME, BUILD_OPTIONS, ARCH) is not None


def _build_prepost(key: tuple) -> bool:
    from pipeline_core_nvidia_h100.kit_api import ARCH, BUILD_OPTIONS, cubin_path

    from pipeline_core_schedules_attention import bwd_prepost

    src = bwd_prepost.source(*key)
    return all(cubin_path(src, name, BUILD_OPTIONS, ARCH) is not None
               for name in (bwd_prepost.PRE_NAME, bwd_prepost.POST_NAME))


def _build_main(variant: tuple) -> bool:
    from pipeline_core_schedules_attention import bwd_call

    return bool(bwd_call.prebuild((variant,)))


def prebuild(jobs: int) -> None:
    """Every cubin the runs load, into ``PIPELINE_CORE_CACHE_DIR`` (no GPU needed): the
    forward's, the preprocess and postprocess, and the main kernel's, default and
    deterministic (``bwd_call.VARIANTS``, ``DETERMINISTIC_VARIANTS``)."""
    from pipeline_core_schedules_attention import bwd_call

    fwd = forward_kernels()
    prepost = [(d, dt) for d in (64, 128) for dt in ("bf16", "fp16")]
    mains = bwd_call.VARIANTS + bwd_call.DETERMINISTIC_VARIANTS
    with ProcessPoolExecutor(jobs) as pool:
        built = (sum(pool.map(_build_forward, fwd)) + sum(pool.map(_build_prepost, prepost))
                 + sum(pool.map(_build_main, mains)))
    emit({"kind": "prebuild", "forward": len(fwd), "prepost": len(prepost), "main": len(mains),
          "deterministic": len(bwd_call.DETERMINISTIC_VARIANTS), "built": built,
          "of": len(fwd) + len(prepost) + len(mains)})


def dry_run(cases: int, seed: int) -> None:
    for case in configs(random.Random(seed), cases):
        emit({"kind": "dry-run", "phase": "correct", "case": list(case)})
    for d, s, causal in TIMED:
        emit({"kind": "dry-run", "phase": "time", "D": d, "S": s, "causal": causal,
              "B": TOKENS // s, "H": HIDDEN // d})
    emit({"kind": "dry-run-summary", "cases": cases, "timed": len(TIMED),
          "forward_kernels": len(forward_kernels()), "sanitize_shapes": len(SANITIZE_SHAPES)})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", default="all",
                    choices=("all", "correct", "graph", "determinism", "time",
                             "sanitize-run", "strides", "spread"))
    ap.add_argument("--draws", type=int, default=200, help="--phase spread: draws per case")
    ap.add_argument("--determinism", action="store_true", help="--phase determinism")
    ap.add_argument("--sanitize", action="store_true",
                    help="compute-sanitizer racecheck and synccheck over the op's kernels")
    ap.add_argument("--sanitize-kernels", default="pc_",
                    help="with --sanitize: the kernel-name substring checked ('' for all)")
    ap.add_argument("--prebuild-only", action="store_true", help="no GPU: build every cubin")
    ap.add_argument("--dry-run", action="store_true", help="no torch: print the plan")
    ap.add_argument("--cases", type=int, default=72)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=900.0, help="per sanitizer, seconds")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    try:
        if args.dry_run:
            return dry_run(args.cases, args.seed)
        if args.prebuild_only:
            return prebuild(args.jobs)
        if args.sanitize:
            return sanitize(out, args.timeout, args.sanitize_kernels)
        import torch

        torch.manual_seed(args.seed)
        phase = "determinism" if args.determinism else args.phase
        if phase == "sanitize-run":
            return sanitize_run(torch)
        emit({"kind": "device", "name": torch.cuda.get_device_name(), "torch": torch.__version__})
        if phase == "spread":
            return spread(torch, args.draws)
        if phase in ("all", "correct"):
            correct(torch, args.cases, args.seed)
        if phase in ("all", "strides"):
            strided(torch)
        if phase in ("all", "graph"):
            graph(torch)
        if phase in ("all", "determinism"):
            determinism(torch)
        if phase in ("all", "time"):
            timing(torch, args.rounds)
    finally:
        if out is not None:
            with open(out / "attention_bwd.jsonl", "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in LINES)


if __name__ == "__main__":
    main()
