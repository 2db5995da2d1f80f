"""The attention backward's main kernel (``bwd_call.attention_bwd_main``) on the GPU:
correctness, sanitizer shapes, timing.

  python3 benchmarks/attention_bwd_main_check.py [--prebuild-only] [--sanitize] [--time]
                                                 [--rounds N] [--out FILE]

1. Correctness (the default): ~24 configurations over S in {1, 17, 128, 1000}, Sq != Sk,
   causal off / top-left / bottom-right, grouped-query heads, D 64 / 128, bf16 / fp16; fresh
   random inputs each; LSE and delta computed in torch fp32 (LSE +inf on a row that sees no
   key, delta = rowsum(dO * O) with O rounded to the input's type, as the forward saves it);
   dq_accum zeroed, dK and dV's memory NaN-poisoned first (the call allocates both like k: the
   freed NaN blocks of their size are what the caching allocator hands back); dQ, dK, dV
   against an fp32 autograd reference.  A configuration passes when each gradient's relative
   error is at most 1.5x sdpa-flash's backward on the same case (where flash runs it: top-left
   or no mask, one head per KV head) plus 1e-3, else under a fixed bound (bf16 3e-2, fp16
   1e-2); one PASS / FAIL line each and a summary line.
2. ``--sanitize``: a few small shapes with tails, each run once (for compute-sanitizer's
   racecheck and synccheck: ``compute-sanitizer --tool racecheck python3 ... --sanitize``).
3. ``--time``: the main kernel alone against torch sdpa's flash and cuDNN backward (autograd of
   their forward, the backward alone timed) at 16k tokens, hidden 2048 (H = 2048 / D), D 64 /
   128, S 1k / 4k / 16k, causal or not; interleaved rounds, CUDA-event medians, per-round
   ratios; TFLOPS count 2.5x the forward's flops (half the square causal).
``--prebuild-only``: every variant's cubin built into PIPELINE_CORE_CACHE_DIR with nvcc, no GPU
and no torch needed (then the GPU run loads them).
``--variants 'base;stages=3;block_m=128,stages=3' --head-dims 64``: schedule variants of the
main kernel (``-p`` parameters, ``stages`` the rings' ``-T stages``) beside the call's own, each
checked on the configurations of those head dims, then timed against each other and the peers
in the same interleaved rounds (the tuning harness: which variant the call should compile).
A variant's ``rewrite=offset`` / ``offset_each`` (with ``shared_dq=false``), ``session17``,
``session18``, ``grad_two_ahead`` or ``per_score_mask`` edits its emitted source instead
(``REWRITES``): a probe of a cut before it is built and proven, the kernel as the kit emitted
it before session 18 or 19, the gradient step's loads two blocks ahead or its mask tested per
pair (``issue_probe.py``).  ``dk_rs=true`` applies where the call's kernel cuts dQ by columns or
rows.  A variant's ``order=`` swaps the output tiles' order (``heads_inner``; ``forward_ties``:
the forward's tie rule, the backward's before session 24; ``hgN`` / ``hgNs``: a fixed order).
Every result is also one JSON line in ``--out`` (default: none).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100", ROOT / "plugins" / "schedules_attention"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from issue_probe import (as_session_17, as_session_18, grad_two_ahead, o_store_4,  # noqa: E402
                         per_score_mask)

#: (B, Hq, Hkv, Sq, Sk): S in {1, 17, 128, 1000}, query and key lengths that differ, GQA
SHAPES = ((1, 2, 2, 1, 1), (1, 2, 2, 17, 17), (2, 4, 2, 128, 128), (1, 4, 1, 1000, 1000),
          (1, 2, 2, 17, 1000), (1, 2, 2, 1000, 17), (2, 2, 1, 128, 1000), (1, 3, 3, 1000, 128))
CAUSALS = (False, True, "bottom_right")
#: small shapes with tails for the sanitizers: (B, Hq, Hkv, Sq, Sk, D, dtype, causal)
SANITIZE = ((1, 2, 1, 100, 77, 64, "bf16", False), (1, 2, 1, 100, 77, 128, "bf16", True),
            (1, 2, 2, 77, 150, 64, "fp16", "bottom_right"), (1, 1, 1, 1, 1, 128, "bf16", False))
BOUND = {"bf16": 3e-2, "fp16": 1e-2}
TOKENS, HIDDEN = 16384, 2048
OUT: list[dict] = []


def emit(record: dict) -> None:
    OUT.append(record)


def configs() -> list[tuple]:
    """Each shape under each mask, the head dim and dtype rotating: ~24 configurations."""
    out = []
    for i, (b, hq, hkv, sq, sk) in enumerate(SHAPES):
        for j, causal in enumerate(CAUSALS):
            n = 3 * i + j
            out.append((b, hq, hkv, sq, sk, (64, 128)[n % 2], ("bf16", "fp16")[n // 2 % 2],
                        causal))
    return out


def keep_mask(torch, sq: int, sk: int, causal, device):
    """Which (row, key) pairs the mask keeps (None: all)."""
    if causal is False:
        return None
    offset = sk - sq if causal == "bottom_right" else 0
    r = torch.arange(sq, device=device)[:, None]
    c = torch.arange(sk, device=device)[None, :]
    return c <= r + offset


def reference(torch, q, k, v, do, scale, causal):
    """fp32 autograd: the output, LSE (+inf on a row with no key) and dQ, dK, dV (k and v's
    grads summed over each KV head's group)."""
    group = q.shape[1] // k.shape[1]
    qf, kf, vf = (t.detach().float().requires_grad_(True) for t in (q, k, v))
    ke, ve = kf.repeat_interleave(group, dim=1), vf.repeat_interleave(group, dim=1)
    s = (qf @ ke.transpose(-1, -2)) * scale
    keep = keep_mask(torch, q.shape[2], k.shape[2], causal, q.device)
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    any_key = torch.isfinite(lse)[..., None]
    p = torch.where(any_key, torch.softmax(s, dim=-1), torch.zeros_like(s))
    out = p @ ve
    dq, dk, dv = torch.autograd.grad(out, (qf, kf, vf), do.float())
    lse = torch.where(torch.isfinite(lse), lse, torch.full_like(lse, float("inf")))
    return (out.detach(), lse.detach(), torch.nan_to_num(dq), torch.nan_to_num(dk),
            torch.nan_to_num(dv))


def rel(torch, got, ref, scale: float = 1.0) -> float:
    """The end-to-end benchmark's gradient error (attention_bwd.rel_err: one statement of it)."""
    from attention_bwd import rel_err

    return rel_err(torch, got, ref, scale)


def flash_errors(torch, q, k, v, do, scale, causal, refs):
    """sdpa-flash's backward errors on the case (None where flash does not run it)."""
    if causal == "bottom_right" or q.shape[1] != k.shape[1]:
        return None
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        qq, kk, vv = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=bool(causal),
                                                                 scale=scale)
        grads = torch.autograd.grad(o, (qq, kk, vv), do)
    except RuntimeError:
        return None
    from attention_bwd import gradient_scale

    return [rel(torch, g, r, gradient_scale(torch, refs)) for g, r in zip(grads, refs)]


def run(torch, bwd, b, hq, hkv, sq, sk, d, dtype, causal, check=True,
        deterministic=False) -> dict:
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    q = torch.randn(b, hq, sq, d, device="cuda", dtype=dt)
    k = torch.randn(b, hkv, sk, d, device="cuda", dtype=dt)
    v = torch.randn(b, hkv, sk, d, device="cuda", dtype=dt)
    do = torch.randn(b, hq, sq, d, device="cuda", dtype=dt)
    scale = d ** -0.5
    out, lse, dq_ref, dk_ref, dv_ref = reference(torch, q, k, v, do, scale, causal)
    delta = (do.float() * out.to(dt).float()).sum(-1)
    sqp = -(-sq // bwd.DQ_ROWS) * bwd.DQ_ROWS
    dq_accum = torch.zeros(b, hq, sqp, d, device="cuda", dtype=torch.float32)
    # each head's rows padded to sqp, as the preprocess writes them (pad rows: +inf and 0)
    lse_pad = torch.full((b, hq, sqp), float("inf"), device="cuda", dtype=torch.float32)
    lse_pad[..., :sq] = lse
    delta_pad = torch.zeros((b, hq, sqp), device="cuda", dtype=torch.float32)
    delta_pad[..., :sq] = delta
    poison = [torch.full(k.shape, float("nan"), device="cuda", dtype=dt) for _ in range(2)]
    del poison  # the call's dK and dV reuse these freed NaN blocks
    dk, dv = bwd.attention_bwd_main(q, k, v, do, lse_pad, delta_pad, dq_accum,
                                    causal=causal, scale=scale, deterministic=deterministic)
    torch.cuda.synchronize()
    rec = {"kind": "correct", "B": b, "Hq": hq, "Hkv": hkv, "Sq": sq, "Sk": sk, "D": d,
           "dtype": dtype, "causal": causal}
    if not check:
        return rec
    from attention_bwd import gradient_scale

    from pipeline_core_schedules_attention.bwd_prepost import postprocess

    # the accumulator is in the kernel's own layout (dq_layout.cuh): its postprocess reads it
    dq = postprocess(dq_accum, q)
    scale = gradient_scale(torch, (dq_ref, dk_ref, dv_ref))
    errs = [rel(torch, dq, dq_ref, scale), rel(torch, dk, dk_ref, scale),
            rel(torch, dv, dv_ref, scale)]
    flash = flash_errors(torch, q, k, v, do, scale, causal, (dq_ref, dk_ref, dv_ref))
    bounds = ([1.5 * f + 1e-3 for f in flash] if flash is not None else [BOUND[dtype]] * 3)
    ok = all(e == e and e <= bound for e, bound in zip(errs, bounds))
    rec.update(err=dict(zip(("dq", "dk", "dv"), errs)),
               flash_err=None if flash is None else dict(zip(("dq", "dk", "dv"), flash)),
               nan=bool(torch.isnan(dk).any() or torch.isnan(dv).any()
                        or torch.isnan(dq).any()), ok=bool(ok))
    return rec


def correctness(torch, bwd) -> int:
    failures = 0
    cases = configs()
    for case in cases:
        try:
            rec = run(torch, bwd, *case)
        except Exception as e:  # one line per config, the run goes on
            rec = {"kind": "correct", "case": repr(case), "ok": False,
                   "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        emit(rec)
        failures += not rec["ok"]
        b, hq, hkv, sq, sk, d, dtype, causal = case
        errs = rec.get("err") or {}
        print(f"{'PASS' if rec['ok'] else 'FAIL'} B={b} Hq={hq} Hkv={hkv} Sq={sq} Sk={sk} D={d} "
              f"{dtype} causal={causal} "
              + (" ".join(f"{n}={e:.2e}" for n, e in errs.items()) or rec.get("error", ""))
              + (f" flash={ {n: round(e, 5) for n, e in rec['flash_err'].items()} }"
                 if rec.get("flash_err") else "")
              + (" NaN" if rec.get("nan") else ""), flush=True)
    print(f"SUMMARY correctness: {len(cases) - failures} of {len(cases)} configurations PASS",
          flush=True)
    return failures


def sanitize(torch, bwd) -> int:
    failures = 0
    for case in SANITIZE:
        try:
            rec = run(torch, bwd, *case)
        except Exception as e:
            rec = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        failures += not rec["ok"]
        print(f"{'PASS' if rec['ok'] else 'FAIL'} sanitize {case} {rec.get('error', '')}",
              flush=True)
        emit({"kind": "sanitize", "case": repr(case), **rec})
    print(f"SUMMARY sanitize: {len(SANITIZE) - failures} of {len(SANITIZE)} shapes PASS",
          flush=True)
    return failures


class Variant:
    """A schedule variant of the main kernel: its own call layer (kernels and recipes), built
    from the call's parameters with ``params`` over them and ``stages`` rings.  ``use()``
    points the module's call at it: the build reads ``call_params`` and ``CALL_STAGES`` when it
    compiles, the launch reads ``CALL``."""

    def __init__(self, bwd, spec: str) -> None:
        from pipeline_core_nvidia_h100.kit_api import HostCall

        self.bwd, self.name = bwd, spec
        pairs = dict(kv.split("=") for kv in spec.split(",") if kv and kv != "base")
        self.stages = int(pairs.pop("stages", bwd.CALL_STAGES))
        #: det=1: the call's deterministic kernel (timed with deterministic=True)
        self.deterministic = pairs.pop("det", "0") == "1"
        #: order=heads_inner: the output tiles' earlier order (heads innermost: hg = every KV
        #: head, no snake), for an A/B against the call's choice (bwd_call._order);
        #: order=forward_ties: the call's choice with the forward's tie rule (the default order
        #: kept among balanced ones, the backward's rule before session 24); order=hgN or
        #: hgNs: groups of N heads, without or with the snake, whatever the balance
        self.order = pairs.pop("order", "call")
        if not re.fullmatch(r"call|heads_inner|forward_ties|hg[1-9][0-9]*s?", self.order):
            raise SystemExit(f"--variants: order={self.order}; pass order=call, heads_inner, "
                             "forward_ties, hgN or hgNs (N a head count)")
        #: rewrite=NAME: a probe's edit of the emitted source (REWRITES), not a kernel the call
        #: builds: what a cut would pay before it is built into the schedule and proven
        self.rewrite = REWRITES[pairs.pop("rewrite", "none")]
        self.params = pairs
        self.call = HostCall(schedule=bwd.NAME, plugins=bwd.CALL.plugins, build=bwd._build,
                             pack=bwd._arguments)

    def use(self) -> None:
        global ACTIVE_REWRITE
        ACTIVE_REWRITE = self.rewrite
        bwd, extra = self.bwd, self.params
        bwd.CALL, bwd.CALL_STAGES = self.call, self.stages
        bwd.call_params = lambda *a, **k: _merged(CALL_PARAMS(*a, **k), extra)
        from pipeline_core_schedules_attention.tile_order import TileOrder
        if self.order == "heads_inner":
            bwd._order = lambda r, built, grid, np: TileOrder(hg=r.plan.bhk)
        elif self.order == "forward_ties":
            bwd._order = lambda r, built, grid, np: ORDER(r, built, grid, np, keep=TileOrder())
        elif self.order.startswith("hg"):
            fixed = TileOrder(hg=int(self.order[2:].rstrip("s")), snake=self.order.endswith("s"))
            bwd._order = lambda r, built, grid, np: fixed
        else:
            bwd._order = ORDER


CALL_PARAMS = ORDER = None  # the module's own call_params and _order, before any variant


def _merged(call: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """The call's parameters under a variant's; ``dk_rs`` only where the merged kernel cuts dQ
    by columns or rows (the schedule refuses it with the keys cut: D 64 causal)."""
    out = {**call, **extra}
    if out.get("dq_cut", "keys") == "keys":
        out.pop("dk_rs", None)
    return out


def _blocks(src: str) -> tuple[str, str, str, str]:
    """The emitted source cut around its consumers' two programs: (head, consumer 0's,
    consumer 1's, tail)."""
    i0 = src.index("if (consumer == 0) {")
    i1 = src.index("} else if (consumer == 1) {")
    i2 = src.index("pcab::finish<", i1)
    return src[:i0], src[i0:i1], src[i1:i2], src[i2:]


#: the named barrier the probes' offsets use (the kernel's own take 1 to 6)
OFFSET_BAR = 8


def _offset(src: str, every: bool) -> str:
    """Consumer 1 starts its S and dP wgmmas only once consumer 0's have retired, once per
    output tile (``every`` False) or every query block: the two consumers' tensor-core and
    math phases out of step (per-consumer dQ only: the kernel has no other consumer join)."""
    import re

    head, c0, c1, tail = _blocks(src)
    assert "barrier.sync 2, 256" not in src, "the offset probes take -p shared_dq=false"
    wait = re.compile(r"(wgmma_commit\(\);\n\s*wgmma_wait<0>\(\);\n)(\s*)(pcab::grad<)")
    fence = re.compile(r"(\n)(\s*)(wgmma_fence\(\);\n\s*pcab::st<)")
    n0, n1 = len(wait.findall(c0)), len(fence.findall(c1))
    assert n0 == n1 and n0 >= 2, (n0, n1)
    bar = 'asm volatile("bar.{} ' + str(OFFSET_BAR) + ', 256;\\n" ::: "memory");\n'
    c0 = wait.sub(lambda m: m[1] + m[2] + bar.format("arrive") + m[2] + m[3], c0,
                  count=0 if every else 1)
    c1 = fence.sub(lambda m: m[1] + m[2] + bar.format("sync") + m[2] + m[3], c1,
                   count=0 if every else 1)
    return head + c0 + c1 + tail


REWRITES = {"none": lambda src: src, "session17": as_session_17, "session18": as_session_18,
            "grad_two_ahead": grad_two_ahead, "per_score_mask": per_score_mask, "offset": lambda src: _offset(src, False),
            "offset_each": lambda src: _offset(src, True), "o_store_4": o_store_4}
ACTIVE_REWRITE = REWRITES["none"]


def _rewriting(emit):
    def emit_rewritten(*args, **kwargs):
        return ACTIVE_REWRITE(emit(*args, **kwargs))
    return emit_rewritten


def timing(torch, bwd, rounds: int, variants=(), head_dims=(64, 128)) -> None:
    from bench_timing import interleaved, ratios
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for d in head_dims:
        for s in (1024, 4096, 16384):
            for causal in (False, True):
                b, h = TOKENS // s, HIDDEN // d
                dt = torch.bfloat16
                q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=dt)
                               for _ in range(4))
                scale = d ** -0.5
                lse = torch.randn(b, h, s, device="cuda").abs() + 5.0
                delta = torch.randn(b, h, s, device="cuda")
                dq_accum = torch.zeros(b, h, -(-s // bwd.DQ_ROWS) * bwd.DQ_ROWS, d,
                                       device="cuda")
                impls = {"ours": lambda: bwd.attention_bwd_main(q, k, v, do, lse, delta, dq_accum,
                                                                causal=causal, scale=scale)}
                if variants:
                    impls = {f"ours:{vr.name}": (lambda vr=vr: (vr.use(), bwd.attention_bwd_main(
                        q, k, v, do, lse, delta, dq_accum, causal=causal, scale=scale,
                        deterministic=vr.deterministic)))
                        for vr in variants}
                for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                                      ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
                    qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
                    try:
                        with sdpa_kernel(backend):
                            o = torch.nn.functional.scaled_dot_product_attention(
                                qq, kk, vv, is_causal=causal, scale=scale)
                        torch.autograd.grad(o, (qq, kk, vv), do, retain_graph=True)
                    except RuntimeError:
                        continue
                    impls[name] = (lambda o=o, qq=qq, kk=kk, vv=vv:
                                   torch.autograd.grad(o, (qq, kk, vv), do, retain_graph=True))
                first = next(iter(impls))
                per = interleaved(torch, impls, rounds)
                flop = 2.5 * 4 * b * h * s * s * d * (0.5 if causal else 1.0)
                med = {n: sorted(t)[len(t) // 2] for n, t in per.items()}
                rec = {"kind": "time", "D": d, "S": s, "B": b, "H": h, "causal": causal,
                       "ms": med, "tflops": {n: round(flop / m / 1e9, 1) for n, m in med.items()},
                       **{f"{o}/{p}": ratios(per, o, p) for o in per if o.startswith("ours")
                          for p in per if p != o and (p == first or not p.startswith("ours"))}}
                emit(rec)
                print(f"TIME D={d} S={s} causal={causal} "
                      + " ".join(f"{n}={rec['tflops'][n]}TF" for n in med)
                      + " " + " ".join(f"{n}={rec[n]}" for n in rec if "/" in n
                                       and n.startswith("ours")), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prebuild-only", action="store_true")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--variants", default="",
                    help="';'-separated schedule variants, each 'base' or k=v,k=v (-p "
                         "parameters; stages: the rings' depth)")
    ap.add_argument("--head-dims", default="64,128")
    a = ap.parse_args()
    from pipeline_core_schedules_attention import bwd_call as bwd
    from pipeline_core_schedules_attention import emit_attention_bwd as emitter
    emitter.emit_attention_bwd = _rewriting(emitter.emit_attention_bwd)
    global CALL_PARAMS, ORDER
    CALL_PARAMS, ORDER = bwd.call_params, bwd._order
    head_dims = tuple(int(x) for x in a.head_dims.split(","))
    variants = [Variant(bwd, spec) for spec in a.variants.split(";") if spec]
    if variants:
        return run_variants(bwd, variants, head_dims, a)
    if a.prebuild_only:
        paths = bwd.prebuild()
        print(f"SUMMARY prebuild: {len(paths)} cubins in {Path(paths[0]).parent}", flush=True)
        return 0
    import torch  # type: ignore[import-not-found]
    torch.manual_seed(36)
    failures = sanitize(torch, bwd) if a.sanitize else correctness(torch, bwd)
    if a.time:
        timing(torch, bwd, a.rounds)
    if a.out:
        a.out.write_text("".join(json.dumps(r, default=str) + "\n" for r in OUT))
    return 1 if failures else 0


def run_variants(bwd, variants, head_dims, a) -> int:
    """Each variant prebuilt, or checked on the configurations of ``head_dims`` and then all
    timed in the same rounds."""
    if a.prebuild_only:
        for vr in variants:
            vr.use()
            paths = bwd.prebuild(tuple(v for v in (bwd.DETERMINISTIC_VARIANTS if vr.deterministic
                                                   else bwd.VARIANTS) if v[0] in head_dims))
            print(f"SUMMARY prebuild {vr.name}: {len(paths)} cubins", flush=True)
        return 0
    import torch  # type: ignore[import-not-found]
    torch.manual_seed(36)
    failures = 0
    for vr in variants:
        vr.use()
        for case in configs():
            if case[5] not in head_dims:
                continue
            try:
                rec = run(torch, bwd, *case, deterministic=vr.deterministic)
            except Exception as e:
                rec = {"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
            failures += not rec["ok"]
            emit({"variant": vr.name, "case": repr(case), **rec})
            if not rec["ok"]:
                print(f"FAIL {vr.name} {case} {rec.get('err') or rec.get('error')}", flush=True)
        print(f"SUMMARY variant {vr.name}: {failures} failures so far", flush=True)
    if a.time and not failures:
        timing(torch, bwd, a.rounds, variants, head_dims)
    if a.out:
        a.out.write_text("".join(json.dumps(r, default=str) + "\n" for r in OUT))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
